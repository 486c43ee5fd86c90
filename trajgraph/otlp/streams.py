"""One ``trajgraph stream`` per tenant over its spool folder, kept running by the server.

The streaming path is the one docs/streaming.md describes (Beam streaming mode, the batch
transforms, newest versions written whole); a child process per tenant keeps Beam's runner,
its signal handling and its memory out of the API's process. A stream that ended (Neo4j lost
longer than its retries: exit 1) is started again on the tenant's next request; it re-reads
its spool from the start, and unchanged trajectories are skipped by their content hash.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from trajgraph.otlp.spool import tenant_dir

log = logging.getLogger(__name__)
POLL_S = 0.2
RESTART_AFTER_S = 5.0  # a stream that keeps failing is not restarted in a tight loop
STOP_WAIT_S = 60.0  # its drain on SIGTERM waits for the write path's retries (~30 s)


class Streams:
    def __init__(self, root: Path, env: Mapping[str, str], *, poll_s: float = POLL_S) -> None:
        self.root = root
        self.env = dict(env)
        self.poll_s = poll_s
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._started: dict[str, float] = {}
        self._lock = threading.Lock()
        self._closed = False

    def ensure(self, tenant: str) -> bool:
        """The tenant's stream is running (started now if it was not); False while one that
        ended is waiting out its restart delay."""
        with self._lock:
            if self._closed:
                return False
            proc = self._procs.get(tenant)
            if proc is not None and proc.poll() is None:
                return True
            if proc is not None:
                log.warning("the OTLP stream of a tenant ended (exit %s)", proc.returncode)
                if time.monotonic() - self._started[tenant] < RESTART_AFTER_S:
                    return False
            self._procs[tenant] = self._start(tenant)
            self._started[tenant] = time.monotonic()
            return True

    def _start(self, tenant: str) -> subprocess.Popen[bytes]:
        folder = tenant_dir(self.root, tenant)
        folder.mkdir(parents=True, exist_ok=True)
        argv = stream_argv(folder, tenant, self.poll_s, folder / "dead-letters")
        argv += ["--metrics", str(folder / "stream-metrics.json")]
        with (folder / "stream.log").open("ab") as out:
            return subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=self.env
            )

    def running(self, tenant: str) -> bool:
        proc = self._procs.get(tenant)
        return proc is not None and proc.poll() is None

    def close(self) -> None:
        """SIGTERM every stream (each drains what it read, then exits), then wait."""
        with self._lock:
            self._closed = True
            procs = list(self._procs.values())
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def stream_argv(folder: Path, tenant: str, poll_s: float, dead_letters: Path) -> list[str]:
    """``trajgraph stream`` over a spool folder, as a child of this Python."""
    return [
        *(sys.executable, "-m", "trajgraph", "stream", str(folder)),
        *("--tenant", tenant, "--poll", str(poll_s), "--dead-letter", str(dead_letters)),
    ]


def child_env(neo_uri: str, user: str, password: str, database: str) -> dict[str, str]:
    """The streams' environment: the server's own, with the Neo4j the server was given
    (settings may come from elsewhere than this environment, e.g. in tests)."""
    env = dict(os.environ)
    env.update(NEO4J_URI=neo_uri, NEO4J_USER=user, NEO4J_PASSWORD=password)
    env["NEO4J_DATABASE"] = database
    return env
