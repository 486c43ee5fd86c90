"""What a run writes beside the graph goes where every worker reaches it (Beam's FileSystems,
tests/memfs.py standing in for an object store), and what only works in the launching process
(the progress bar, stdin) says so on other runners."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import apache_beam as beam
import pytest

from tests import memfs
from trajgraph.core.errors import ConfigError
from trajgraph.core.settings import LocalServerSettings, Settings
from trajgraph.jobs import ingest as ingest_job
from trajgraph.jobs.summary import IngestSummary, write_metrics
from trajgraph.pipelines import files
from trajgraph.pipelines import stream_pipeline as stream
from trajgraph.pipelines.dead_letter import AppendDeadLetterFn, WriteJsonLines, dead_letter_dir


@pytest.fixture
def store() -> Iterator[str]:
    root = f"{memfs.PREFIX}unit-{id(object())}"
    yield root
    memfs.clear(root)


def test_files_on_a_beam_filesystem(store: str) -> None:
    folder = files.join(store, "dl")
    assert folder == f"{store}/dl" and not files.is_local(folder)
    files.make_dirs(folder)  # an object store has no folders: nothing to do, no error
    path = files.join(folder, "x.jsonl")
    assert files.read_text(path) is None and not files.exists(path)
    files.write_bytes(path, b'{"a": 1}\n')
    assert files.read_text(path) == '{"a": 1}\n' and files.exists(path)
    files.delete(path)
    files.delete(path)  # already gone: nothing
    assert memfs.files().get(path) is None
    files.remove_empty_dir(folder)


def test_files_on_the_local_disk(tmp_path: Path) -> None:
    folder = files.join(str(tmp_path), "a", "b")
    assert folder == str(tmp_path / "a" / "b") and files.is_local(folder)
    files.make_dirs(folder)
    files.make_dirs(folder)  # exists: fine
    path = files.join(folder, "x.jsonl")
    files.write_bytes(path, b"x\n")
    assert files.read_text(path) == "x\n"
    files.delete(path)
    files.remove_empty_dir(folder)
    assert not Path(folder).exists() and (tmp_path / "a").is_dir()


def test_dead_letter_dir_keeps_a_url_whole(tmp_path: Path) -> None:
    settings = Settings(local=LocalServerSettings(home=tmp_path / "neo4j"))
    assert dead_letter_dir("gs://bucket/dl", settings) == "gs://bucket/dl"
    default = dead_letter_dir(None, settings)
    assert Path(default).parent == tmp_path / "dead-letter"


def test_workers_write_dead_letters_to_the_store(store: str) -> None:
    with beam.Pipeline() as p:
        rows = p | beam.Create(
            [{"stage": "read", "source": "a"}, {"stage": "parse", "source": "b"}]
        )
        _ = rows | WriteJsonLines(f"{store}/run/dead-letter")
    written = memfs.files()[f"{store}/run/dead-letter.jsonl"].decode().splitlines()
    assert sorted(json.loads(x)["stage"] for x in written) == ["parse", "read"]
    assert [p for p in memfs.files() if p.startswith(store)] == [f"{store}/run/dead-letter.jsonl"]


def test_stream_dead_letters_on_a_store_go_one_file_per_bundle(store: str) -> None:
    fn = AppendDeadLetterFn(f"{store}/stream/dead-letter.jsonl")
    fn.start_bundle()
    list(fn.process({"stage": "parse", "reason": "not JSON"}))
    list(fn.process({"stage": "validate", "reason": "bad"}))
    fn.finish_bundle()
    fn.start_bundle()
    fn.finish_bundle()  # nothing pending: no file
    (path,) = [p for p in memfs.files() if p.startswith(store)]
    assert path.startswith(f"{store}/stream/dead-letter-") and path.endswith(".jsonl")
    assert len(memfs.files()[path].decode().splitlines()) == 2


def test_metrics_file_on_a_store(store: str) -> None:
    write_metrics(f"{store}/metrics.json", IngestSummary(records=3, ingested=3))
    metrics = json.loads(memfs.files()[f"{store}/metrics.json"])
    assert (metrics["records"], metrics["status"]) == (3, "ok")


def test_the_progress_bar_is_off_when_the_workers_are_elsewhere(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def show(progress: str, beam_args: list[str]) -> bool:
        args = argparse.Namespace(progress=progress, json=False)
        return ingest_job._show_progress(args, beam_args)

    remote = ["--runner", "PrismRunner", "--environment_type", "EXTERNAL"]
    assert show("on", []) and show("on", ["--runner", "PrismRunner"])
    assert not show("on", remote)
    assert (
        "no progress bar: the runner's workers are not in this process" in capsys.readouterr().err
    )
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    assert show("auto", []) and not show("auto", remote) and not show("off", [])
    assert capsys.readouterr().err == ""  # auto turns itself off silently


def test_stdin_streams_only_to_workers_in_this_process(tmp_path: Path) -> None:
    binary = tmp_path / "prism"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    settings = Settings(prism_location=binary)
    config = stream.StreamConfig.from_args(stream.build_parser().parse_args(["-"]), settings)
    assert config.prepare_beam_args([], settings) == []
    # `trajgraph stream --runner PrismRunner` finds the binary like ingest does; LOOPBACK.
    prism = config.prepare_beam_args(["--runner", "PrismRunner"], settings)
    assert f"--prism_location={binary}" in prism
    with pytest.raises(ConfigError, match=r"stdin\) is only readable by workers in this process"):
        config.prepare_beam_args(["--runner", "PortableRunner"], settings)
    with pytest.raises(ConfigError, match="only readable by workers in this process"):
        config.prepare_beam_args(
            ["--runner", "PrismRunner", "--environment_type", "EXTERNAL"], settings
        )
