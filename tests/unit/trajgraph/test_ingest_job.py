"""The nightly job around the ingest pipeline (trajgraph/jobs/) without Neo4j: exit codes, the
error line of a failed run, the metrics file, which files a run must read again, and the LLM
windows the heuristic stood in for because the server did not answer."""

from __future__ import annotations

import json
import logging
import signal
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to
from neo4j.exceptions import ServiceUnavailable

from tests.fake_openai import FakeOpenAI, fake_llm_settings
from trajgraph.core.errors import ConfigError, GraphError, InputError
from trajgraph.demo import sample_trajectory
from trajgraph.extractors.llm import LLMExtractor
from trajgraph.extractors.windows import build_windows
from trajgraph.graph.rows import GraphRows
from trajgraph.jobs import ingest, signals
from trajgraph.jobs.manifest import file_key
from trajgraph.jobs.summary import (
    EXIT_CONFIG,
    METRICS_SCHEMA,
    IngestSummary,
    error_text,
    write_metrics,
)
from trajgraph.pipelines.adapters.base import Located
from trajgraph.pipelines.ingest_pipeline import retry_rows
from trajgraph.pipelines.transforms import BuildGraphRows


def _summary(**kw: Any) -> IngestSummary:
    s = IngestSummary(records=2, ingested=2)
    for k, v in kw.items():
        setattr(s, k, v)
    return s


@pytest.mark.parametrize(
    ("changes", "status", "code"),
    [
        ({}, "ok", 0),
        ({"records": 3}, "failed", 1),  # does not balance
        ({"records": 3, "dead_lettered": 1}, "partial", 3),
        ({"windows_failed": 1}, "partial", 3),
        ({"windows_degraded": 4}, "partial", 3),
        ({"counters": {"embed_failed": 1}}, "partial", 3),
        # A reembed moved the graph meanwhile: vectors it has not remade yet are stale.
        ({"space_moved_to": "hash-32", "stale_vectors": 5}, "partial", 3),
        ({"space_moved_to": "hash-32", "stale_vectors": 0}, "ok", 0),
    ],
)
def test_exit_codes_of_finished_runs(changes: dict[str, Any], status: str, code: int) -> None:
    s = _summary(**changes)
    s.set_status()
    assert (s.status, s.exit_code) == (status, code)
    assert (s.error is None) == (code != 1)
    assert ("trajgraph reembed" in s.render()) == bool(changes.get("stale_vectors"))


@pytest.mark.parametrize(
    ("counters", "status", "code"),
    [
        ({"records": 5, "dead_lettered": 0, "windows_degraded": 0}, "ok", 0),
        ({"records": 5, "dead_lettered": 1}, "partial", 3),
        ({"records": 5, "windows_failed": 2}, "partial", 3),
        ({"records": 5, "windows_degraded": 2}, "partial", 3),
        ({"records": 5, "embed_failed": 1}, "partial", 3),
    ],
)
def test_a_stream_that_ended_exits_like_an_ingest(
    counters: dict[str, int],
    status: str,
    code: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from trajgraph.jobs import stream

    def ended(argv: Any, **kw: Any) -> dict[str, Any]:
        return {**counters, "dead_letter_path": "/var/dl/dead-letter.jsonl"}

    monkeypatch.setattr(stream, "run", ended)
    assert stream.main(["live/"]) == code
    out = capsys.readouterr()
    assert json.loads(out.out)["status"] == status
    if code:  # one line naming the counts and where their reasons are
        (line,) = out.err.splitlines()
        assert line.startswith("trajgraph: stream finished partial (")
        assert "/var/dl/dead-letter.jsonl" in line
        assert all(
            f"{k.replace('_', ' ')} {v}" in line
            for k, v in counters.items()
            if v and k != "records"
        )
    else:
        assert out.err == ""


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (ConfigError("bad budget"), "error", 2),
        (InputError("no input files match", source="x/*.json"), "error", 2),
        (GraphError("Neo4j is not reachable"), "failed", 1),
        (RuntimeError("boom"), "failed", 1),
        (KeyboardInterrupt(), "interrupted", 130),
        (signals.Terminated(), "interrupted", 143),
    ],
)
def test_exit_codes_of_runs_that_raised(error: BaseException, status: str, code: int) -> None:
    s = IngestSummary()
    s.set_failure(error, 0.0)
    assert (s.status, s.exit_code) == (status, code)
    assert s.error and s.finished_at


def test_a_signal_wrapped_by_beam_still_counts_as_the_signal() -> None:
    # Beam runs bundles on the main thread and re-raises what a DoFn raised as RuntimeError.
    signals.received[:] = [signal.SIGTERM]
    try:
        s = IngestSummary()
        s.set_failure(RuntimeError("jobs.signals.Terminated [while running 'W']"), 0.0)
        assert (s.status, s.exit_code, s.error) == ("interrupted", 143, "terminated by SIGTERM")
    finally:
        signals.received.clear()


def test_a_signal_silences_logging_until_the_run_is_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Beam logs the bundle a signal interrupted, traceback and all: the run's summary says
    what happened, so nothing is logged from the signal to the end of the run."""
    log = logging.getLogger("apache_beam.runners.common")
    with signals.ending_the_run():
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        log.error("KeyboardInterrupt [while running 'Write graph']")
    assert signals.received == [signal.SIGINT]
    log.error("the next run logs again")
    assert [r.getMessage() for r in caplog.records] == ["the next run logs again"]
    signals.received.clear()


def test_error_text_names_the_lost_connection_under_beams_wrapping() -> None:
    try:
        try:
            try:
                raise ServiceUnavailable("Failed to read from defunct connection")
            except ServiceUnavailable as e:
                raise GraphError("a batch write failed: Neo4j is lost") from e
        except GraphError as e:  # what Beam does: same type, stage appended
            raise GraphError(f"{e} [while running 'Write graph/Write batches']") from e
    except GraphError as outer:
        text = error_text(outer)
    assert text.startswith("a batch write failed: Neo4j is lost [while running")
    assert "caused by ServiceUnavailable: Failed to read from defunct connection" in text
    assert error_text(ValueError("x")) == "ValueError: x"


def test_metrics_file_has_the_summary_status_and_times(tmp_path: Path) -> None:
    s = _summary(files_skipped=4, started_at="2026-01-01T00:00:00Z")
    s.set_failure(GraphError("Neo4j is lost"), 0.0)
    path = tmp_path / "m" / "metrics.json"
    write_metrics(path, s)
    d = json.loads(path.read_text())
    assert d["schema"] == METRICS_SCHEMA
    assert (d["status"], d["exit_code"], d["error_type"]) == ("failed", 1, "GraphError")
    assert d["error"] == "Neo4j is lost" and d["files_skipped"] == 4
    assert d["started_at"] and d["finished_at"] and d["pid"] > 0
    assert [p.name for p in path.parent.iterdir()] == ["metrics.json"]


def test_main_prints_json_with_the_error_and_writes_metrics_when_it_cannot_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = tmp_path / "metrics.json"
    code = ingest.main(
        [
            str(tmp_path / "nothing-*.jsonl"),
            "--json",
            "--metrics",
            str(metrics),
            "--progress",
            "off",
        ]
    )
    out, err = capsys.readouterr()
    assert code == EXIT_CONFIG == 2
    summary = json.loads(out)
    assert summary["status"] == "error" and "no input files match" in summary["error"]
    assert "trajgraph: error:" in err and "Traceback" not in err
    assert json.loads(metrics.read_text())["exit_code"] == 2


def test_file_outcomes_from_dead_letters_and_windows_to_retry(tmp_path: Path) -> None:
    a, b, c = (str(tmp_path / n) for n in ("a.jsonl", "b.json", "c.traj"))
    dl = tmp_path / "dead-letter.jsonl"
    dl.write_text(
        "\n".join(json.dumps({"source": src, "stage": "normalize"}) for src in (a, a, b)) + "\n"
    )
    retry = tmp_path / "retry"
    (tmp_path / "retry.jsonl").write_text(json.dumps({"source": c, "windows": 3}) + "\n")
    s = _summary(dead_lettered=3)
    failed, degraded = ingest.file_outcomes(s, [a, b, c], str(dl), str(retry))
    assert failed == {file_key(a): 2, file_key(b): 1}
    assert degraded == {file_key(c): 3}

    # A dead letter without a source, or vectors that could not be made: every file again.
    dl.write_text(json.dumps({"source": "", "stage": "read"}) + "\n")
    s = _summary(dead_lettered=1, counters={"embed_failed": 1})
    failed, degraded = ingest.file_outcomes(s, [a, b, c], str(dl), str(retry))
    assert set(failed) == set(degraded) == {file_key(a), file_key(b), file_key(c)}


def test_the_summary_shows_the_first_dead_letter_reasons(tmp_path: Path) -> None:
    """A user whose file was refused reads why under the summary, without opening the file."""
    a = str(tmp_path / "a.jsonl")
    dl = tmp_path / "dead-letter.jsonl"
    reasons = ["bad\nline 1", "bad line 2", "bad line 2", "x" * 1000, "bad line 4"]
    dl.write_text("\n".join(json.dumps({"source": a, "reason": r}) for r in reasons) + "\n")
    s = _summary(records=7, ingested=2, dead_lettered=5)
    ingest.file_outcomes(s, [a], str(dl), None)
    assert s.dead_letter_reasons == ["bad line 1", "bad line 2", "x" * 399 + "…"]
    text = s.render()
    assert "    bad line 1\n    bad line 2\n" in text
    assert "… and 2 more in the dead-letter file" in text
    assert s.to_json()["dead_letter_reasons"] == s.dead_letter_reasons


def test_llm_windows_are_retried_only_when_the_server_did_not_answer(
    fake_llm: FakeOpenAI,
) -> None:
    windows = build_windows(sample_trajectory(), budget_tokens=512)
    turns = [w.turn for w in windows]
    ex = LLMExtractor(fake_llm_settings(fake_llm))
    fake_llm.script("500", "500")  # one packed request, both attempts fail
    assert ex.extract_windows(windows).retry == turns
    fake_llm.script("schema_invalid", "schema_invalid")  # answered, unusable: not a retry
    assert ex.extract_windows(windows).retry == []
    assert ex.extract_windows(windows).retry == []  # healthy
    ex.close()


def test_graph_rows_carry_the_windows_to_retry(fake_llm: FakeOpenAI) -> None:
    traj = {**sample_trajectory(), "tenant": "t", "source": "logs/demo.jsonl"}
    fake_llm.script("500", "500")
    with BeamTestPipeline() as p:
        built = (
            p
            | beam.Create([Located("logs/demo.jsonl", "line 1", traj)])
            | BuildGraphRows("llm", 512, fake_llm_settings(fake_llm), use_cache=False)
        )
        assert_that(
            built["rows"] | beam.FlatMap(retry_rows) | beam.Map(lambda r: r["source"]),
            equal_to(["logs/demo.jsonl"]),
        )
    assert retry_rows(GraphRows("tr_x", "h")) == []
