"""Streaming ingest: turn events from growing JSONL files (or stdin) reach the graph as they
arrive, through the same extraction and write transforms as batch.

Events, one JSON object per line:

* a turn: ``{"trajectory_id", "idx", "action", "observation", ...}`` (any canonical turn field);
* a header: ``{"trajectory_id", "type": "header", "task", "metadata"}``;
* a footer: ``{"trajectory_id", "type": "footer", "outcome"}``;
* ``tenant`` on any of them (else ``--tenant``).

Per trajectory, a stateful DoFn keeps what has arrived, keyed by turn index: an event for an
index already held replaces it (or is dropped when identical), out-of-order events slot into
place, and the changes of one bundle (one poll's lines) emit the whole trajectory so far,
once. Extraction and the write are the batch ones, and a trajectory is rewritten as a whole
when it changes, so the graph after the last event is exactly what a batch ingest of the
same turns builds (``trajgraph digest`` checks that). A restart re-reads the source files
from the beginning, a file's lines so far in one poll: each trajectory comes out whole, and
unchanged ones are skipped by their content hash, so nothing is duplicated or missed.

Each emitted trajectory carries a version (1, 2, ... per trajectory). Extraction runs on the
versions in parallel, and a runner that does not fuse the write with the assembly, or that
splits bundles (Prism did, docs/scale-out.md), may hand them to the writer out of order and
two at a time; so the write is keyed by trajectory again: :class:`WriteNewestVersionFn`
writes one trajectory's versions one at a time and drops a version older than the newest
already written.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import os
import queue
import stat
import sys
import threading
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import apache_beam as beam
from apache_beam.coders import PickleCoder, VarIntCoder
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.transforms.periodicsequence import (
    ImpulseSeqGenDoFn,
    ImpulseSeqGenRestrictionProvider,
)
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from trajgraph.core.env import DEFAULT_TENANT
from trajgraph.core.errors import InputError, SchemaValidationError
from trajgraph.graph.rows import GraphRows
from trajgraph.pipelines import dead_letter, progress
from trajgraph.pipelines.adapters import normalize
from trajgraph.pipelines.adapters.base import LineFile, Located, RawRecord, parse_json
from trajgraph.pipelines.adapters.detect import sniff_line_file
from trajgraph.pipelines.transforms import NS, GraphWriterFn, WriteGraph
from trajgraph.schemas.ids import id_problem
from trajgraph.schemas.trajectory import max_turn_idx, validate

EVENT_TYPES = ("turn", "header", "footer")
READ_FAILURES = "read_failures"
MAX_LINE_BYTES = 16 * 1024 * 1024
# At most this much of a file per poll (a whole line over the limit, and more, fits).
READ_CHUNK_BYTES = 4 * MAX_LINE_BYTES
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
_SESSIONS = ReadModifyWriteStateSpec("sessions", PickleCoder())
_SESSIONS_PARAM = beam.DoFn.StateParam(_SESSIONS)
_RECORD = ReadModifyWriteStateSpec("record", PickleCoder())
_RECORD_PARAM = beam.DoFn.StateParam(_RECORD)
_FAILING = ReadModifyWriteStateSpec("failing", PickleCoder())
_FAILING_PARAM = beam.DoFn.StateParam(_FAILING)
_WRITTEN = ReadModifyWriteStateSpec("written", VarIntCoder())
_WRITTEN_PARAM = beam.DoFn.StateParam(_WRITTEN)


SESSION_TRAJECTORIES = "session_trajectories"
EVENTS = "events"


def source_files(source: str) -> list[Path]:
    """The files a stream follows: one file, or every ``*.jsonl`` under a directory (Claude
    Code keeps sessions one folder down, ``~/.claude/projects/<project>/``)."""
    root = Path(source)
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*.jsonl") if p.is_file())  # not a dir named x.jsonl


class TailSourceFn(beam.DoFn):
    """On every tick, the lines appended since the last one: to a file, to any ``*.jsonl``
    file under a directory (new files included), or on stdin. One key, so one reader holds
    the offsets. Other files' lines are turn events, but a file whose first lines are a
    Claude Code transcript or an OTLP export is a session file: its lines so far are kept
    and adapted as a whole, like a batch ingest of the file, whenever they grow, and each
    trajectory that changed (the session, each sub-agent) goes out on
    ``SESSION_TRAJECTORIES``. A call still waiting for its result is a turn with an empty
    observation until the result arrives."""

    def __init__(self, source: str, tenant: str = DEFAULT_TENANT) -> None:
        self._source = source
        self._tenant = tenant

    def setup(self) -> None:
        if self._source == STDIN:
            _start_stdin_reader()

    def process(
        self,
        _tick: Any,
        offsets: Any = _OFFSETS_PARAM,
        sessions: Any = _SESSIONS_PARAM,
        failing: Any = _FAILING_PARAM,
    ) -> Iterator[Any]:
        if self._source == STDIN:
            yield from _drain_stdin()
            return
        state: dict[str, Tail] = offsets.read() or {}
        unreadable: dict[str, str] = failing.read() or {}
        listed = [str(path) for path in source_files(self._source)]
        _follow_renames(state, listed, sessions)
        # Files known before first: one of them copied and truncated hands what it held to
        # its copy, which must not then be read from its start as a new file. Files rotated
        # away from a followed name are followed under their new name while they exist (a
        # writer that has not reopened its log still appends to them).
        known = [name for name in state if name in listed or state[name].origin]
        known.sort(key=lambda name: bool(state[name].origin))  # followed names, then rotated
        for name in [*known, *(name for name in listed if name not in known)]:
            if name not in known and name in state:
                continue  # handed its state during this poll: read already
            yield from self._poll(name, state, sessions, failing, unreadable)
        offsets.write(state)

    def _poll(
        self,
        name: str,
        state: dict[str, Tail],
        sessions: Any,
        failing: Any,
        unreadable: dict[str, str],
    ) -> Iterator[Any]:
        """One followed file: what it gained since the last poll, as lines (or session
        trajectories), and its read failures, each said once."""
        tail = state.get(name) or Tail()
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            # A name that is not UTF-8: none of its records could be written (their source
            # is on every node). Said once, like an unreadable file.
            reason = "the file name is not valid UTF-8: rename the file"
            yield from _report_once(name, "name", "file", reason, failing, unreadable)
            return
        if _settled(name, tail, state):
            return
        read = yield from self._read(name, tail, state, sessions, failing, unreadable)
        if read is not None:
            tail, data = read
            yield from self._emit(name, tail, data, sessions)

    def _read(
        self,
        name: str,
        tail: Tail,
        state: dict[str, Tail],
        sessions: Any,
        failing: Any,
        unreadable: dict[str, str],
    ) -> Generator[Any, None, tuple[Tail, bytes] | None]:
        """The file's next chunk from where its reader is, and that reader (a new one when
        the file was rotated or truncated: the old file's rest is read first); None when it
        cannot be read (reported once)."""
        try:
            with _open_regular(name) as f:
                st = os.fstat(f.fileno())
                identity = (st.st_dev, st.st_ino)
                replaced = bool(tail.pos) and identity != tail.identity
                rewritten = bool(tail.pos) and not replaced and not tail.continues(f, st.st_size)
                if replaced or rewritten:
                    # Rotated (renamed away, another file under the name) or copied and
                    # truncated: first the rest of the old file, wherever it is now, so
                    # that nothing appended before the rotation is lost; then this file
                    # from its start, as a restart would read it.
                    moved = _rotated_copy(name, tail, identity) if rewritten else None
                    if moved is not None:
                        path, at = moved
                        state[path] = dataclasses.replace(
                            tail, origin=tail.origin or name, identity=at, mtime_ns=0
                        )
                        _move_session(sessions, name, path)
                        yield from self._poll(path, state, sessions, failing, unreadable)
                    else:
                        _forget_session(sessions, name)
                    tail = Tail(origin=tail.origin)
                f.seek(tail.pos)
                # Bounded: a stream started on a large file reads it over a few polls, not
                # all into memory at once.
                data = f.read(READ_CHUNK_BYTES)
        except OSError as e:
            # Reported once (again when the error changes), not on every poll; its lines
            # are not skipped: they are read once the file is readable again.
            where = f"from byte {tail.pos}"
            yield from _report_once(name, repr(e), where, repr(e), failing, unreadable)
            return None
        if unreadable.pop(name, None) is not None:
            failing.write(unreadable)
        tail.identity, tail.mtime_ns = identity, st.st_mtime_ns
        state[name] = tail
        return tail, data

    def _emit(self, name: str, tail: Tail, data: bytes, sessions: Any) -> Iterator[Any]:
        """The complete lines of ``data`` (read at ``tail.pos``): turn events, or the file's
        session trajectories so far; then the reader moved past them."""
        pos, lineno, kind = tail.pos, tail.lineno, tail.kind
        if tail.skipping:  # the rest of a line over the limit, already dead-lettered
            cut = data.find(b"\n")
            if cut < 0:
                tail.advance(data, pos + len(data), lineno, kind, skipping=True)
                return
            pos, lineno, data = pos + cut + 1, lineno + 1, data[cut + 1 :]
            tail.advance(b"", pos, lineno, kind, skipping=False)
        end = data.rfind(b"\n")
        # What follows the last newline waits for its own, unless it is already over the
        # limit (a writer that died mid-line, a binary file): held, it would be read again on
        # every poll for ever. It is dead-lettered now and skipped to its newline, whenever
        # that comes.
        overlong = len(data) - (end + 1) > MAX_LINE_BYTES
        if end < 0 and not overlong:
            return  # only a partial line so far: wait for its newline
        if end >= 0:
            kind = kind or sniff_line_file(data[: end + 1]) or EVENTS
            if kind != EVENTS:
                lineno += data.count(b"\n", 0, end + 1)
                held = sessions.read() or {}
                yield from _session_trajectories(held, name, kind, data[: end + 1], self._tenant)
                sessions.write(held)
            else:
                # Lines end at "\n" only, as batch splits them: a stray "\r" (which
                # splitlines() also ends a line at) would shift every later locator.
                for raw in data[:end].split(b"\n"):
                    lineno += 1
                    if raw.strip():
                        yield Line(name, f"line {lineno}", raw.removesuffix(b"\r"))
        if overlong:
            _count("dead_lettered")
            yield beam.pvalue.TaggedOutput(
                READ_FAILURES,
                dead_letter.row(
                    "read",
                    name,
                    f"line {lineno + 1}",
                    f"line is over {MAX_LINE_BYTES} bytes (no newline yet): skipped up to "
                    "its newline",
                ),
            )
            tail.advance(data, pos + len(data), lineno, kind, skipping=True)
            return
        tail.advance(data[: end + 1], pos + end + 1, lineno, kind, skipping=False)


def _settled(name: str, tail: Tail, state: dict[str, Tail]) -> bool:
    """Nothing to read: a rotated file removed (or gone on under a name not followed),
    forgotten; or a file unchanged since the last poll (one stat, not an open and a read: a
    folder of thousands of finished sessions is polled twice a second)."""
    try:
        st = os.stat(name)
    except OSError:
        st = None  # opening it says why, once
    if tail.origin and (st is None or (st.st_dev, st.st_ino) != tail.identity):
        state.pop(name, None)
        return True
    return st is not None and tail.unchanged(st)


def _report_once(
    name: str, why: str, locator: str, reason: str, failing: Any, unreadable: dict[str, str]
) -> Iterator[Any]:
    """A dead letter for a file that cannot be read, unless ``why`` was said already (again
    when it changes), so that it is not said on every poll."""
    if unreadable.get(name) == why:
        return
    unreadable[name] = why
    failing.write(unreadable)
    _count("dead_lettered")
    yield beam.pvalue.TaggedOutput(READ_FAILURES, dead_letter.row("read", name, locator, reason))


# How much of a followed file's last bytes the reader keeps, to tell the same file grown
# from one truncated and written again past the old offset within one poll.
TAIL_BYTES = 64


@dataclasses.dataclass
class Tail:
    """Where the reader is in one followed file."""

    pos: int = 0  # bytes read (up to the last complete line)
    lineno: int = 0
    kind: str = ""  # EVENTS, or the session format of the file
    identity: tuple[int, int] = (0, 0)  # (st_dev, st_ino)
    skipping: bool = False  # inside a line over the limit, already dead-lettered
    last: bytes = b""  # the last TAIL_BYTES bytes before pos
    mtime_ns: int = 0
    origin: str = ""  # for a rotated file: the followed name it was rotated away from

    def unchanged(self, st: os.stat_result) -> bool:
        return (
            (st.st_dev, st.st_ino) == self.identity
            and st.st_size == self.pos
            and st.st_mtime_ns == self.mtime_ns
        )

    def continues(self, f: Any, size: int) -> bool:
        """Whether the open file still holds, before ``pos``, the bytes read there (False:
        truncated, and maybe written again past ``pos``, since the last poll)."""
        if size < self.pos:
            return False
        if not self.last:
            return True
        f.seek(self.pos - len(self.last))
        return bool(f.read(len(self.last)) == self.last)

    def advance(self, data: bytes, pos: int, lineno: int, kind: str, *, skipping: bool) -> None:
        self.last = (self.last + data)[-TAIL_BYTES:] if data else self.last
        self.pos, self.lineno, self.kind, self.skipping = pos, lineno, kind, skipping


def _open_regular(name: str) -> Any:
    """``open(name, "rb")`` that never blocks (a FIFO put under a followed name) and refuses
    what is not a regular file (a device such as /dev/zero never ends)."""
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    f = open(fd, "rb", closefd=True)  # noqa: SIM115 (the caller's with closes it)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        f.close()
        raise OSError(f"not a regular file: {name}")
    return f


def _follow_renames(state: dict[str, Tail], listed: list[str], sessions: Any) -> None:
    """Move the state of every followed file that now has another name to that name: a
    file rotated by rename (``a.jsonl`` → ``a.1.jsonl``, or on to ``a.2.jsonl``) goes on
    from where it was read to, not from its start as a new file, and the file now under the
    old name is read from its start."""
    current: dict[str, tuple[int, int]] = {}
    for name in {*listed, *state}:
        with contextlib.suppress(OSError):
            st = os.stat(name)
            current[name] = (st.st_dev, st.st_ino)
    displaced = {
        tail.identity: name
        for name, tail in state.items()
        if tail.identity != (0, 0) and current.get(name) != tail.identity
    }
    if not displaced:
        return
    moved: dict[str, str] = {}  # new name -> old name
    for name in listed:
        old = displaced.pop(current.get(name, (0, 0)), None)
        if old is not None:
            moved[name] = old
    for old in displaced.values():  # renamed to a name the listing does not hold
        found = _rotated_copy(old, state[old], None)
        if found is not None and found[0] not in moved:
            moved[found[0]] = old
    tails = {new: state[old] for new, old in moved.items()}
    for new, old in sorted(moved.items(), key=lambda kv: kv[0] in moved.values()):
        _move_session(sessions, old, new)
    for name in {*moved.values(), *displaced.values()}:
        if name in listed:  # another file under the name: read from its start
            state[name] = Tail(origin=state[name].origin)
        else:
            del state[name]  # a rotated file gone on, or removed
    for new, tail in tails.items():
        old = moved[new]
        state[new] = dataclasses.replace(tail, origin=tail.origin or old)


def _move_session(sessions: Any, old: str, new: str) -> None:
    """The lines held for a session file follow it to its new name; the name it left keeps
    only the versions (what comes under it next still supersedes what was written)."""
    held = sessions.read() or {}
    if old not in held:
        return
    rec = held[old]
    held[new] = {**rec, "hashes": dict(rec["hashes"]), "versions": dict(rec["versions"])}
    held[old] = {"data": b"", "hashes": {}, "versions": dict(rec["versions"])}
    sessions.write(held)


def _rotated_copy(
    name: str, tail: Tail, truncated: tuple[int, int] | None
) -> tuple[str, tuple[int, int]] | None:
    """Where the file read as ``name`` is now, beside it: the same inode under another name
    (rotation by rename), or, when ``name`` was truncated in place (``truncated`` is its
    identity), a copy holding what was read before the offset (copy-truncate)."""
    folder = os.path.dirname(name) or "."
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return None
    for entry in sorted(entries, key=lambda e: e.name):
        path = entry.path
        if path == name:
            continue
        try:
            st = entry.stat()
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        if truncated is None:
            if (st.st_dev, st.st_ino) == tail.identity:
                return path, tail.identity
            continue
        if st.st_size < tail.pos or (st.st_dev, st.st_ino) == truncated:
            continue
        try:
            with open(path, "rb") as f:
                f.seek(tail.pos - len(tail.last))
                if f.read(len(tail.last)) == tail.last:
                    return path, (st.st_dev, st.st_ino)
        except OSError:
            continue
    return None


def _forget_session(sessions: Any, source: str) -> None:
    """Drop the lines held for a session file that was replaced (its versions stay, so the
    new file's trajectories still supersede what was written)."""
    held = sessions.read() or {}
    if source in held:
        held[source]["data"] = b""
        held[source]["hashes"] = {}
        sessions.write(held)


def _session_trajectories(
    held: dict[str, Any], source: str, fmt: str, data: bytes, tenant: str
) -> Iterator[Any]:
    """Add a session file's new lines to what is held for it and yield the trajectories
    that changed, each with its next version (dead-letter rows for a file that cannot be
    adapted)."""
    rec = held.setdefault(source, {"data": b"", "hashes": {}, "versions": {}})
    rec["data"] += data
    try:
        trajectories = normalize(RawRecord(source, "file", fmt, LineFile(rec["data"])))
    except InputError as e:
        _count("dead_lettered")
        yield beam.pvalue.TaggedOutput(
            READ_FAILURES, dead_letter.row("normalize", source, "file", e.reason)
        )
        return
    for traj in trajectories:
        traj.setdefault("tenant", tenant)
        digest = hashlib.blake2b(
            json.dumps(traj, sort_keys=True, default=str).encode(), digest_size=16
        ).hexdigest()
        if rec["hashes"].get(traj["id"]) == digest:
            continue  # unchanged sub-agents are not re-sent
        rec["hashes"][traj["id"]] = digest
        version = rec["versions"].get(traj["id"], 0) + 1
        rec["versions"][traj["id"]] = version
        located = Located(source, "file", traj, version=version)
        yield beam.pvalue.TaggedOutput(SESSION_TRAJECTORIES, located)


_STDIN_QUEUE: queue.Queue[bytes] = queue.Queue()
_STDIN_STARTED = threading.Event()
_STDIN_CLOSED = threading.Event()


def _start_stdin_reader() -> None:
    if _STDIN_STARTED.is_set():
        return
    _STDIN_STARTED.set()

    def read() -> None:
        try:
            for raw in stdin_lines(sys.stdin.buffer):
                _STDIN_QUEUE.put(raw)
        finally:
            _STDIN_CLOSED.set()  # after the last line is queued

    threading.Thread(target=read, name="trajgraph-stdin", daemon=True).start()


def stdin_lines(stream: Any) -> Iterator[bytes]:
    """The lines of ``stream``, each held at most ``MAX_LINE_BYTES + 1`` long: a longer one
    (an agent that printed a binary blob) is cut there and the rest of it skipped, so it is
    one line, dead-lettered for its length, and memory stays bounded."""
    while True:
        raw = stream.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while True:  # skip to its end
                rest = stream.readline(MAX_LINE_BYTES + 1)
                if not rest or rest.endswith(b"\n"):
                    break
        yield raw


_stdin_lineno = 0


def _drain_stdin() -> Iterator[Line]:
    """The lines queued since the last tick; at the end of stdin, the end of the stream."""
    global _stdin_lineno
    closed = _STDIN_CLOSED.is_set()  # read first: every line queued before it is drained
    while True:
        try:
            raw = _STDIN_QUEUE.get_nowait()
        except queue.Empty:
            break
        _stdin_lineno += 1
        if raw.strip():
            yield Line("<stdin>", f"line {_stdin_lineno}", raw.rstrip(b"\n"))
    if closed:
        # `agent | trajgraph stream -`: the agent is done, so is the stream (what was read is
        # still written: the poll stops, the pipeline drains).
        request_stop()


# -- the end of a stream: --duration, the end of stdin, or a signal ---------------------------

# Set by the end of stdin or by SIGTERM/SIGINT: the poll emits one last tick (the reader hands
# over what it holds) and stops; the pipeline then drains and ends as at the end of
# --duration. Module-level, so only workers in this process see it (the DirectRunner,
# LOOPBACK workers); trajgraph/jobs/stream.py ends other runners at once instead.
_STOP = threading.Event()


def request_stop() -> None:
    _STOP.set()


def stop_requested() -> bool:
    return _STOP.is_set()


def reset_stop() -> None:
    _STOP.clear()


_TICKS_PARAM = beam.DoFn.RestrictionParam(ImpulseSeqGenRestrictionProvider())
_TICK_WATERMARK_PARAM = beam.DoFn.WatermarkEstimatorParam(
    ManualWatermarkEstimator.default_provider()
)


class PollUntilStoppedFn(ImpulseSeqGenDoFn):
    """PeriodicImpulse's ticks (every ``interval`` seconds from ``start`` to ``stop``), ending
    early when :func:`request_stop` is called: one last tick, then none."""

    @beam.DoFn.unbounded_per_element()
    def process(
        self,
        element: Any,
        restriction_tracker: Any = _TICKS_PARAM,
        watermark_estimator: Any = _TICK_WATERMARK_PARAM,
    ) -> Iterator[Any]:
        start, _, interval = element
        if isinstance(start, Timestamp):
            start = start.micros / 1_000_000
        index = restriction_tracker.current_restriction().start
        end = restriction_tracker.current_restriction().stop
        # Breaks, not returns: Beam warns about a generator that returns (beam#22969).
        while True:
            at = Timestamp.of(start + interval * index)
            stopping = _STOP.is_set()
            if not stopping and at > Timestamp.now():
                _advance(watermark_estimator, at)
                restriction_tracker.defer_remainder(at)
                break
            if not restriction_tracker.try_claim(index):
                break  # --duration is up
            _advance(watermark_estimator, at)
            yield TimestampedValue(at, at)
            index += 1
            if stopping:
                if index < end:
                    restriction_tracker.try_claim(end)  # nothing more to claim: done
                break


def _advance(watermark_estimator: Any, to: Timestamp) -> None:
    current = watermark_estimator.current_watermark()
    if current is None or to > current:  # a watermark only moves forward
        watermark_estimator.set_watermark(to)


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
    problem = body_problem(kind, tid, {k: v for k, v in ev.items() if k not in _ENVELOPE})
    if problem is not None:  # held, it would fail every later emission of its trajectory
        raise fail(f"bad {kind} event: {problem}")
    return {**ev, "type": kind, "tenant": tenant, "source": line.source, "locator": line.locator}


_ENVELOPE = frozenset({"type", "tenant", "trajectory_id", "source", "locator"})


def body_problem(kind: str, tid: str, body: dict[str, Any]) -> str | None:
    """What the contract refuses in one event's fields (None: nothing), judged by validating
    the smallest trajectory that holds them, as :func:`trajectory_of` would place them. A
    turn event may leave out ``action`` or ``observation`` (a later event for its index
    replaces it); what it gives must have the contract's type."""
    probe: dict[str, Any] = {"id": tid, "task": "", "format": "stream", "turns": []}
    if kind == "turn":
        probe["turns"] = [{"action": "", "observation": "", **body}]
    elif kind == "header":
        probe.update({k: v for k, v in body.items() if k not in ("id", "turns")})
    elif "outcome" in body:
        probe["outcome"] = body["outcome"]
    probe["source"] = probe.get("source") or "event"  # filled like a canonical record's
    if probe.get("metadata") is None:
        probe["metadata"] = {}
    try:
        validate(probe)
    except SchemaValidationError as e:
        return e.reason.replace("turns/0/", "").replace("at turns/0:", "at the turn:")
    return None


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
    """Keyed by (tenant, trajectory id): holds the events so far and, when they change the
    trajectory, emits the whole trajectory, normalized like a canonical batch record: once
    per bundle, after its last event for the trajectory.

    A bundle holds what one poll read. Emitting after every event made a poll that read a
    whole log (a restart, a stream started on an existing file) extract and write every
    prefix of it: 500 turns were 500 versions and 125,250 turns extracted (7.8 minutes, not
    seconds), and during a restart readers saw a trajectory already written whole shrink to
    its first turns and grow back. Once per bundle, a restart's version is the whole log
    again, which the write skips as unchanged."""

    def start_bundle(self) -> None:
        self._latest: dict[str, tuple[dict[str, Any], dict[str, Any], Any, Any]] = {}

    def process(
        self,
        keyed: tuple[str, dict[str, Any]],
        record: Any = _RECORD_PARAM,
        timestamp: Any = beam.DoFn.TimestampParam,
        window: Any = beam.DoFn.WindowParam,
    ) -> Iterator[NoReturn]:
        yield from ()  # emits in finish_bundle; still a generator, as Beam expects of process
        key, ev = keyed
        rec = record.read() or {"turns": {}, "header": {}, "footer": {}}
        if not apply_event(rec, ev):
            progress.bump("stream_duplicates")
            beam.metrics.Metrics.counter("trajgraph", "stream_duplicates").inc()
            return
        rec["version"] = rec.get("version", 0) + 1
        record.write(rec)
        if key in self._latest:
            _count("stream_versions_coalesced")
        # A copy: the state's object may be the one the next event changes.
        self._latest[key] = (ev, copy.deepcopy(rec), timestamp, window)

    def finish_bundle(self) -> Iterator[Any]:
        latest, self._latest = self._latest, {}
        for ev, rec, timestamp, window in latest.values():
            traj = trajectory_of((ev["tenant"], ev["trajectory_id"]), rec)
            raw = RawRecord(ev["source"], ev["locator"], "canonical", traj)
            for normalized in normalize(raw):
                located = Located(ev["source"], ev["locator"], normalized, version=rec["version"])
                yield WindowedValue(located, timestamp, (window,))


def _count(name: str, n: int = 1) -> None:
    beam.metrics.Metrics.counter(NS, name).inc(n)
    progress.bump(name, n)


class WriteNewestVersionFn(GraphWriterFn):
    """Keyed by trajectory uid: writes a streamed trajectory's version unless a newer one
    was written already (see the module's docstring).

    Per-key state makes the runner process one trajectory's versions one at a time, and the
    write is synchronous here, so two writes of a trajectory never interleave and an older
    version never overwrites a newer one. Versions 0 (not streamed) are always written. The
    driver, schema and writer are GraphWriterFn's."""

    def process(
        self, keyed: tuple[str, GraphRows], written: Any = _WRITTEN_PARAM
    ) -> Iterator[NoReturn]:
        yield from ()  # a sink; still a generator, as Beam expects of process
        _, rows = keyed
        newest = written.read() or 0
        if rows.version and rows.version <= newest:
            _count("stream_stale_versions")
            return
        stats = self._writer.write([rows])
        written.write(max(newest, rows.version))
        self._count_written(stats)


class WriteNewestVersions(WriteGraph):
    """GraphRows of streamed trajectories → node embeddings (when an embedder is given) →
    each trajectory's newest version in Neo4j."""

    def write(self, rows: Any) -> Any:
        return (
            rows
            | "Key by trajectory uid"
            >> beam.Map(lambda r: (r.trajectory_uid, r)).with_output_types(
                beam.typehints.KV[str, Any]
            )
            | "Write the newest versions"
            >> beam.ParDo(WriteNewestVersionFn(self._neo, self._batch_size))
        )
