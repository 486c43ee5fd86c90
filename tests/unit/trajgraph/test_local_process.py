"""trajgraph.core.process.LocalProcess, the one manager of the servers trajgraph runs: only a
positive pid whose command line is ours is ever signalled (issue 44), a stale pid file is
removed, and start reports a death or a deadline with the log tail."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from trajgraph.core import process
from trajgraph.core.errors import ServerError
from trajgraph.core.process import LocalProcess

MARKER = "trajgraph-test-server-7c1f"
SLEEPER = [sys.executable, "-c", "import sys, time; print('booting', flush=True); time.sleep(60)"]


def _server(tmp_path: Path, ready: Callable[[], bool] = lambda: True, **kw: object) -> LocalProcess:
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    fields: dict[str, object] = {
        "name": "the test server",
        "run_dir": run,
        "pid_file": run / "server.pid",
        "markers": (MARKER,),
        "ready": ready,
        "not_ready": "say hello",
        "stop_command": "stop-it",
        "start_timeout_s": 5.0,
        "logs": (run / "server.log",),
        "tail_lines": 5,
        "state_files": (run / "server.json",),
    }
    fields.update(kw)
    return LocalProcess(**fields)  # type: ignore[arg-type]


@pytest.fixture
def signals(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every real signal os.kill is asked to send (kill(pid, 0) probes pass through); one to a
    process group is recorded, never sent, so a failing test cannot kill the test run."""
    sent: list[tuple[int, int]] = []
    real = os.kill

    def spy(pid: int, sig: int) -> None:
        if sig != 0:
            sent.append((pid, sig))
        if pid > 0:
            real(pid, sig)

    monkeypatch.setattr(os, "kill", spy)
    return sent


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """A live process that is not ours: its command line lacks the marker."""
    p = subprocess.Popen(SLEEPER)
    yield p
    p.kill()
    p.wait()


@pytest.mark.parametrize("text", ["-1", "0", "-4242", f"-{os.getpgrp()}", "", "junk", "1.5"])
def test_a_pid_file_naming_no_single_process_is_never_signalled(
    tmp_path: Path, text: str, signals: list[tuple[int, int]]
) -> None:
    server = _server(tmp_path)
    server.pid_file.write_text(text + "\n")
    (server.state_files[0]).write_text("{}")
    assert process.read_pid(server.pid_file) is None
    assert server.pid() is None
    assert server.stop(timeout=1.0) is False
    assert signals == []
    assert not server.pid_file.exists(), "a stale pid file is removed, not obeyed"
    assert not server.state_files[0].exists()


@pytest.mark.parametrize("pid", [0, -1, -os.getpgrp()])
def test_no_process_group_counts_as_alive_or_ours(pid: int, tmp_path: Path) -> None:
    assert process.alive(pid) is False
    assert process.command_line(pid) is None
    assert _server(tmp_path).owns(pid) is False


def test_another_processs_pid_is_never_signalled(
    tmp_path: Path, signals: list[tuple[int, int]], stranger: subprocess.Popen[bytes]
) -> None:
    server = _server(tmp_path)
    for pid in (stranger.pid, os.getpid()):
        server.pid_file.write_text(f"{pid}\n")
        assert server.pid() is None
        assert server.stop(timeout=1.0) is False
        assert not server.pid_file.exists()
    assert signals == []
    assert stranger.poll() is None, "the stranger is still running"


def test_start_then_stop_our_own_server(tmp_path: Path, signals: list[tuple[int, int]]) -> None:
    server = _server(tmp_path)
    with server.lock():
        assert server.current() is None
        pid = server.start([*SLEEPER, MARKER])
    assert server.pid() == pid and server.owns(pid)
    assert MARKER in (process.command_line(pid) or [])
    assert server.stop(timeout=10.0) is True
    assert [p for p, _sig in signals] == [pid]
    assert not process.alive(pid)
    assert not server.pid_file.exists()
    assert server.stop(timeout=1.0) is False


def test_a_server_that_dies_during_start_up_shows_its_log(tmp_path: Path) -> None:
    server = _server(tmp_path, ready=lambda: False)
    server.logs[0].write_text("an old run's line\n")
    crash = [sys.executable, "-c", "print('cannot bind the port'); raise SystemExit(3)", MARKER]
    with pytest.raises(ServerError) as e:
        server.start(crash)
    msg = str(e.value)
    assert msg.startswith("the test server exited during start-up.")
    assert "cannot bind the port" in msg and "an old run's line" not in msg
    assert f"--- last lines of {server.logs[0]} ---" in msg
    assert not server.pid_file.exists()


def test_a_server_not_ready_by_the_deadline_is_left_running(tmp_path: Path) -> None:
    server = _server(tmp_path, ready=lambda: False, start_timeout_s=1.0, log_note="(see x)")
    with pytest.raises(ServerError) as e:
        server.start([*SLEEPER, MARKER], deadline=time.monotonic() + 1.0)
    msg = str(e.value)
    pid = process.read_pid(server.pid_file)
    assert pid is not None and process.alive(pid), "left running"
    try:
        assert f"the test server (pid {pid}) did not say hello within 1 s" in msg
        assert "(stop it with `stop-it`)" in msg
        assert msg.rstrip().endswith("(see x)")
    finally:
        assert server.stop(timeout=10.0) is True
    assert not process.alive(pid)


def test_failure_logs_without_any_log_say_so(tmp_path: Path) -> None:
    server = _server(tmp_path)
    assert server.failure_logs() == f"(nothing in {server.logs[0]})"
