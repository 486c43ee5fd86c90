"""``trajgraph flink|spark start|stop|status`` and ``python -m trajgraph.pipelines.engines``
(``fetch``: the jars and boot, for deploy/dev.sh and CI before the tests).

The caller is the edge: it passes the settings, this Python's ``bin`` folder and the PATH
the cluster's workers extend, so nothing here reads the environment.
"""

from __future__ import annotations

from pathlib import Path

from trajgraph.core.jvm import Log
from trajgraph.core.settings import Settings
from trajgraph.pipelines.engines import control
from trajgraph.pipelines.engines.boot import ensure_boot
from trajgraph.pipelines.engines.cluster import ClusterState
from trajgraph.pipelines.engines.flags import shell_flags
from trajgraph.pipelines.engines.layout import ENGINES

MEMBER_WORDS = {"flink": "TaskManagers", "spark": "Workers"}
RUNNER_NAMES = {"flink": "FlinkRunner", "spark": "SparkRunner"}


def print_status(state: ClusterState, *, out: Log = print) -> None:
    running = state.running
    out(
        f"{state.engine}: {'running' if running else 'not running (or not all of it)'}, "
        f"{state.members} {MEMBER_WORDS[state.engine]}, Beam {state.beam_version} job server "
        f"at {state.job_endpoint}, web {state.web}"
    )
    for p in state.processes:
        pid = f"pid {p.pid}" if p.pid is not None else "not running"
        out(f"  {p.title:24} port {p.port:<6} {pid:<14} log {p.log}")
    out(f"  SDK workers: {state.boot} with {state.python_bin}/python")


def print_ingest_hint(state: ClusterState, *, out: Log = print) -> None:
    out(f"ingest on it (with the cluster venv's trajgraph, apache-beam {state.beam_version}):")
    out(f"  trajgraph ingest PATHS --runner {RUNNER_NAMES[state.engine]}")
    out("or, the same with every flag (what a cluster of your own needs):")
    out(f"  trajgraph ingest PATHS {shell_flags(state)}")


def run(
    engine: str,
    action: str,
    settings: Settings,
    *,
    members: int,
    base_port: int | None,
    python_bin: Path,
    base_path: str,
    beam_version: str,
) -> int:
    """Exit codes: 0 ok (status: running), 3 status: not running."""
    if action == "stop":
        n = control.stop(settings, engine)
        print(f"{engine} cluster stopped" if n else f"no {engine} cluster was running")
        return 0
    if action == "status":
        state = control.status(settings, engine)
        if state is None:
            print(f"{engine}: not running (never started here, or stopped)")
            return 3
        print_status(state)
        return 0 if state.running else 3
    control.check_beam(beam_version)
    spec = control.spec(
        settings,
        engine,
        members=members,
        base_port=base_port,
        python_bin=python_bin,
        base_path=base_path,
    )
    state = control.start(spec)
    print_status(state)
    print_ingest_hint(state)
    return 0


def fetch(settings: Settings, engines: tuple[str, ...] = ENGINES) -> None:
    """What a start needs and can take minutes to get: the jars, Java checked, boot."""
    java = control.cluster_java(settings)
    for engine in engines:
        lib = control.ensure_jars(settings, engine)
        print(f"{engine} jars: {lib} ({len(list(lib.glob('*.jar')))} jars)")
    print(f"boot: {ensure_boot(settings)} (Java {java.major} from {java.source})")
