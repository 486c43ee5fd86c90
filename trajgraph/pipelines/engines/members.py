"""One process of a local cluster (a JobManager, a TaskManager, a job server, ...), described
for trajgraph/core/process.py's ``LocalProcess``, and the cluster's description: what the
engine modules (flink.py, spark.py) need to build their members' command lines.

Each member has a folder of its own under the run dir (its working directory, pid file and
start/stop lock), so the cluster can hold its own lock while it starts or stops members;
all logs go to the run dir's ``logs/``.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trajgraph.core.process import LocalProcess, port_open
from trajgraph.pipelines.engines.layout import HOST, ClusterPaths, Ports

HTTP_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class ClusterSpec:
    """What a start needs to know: the engine, its size and ports, where its files live, the
    Java that runs it, and the environment of the processes that start SDK workers."""

    engine: str
    members: int
    ports: Ports
    paths: ClusterPaths
    java: Path
    boot: Path
    # PATH first holds the venv whose ``python`` the workers run (boot runs `python`), and
    # RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT keeps boot from making a venv per worker. The
    # rest of the members' environment (NEO4J_*, OPENAI_*, TRAJGRAPH_*) is inherited from
    # the process that starts the cluster: the workers read their secrets there.
    worker_env: Mapping[str, str] = field(default_factory=dict)
    start_timeout_s: float = 120.0


@dataclass(frozen=True)
class Member:
    role: str  # "jobmanager", "taskmanager-1", "jobserver": its folder, pid file and log
    title: str  # "Flink TaskManager 1": in messages and status
    command: list[str]
    markers: tuple[str, ...]  # arguments on its command line that prove a pid is ours
    port: int  # the one status shows
    ready: Callable[[], bool]
    not_ready: str  # "register with the JobManager"
    env: Mapping[str, str] = field(default_factory=dict)

    def launch_command(self) -> list[str]:
        """``env K=V ... java ...``: env execs java, so the pid and command line are java's."""
        if not self.env:
            return self.command
        return ["env", *(f"{k}={v}" for k, v in self.env.items()), *self.command]


def member_dir(paths: ClusterPaths, role: str) -> Path:
    return paths.run_dir / role


def log_path(paths: ClusterPaths, role: str) -> Path:
    return paths.logs_dir / f"{role}.log"


def local_process(
    paths: ClusterPaths,
    engine: str,
    *,
    role: str,
    title: str,
    markers: tuple[str, ...],
    ready: Callable[[], bool] | None = None,
    not_ready: str = "start",
    start_timeout_s: float = 120.0,
) -> LocalProcess:
    folder = member_dir(paths, role)
    return LocalProcess(
        name=title,
        run_dir=folder,
        pid_file=folder / "pid",
        markers=markers,
        ready=ready or (lambda: False),
        not_ready=not_ready,
        stop_command=f"trajgraph {engine} stop",
        start_timeout_s=start_timeout_s,
        logs=(log_path(paths, role),),
    )


def member_process(spec: ClusterSpec, m: Member) -> LocalProcess:
    return local_process(
        spec.paths,
        spec.engine,
        role=m.role,
        title=m.title,
        markers=m.markers,
        ready=m.ready,
        not_ready=m.not_ready,
        start_timeout_s=spec.start_timeout_s,
    )


def http_json(port: int, path: str) -> Any:
    """GET http://127.0.0.1:port/path as JSON; None when nothing (or no JSON) answers."""
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=HTTP_TIMEOUT_S) as r:
            return json.loads(r.read().decode("utf-8"))
    except (OSError, ValueError):
        return None


def job_server(
    spec: ClusterSpec,
    title: str,
    head: list[str],
    markers: tuple[str, ...],
    env: Mapping[str, str] | None = None,
) -> Member:
    """A Beam job server (``head``: its JVM, class and engine flags) on the spec's job,
    artifact and expansion ports; ready once its job and artifact services listen."""
    ports = spec.ports
    return Member(
        role="jobserver",
        title=title,
        command=[
            *head,
            f"--job-host={HOST}",
            f"--job-port={ports.job}",
            f"--artifact-port={ports.artifact}",
            f"--expansion-port={ports.expansion}",
            f"--artifacts-dir={spec.paths.run_dir / 'artifacts'}",
        ],
        markers=markers,
        port=ports.job,
        ready=lambda: port_open(ports.job) and port_open(ports.artifact),
        not_ready=f"listen on its job port {ports.job}",
        env=dict(env or {}),
    )
