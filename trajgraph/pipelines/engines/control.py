"""A local cluster from settings: what it needs (Java, the engine's jars, boot), its spec,
and start, stop and status as the CLI and the tests call them.

The cluster runs the job servers of Beam 2.62.0 (versions.py), so it is started from the
Python that will launch jobs and run the SDK workers: the cluster venv
(``.venv-cluster``), whose apache-beam is that version. ``python_bin`` (that venv's
``bin``) goes first on the workers' PATH; the rest of their environment is this process's.
"""

from __future__ import annotations

from pathlib import Path

from trajgraph.core.errors import ConfigError, RunnerError, ServerError
from trajgraph.core.jvm import Java, Log, MavenFailure, fetch_with_dependencies, find_java
from trajgraph.core.settings import Settings
from trajgraph.pipelines.engines import cluster
from trajgraph.pipelines.engines.boot import ensure_boot
from trajgraph.pipelines.engines.layout import (
    DEFAULT_BASE_PORTS,
    ENGINES,
    MAX_MEMBERS,
    ClusterPaths,
    Ports,
    paths,
)
from trajgraph.pipelines.engines.members import ClusterSpec
from trajgraph.pipelines.engines.versions import BEAM

JAVA_RANGE = (11, 21)  # Flink 1.19 and Spark 3.5 both run on 11 and 17; 21 for Flink


def cluster_java(settings: Settings) -> Java:
    try:
        return find_java(
            need=JAVA_RANGE,
            wanted="Java 11 to 21 (17 recommended)",
            what="a local Flink or Spark cluster",
            java_home=settings.local.java_home,
            system_java_home=settings.local.system_java_home,
        )
    except ServerError as e:
        raise RunnerError(str(e)) from e


def ensure_jars(settings: Settings, engine: str, *, log: Log = print) -> Path:
    """The engine's lib dir, fetched with Maven on first use only (``~/.m2`` is reused)."""
    p = paths(settings, engine)

    def fail(f: MavenFailure) -> RunnerError:
        return RunnerError(
            f"cannot fetch the jars of a local {engine} cluster ({f.coords} and its "
            f"dependencies) with Maven: {f.reason}\n{f.tail(15)}"
        )

    return fetch_with_dependencies(p.jars.coords, p.lib_dir, fail=fail, log=log, pom=p.jars.pom())


def check_engine(engine: str, members: int) -> None:
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r}: one of {', '.join(ENGINES)}")
    if not 1 <= members <= MAX_MEMBERS:
        raise ConfigError(f"a local cluster has 1 to {MAX_MEMBERS} members, not {members}")


def check_beam(installed: str) -> None:
    if installed != BEAM:
        raise RunnerError(
            f"the local clusters run Beam {BEAM}'s job servers, and their SDK workers run "
            f"this Python, whose apache-beam is {installed}: start them from the cluster venv "
            f"(.venv-cluster/bin/trajgraph, made by `bash deploy/dev.sh clusters`)"
        )


def spec(
    settings: Settings,
    engine: str,
    *,
    members: int,
    base_port: int | None,
    python_bin: Path,
    base_path: str,
    log: Log = print,
    instance: str | None = None,
) -> ClusterSpec:
    """Everything a start needs, fetched or built on first use (jars, boot)."""
    check_engine(engine, members)
    java = cluster_java(settings)
    p = paths(settings, engine, instance)
    ensure_jars(settings, engine, log=log)
    boot = ensure_boot(settings, log=log)
    return ClusterSpec(
        engine=engine,
        members=members,
        ports=Ports(base_port if base_port is not None else DEFAULT_BASE_PORTS[engine]),
        paths=p,
        java=java.path,
        boot=boot,
        worker_env={
            "PATH": f"{python_bin}:{base_path}" if base_path else str(python_bin),
            "RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT": "1",
        },
    )


def start(s: ClusterSpec, *, log: Log = print) -> cluster.ClusterState:
    return cluster.start(s, log=log)


def stop(settings: Settings, engine: str, *, log: Log = print) -> int:
    return cluster.stop(paths(settings, engine), engine, log=log)


def status(settings: Settings, engine: str) -> cluster.ClusterState | None:
    return cluster.status(paths(settings, engine), engine)


def cluster_paths(settings: Settings, engine: str, instance: str | None = None) -> ClusterPaths:
    return paths(settings, engine, instance)
