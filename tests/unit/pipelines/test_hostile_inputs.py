"""Hostile inputs to the read side of ingest: every record ends in the graph or in a dead
letter naming its file and record, without a crash, and no dead-letter row echoes a secret.
Each test builds its inputs from small synthetic records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from trajgraph.core.errors import InputError
from trajgraph.pipelines import dead_letter
from trajgraph.pipelines import stream_transforms as streaming
from trajgraph.pipelines.adapters import normalize, split_records
from trajgraph.pipelines.adapters.base import LineFile, RawRecord
from trajgraph.pipelines.adapters.detect import sniff_line_file
from trajgraph.pipelines.stream_transforms import (
    Line,
    TailSourceFn,
    apply_event,
    parse_event,
    trajectory_of,
)
from trajgraph.pipelines.transforms import ReadLogRecords, SplitFileFn
from trajgraph.schemas.trajectory import validate


def _canonical(tid: str) -> dict[str, Any]:
    return {"id": tid, "task": "t", "turns": [{"idx": 0, "action": "ls", "observation": "x"}]}


def _line(tid: str) -> str:
    return json.dumps(_canonical(tid)) + "\n"


def test_file_names_with_glob_characters_are_read_as_themselves(tmp_path: Path) -> None:
    # Beam's MatchAll reads [ ] * ? in a listed path as a glob: "run[1].jsonl" matched only
    # "run1.jsonl" (or nothing, silently), so the file was never read nor dead-lettered.
    names = {"run[1].jsonl": "bracket", "a*b?.jsonl": "star", "run1.jsonl": "decoy"}
    for name, tid in names.items():
        (tmp_path / name).write_text(_line(tid), encoding="utf-8")
    paths = [str(tmp_path / n) for n in ("run[1].jsonl", "a*b?.jsonl")]
    with BeamTestPipeline() as p:
        read = p | ReadLogRecords(paths, None, 1 << 20)
        assert_that(
            read["records"] | beam.Map(lambda r: (Path(r.source).name, r.locator)),
            equal_to([("run[1].jsonl", "line 1"), ("a*b?.jsonl", "line 1")]),
            label="records",
        )
        assert_that(read["bad"], equal_to([]), label="bad")


def test_a_listed_file_gone_before_it_is_read_is_a_dead_letter(tmp_path: Path) -> None:
    there = tmp_path / "there.jsonl"
    there.write_text(_line("there"), encoding="utf-8")
    gone = str(tmp_path / "gone.jsonl")  # listed, then removed before the read
    with BeamTestPipeline() as p:
        read = p | ReadLogRecords([str(there), gone], None, 1 << 20)
        assert_that(
            read["records"] | beam.Map(lambda r: r.source), equal_to([str(there)]), label="ok"
        )
        assert_that(
            read["bad"] | beam.Map(lambda d: (d["stage"], d["source"], d["locator"])),
            equal_to([("read", gone, "file")]),
            label="bad",
        )


KEY = "sk-proj-" + "Z" * 30
PASSWORD = "hunter2-" + "q" * 12


@pytest.mark.parametrize(
    "payload",
    [
        f'{{"id": "x", "api_key": "{KEY}", "password": "{PASSWORD}", "turns": 5}}'.encode(),
        f'{{"action": "curl -H \'Authorization: Bearer {KEY}\'", "password={PASSWORD}'.encode(),
        # the key straddles the preview's cut: no prefix of it survives either
        b"x" * (dead_letter.PREVIEW_CHARS - 16) + f" {KEY} password={PASSWORD}".encode(),
    ],
)
def test_dead_letter_previews_never_echo_credentials(payload: bytes) -> None:
    record = RawRecord("/logs/a.jsonl", "line 3", None, payload)
    try:
        normalize(record)
    except InputError as e:
        error: Exception = e
    else:  # pragma: no cover - every payload here is refused
        raise AssertionError("the record was accepted")
    row = dead_letter.from_exception("normalize", (record, (type(error), repr(error), None)))
    text = dead_letter.to_json_line(row)
    assert (row["source"], row["locator"]) == ("/logs/a.jsonl", "line 3")
    assert row["preview"]  # still shows the record, masked
    for secret in (KEY, PASSWORD, KEY[:12], PASSWORD[:10]):
        assert secret not in text


DEEP = "[" * 100_000 + "]" * 100_000  # deeper than any recursive parser goes


def test_a_deeply_nested_first_line_fails_alone_and_the_lines_after_it_land() -> None:
    # The first lines decide whether a JSONL file is one session; one line too deep to parse
    # used to fail the whole file as one record, and the lines after it were never counted.
    data = f'{{"id": "deep", "x": {DEEP}}}\n{_line("after-1")}{_line("after-2")}'.encode()
    records = list(split_records("/logs/a.jsonl", data))
    assert [r.locator for r in records] == ["line 1", "line 2", "line 3"]
    with pytest.raises(InputError, match=r"/logs/a\.jsonl \[line 1\]: .*nested too deeply"):
        normalize(records[0])
    assert [normalize(r)[0]["id"] for r in records[1:]] == ["after-1", "after-2"]


def test_a_deeply_nested_json_file_is_a_clear_input_error() -> None:
    with pytest.raises(InputError, match=r"/logs/a\.json: .*nested too deeply"):
        list(split_records("/logs/a.json", DEEP.encode()))


def test_a_deeply_nested_line_in_a_session_file_is_a_bad_line() -> None:
    session = {"type": "user", "sessionId": "s1", "uuid": "u1", "message": {"content": "hi"}}
    data = (json.dumps(session) + "\n" + DEEP + "\n" + json.dumps(session) + "\n").encode()
    (record,) = split_records("/logs/s.jsonl", data)
    assert record.format == "claude-code"
    assert isinstance(record.payload, LineFile)
    normalize(record)  # the deep line is one bad line of the session, not a crash


def test_a_deeply_nested_stream_event_is_one_bad_line() -> None:
    # The stream's reader sniffs a file's first lines: a deep one stopped the whole stream.
    assert sniff_line_file(f"{DEEP}\n".encode()) is None
    with pytest.raises(InputError, match=r"/live/a\.jsonl \[line 1\]: .*nested too deeply"):
        parse_event(Line("/live/a.jsonl", "line 1", DEEP.encode()), "default")


@pytest.mark.parametrize(
    "event",
    [
        {"idx": 1, "action": 5, "observation": "o"},
        {"idx": 1, "action": "a", "observation": None},
        {"idx": 1, "action": "a", "observation": "o", "reward": "high"},
        {"idx": 1, "action": "a", "observation": "o", "timestamp": 17},
        {"idx": 1, "action": "a", "observation": "o", "extra": 1},
        {"idx": 1, "action": ["ls"], "observation": "o"},
        {"type": "header", "task": ["fix"]},
        {"type": "header", "metadata": "not an object"},
        {"type": "header", "format": "zzz"},
        {"type": "header", "unknown": 1},
        {"type": "footer", "outcome": 3},
    ],
)
def test_one_bad_event_is_dead_lettered_alone_and_does_not_poison_its_trajectory(
    event: dict[str, Any],
) -> None:
    # docs/streaming.md: a bad line is dead-lettered at once, "so one bad event cannot poison
    # every later emission of its trajectory". A turn with a wrong type used to be held: every
    # later good line of the trajectory was then dead-lettered (with that line's locator and
    # the bad line's reason) and the graph kept the trajectory as it was before it.
    good: list[dict[str, Any]] = [
        {"idx": 0, "action": "a0", "observation": "o0"},
        {"type": "header", "task": "fix it", "metadata": {"model": "m"}},
        {"idx": 2, "action": "a2", "observation": "o2"},
        {"type": "footer", "outcome": "done"},
    ]
    lines = [*good[:2], event, *good[2:]]
    rec: dict[str, Any] = {"turns": {}, "header": {}, "footer": {}}
    for n, body in enumerate(lines, start=1):
        line = Line(
            "/live/a.jsonl", f"line {n}", json.dumps({"trajectory_id": "t", **body}).encode()
        )
        if body is event:
            with pytest.raises(InputError, match=r"/live/a\.jsonl \[line 3\]: bad \w+ event"):
                parse_event(line, "default")
            continue
        apply_event(rec, parse_event(line, "default"))
    (traj,) = normalize(
        RawRecord("/live/a.jsonl", "line 5", "canonical", trajectory_of(("default", "t"), rec))
    )
    validate(traj)
    assert ([t["idx"] for t in traj["turns"]], traj["task"], traj["outcome"]) == (
        [0, 2],
        "fix it",
        "done",
    )


class _State:
    """A DoFn state cell: what the runner hands a stateful DoFn's process()."""

    def __init__(self) -> None:
        self.value: Any = None

    def read(self) -> Any:
        return self.value

    def write(self, value: Any) -> None:
        self.value = value


def _event(tid: str, idx: int, pad: str = "") -> str:
    return json.dumps({"trajectory_id": tid, "idx": idx, "action": "a" + pad, "observation": "o"})


def test_a_file_replaced_while_streamed_is_read_again_from_its_start(tmp_path: Path) -> None:
    # Log rotation (or an editor's save) puts a new file under the followed name. The reader
    # kept the old file's byte offset: a shorter new file was never read (its lines lost
    # without a dead letter), a longer one was read from the middle of a line.
    live = tmp_path / "live.jsonl"
    live.write_text("".join(_event("old", i, "x" * 200) + "\n" for i in range(3)))
    reader, offsets, sessions, failing = TailSourceFn(str(tmp_path)), _State(), _State(), _State()

    def poll() -> list[tuple[str, str]]:
        return [
            (json.loads(x.data)["trajectory_id"], x.locator)
            for x in reader.process(None, offsets, sessions, failing)
            if isinstance(x, Line)
        ]

    assert poll() == [("old", "line 1"), ("old", "line 2"), ("old", "line 3")]
    fresh = tmp_path / "fresh.tmp"
    fresh.write_text(_event("new", 0) + "\n")
    fresh.replace(live)  # a new file (inode) under the same name, shorter than the offset
    assert poll() == [("new", "line 1")]
    with live.open("a") as f:
        f.write(_event("new", 1) + "\n")
    assert poll() == [("new", "line 2")]
    live.write_text(_event("cut", 0) + "\n")  # truncated in place, then written again
    assert poll() == [("cut", "line 1")]


def test_a_stream_reports_an_unreadable_file_once_and_follows_no_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every poll (0.5 s) wrote one more identical dead letter for a file it could not open,
    # and for a directory named like a log: 33 rows in 6 s, uncounted in the summary.
    (tmp_path / "dir.jsonl").mkdir()
    locked = tmp_path / "locked.jsonl"
    locked.write_text(_event("locked", 0) + "\n")
    real_open = streaming._open_regular

    def deny(name: str) -> Any:
        if name == str(locked) and deny.on:  # type: ignore[attr-defined]
            raise PermissionError(13, "Permission denied", name)
        return real_open(name)

    deny.on = True  # type: ignore[attr-defined]
    monkeypatch.setattr(streaming, "_open_regular", deny)
    reader, offsets, sessions, failing = TailSourceFn(str(tmp_path)), _State(), _State(), _State()
    polls = [list(reader.process(None, offsets, sessions, failing)) for _ in range(5)]
    rows = [x.value for poll in polls for x in poll]  # TaggedOutput: the read failures
    assert [(r["source"], r["stage"]) for r in rows] == [(str(locked), "read")]
    assert "Permission denied" in rows[0]["reason"]
    deny.on = False  # type: ignore[attr-defined]
    (line,) = reader.process(None, offsets, sessions, failing)
    assert (line.source, line.locator) == (str(locked), "line 1")  # nothing of it was skipped


@pytest.mark.parametrize("command", ["ingest", "stream"])
def test_a_tenant_the_contract_refuses_is_a_config_error_before_the_run(
    command: str, tmp_path: Path
) -> None:
    # A 200-character --tenant (or TRAJGRAPH_TENANT) used to run the whole job and dead-letter
    # every record ("schema-invalid at tenant"), exit 3, instead of one configuration error.
    from trajgraph.core import settings as settings_mod
    from trajgraph.core.errors import ConfigError
    from trajgraph.pipelines import ingest_pipeline as ingest
    from trajgraph.pipelines import stream_pipeline as stream

    logs = tmp_path / "a.jsonl"
    logs.write_text(_line("a"))
    s = settings_mod.load({})
    for flags, env in ((["--tenant", "t" * 129], {}), ([], {"TRAJGRAPH_TENANT": "t" * 129})):
        s = settings_mod.load(env)
        mod: Any = ingest if command == "ingest" else stream
        args, _ = mod.build_parser().parse_known_args(
            [str(logs), "--extractor", "heuristic", *flags]
        )
        config_cls = ingest.IngestConfig if command == "ingest" else stream.StreamConfig
        with pytest.raises(ConfigError, match=r"tenant .*128"):
            config_cls.from_args(args, s)
    args, _ = mod.build_parser().parse_known_args([str(logs), "--tenant", "t" * 128])
    assert config_cls.from_args(args, s).tenant == "t" * 128


def test_stream_line_numbers_are_the_files_own_with_crlf_and_stray_carriage_returns(
    tmp_path: Path,
) -> None:
    # Lines end at "\n" (as batch reads them, and as the reader's offsets count): a stray
    # "\r" inside a corrupted line made two records of it and shifted every later locator.
    live = tmp_path / "live.jsonl"
    live.write_bytes(
        (_event("t", 0) + "\r\n").encode() + b'{"broken\rline"\n' + (_event("t", 1) + "\n").encode()
    )
    reader, offsets, sessions, failing = TailSourceFn(str(live)), _State(), _State(), _State()
    lines = [x for x in reader.process(None, offsets, sessions, failing) if isinstance(x, Line)]
    assert [(x.locator, x.data[:12]) for x in lines] == [
        ("line 1", b'{"trajectory'),
        ("line 2", b'{"broken\rlin'),
        ("line 3", b'{"trajectory'),
    ]
    assert parse_event(lines[0], "default")["idx"] == 0  # the CR of a CRLF is not data


def test_a_compressed_file_is_held_to_the_record_limit_while_it_is_read(tmp_path: Path) -> None:
    # Beam opens *.gz (bz2, zst, ...) decompressed, and the limit was checked against the
    # compressed size: 60 MB of JSON in a 60 kB file was read whole into memory first.
    import gzip
    import tracemalloc

    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b'{"turns": [], "pad": "' + b"0" * 60_000_000 + b'"}', 9))
    small = tmp_path / "small.json.gz"
    small.write_bytes(gzip.compress(json.dumps(_canonical("gz")).encode()))
    fn = SplitFileFn(None, 1 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=r"bomb\.json\.gz \[file\]: .*over the 1048576-byte"):
            list(fn.process(_readable(bomb)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16_000_000
    assert [r.locator for r in fn.process(_readable(small))] == ["file"]


def _readable(path: Path) -> Any:
    from apache_beam.io import fileio
    from apache_beam.io.filesystems import FileSystems

    return fileio.ReadableFile(FileSystems.get_filesystem(str(path)).metadata(str(path)))


def test_a_compressed_file_is_read_to_its_end(tmp_path: Path) -> None:
    # A compressed file's read() stops at Beam's 16 MiB buffer: every line after it was
    # lost without a count or a dead letter, and the line it cut was called truncated.
    import gzip

    line = (json.dumps({**_canonical("x"), "pad": "p" * 900}) + "\n").encode()
    n = (17 << 20) // len(line) + 1
    logs = tmp_path / "many.json.gz"  # a .json whose values sit one per line is JSONL
    logs.write_bytes(gzip.compress(line * n, 1))
    records = list(SplitFileFn(None, 64 << 20).process(_readable(logs)))
    assert len(records) == n
    assert records[-1].locator == f"line {n}"
    assert normalize(records[-1])[0]["id"] == "x"


@pytest.mark.parametrize("value", ["0", "-1"])
def test_a_record_limit_below_one_byte_is_a_config_error(value: str, tmp_path: Path) -> None:
    # It ran the whole job and dead-lettered every record ("over the -1-byte limit"), exit 3.
    from trajgraph.core import settings as settings_mod
    from trajgraph.core.errors import ConfigError
    from trajgraph.pipelines import ingest_pipeline as ingest

    args, _ = ingest.build_parser().parse_known_args(
        [str(tmp_path), "--extractor", "heuristic", "--max-record-bytes", value]
    )
    with pytest.raises(ConfigError, match="--max-record-bytes"):
        ingest.IngestConfig.from_args(args, settings_mod.load({}))


def test_a_file_named_on_the_command_line_is_that_file_even_with_glob_characters(
    tmp_path: Path,
) -> None:
    from trajgraph.pipelines.preflight import expand_paths

    for name in ("run[1].jsonl", "run1.jsonl", "a*b.jsonl", "ab.jsonl"):
        (tmp_path / name).write_text(_line(name))
    assert expand_paths([str(tmp_path / "run[1].jsonl")]) == [str(tmp_path / "run[1].jsonl")]
    assert expand_paths([str(tmp_path / "a*b.jsonl")]) == [str(tmp_path / "a*b.jsonl")]
    # a pattern that names no file is still a glob
    assert expand_paths([str(tmp_path / "run[0-9].jsonl")]) == [str(tmp_path / "run1.jsonl")]


@pytest.mark.parametrize("name", ["dl [1]", "dl*", "dl?"])
def test_a_dead_letter_folder_beams_sinks_cannot_write_is_a_config_error(
    name: str, tmp_path: Path
) -> None:
    # Beam's file sinks read [ ] * ? in their prefix as a glob when they finalize: the run
    # wrote the graph, then failed (exit 1, "rerun", which failed the same way) and its dead
    # letters were lost.
    from trajgraph.core import settings as settings_mod
    from trajgraph.core.errors import ConfigError
    from trajgraph.pipelines.dead_letter import dead_letter_dir

    with pytest.raises(ConfigError, match="--dead-letter"):
        dead_letter_dir(str(tmp_path / name), settings_mod.load({}))
    assert dead_letter_dir(str(tmp_path / "dl (1) ü"), settings_mod.load({})).endswith("ü")


@pytest.mark.parametrize(
    "flags",
    [
        ["--poll", "nan"],
        ["--poll", "inf"],
        ["--poll", "0"],
        ["--duration", "-5"],
        ["--duration", "0"],
        ["--duration", "nan"],
        ["--duration", "inf"],
        # The batch pipeline's check, which the stream once skipped: it started, then
        # dead-lettered every trajectory (no window fits in 10 tokens).
        ["--budget", "10"],
        ["--budget", "63"],
    ],
)
def test_stream_timing_flags_that_cannot_work_are_config_errors(
    flags: list[str], tmp_path: Path
) -> None:
    # They reached Beam's impulse and failed there: a traceback, exit 1 ("rerun").
    from trajgraph.core import settings as settings_mod
    from trajgraph.core.errors import ConfigError
    from trajgraph.pipelines import stream_pipeline as stream

    args = stream.build_parser().parse_args([str(tmp_path), "--extractor", "heuristic", *flags])
    with pytest.raises(ConfigError, match=flags[0]):
        stream.StreamConfig.from_args(args, settings_mod.load({}))


@pytest.mark.parametrize("budget", ["10", "64"])
def test_batch_and_stream_take_the_same_budgets(budget: str, tmp_path: Path) -> None:
    # One check (pipelines/preflight.py checked_budget) for both pipelines.
    from trajgraph.core import settings as settings_mod
    from trajgraph.core.errors import ConfigError
    from trajgraph.pipelines import ingest_pipeline as batch
    from trajgraph.pipelines import stream_pipeline as stream

    settings = settings_mod.load({})
    (tmp_path / "a.jsonl").write_text(_line("a"))  # the batch's inputs are checked too
    flags = [str(tmp_path), "--extractor", "heuristic", "--budget", budget]
    outcomes: list[int | str] = []
    for check in (
        lambda: batch.IngestConfig.from_args(batch.build_parser().parse_args(flags), settings),
        lambda: stream.StreamConfig.from_args(stream.build_parser().parse_args(flags), settings),
    ):
        try:
            outcomes.append(check().budget_tokens)
        except ConfigError as e:
            outcomes.append(str(e))
    assert outcomes[0] == outcomes[1], outcomes
    assert outcomes[0] == (64 if budget == "64" else "--budget must be at least 64 tokens, got 10")


def test_a_streamed_session_file_that_cannot_be_adapted_is_a_counted_dead_letter(
    tmp_path: Path,
) -> None:
    # `trajgraph stream` exits 3 when it dead-lettered something: it knows by the
    # dead_lettered counter, which this dead letter did not bump (the stream said "ok").
    from trajgraph.pipelines import progress

    live = tmp_path / "session.jsonl"
    only_bookkeeping = {"type": "system", "sessionId": "s1", "uuid": "u1", "content": "x"}
    live.write_text(json.dumps(only_bookkeeping) + "\n")
    reader, offsets, sessions, failing = TailSourceFn(str(tmp_path)), _State(), _State(), _State()
    progress.reset()
    out = list(reader.process(None, offsets, sessions, failing))
    rows = [x.value for x in out if not isinstance(x, Line)]
    assert [(r["stage"], r["source"], r["locator"]) for r in rows] == [
        ("normalize", str(live), "file")
    ]
    assert progress.snapshot().get("dead_lettered") == 1


def test_a_line_over_the_limit_with_no_newline_is_dead_lettered_once_and_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A writer that died mid-line (or a binary file named .jsonl) left a line with no
    # newline: the reader held it and read all of it again on every poll, for ever, and a
    # line of a gigabyte was a gigabyte read twice a second. Now it is dead-lettered once
    # and the reader skips to its newline, whenever that comes.
    monkeypatch.setattr(streaming, "MAX_LINE_BYTES", 1000)
    live = tmp_path / "live.jsonl"
    live.write_text(_event("t", 0) + "\n" + "x" * 1500)
    reader, offsets, sessions, failing = TailSourceFn(str(live)), _State(), _State(), _State()

    def poll() -> tuple[list[str], list[dict[str, Any]]]:
        out = list(reader.process(None, offsets, sessions, failing))
        return [x.locator for x in out if isinstance(x, Line)], [
            x.value for x in out if not isinstance(x, Line)
        ]

    lines, rows = poll()
    assert lines == ["line 1"]
    assert [(r["source"], r["locator"], r["stage"]) for r in rows] == [
        (str(live), "line 2", "read")
    ]
    assert "over 1000 bytes" in rows[0]["reason"]
    with live.open("a") as f:
        f.write("y" * 3000)  # still no newline: nothing more, no second dead letter
    assert poll() == ([], [])
    with live.open("a") as f:
        f.write("z\n" + _event("t", 1) + "\n")
    assert poll() == (["line 3"], [])  # the long line's end is skipped, numbering kept


def test_a_large_file_is_read_over_several_polls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stream started on a large existing file read all of it into memory in one poll.
    monkeypatch.setattr(streaming, "MAX_LINE_BYTES", 200)
    monkeypatch.setattr(streaming, "READ_CHUNK_BYTES", 800)
    live = tmp_path / "live.jsonl"
    live.write_text("".join(_event("t", i) + "\n" for i in range(40)))
    reader, offsets, sessions, failing = TailSourceFn(str(live)), _State(), _State(), _State()
    polls = [
        [x.locator for x in reader.process(None, offsets, sessions, failing)] for _ in range(8)
    ]
    assert 1 < len([p for p in polls if p]) < 8  # several polls, each bounded
    assert all(len(p) * len(_event("t", 10)) <= 800 for p in polls)
    assert [loc for p in polls for loc in p] == [f"line {i}" for i in range(1, 41)]


def test_a_line_over_the_limit_on_stdin_is_one_bounded_bad_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The stdin reader held a line whole until its newline: an agent that printed a
    # gigabyte without one made the stream hold a gigabyte.
    import io

    monkeypatch.setattr(streaming, "MAX_LINE_BYTES", 100)
    piped = io.BytesIO(
        (_event("t", 0) + "\n").encode() + b"x" * 1000 + b"\n" + (_event("t", 1) + "\n").encode()
    )
    lines = list(streaming.stdin_lines(piped))
    assert len(lines) == 3 and all(len(x) <= 101 for x in lines)
    assert [json.loads(lines[i])["idx"] for i in (0, 2)] == [0, 1]
    bad = Line("<stdin>", "line 2", lines[1].rstrip(b"\n"))
    with pytest.raises(InputError, match="over 100 bytes"):
        streaming.parse_event(bad, "t")
    # A last line with no newline (the agent died mid-line) is a line too.
    assert list(streaming.stdin_lines(io.BytesIO(b'{"a": 1}'))) == [b'{"a": 1}']


def test_an_idle_poll_opens_no_file_that_did_not_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every poll opened and read every file under the folder (a Claude Code projects folder
    # holds thousands of finished sessions), twice a second; now one stat each.
    for i in range(5):
        (tmp_path / f"s{i}.jsonl").write_text(_event(f"t{i}", 0) + "\n")
    reader, offsets, sessions, failing = TailSourceFn(str(tmp_path)), _State(), _State(), _State()
    assert len(list(reader.process(None, offsets, sessions, failing))) == 5
    opened: list[Path] = []
    real_open = streaming._open_regular

    def counting(name: str) -> Any:
        opened.append(Path(name))
        return real_open(name)

    monkeypatch.setattr(streaming, "_open_regular", counting)
    assert list(reader.process(None, offsets, sessions, failing)) == []
    assert opened == []
    with (tmp_path / "s3.jsonl").open("a") as f:
        f.write(_event("t3", 1) + "\n")
    opened.clear()
    (line,) = reader.process(None, offsets, sessions, failing)
    assert (line.locator, opened) == ("line 2", [tmp_path / "s3.jsonl"])
