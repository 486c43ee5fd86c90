"""The Neo4j server process: whether a pid is our server for this run dir, whether Bolt
answers, starting it detached and waiting for Bolt, and the log lines to show when it dies.
The generic parts (pid files, launching, waiting) are trajgraph/core/process.py's.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from trajgraph.core.errors import ServerError
from trajgraph.core.process import alive, launch, read_pid, tail
from trajgraph.core.settings import LocalServerSettings
from trajgraph.graph.local_server.config import ENTRY_POINT, HOST, ServerPaths, paths

LOG_TAIL_LINES = 40


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


def failure_logs(p: ServerPaths, log_offset: int, console_offset: int) -> str:
    parts = []
    for path, offset in ((p.console_log, console_offset), (p.log_path, log_offset)):
        text = tail(path, LOG_TAIL_LINES, offset)
        if text:
            parts.append(f"--- last lines of {path} ---\n{text}")
    parts.append(f"(more detail in {p.logs_dir / 'debug.log'})")
    return "\n".join(parts)
