"""Start, stop and inspect a local cluster: its members in order, and its state file.

``start`` is idempotent: a cluster whose every member runs is left as it is; leftovers of a
failed or half-stopped one are stopped first. Members start phase by phase (the master,
then its TaskManagers or Workers together, then the job server), each phase waited for
until every member is ready; when one fails, everything this start launched is stopped and
the error shows that member's log. The state file (``<run dir>/cluster.json``) names every
member with the arguments that prove its pid is ours, so ``stop`` and ``status`` need no
flags, and ``--runner FlinkRunner`` finds the job server (flags.py).

Nothing is kept in memory between calls: pid files, the state file and the process table
are the truth, as for the local Neo4j.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trajgraph.core.errors import ServerError
from trajgraph.core.jvm import Log, file_lock
from trajgraph.core.process import LocalProcess, port_open
from trajgraph.pipelines.engines import flink, spark
from trajgraph.pipelines.engines.layout import HOST, ClusterPaths
from trajgraph.pipelines.engines.members import (
    ClusterSpec,
    Member,
    local_process,
    log_path,
    member_process,
)
from trajgraph.pipelines.engines.versions import BEAM

STOP_TIMEOUT_S = 30.0
PHASES: dict[str, Callable[[ClusterSpec], list[list[Member]]]] = {
    "flink": flink.phases,
    "spark": spark.phases,
}
CONFIGURE: dict[str, Callable[[ClusterSpec], None]] = {
    "flink": flink.write_config,
    "spark": spark.write_config,
}


@dataclass(frozen=True)
class MemberState:
    role: str
    title: str
    markers: tuple[str, ...]
    port: int
    log: str
    pid: int | None = None  # filled by ``status``: our live process, else None


@dataclass(frozen=True)
class ClusterState:
    """What the state file holds (and ``status`` shows)."""

    engine: str
    beam_version: str
    members: int  # TaskManagers or Workers
    base_port: int
    job_endpoint: str  # HOST:PORT of the job server
    web: str  # Flink's REST/web UI, Spark's Master UI
    boot: str
    python_bin: str  # the folder whose `python` the SDK workers run
    processes: tuple[MemberState, ...]
    ready: bool = False  # every member ready when the start finished

    @property
    def running(self) -> bool:
        return self.ready and all(p.pid is not None for p in self.processes)


def read_state(paths: ClusterPaths) -> ClusterState | None:
    try:
        raw: dict[str, Any] = json.loads(paths.state_file.read_text("utf-8"))
        processes = tuple(
            MemberState(**{**p, "markers": tuple(p["markers"])}) for p in raw.pop("processes")
        )
        return ClusterState(**raw, processes=processes)
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _write_state(paths: ClusterPaths, state: ClusterState) -> None:
    data = asdict(state)
    for p in data["processes"]:
        p.pop("pid", None)
    tmp = paths.state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(paths.state_file)


def _process(paths: ClusterPaths, engine: str, m: MemberState) -> LocalProcess:
    return local_process(paths, engine, role=m.role, title=m.title, markers=m.markers)


def status(paths: ClusterPaths, engine: str) -> ClusterState | None:
    """The state file with each member's live pid (None: not running); None: never started."""
    state = read_state(paths)
    if state is None:
        return None
    live = tuple(
        MemberState(**{**asdict(m), "pid": _process(paths, engine, m).pid()})
        for m in state.processes
    )
    return ClusterState(**{**asdict(state), "processes": live})


def stop(paths: ClusterPaths, engine: str, *, log: Log = print) -> int:
    """Stop every member the state file names (the job server first); how many ran."""
    with file_lock(paths.run_dir / ".lock"):
        return _stop_locked(paths, engine, log)


def _stop_locked(paths: ClusterPaths, engine: str, log: Log) -> int:
    state = read_state(paths)
    if state is None:
        return 0
    stopped = 0
    for m in reversed(state.processes):
        if _process(paths, engine, m).stop(timeout=STOP_TIMEOUT_S):
            log(f"stopped {m.title}")
            stopped += 1
    paths.state_file.unlink(missing_ok=True)
    return stopped


def _planned_state(spec: ClusterSpec, phases: list[list[Member]]) -> ClusterState:
    web = f"http://{HOST}:{spec.ports.web}"
    return ClusterState(
        engine=spec.engine,
        beam_version=BEAM,
        members=spec.members,
        base_port=spec.ports.base,
        job_endpoint=f"{HOST}:{spec.ports.job}",
        web=web,
        boot=str(spec.boot),
        python_bin=spec.worker_env.get("PATH", "").split(":", 1)[0],
        processes=tuple(
            MemberState(m.role, m.title, m.markers, m.port, str(log_path(spec.paths, m.role)))
            for phase in phases
            for m in phase
        ),
    )


def start(spec: ClusterSpec, *, log: Log = print) -> ClusterState:
    """Start the cluster unless it runs as asked; its status once every member is ready."""
    spec.paths.run_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(spec.paths.run_dir / ".lock"):
        current = status(spec.paths, spec.engine)
        if current is not None and current.running:
            if (current.members, current.base_port) == (spec.members, spec.ports.base):
                return current
            log(f"the running {spec.engine} cluster has other settings: restarting it")
        _stop_locked(spec.paths, spec.engine, log)
        phases = PHASES[spec.engine](spec)
        _check_ports_free(spec)
        CONFIGURE[spec.engine](spec)
        spec.paths.logs_dir.mkdir(parents=True, exist_ok=True)
        state = _planned_state(spec, phases)
        _write_state(spec.paths, state)  # before launching: a failed start can be stopped
        started = time.monotonic()
        try:
            for phase in phases:
                _start_phase(spec, phase)
        except BaseException:
            _stop_locked(spec.paths, spec.engine, lambda _m: None)
            raise
        ready = ClusterState(**{**asdict(state), "ready": True, "processes": state.processes})
        _write_state(spec.paths, ready)
        log(f"{spec.engine} cluster ready after {time.monotonic() - started:.1f} s")
    found = status(spec.paths, spec.engine)
    assert found is not None
    return found


def _start_phase(spec: ClusterSpec, phase: list[Member]) -> None:
    deadline = time.monotonic() + spec.start_timeout_s
    launched: list[tuple[LocalProcess, int, tuple[int, ...]]] = []
    for m in phase:
        process = member_process(spec, m)
        process.run_dir.mkdir(parents=True, exist_ok=True)
        marks = process.log_marks()
        launched.append((process, process.launch(m.launch_command()), marks))
    for process, pid, marks in launched:
        process.wait_ready(pid, deadline=deadline, marks=marks)


def _check_ports_free(spec: ClusterSpec) -> None:
    """Every port of the cluster's range must be free (some are picked by the engine)."""
    for port in range(spec.ports.base, spec.ports.last(spec.members) + 1):
        if port_open(port):
            raise ServerError(
                f"port {port} on {HOST} is already taken by another program (a {spec.engine} "
                f"cluster uses ports {spec.ports.base} to {spec.ports.last(spec.members)}). "
                f"Choose others: trajgraph {spec.engine} start --base-port N"
            )


def member_logs(state: ClusterState) -> list[Path]:
    return [Path(p.log) for p in state.processes]
