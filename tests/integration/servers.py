"""Servers the integration tests start for themselves: a private Neo4j (its own port, data
and run dir; the shared server's jars) that a test may stop and start, an ASGI app served
by uvicorn on a thread, a Beam worker pool and a Prism job server."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import neo4j
import uvicorn

from tests.paths import REPO
from trajgraph.core.settings import Settings
from trajgraph.graph import cypher, digest
from trajgraph.graph import local_server as ls
from trajgraph.hooks.server import alive
from trajgraph.http_guard import uvicorn_config


def child_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment of a `trajgraph` child process: only what finding programs needs,
    the test Neo4j's connection, and ``extra`` (so nothing of the test run's own settings
    leaks into what the child is meant to show)."""
    neo = settings.neo4j
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "JAVA_HOME")}
    return {
        **keep,
        "NEO4J_URI": neo.uri,
        "NEO4J_USER": neo.user,
        "NEO4J_PASSWORD": neo.password,
        "NEO4J_DATABASE": neo.database,
        **extra,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclasses.dataclass
class Private:
    settings: Settings  # .neo4j points at the private server, .local manages it
    driver: neo4j.Driver

    @property
    def db(self) -> str:
        return self.settings.neo4j.database

    def labels(self, tenant: str) -> dict[str, int]:
        records = self.driver.execute_query(
            cypher.COUNT_TENANT_BY_LABEL, tenant=tenant, database_=self.db
        ).records
        return {r["label"]: r["n"] for r in records}

    def digest(self, tenant: str) -> str:
        return digest.graph_digest(self.driver, self.db, tenant)

    def env(self) -> dict[str, str]:
        """The environment of a `trajgraph` subprocess that uses this server (and no LLM)."""
        neo = self.settings.neo4j
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAJGRAPH_LLM",))}
        env.update(NEO4J_URI=neo.uri, NEO4J_USER=neo.user, NEO4J_PASSWORD=neo.password)
        env.update(NEO4J_DATABASE=neo.database, PYTHONPATH=str(REPO))
        return env

    def start(self) -> None:
        ls.start(self.settings.neo4j, self.settings.local, log=lambda m: print(m, file=sys.stderr))

    def stop(self) -> None:
        ls.stop(self.settings.local, timeout=30)


@contextmanager
def private_neo4j_server(base: Settings, root: Path) -> Iterator[Private]:
    """A Neo4j of its own under ``root``, running until the block ends (stopped either way)."""
    port = free_port()
    local = dataclasses.replace(
        base.local,
        bolt_port=port,
        data_dir=root / "neo4j" / "data",
        run_dir=root / "neo4j" / "run",
        heap="384m",
        pagecache="64m",
    )
    settings = dataclasses.replace(
        base,
        local=local,
        neo4j=dataclasses.replace(base.neo4j, uri=f"bolt://127.0.0.1:{port}"),
    )
    private: Private | None = None
    try:
        ls.start(settings.neo4j, local, log=lambda m: print(m, file=sys.stderr))
        neo = settings.neo4j
        with neo4j.GraphDatabase.driver(neo.uri, auth=(neo.user, neo.password)) as drv:
            private = Private(settings, drv)
            yield private
    finally:
        ls.stop(local, timeout=30)


@contextmanager
def reused_private_neo4j(settings: Settings) -> Iterator[Private]:
    """The private Neo4j of ``settings``, running (started if a test stopped or killed it)
    and emptied: what a fresh server holds, without the start-up."""
    ls.start(settings.neo4j, settings.local, log=lambda m: print(m, file=sys.stderr))
    neo = settings.neo4j
    with neo4j.GraphDatabase.driver(neo.uri, auth=(neo.user, neo.password)) as drv:
        empty(drv, neo.database)
        yield Private(settings, drv)


def empty(drv: neo4j.Driver, database: str) -> None:
    """Every node, constraint and index (but Neo4j's own token lookups) dropped."""
    with drv.session(database=database) as session:  # IN TRANSACTIONS: an implicit one
        session.run(
            "MATCH (n) CALL { WITH n DETACH DELETE n } IN TRANSACTIONS OF 10000 ROWS"
        ).consume()
    for kind, shown in (("CONSTRAINT", "SHOW CONSTRAINTS"), ("INDEX", "SHOW INDEXES")):
        names = [
            r["name"]
            for r in drv.execute_query(f"{shown} YIELD name, type", database_=database).records
            if r["type"] != "LOOKUP"
        ]
        for name in names:
            drv.execute_query(f"DROP {kind} `{name}` IF EXISTS", database_=database)


@contextmanager
def serve_in_thread(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn on 127.0.0.1 (a free port) in this process, configured as
    `trajgraph serve` configures it (trajgraph.http_guard.uvicorn_config); its base URL."""
    port = free_port()
    config = uvicorn_config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def hook_server(env: dict[str, str], hook_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`trajgraph hook serve` in a child process run with ``env`` (its TRAJGRAPH_HOOK_DIR is
    ``hook_dir``), once its socket answers; terminated on the way out."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "trajgraph.cli", "hook", "serve", "--idle-minutes", "5"],
        env=env,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 90
        while not alive(hook_dir / "hook.sock"):
            assert time.monotonic() < deadline and proc.poll() is None, "server did not start"
            time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _wait_for_port(proc: subprocess.Popen[bytes], port: int, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not listen within {timeout:.0f} s") from None
            time.sleep(0.2)


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group the child leads (it and what it started), then SIGKILL."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=15)


@contextmanager
def beam_worker_pool() -> Iterator[str]:
    """A Beam worker pool in its own process group (``host:port`` for ``--environment_type
    EXTERNAL --environment_config``): each SDK worker it starts is a new Python process, so
    the pipeline's DoFns cross a process boundary as on a Flink task manager."""
    port = free_port()
    env = dict(os.environ)
    # The pool starts workers as `python -c ...`: make that this venv's Python.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "apache_beam.runners.worker.worker_pool_main",
            f"--service_port={port}",
        ],
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_for_port(proc, port, "the Beam worker pool", 60)
        yield f"localhost:{port}"
    finally:
        _stop_group(proc)


@dataclasses.dataclass
class PrismServer:
    endpoint: str  # localhost:port, for --job_endpoint
    pid: int


@contextmanager
def prism_job_server(binary: Path) -> Iterator[PrismServer]:
    """One Prism process serving Beam's job API, shared by the tests that run pipelines on
    Prism (each job then skips Prism's start-up); bench/scaling.py reads its memory."""
    port = free_port()
    proc = subprocess.Popen(
        [
            str(binary),
            "--job_port",
            str(port),
            "--serve_http=false",
            "--log_level",
            "warn",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_for_port(proc, port, f"Prism ({binary})", 60)
        yield PrismServer(f"localhost:{port}", proc.pid)
    finally:
        _stop_group(proc)


@dataclasses.dataclass
class ServeProcess:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path  # the server's stdout and stderr (uvicorn's access log, our log lines)

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@contextmanager
def serve_process(
    env: dict[str, str], log: Path, *, timeout_s: float = 90
) -> Iterator[ServeProcess]:
    """``trajgraph serve`` as its own process (the production uvicorn set-up: the guarded
    h11 protocol, the access log) on a free port; stopped at the end."""
    port = free_port()
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "trajgraph.cli", "serve", "--port", str(port)],
            env=env,
            cwd=REPO,
            stdout=err,  # uvicorn's access log
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"trajgraph serve did not start: {log.read_text()}"
                    ) from None
                time.sleep(0.2)
        yield ServeProcess(url, proc, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
