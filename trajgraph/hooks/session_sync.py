"""What one hook call does: bring a session's new turns into the graph, then remind.

``HookEngine`` is long-lived (the hook server keeps one warm, docs/hooks.md), so each call
pays only for what is new:

* the transcript is read from the byte offset of the last call; complete lines only (a line
  being written waits for the next call);
* a turn enters the graph once its tool call has a result (the completed prefix of the
  main line or of one sub-agent), and its window is extracted once (heuristic extractor,
  the batch pipeline's windows);
* merge and rows are the batch pipeline's, over the whole prefix, and only rows that are new
  or changed since the last write are sent, in one transaction. Should a row the graph holds
  no longer be produced, the trajectory is rewritten as a whole instead, so the graph is
  always what a batch write of the same turns builds
  (tests/integration/trajgraph/test_agent_sessions.py).

Then ``remind`` (through the ``TrajGraph`` client) judges the pending call against the turns
before it. No embeddings are
written here: reminders read turns and states, not vectors.
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
from collections.abc import Iterator
from dataclasses import dataclass, field
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
from trajgraph.pipelines.adapters.base import iter_lines
from trajgraph.pipelines.adapters.claude_code import (
    Line,
    Lines,
    compact,
    read_lines,
    read_session,
    render_action,
    sidechain_file,
    subagent_id,
    trajectories_of,
)
from trajgraph.pipelines.adapters.codex import LINE_TYPES as CODEX_LINE_TYPES
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
    answered: bool = False  # the call named by tool_use_id has its result in the transcript


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

    # -- the call ------------------------------------------------------------------------------

    def pre_tool_use(
        self,
        *,
        tenant: str,
        transcript_path: str,
        tool_name: str,
        tool_input: Any,
        tool_use_id: str | None = None,
        agent_id: str | None = None,
        remind: bool = True,
    ) -> Outcome:
        """Sync the transcript's completed turns, then ask for a reminder about the pending
        call (unless ``remind`` is False: PostToolUse only syncs)."""
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        state = self._file(tenant, transcript_path)
        redirect: Path | None = None
        with self._locked(state):
            self._read_new_lines(state)
            timings["read"] = _ms(t0)
            session = read_session(state.lines.records)
            sid = session.session_id or Path(transcript_path).stem
            line: Line | None = session.main
            tid = sid
            if agent_id:
                line = session.agents.get(agent_id)
                tid = subagent_id(sid, agent_id)
            if line is None:
                own = sidechain_file(transcript_path, sid, agent_id or "")
                if not agent_id or not own.is_file() or str(own) == transcript_path:
                    return Outcome(tid, 0, None, 0, timings)
                redirect = own  # this version keeps the sub-agent's transcript in its own file
            else:
                done = next(
                    (i for i, c in enumerate(line.calls) if not c.answered), len(line.calls)
                )
                pending = next(
                    (i for i, c in enumerate(line.calls) if tool_use_id and c.id == tool_use_id),
                    done,
                )
                answered = pending < len(line.calls) and line.calls[pending].answered
                t1 = time.perf_counter()
                upto = min(done, pending) if remind else done
                new = self._sync(tenant, state, session, tid, upto)
                timings["sync"] = _ms(t1)
        if redirect is not None:
            return self.pre_tool_use(
                tenant=tenant,
                transcript_path=str(redirect),
                tool_name=tool_name,
                tool_input=tool_input,
                tool_use_id=tool_use_id,
                agent_id=agent_id,
                remind=remind,
            )
        if not remind:
            timings["total"] = _ms(t0)
            return Outcome(tid, pending, None, new, timings, answered)
        t2 = time.perf_counter()
        reminder = self._remind(tenant, tid, render_action(tool_name, tool_input), pending)
        timings["remind"] = _ms(t2)
        timings["total"] = _ms(t0)
        return Outcome(tid, pending, reminder, new, timings, answered)

    def post_tool_use(
        self,
        *,
        tenant: str,
        transcript_path: str,
        tool_use_id: str | None,
        agent_id: str | None = None,
        wait_s: float = 10.0,
    ) -> Outcome:
        """After a call: Claude Code writes its result to the transcript only after its
        PostToolUse hooks ran, so wait (polling) until the result is there, then sync. The
        client does not wait for this; the next PreToolUse finds the turn in the graph."""
        end = time.monotonic() + wait_s
        state = self._file(tenant, transcript_path)
        while tool_use_id and time.monotonic() < end:
            with self._locked(state):
                self._read_new_lines(state)
                if tool_use_id in state.results:
                    break
            time.sleep(0.05)
        return self.pre_tool_use(
            tenant=tenant,
            transcript_path=transcript_path,
            tool_name="",
            tool_input=None,
            tool_use_id=tool_use_id,
            agent_id=agent_id,
            remind=False,
        )

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

    def _read_new_lines(self, state: SessionFile) -> None:
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
        results: list[str] = []

        def keep(record: dict[str, Any]) -> dict[str, Any]:
            results.extend(_result_ids([record]))
            # Claude Code's bookkeeping is shrunk; a Codex rollout line is all conversation.
            return record if record.get("type") in CODEX_LINE_TYPES else compact(record)

        more = read_lines(iter_lines(data[: end + 1]), keep)
        state.results.update(results)
        state.lines.records.extend(more.records)
        state.lines.bad_lines.extend(more.bad_lines)
        state.offset += end + 1
        if end > RELEASE_AFTER_BYTES:
            del data, more
            _release_memory(collect=False)

    # -- writing the completed prefix ---------------------------------------------------------

    def _sync(self, tenant: str, state: SessionFile, session: Any, tid: str, done: int) -> int:
        synced = state.trajectories.setdefault(tid, Synced())
        if done <= synced.turns and synced.content_hash:
            # Nothing completed since the last write. (Fewer turns than the graph holds: a
            # call earlier than the last synced one; remind's as-of view hides the rest.)
            return 0
        trajs = {t["id"]: t for t in self._trajectories(session, state)}
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

    def _trajectories(self, session: Any, state: SessionFile) -> list[dict[str, Any]]:
        """The transcript's trajectories as ``trajgraph ingest`` adapts them (the Codex
        engine, hooks/codex_sync.py, adapts a rollout instead)."""
        return trajectories_of(session, state.lines, source=state.path)

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


def _result_ids(records: list[dict[str, Any]]) -> Iterator[str]:
    """tool_use ids answered in these records (the main line's and sub-agents')."""
    for rec in records:
        message = rec.get("message")
        data = rec.get("data")
        if isinstance(data, dict) and isinstance(data.get("message"), dict):
            message = data["message"].get("message")
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") == "tool_result":
                yield str(part.get("tool_use_id"))


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
