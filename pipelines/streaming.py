"""Streaming ingest: turn events from growing JSONL files (or stdin) reach the graph as they
arrive, through the same extraction and write transforms as batch.

Events, one JSON object per line:

* a turn: ``{"trajectory_id", "idx", "action", "observation", ...}`` (any canonical turn field);
* a header: ``{"trajectory_id", "type": "header", "task", "metadata"}``;
* a footer: ``{"trajectory_id", "type": "footer", "outcome"}``;
* ``tenant`` on any of them (else ``--tenant``).

Per trajectory, a stateful DoFn keeps what has arrived, keyed by turn index: an event for an
index already held replaces it (or is dropped when identical), out-of-order events slot into
place, and each change emits the whole trajectory so far. Extraction and the write are the
batch ones, and a trajectory is rewritten as a whole when it changes, so the graph after the
last event is exactly what a batch ingest of the same turns builds (``trajgraph digest``
checks that). A restart re-reads the source files from the beginning: unchanged trajectories
are skipped by their content hash, so nothing is duplicated and nothing is missed.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.coders import PickleCoder
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec

from trajgraph.errors import InputError
from trajgraph.pipelines import dead_letter, progress
from trajgraph.pipelines.adapters import normalize
from trajgraph.pipelines.adapters.base import Located, RawRecord, parse_json
from trajgraph.schemas.ids import id_problem
from trajgraph.schemas.trajectory import max_turn_idx

EVENT_TYPES = ("turn", "header", "footer")
READ_FAILURES = "read_failures"
MAX_LINE_BYTES = 16 * 1024 * 1024
STDIN = "-"


@dataclass(frozen=True)
class Line:
    source: str
    locator: str
    data: bytes


# -- reading: new complete lines since the last poll ------------------------------------------


# Beam injects state through parameter defaults; module-level so the default is one object.
_OFFSETS = ReadModifyWriteStateSpec("offsets", PickleCoder())
_OFFSETS_PARAM = beam.DoFn.StateParam(_OFFSETS)
_RECORD = ReadModifyWriteStateSpec("record", PickleCoder())
_RECORD_PARAM = beam.DoFn.StateParam(_RECORD)


class TailSourceFn(beam.DoFn):
    """On every tick, the lines appended since the last one: to any ``*.jsonl`` file in a
    directory (new files included), or on stdin. One key, so one reader holds the offsets."""

    def __init__(self, source: str) -> None:
        self._source = source

    def setup(self) -> None:
        if self._source == STDIN:
            _start_stdin_reader()

    def process(self, _tick: Any, offsets: Any = _OFFSETS_PARAM) -> Iterator[Any]:
        if self._source == STDIN:
            yield from _drain_stdin()
            return
        state: dict[str, tuple[int, int]] = offsets.read() or {}
        for path in sorted(Path(self._source).glob("*.jsonl")):
            name = str(path)
            pos, lineno = state.get(name, (0, 0))
            try:
                with path.open("rb") as f:
                    f.seek(pos)
                    data = f.read()
            except OSError as e:
                # Reported once per poll until readable again; its lines are not skipped.
                yield beam.pvalue.TaggedOutput(
                    READ_FAILURES, dead_letter.row("read", name, f"from byte {pos}", repr(e))
                )
                continue
            end = data.rfind(b"\n")
            if end < 0:
                continue  # only a partial line so far: wait for its newline
            for raw in data[: end + 1].splitlines():
                lineno += 1
                if raw.strip():
                    yield Line(name, f"line {lineno}", raw)
            state[name] = (pos + end + 1, lineno)
        offsets.write(state)


_STDIN_QUEUE: queue.Queue[bytes] = queue.Queue()
_STDIN_STARTED = threading.Event()


def _start_stdin_reader() -> None:
    if _STDIN_STARTED.is_set():
        return
    _STDIN_STARTED.set()

    def read() -> None:
        for raw in sys.stdin.buffer:
            _STDIN_QUEUE.put(raw)

    threading.Thread(target=read, name="trajgraph-stdin", daemon=True).start()


_stdin_lineno = 0


def _drain_stdin() -> Iterator[Line]:
    global _stdin_lineno
    while True:
        try:
            raw = _STDIN_QUEUE.get_nowait()
        except queue.Empty:
            return
        _stdin_lineno += 1
        if raw.strip():
            yield Line("<stdin>", f"line {_stdin_lineno}", raw.rstrip(b"\n"))


# -- events -------------------------------------------------------------------------------


def parse_event(line: Line, default_tenant: str) -> dict[str, Any]:
    """One line → an event dict with ``type``, ``tenant``, ``trajectory_id``, ``source`` and
    ``locator``; InputError (file and line named) for anything else."""

    def fail(reason: str) -> InputError:
        return InputError(reason, source=line.source, locator=line.locator)

    if len(line.data) > MAX_LINE_BYTES:
        raise fail(f"line is over {MAX_LINE_BYTES} bytes")
    try:
        ev = parse_json(line.data)
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError, a non-finite number
        raise fail(f"not JSON: {e}") from e
    if not isinstance(ev, dict):
        raise fail("an event must be a JSON object")
    tid = ev.get("trajectory_id")
    if not isinstance(tid, str) or not tid.strip():
        raise fail("missing trajectory_id")
    problem = id_problem(tid)
    if problem is not None:  # refused here, or every later emission of it would fail too
        raise fail(f"trajectory_id {problem}")
    kind = ev.get("type") or "turn"
    if kind not in EVENT_TYPES:
        raise fail(f"type must be one of {', '.join(EVENT_TYPES)}, got {kind!r}")
    if kind == "turn":
        idx = ev.get("idx")
        if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx <= max_turn_idx():
            raise fail(f"a turn event needs an integer idx from 0 to {max_turn_idx()}")
    tenant = ev.get("tenant") or default_tenant
    if not isinstance(tenant, str):
        raise fail("tenant must be a string")
    return {**ev, "type": kind, "tenant": tenant, "source": line.source, "locator": line.locator}


_ENVELOPE = frozenset({"type", "tenant", "trajectory_id", "source", "locator"})


def apply_event(rec: dict[str, Any], ev: dict[str, Any]) -> bool:
    """Fold one event into a trajectory's record; False when it changes nothing (duplicate)."""
    body = {k: v for k, v in ev.items() if k not in _ENVELOPE}
    if ev["type"] == "turn":
        idx = int(ev["idx"])
        if rec["turns"].get(idx) == body:
            return False
        rec["turns"][idx] = body
        return True
    part = rec[ev["type"]]
    merged = {**part, **body}
    if merged == part:
        return False
    rec[ev["type"]] = merged
    return True


def trajectory_of(key: tuple[str, str], rec: dict[str, Any]) -> dict[str, Any]:
    """The canonical record a batch ingest of the same turns would read."""
    tenant, tid = key
    out: dict[str, Any] = {"id": tid, "tenant": tenant}
    out.update({k: v for k, v in rec["header"].items() if k not in ("id", "turns")})
    if "outcome" in rec["footer"]:
        out["outcome"] = rec["footer"]["outcome"]
    out["turns"] = [rec["turns"][i] for i in sorted(rec["turns"])]
    return out


class AssembleTrajectoryFn(beam.DoFn):
    """Keyed by (tenant, trajectory id): holds the events so far and, whenever one changes
    the trajectory, emits the whole trajectory, normalized like a canonical batch record."""

    def process(
        self, keyed: tuple[str, dict[str, Any]], record: Any = _RECORD_PARAM
    ) -> Iterator[Any]:
        _, ev = keyed
        rec = record.read() or {"turns": {}, "header": {}, "footer": {}}
        if not apply_event(rec, ev):
            progress.bump("stream_duplicates")
            beam.metrics.Metrics.counter("trajgraph", "stream_duplicates").inc()
            return
        record.write(rec)
        traj = trajectory_of((ev["tenant"], ev["trajectory_id"]), rec)
        raw = RawRecord(ev["source"], ev["locator"], "canonical", traj)
        for normalized in normalize(raw):
            yield Located(ev["source"], ev["locator"], normalized)


class AppendDeadLetterFn(beam.DoFn):
    """Streaming has no end to write a file at: dead letters are appended as they come."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"_path": self._path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._path = state["_path"]
        self._lock = threading.Lock()

    def process(self, row: dict[str, Any]) -> None:
        with self._lock:
            os.makedirs(os.path.dirname(self._path) or ".", exist_ok=True)
            with open(self._path, "a", encoding="utf-8") as f:
                f.write(dead_letter.to_json_line(row) + "\n")
