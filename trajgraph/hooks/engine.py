"""What one hook call does, for every agent: bring a session's new turns into the graph,
then remind.

``HookEngine`` is long-lived (the hook server keeps one warm, docs/hooks.md), so each call
pays only for what is new:

* the session file (Claude Code's transcript, Codex's rollout) is read from the byte offset
  of the last call; complete lines only (a line being written waits for the next call);
* a turn enters the graph once its tool call has a result (the completed prefix of the
  main line or of one sub-agent), and its window is extracted once (heuristic extractor,
  the batch pipeline's windows);
* merge and rows are the batch pipeline's, over the whole prefix, and only rows that are new
  or changed since the last write are sent, in one transaction. Should a row the graph holds
  no longer be produced, the trajectory is rewritten as a whole instead, so the graph is
  always what a batch write of the same turns builds
  (tests/integration/trajgraph/test_agent_sessions.py).

Then ``remind`` (through the ``TrajGraph`` client) judges the pending call against the turns
before it. No embeddings are written here: reminders read turns and states, not vectors.
What differs between agents (how the file is read into calls and trajectories, how the
pending call is rendered) is the agent's adapter (hooks/agents.py), passed to each call.
A call waits at most ``LOCK_WAIT_S`` for its session (another call reading or writing it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import neo4j

from trajgraph.client import TrajGraph
from trajgraph.core.errors import BusyError, ConfigError, InputError, NotFoundError
from trajgraph.extractors import get_extractor
from trajgraph.extractors.merge import merge
from trajgraph.extractors.windows import build_windows
from trajgraph.graph import cypher
from trajgraph.graph.connection import write_transaction
from trajgraph.graph.embedders import HashEmbedder
from trajgraph.graph.rows import ROW_KINDS, GraphRows, build_rows, content_hash
from trajgraph.graph.writer import STATEMENTS, clear_content, orphan_deletes
from trajgraph.hooks.agents import Agent, Reading, ToolCall
from trajgraph.pipelines.adapters.base import Lines
from trajgraph.queries.memory.findings import Reminder
from trajgraph.queries.memory.remind import MAX_ACTION_CHARS
from trajgraph.schemas.extraction import WindowExtraction
from trajgraph.schemas.trajectory import validate

log = logging.getLogger("trajgraph.hook")

MAX_TRANSCRIPT_BYTES = 256 * 1024 * 1024
# What all sessions together may hold (bytes of transcript read; parsed, about twice that):
# past it, the sessions used least recently are forgotten (read again from the start if
# they come back). Without it, one transcript under five symlinked names was five copies.
MAX_HELD_BYTES = MAX_TRANSCRIPT_BYTES
# A session not called for this long is forgotten (the server may live for hours).
SESSION_IDLE_S = 15 * 60
# A read larger than this gives the memory of its bytes and parse back to the system after.
RELEASE_AFTER_BYTES = 16 * 1024 * 1024
# How long a call waits for its session's lock (another call reading or writing it).
LOCK_WAIT_S = 30.0


@dataclass
class Synced:
    """What one trajectory has in the graph, as this engine wrote it."""

    turns: int = 0
    last_key: str = ""  # digest of the last extracted turn: an edited file resets
    extractions: list[WindowExtraction] = field(default_factory=list)
    sent: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # kind -> id -> row
    content_hash: str = ""


@dataclass
class SessionFile:
    path: str
    offset: int = 0
    lines: Lines = field(default_factory=Lines)
    results: set[str] = field(default_factory=set)  # tool_use ids with a result so far
    trajectories: dict[str, Synced] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    identity: tuple[int, int] = (0, 0)  # (st_dev, st_ino) of the file read so far
    used: float = field(default_factory=time.monotonic)

    def forget(self) -> None:
        """Back to nothing read (the file was replaced, or memory is needed)."""
        self.offset, self.lines, self.trajectories, self.results = 0, Lines(), {}, set()


@dataclass
class Outcome:
    """The result of one call: the reminder (or None) and where the time went."""

    trajectory: str
    pending_turn: int
    reminder: Reminder | None
    new_turns: int
    timings_ms: dict[str, float]
    answered: bool = False  # the call named by tool_use_id has its result in the file
    version: str = ""  # the agent's CLI version the session file names ("" when none)


def _digest(value: Any) -> str:
    raw = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str).encode()
    return hashlib.blake2b(raw, digest_size=12).hexdigest()


def _identity(kind: str, row: dict[str, Any]) -> str:
    return str(row.get("uid") or f"{row.get('src')}->{row.get('dst')}")


class HookEngine:
    def __init__(
        self,
        driver: neo4j.Driver,
        *,
        database: str,
        budget_tokens: int = 2048,
        batch_size: int = 1000,
    ) -> None:
        self._driver = driver
        self._database = database
        self._budget = budget_tokens
        self._batch = batch_size
        self._extractor = get_extractor("heuristic")
        # The read side through the one client (offline rules: no LLM inside a hook; no
        # question is embedded, the hash embedder only stands in).
        self._client = TrajGraph(driver, database=database, embedder=HashEmbedder(), llm=None)
        self._files: dict[tuple[str, str], SessionFile] = {}
        self._files_lock = threading.Lock()

    def close(self) -> None:
        self._client.close()
        self._extractor.close()

    @property
    def client(self) -> TrajGraph:
        """The read side (project memory, reminders): offline rules, no LLM."""
        return self._client

    # -- the call ------------------------------------------------------------------------------

    def tool_call(
        self, agent: Agent, *, tenant: str, call: ToolCall, remind: bool = True
    ) -> Outcome:
        """Sync the session's completed turns, then ask for a reminder about the pending
        call (unless ``remind`` is False: PostToolUse only syncs)."""
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        state = self._file(tenant, call.path)
        with self._locked(state):  # bounded: a stuck call on the session means silence
            self._read_new_lines(state, agent)
            timings["read"] = _ms(t0)
            reading = agent.read(state, call)
            calls = reading.calls
            if calls is not None:
                done, pending, answered = _positions(calls, call.tool_use_id)
                t1 = time.perf_counter()
                upto = min(done, pending) if remind else done
                new = self._sync(tenant, state, agent, reading, upto)
                timings["sync"] = _ms(t1)
        tid, version = reading.trajectory, reading.version
        if calls is None:
            if reading.redirect is None:
                return Outcome(tid, 0, None, 0, timings, version=version)
            own = replace(call, path=reading.redirect)
            return self.tool_call(agent, tenant=tenant, call=own, remind=remind)
        if not remind:
            timings["total"] = _ms(t0)
            return Outcome(tid, pending, None, new, timings, answered, version)
        t2 = time.perf_counter()
        reminder = self._remind(tenant, tid, agent.action(reading, pending, call), pending)
        timings["remind"] = _ms(t2)
        timings["total"] = _ms(t0)
        return Outcome(tid, pending, reminder, new, timings, answered, version)

    def after_tool_call(
        self, agent: Agent, *, tenant: str, call: ToolCall, wait_s: float = 10.0
    ) -> Outcome:
        """After a call: Claude Code writes its result to the transcript only after its
        PostToolUse hooks ran (Codex, its output to the rollout), so wait (polling) until the
        result is there, then sync. The hook client does not wait for this; the next
        PreToolUse finds the turn in the graph."""
        end = time.monotonic() + wait_s
        state = self._file(tenant, call.path)
        while call.tool_use_id and time.monotonic() < end:
            with self._locked(state):
                self._read_new_lines(state, agent)
                if agent.answered(state, call.tool_use_id):
                    break
            time.sleep(0.05)
        return self.tool_call(agent, tenant=tenant, call=call, remind=False)

    def _file(self, tenant: str, path: str) -> SessionFile:
        """The state of a transcript, one per file: names that lead to the same file (a
        symlink, ``..``) share it."""
        name = str(Path(path).expanduser())
        try:
            st = os.stat(name)
        except OSError as e:
            raise InputError(f"cannot read the transcript: {e}", source=name) from e
        if not stat.S_ISREG(st.st_mode):
            # A device (/dev/zero reports size 0 and never ends) or a FIFO (open() waits
            # for a writer for ever): not a transcript.
            raise InputError("the transcript is not a regular file", source=name)
        with self._files_lock:
            # Keyed by where the name leads (a file replaced there is noticed by its inode
            # when read, and read again from its start).
            key = (tenant, os.path.realpath(name))
            if key not in self._files:
                self._files[key] = SessionFile(name)
            state = self._files[key]
            state.used = time.monotonic()
            return state

    @contextlib.contextmanager
    def _locked(self, state: SessionFile) -> Iterator[None]:
        """The session's lock, waited for at most LOCK_WAIT_S (then BusyError: silence)."""
        if not state.lock.acquire(timeout=LOCK_WAIT_S):
            raise BusyError("another call on this session is still running")
        try:
            yield
        finally:
            state.lock.release()

    def forget_sessions(self, *, idle_s: float = SESSION_IDLE_S) -> int:
        """Forget sessions not called for ``idle_s``, then the least recently used ones
        while all together hold over MAX_HELD_BYTES; a session in use is left alone. Called
        after each call and by the server's idle watchdog. Returns how many were dropped."""
        now = time.monotonic()
        dropped = 0
        with self._files_lock:
            held = sum(s.offset for s in self._files.values())
            for key, state in sorted(self._files.items(), key=lambda kv: kv[1].used):
                if now - state.used < idle_s and held <= MAX_HELD_BYTES:
                    break
                if not state.lock.acquire(blocking=False):
                    continue  # a call is using it
                try:
                    held -= state.offset
                    state.forget()
                    del self._files[key]
                    dropped += 1
                finally:
                    state.lock.release()
        if dropped:
            _release_memory()
        return dropped

    def _read_new_lines(self, state: SessionFile, agent: Agent) -> None:
        try:
            # O_NONBLOCK: a path that became a FIFO since _file() must not block the open.
            fd = os.open(state.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError as e:
            raise InputError(f"cannot read the transcript: {e}", source=state.path) from e
        with open(fd, "rb", closefd=True) as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise InputError("the transcript is not a regular file", source=state.path)
            if st.st_size > MAX_TRANSCRIPT_BYTES:
                raise InputError(
                    f"transcript is over {MAX_TRANSCRIPT_BYTES} bytes", source=state.path
                )
            identity = (st.st_dev, st.st_ino)
            if st.st_size < state.offset or identity != state.identity:
                state.forget()  # rewritten, truncated or replaced: start over
                state.identity = identity
            f.seek(state.offset)
            # No more than the size just read: a file growing meanwhile is read next call,
            # and the cap holds whatever the file does.
            data = f.read(st.st_size - state.offset)
        end = data.rfind(b"\n")
        if end < 0:
            return  # nothing complete yet
        more, results = agent.read_lines(data[: end + 1])
        state.results.update(results)
        state.lines.records.extend(more.records)
        state.lines.bad_lines.extend(more.bad_lines)
        state.offset += end + 1
        if end > RELEASE_AFTER_BYTES:
            del data, more
            _release_memory(collect=False)

    # -- writing the completed prefix ---------------------------------------------------------

    def _sync(
        self, tenant: str, state: SessionFile, agent: Agent, reading: Reading, done: int
    ) -> int:
        tid = reading.trajectory
        synced = state.trajectories.setdefault(tid, Synced())
        if done <= synced.turns and synced.content_hash:
            # Nothing completed since the last write. (Fewer turns than the graph holds: a
            # call earlier than the last synced one; remind's as-of view hides the rest.)
            return 0
        trajs = {t["id"]: t for t in agent.trajectories(reading.session, state)}
        traj = trajs.get(tid)
        if traj is None or done == 0:
            return 0
        traj["turns"] = traj["turns"][:done]
        traj["tenant"] = tenant
        turns = traj["turns"]
        if synced.turns and synced.last_key != _digest(turns[synced.turns - 1]):
            synced = state.trajectories[tid] = Synced()  # the file changed under us
        # The contract check of the batch pipeline, on what is new (the rest passed it before).
        validate({**traj, "turns": turns[synced.turns :]})
        new = done - synced.turns
        if new:
            start = max(0, synced.turns - 1)
            part = {**traj, "turns": turns[start:done]}
            windows = build_windows(part, budget_tokens=self._budget)[synced.turns - start :]
            batch = self._extractor.extract_windows(windows, task=str(traj.get("task") or ""))
            if batch.failures:
                raise ConfigError(f"extraction failed for turns {[t for t, _ in batch.failures]}")
            synced.extractions.extend(batch.extractions)
            synced.turns, synced.last_key = done, _digest(turns[done - 1])
        merged = merge(turns, synced.extractions)
        digest = content_hash(traj, merged, extractor=self._extractor.fingerprint)
        if digest == synced.content_hash:
            return 0
        rows = build_rows(traj, merged, extractor=self._extractor.label, content_hash=digest)
        self._write(rows, synced)
        return new

    def _write(self, rows: GraphRows, synced: Synced) -> None:
        """Write what changed since this engine's last write, in one transaction under the
        trajectory's lock (graph/cypher.py LOCK_TRAJECTORIES). The rows sent before are only
        a base while the graph holds the hash this engine wrote: when another writer (a
        batch ingest of the same session, another hook server) replaced the trajectory
        since, or something sent before is no longer produced, it is rewritten whole."""
        current = {k: {_identity(k, r): r for r in rows.rows[k]} for k in ROW_KINDS}
        uid = rows.trajectory_uid
        batch = self._batch
        dropped = any(not synced.sent.get(k, {}).keys() <= current[k].keys() for k in ROW_KINDS)

        def work(tx: neo4j.ManagedTransaction) -> None:
            locked = tx.run(cypher.LOCK_TRAJECTORIES, uids=[uid]).single()
            assert locked is not None  # MERGE returns the trajectory's row
            stored, existed = locked["content_hash"], locked["existed"]
            if stored == rows.content_hash:
                return  # this version is there already
            ours = bool(synced.content_hash) and stored == synced.content_hash and not dropped
            orphans: tuple[list[str], list[str]] = ([], [])
            if existed and not ours:  # as an ingest rewrites it (graph/writer.py)
                orphans = clear_content(tx, [uid])
            sent = synced.sent if ours else {}
            for kind in ROW_KINDS:
                todo = [r for key, r in current[kind].items() if sent.get(kind, {}).get(key) != r]
                for start in range(0, len(todo), batch):
                    tx.run(STATEMENTS[kind], rows=todo[start : start + batch]).consume()
            for statement, params in orphan_deletes(orphans, batch):
                tx.run(statement, params).consume()

        write_transaction(self._driver, self._database, work)
        synced.sent, synced.content_hash = current, rows.content_hash

    # -- reminding ---------------------------------------------------------------------------

    def _remind(self, tenant: str, tid: str, action: str, before: int) -> Reminder | None:
        if not action.strip() or before == 0 or len(action) > MAX_ACTION_CHARS:
            return None  # nothing to compare with (a huge Write is not a command to repeat)
        try:
            result = self._client.remind(tid, action, before_turn=before, tenant=tenant)
        except NotFoundError:
            return None  # nothing of this session in the graph yet
        return result if result.reminder else None


def _positions(calls: Sequence[Any], tool_use_id: str | None) -> tuple[int, int, bool]:
    """The completed prefix (calls before the first unanswered one), the pending call (the
    one named by ``tool_use_id``, else the first unanswered) and whether it is answered."""
    done = next((i for i, c in enumerate(calls) if not c.answered), len(calls))
    pending = next((i for i, c in enumerate(calls) if tool_use_id and c.id == tool_use_id), done)
    return done, pending, pending < len(calls) and bool(calls[pending].answered)


def _release_memory(*, collect: bool = True) -> None:
    """Give freed memory back to the system: glibc keeps the heap of a big transcript's
    parsed records otherwise, and the server's RSS stays at its peak."""
    import ctypes
    import ctypes.util
    import gc

    if collect:
        gc.collect()
    # Not glibc (no malloc_trim): the memory is reused by the next session instead.
    with contextlib.suppress(OSError, AttributeError, TypeError):
        ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 1)
