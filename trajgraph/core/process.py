"""Local processes trajgraph starts (the Neo4j server, the LLM server, the hook server), seen
from outside: pid files, whether a pid is alive, whether a port answers, launching detached,
waiting for an exit, and the tail of a log to show when one dies.

Nothing here keeps state in memory between calls: the pid file and the process table are the
truth, so any process (CLI, tests, dev.sh) sees the same server.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from pathlib import Path

from trajgraph.core.errors import ServerError
from trajgraph.core.jvm import last_lines

LOOPBACK = "127.0.0.1"  # every server trajgraph starts listens here only


def read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError, OSError):
        # If we are its parent (tests start and stop in one process), reap it: a zombie
        # still answers kill(0).
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError, IndexError):
        if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def port_open(port: int, timeout: float = 1.0, host: str = LOOPBACK) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def launch(cmd: list[str], *, cwd: Path, log_path: Path, pid_file: Path) -> int:
    """Start cmd fully detached, its output appended to ``log_path``; write and return its pid.

    A new session keeps the server alive past this process and a Ctrl-C in the calling shell.
    A short-lived `sh` launches it in the background and exits, so the server is not our
    child: no zombie to reap and nothing to wait for (the CLI exits, tests keep running).
    """
    launcher = 'log="$1"; shift; "$@" </dev/null >>"$log" 2>&1 & echo $!'
    try:
        out = subprocess.run(
            ["/bin/sh", "-c", launcher, "sh", str(log_path), *cmd],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            start_new_session=True,
            timeout=30,
            check=True,
        )
        pid = int(out.stdout.strip())
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        raise ServerError(f"cannot launch {cmd[0]}: {e}") from e
    pid_file.write_text(f"{pid}\n")
    return pid


def wait_dead(pid: int, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.2)
    return True


def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def tail(path: Path, n: int, offset: int = 0) -> str:
    """Last n lines of a file written after offset (logs append across runs)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset if offset <= size(path) else 0)
            return last_lines(f.read().decode("utf-8", "replace"), n)
    except OSError:
        return ""
