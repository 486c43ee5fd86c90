"""The server process seen from outside: its pid file, whether it is alive and ours, whether
Bolt answers, launching it detached, and the log lines to show when it dies.

Nothing here keeps state in memory between calls: the pid file in the run dir and the
process table are the truth, so any process (CLI, tests, dev.sh) sees the same server.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from pathlib import Path

from trajgraph.errors import ServerError
from trajgraph.graph.local_server.config import ENTRY_POINT, HOST, ServerPaths, paths
from trajgraph.jvm import last_lines
from trajgraph.settings import LocalServerSettings

LOG_TAIL_LINES = 40


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


def is_ours(pid: int, local: LocalServerSettings) -> bool:
    """The pid is alive and is our Neo4j for this run dir (guards against pid reuse)."""
    if not alive(pid):
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.parent.exists():  # no /proc (macOS): trust the pid file
        return True
    try:
        args = cmdline.read_bytes().split(b"\0")
    except OSError:
        return False
    home = f"--home-dir={paths(local).run_dir}".encode()
    return ENTRY_POINT.encode() in args and home in args


def our_pid(local: LocalServerSettings) -> int | None:
    pid = read_pid(paths(local).pid_file)
    return pid if pid is not None and is_ours(pid, local) else None


def port_open(port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def bolt_answers(port: int, timeout: float = 2.0) -> bool:
    """Does a Bolt server answer the handshake on the port? Sends no credentials.

    Used instead of a driver login for liveness, so probing never counts as a failed login.
    """
    # Magic preamble, then four version proposals: 5.8..5.0, 4.4..4.2, none, none.
    hello = bytes.fromhex("6060B01700080805000204040000000000000000")
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(hello)
            reply = b""
            while len(reply) < 4:
                chunk = s.recv(4 - len(reply))
                if not chunk:
                    return False
                reply += chunk
    except OSError:
        return False
    # A Bolt server answers 4 bytes starting with 0 (a version, or zeros for "none agreed");
    # an HTTP server or anything else answers text or nothing.
    return reply[0] == 0


def spawn(cmd: list[str], p: ServerPaths) -> int:
    """Start the Neo4j command detached (see ``launch``) and return its pid."""
    return launch(cmd, cwd=p.run_dir, log_path=p.console_log, pid_file=p.pid_file)


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


def wait_for_bolt(
    pid: int, local: LocalServerSettings, deadline: float, log_offset: int, console_offset: int
) -> None:
    p = paths(local)
    while not bolt_answers(local.bolt_port, timeout=1.0):
        if not alive(pid):
            p.pid_file.unlink(missing_ok=True)
            raise ServerError(
                f"Neo4j exited during start-up.\n{failure_logs(p, log_offset, console_offset)}"
            )
        if time.monotonic() > deadline:
            raise ServerError(
                f"Neo4j (pid {pid}) did not open Bolt on port {local.bolt_port} within "
                f"{local.start_timeout_s:.0f} s; it is left running (stop it with "
                f"`trajgraph neo4j stop`).\n{failure_logs(p, log_offset, console_offset)}"
            )
        time.sleep(0.25)


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


def _tail(path: Path, n: int, offset: int = 0) -> str:
    """Last n lines of a file written after offset (logs append across runs)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset if offset <= size(path) else 0)
            return last_lines(f.read().decode("utf-8", "replace"), n)
    except OSError:
        return ""


def failure_logs(p: ServerPaths, log_offset: int, console_offset: int) -> str:
    parts = []
    for path, offset in ((p.console_log, console_offset), (p.log_path, log_offset)):
        text = _tail(path, LOG_TAIL_LINES, offset)
        if text:
            parts.append(f"--- last lines of {path} ---\n{text}")
    parts.append(f"(more detail in {p.logs_dir / 'debug.log'})")
    return "\n".join(parts)
