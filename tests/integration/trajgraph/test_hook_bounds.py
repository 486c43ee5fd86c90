"""The hook server's bounds against the paths an agent hands it (issue 31): a device, a FIFO,
one transcript under many names, idle connections; memory and threads stay bounded and every
call answers (with silence when the path is not a transcript).

``bench/hook_bounds.py`` measures the same cases on a running server (RSS and threads)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bench.hook_bounds import request
from tests.integration.servers import child_env, hook_server
from tests.paths import REPO
from trajgraph.core.errors import InputError
from trajgraph.core.settings import Settings
from trajgraph.hooks import engine as engine_mod
from trajgraph.hooks.agents import AGENTS, CLAUDE_CODE
from trajgraph.hooks.engine import HookEngine, SessionFile
from trajgraph.hooks.server import MAX_CONNECTIONS


@pytest.fixture
def engine(driver: Any, neo4j_settings: Settings) -> Iterator[HookEngine]:
    e = HookEngine(driver, database=neo4j_settings.neo4j.database)
    yield e
    e.close()


def _session(sid: str, calls: int = 2) -> bytes:
    records: list[dict[str, Any]] = [
        {"type": "user", "sessionId": sid, "uuid": "u", "message": {"content": "Fix it"}}
    ]
    for n in range(calls):
        use = {"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {"command": f"ls {n}"}}
        result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": f"out {n}"}
        records += [
            {"type": "assistant", "sessionId": sid, "message": {"content": [use]}},
            {"type": "user", "sessionId": sid, "message": {"content": [result]}},
            {"type": "file-history-snapshot", "snapshot": {"files": {"a.py": "x" * 2000}}},
        ]
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def _call(engine: HookEngine, tenant: str, path: str) -> Any:
    hook = {"transcript_path": path, "tool_name": "Bash", "tool_input": {"command": "ls"}}
    return engine.tool_call(CLAUDE_CODE, tenant=tenant, call=CLAUDE_CODE.call_of(hook))


def _in_time(fn: Any, seconds: float = 10.0) -> Any:
    """``fn()`` on a thread, which must end within ``seconds`` (a blocked open never did)."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the call blocked"
    if "error" in out:
        raise out["error"]
    return out.get("value")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_a_device_as_the_transcript_is_refused_at_once(
    engine: HookEngine, tenant: str, device: str
) -> None:
    # /dev/zero reports size 0, so a cap on the reported size read until memory ran out.
    if not os.path.exists(device):
        pytest.skip(f"no {device} here")
    with pytest.raises(InputError, match="not a regular file"):
        _in_time(lambda: _call(engine, tenant, device))
    assert engine._files == {}


def test_a_fifo_as_the_transcript_neither_blocks_nor_holds_a_thread(
    engine: HookEngine, tenant: str, tmp_path: Path
) -> None:
    threads = threading.active_count()
    fifos = []
    for n in range(20):
        os.mkfifo(tmp_path / f"f{n}.jsonl")
        fifos.append(str(tmp_path / f"f{n}.jsonl"))
    for name in fifos:
        with pytest.raises(InputError, match="not a regular file"):
            _in_time(lambda f=name: _call(engine, tenant, f))
    assert threading.active_count() == threads
    # The variant: a regular file when the call looked, a FIFO when it opened it.
    racing = tmp_path / "racing.jsonl"
    os.mkfifo(racing)
    with pytest.raises(InputError, match="not a regular file"):
        _in_time(lambda: engine._read_new_lines(SessionFile(str(racing)), CLAUDE_CODE))


def test_one_transcript_under_many_names_is_held_once_and_written_once(
    engine: HookEngine, tenant: str, tmp_path: Path, driver: Any, neo4j_settings: Settings
) -> None:
    real = tmp_path / "real" / "s1.jsonl"
    real.parent.mkdir()
    real.write_bytes(_session("hb-session"))
    names = [tmp_path / f"link-{n}.jsonl" for n in range(5)]
    for link in names:
        link.symlink_to(real)
    for name in [real, *names, tmp_path / "real" / ".." / "real" / "s1.jsonl"]:
        assert _call(engine, tenant, str(name)).trajectory == "hb-session"
    (state,) = engine._files.values()
    # Bookkeeping is held as its type and session only (what the adapter reads of it).
    snapshots = [r for r in state.lines.records if r.get("type") == "file-history-snapshot"]
    assert snapshots and all(set(r) == {"type", "sessionId"} for r in snapshots)
    found = driver.execute_query(
        "MATCH (t:Trajectory {tenant: $tenant}) RETURN t.id AS id, t.source AS source",
        tenant=tenant,
        database_=neo4j_settings.neo4j.database,
    ).records
    assert [(r["id"], r["source"]) for r in found] == [("hb-session", str(real))]


def test_sessions_over_the_total_cap_or_idle_are_forgotten_and_read_again(
    engine: HookEngine, tenant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = []
    for n in range(4):
        (tmp_path / f"s{n}.jsonl").write_bytes(_session(f"hb-{n}"))
        paths.append(str(tmp_path / f"s{n}.jsonl"))
    size = os.path.getsize(paths[0])
    monkeypatch.setattr(engine_mod, "MAX_HELD_BYTES", 2 * size)  # room for two sessions
    for name in paths:
        _call(engine, tenant, name)
        engine.forget_sessions()
    kept = sorted(s.path for s in engine._files.values())
    assert kept == paths[2:]  # the two used last
    assert sum(s.offset for s in engine._files.values()) <= 2 * size
    # A forgotten session comes back whole: read from its start, its turns all there.
    outcome = _call(engine, tenant, paths[0])
    assert outcome.pending_turn == 2
    assert engine.forget_sessions(idle_s=0) == 3  # idle: all of them
    assert engine._files == {}


def test_a_transcript_replaced_under_its_name_is_read_from_its_start(
    engine: HookEngine, tenant: str, tmp_path: Path
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(_session("hb-old", calls=3))
    assert _call(engine, tenant, str(path)).pending_turn == 3
    fresh = tmp_path / "fresh.tmp"
    fresh.write_bytes(_session("hb-new", calls=1) + b"\n" * 5000)  # longer, another inode
    fresh.replace(path)
    outcome = _call(engine, tenant, str(path))
    assert (outcome.trajectory, outcome.pending_turn) == ("hb-new", 1)


# -- the server: connections and files --------------------------------------------------------


@pytest.fixture
def server(
    neo4j_settings: Settings, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir(mode=0o755)  # as an older version (or a person) left it
    os.chmod(hook_dir, 0o755)
    (hook_dir / "hook.log").write_text("old line\n")
    os.chmod(hook_dir / "hook.log", 0o644)
    env = child_env(neo4j_settings, TRAJGRAPH_HOOK_DIR=str(hook_dir), PYTHONPATH=str(REPO))
    with hook_server(env, hook_dir) as proc:
        yield proc, hook_dir


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no thread count")


def _ask(sock: Path, hook: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
    return request(sock, {"tenant": "hb", "input": hook}, timeout)


def test_the_server_keeps_its_folder_private_and_its_threads_bounded(
    server: tuple[subprocess.Popen[bytes], Path], tmp_path: Path
) -> None:
    proc, hook_dir = server
    assert os.stat(hook_dir).st_mode & 0o777 == 0o700  # tightened
    assert os.stat(hook_dir / "hook.log").st_mode & 0o777 == 0o600
    sock = hook_dir / "hook.sock"
    base = _threads(proc.pid)
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    hook = {"transcript_path": str(fifo), "tool_name": "Bash", "tool_input": {"command": "ls"}}
    replies = [_ask(sock, {**hook, "session_id": str(n)}) for n in range(20)]
    assert {r["error"].split(":")[0] for r in replies} == {"InputError"}
    assert all(r["output"] is None for r in replies)
    # Clients that connect and never write: bounded, then closed by the server.
    idle = []
    for _ in range(MAX_CONNECTIONS + 8):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(sock))
        idle.append(s)
    time.sleep(1.0)
    assert _threads(proc.pid) <= base + MAX_CONNECTIONS + 8  # one per connection at most
    busy = _ask(sock, {**hook, "session_id": "late"})  # answered at once, not queued for ever
    assert busy["error"] in ("busy",) or busy["error"].startswith("InputError")
    deadline = time.monotonic() + 30
    while _threads(proc.pid) > base and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _threads(proc.pid) <= base
    for s in idle:
        s.close()
    log = (hook_dir / "hook.log").read_text()
    assert "not a regular file" in log and "Traceback" not in log
    assert proc.poll() is None


@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_a_call_waits_a_bounded_time_for_its_sessions_lock(
    driver: Any,
    neo4j_settings: Settings,
    tenant: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    agent: str,
) -> None:
    # Both agents' calls wait at most LOCK_WAIT_S for a call still holding the session (then
    # BusyError: the hook stays silent); the Codex path once waited for ever.
    from trajgraph.core.errors import BusyError

    engine = HookEngine(driver, database=neo4j_settings.neo4j.database)
    try:
        path = tmp_path / "session.jsonl"
        path.write_bytes(_session("lock-session"))
        monkeypatch.setattr(engine_mod, "LOCK_WAIT_S", 0.3)
        adapter = AGENTS[agent]
        call = adapter.call_of({"transcript_path": str(path), "tool_name": "shell"})
        calls = {  # before the call and after it (which first waits for the call's result)
            "tool_call": lambda: engine.tool_call(adapter, tenant=tenant, call=call),
            "after_tool_call": lambda: engine.after_tool_call(
                adapter, tenant=tenant, call=replace(call, tool_use_id="pending-call")
            ),
        }
        state = engine._file(tenant, str(path))
        with state.lock:
            for name, make_call in calls.items():
                t0 = time.monotonic()
                with pytest.raises(BusyError):
                    _in_time(make_call, seconds=5.0)
                assert time.monotonic() - t0 < 3.0, name
    finally:
        engine.close()
