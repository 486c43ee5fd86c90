"""The Neo4j server as a local process: its description for trajgraph/core/process.py's
``LocalProcess`` (the pid file, the arguments that prove a pid is ours, the Bolt handshake as
readiness, the logs to show when it dies), and the handshake itself.
"""

from __future__ import annotations

import socket

from trajgraph.core.process import LocalProcess
from trajgraph.core.settings import LocalServerSettings
from trajgraph.graph.local_server.config import ENTRY_POINT, HOST, paths

LOG_TAIL_LINES = 40


def server(local: LocalServerSettings) -> LocalProcess:
    """Our Neo4j for local's run dir: the entry point started with that run dir as its home
    (two servers from two run dirs are told apart; a reused pid is not taken for ours)."""
    p = paths(local)
    return LocalProcess(
        name="Neo4j",
        run_dir=p.run_dir,
        pid_file=p.pid_file,
        markers=(ENTRY_POINT, f"--home-dir={p.run_dir}"),
        ready=lambda: bolt_answers(local.bolt_port, timeout=1.0),
        not_ready=f"open Bolt on port {local.bolt_port}",
        stop_command="trajgraph neo4j stop",
        start_timeout_s=local.start_timeout_s,
        # The JVM's own output first: crashes before logging starts land there.
        logs=(p.console_log, p.log_path),
        tail_lines=LOG_TAIL_LINES,
        log_note=f"(more detail in {p.logs_dir / 'debug.log'})",
    )


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
