"""Start, stop and inspect the local server managed from a run dir.

``start`` is idempotent and safe to call from several processes at once (a lock in the run
dir queues them): it fetches what is missing, launches the server detached, waits for Bolt
and sets the password; ``stop`` sends SIGTERM, then SIGKILL after a timeout. Launching,
waiting and signalling are ``LocalProcess``'s (trajgraph/core/process.py), as for the LLM.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from trajgraph.core import process as proc
from trajgraph.core.errors import ServerError
from trajgraph.core.jvm import Log
from trajgraph.core.settings import LocalServerSettings, Neo4jSettings
from trajgraph.graph.local_server import process
from trajgraph.graph.local_server.config import (
    HOST,
    bolt_uri,
    java_command,
    make_dirs,
    paths,
    write_conf,
)
from trajgraph.graph.local_server.install import ensure_jars, find_java
from trajgraph.graph.local_server.password import check_password, ensure_password


@dataclass(frozen=True)
class ServerStatus:
    running: bool  # our process is alive AND Bolt answers on the port
    pid: int | None  # set whenever our process is alive (also while it is still starting)
    bolt_uri: str
    version: str
    data_dir: Path
    log_path: Path


def status(neo: Neo4jSettings, local: LocalServerSettings) -> ServerStatus:
    """State of the server managed from local's run dir (neo is taken for symmetry with start)."""
    del neo  # status never logs in: liveness is the pid plus a Bolt handshake
    p = paths(local)
    pid = process.server(local).pid()
    return ServerStatus(
        running=pid is not None and process.bolt_answers(local.bolt_port),
        pid=pid,
        bolt_uri=bolt_uri(local),
        version=local.version,
        data_dir=p.data_dir,
        log_path=p.log_path,
    )


def start(neo: Neo4jSettings, local: LocalServerSettings, *, log: Log = print) -> ServerStatus:
    """Start the server if needed; return once neo.user/neo.password can run `RETURN 1`."""
    check_password(neo)
    p = paths(local)
    make_dirs(p.run_dir)
    deadline = time.monotonic() + local.start_timeout_s
    server = process.server(local)
    with server.lock():
        pid = server.current()  # a stale pid file is removed here, never obeyed
        t0 = time.monotonic()
        if pid is None:
            if proc.port_open(local.bolt_port):
                what = (
                    "a Bolt server (another Neo4j?)"
                    if process.bolt_answers(local.bolt_port)
                    else ("another program")
                )
                raise ServerError(
                    f"port {local.bolt_port} on {HOST} is already taken by {what}, not by the "
                    f"trajgraph Neo4j managed from {p.run_dir}. Stop it, or choose another port "
                    "with TRAJGRAPH_NEO4J_PORT (or the port in NEO4J_URI)."
                )
            java = find_java(local)
            ensure_jars(local, log=log)
            if local.browser:
                from trajgraph.graph.local_server.browser import ensure_browser

                ensure_browser(local, log=log)
            make_dirs(p.data_dir, p.logs_dir, p.conf_file.parent)
            write_conf(local, database=neo.database)
            log(
                f"Starting Neo4j {local.version} (Java {java.major}) on {bolt_uri(local)}; "
                f"data {p.data_dir}, log {p.log_path}"
            )
            t0 = time.monotonic()
            pid = server.start(java_command(java.path, local), deadline=deadline)
        elif not process.bolt_answers(local.bolt_port):
            log(f"Neo4j (pid {pid}) is starting; waiting for it")
            server.wait_ready(pid, deadline=deadline, marks=server.log_marks())
        ensure_password(neo, local, deadline, log)
        if time.monotonic() - t0 > 0.5:
            log(f"Neo4j is up on {bolt_uri(local)} (pid {pid}) after {time.monotonic() - t0:.1f} s")
    return status(neo, local)


def stop(local: LocalServerSettings, *, timeout: float = 60.0) -> bool:
    """SIGTERM the server (Neo4j shuts down cleanly on TERM), SIGKILL it after timeout; True
    if one was running."""
    return process.server(local).stop(timeout=timeout)
