"""A local Flink session cluster as separate JVMs, and Beam's Flink job server in front of it.

The JobManager (``StandaloneSessionClusterEntrypoint``) and each TaskManager
(``TaskManagerRunner``) are what Flink's ``start-cluster.sh`` would start, from the jars of
Beam's ``beam-runners-flink-1.19`` (Flink 1.19.0 comes with it) instead of a Flink
distribution: one config file written here, every address on 127.0.0.1, and each
TaskManager's memory given explicitly (Flink's scripts compute it with ``BashJavaUtils``;
TaskManagerRunner refuses to start without it). Each TaskManager has one slot, so the
default parallelism is the number of TaskManagers. The job server
(``FlinkJobServerDriver``) submits jobs to the JobManager's REST port; the TaskManagers run
the Python DoFns in SDK workers they start with Beam's boot program (PROCESS environment).
"""

from __future__ import annotations

from trajgraph.pipelines.engines.layout import HOST
from trajgraph.pipelines.engines.members import (
    ClusterSpec,
    Member,
    http_json,
    job_server,
)

JOB_MANAGER = "org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint"
TASK_MANAGER = "org.apache.flink.runtime.taskexecutor.TaskManagerRunner"
JOB_SERVER = "org.apache.beam.runners.flink.FlinkJobServerDriver"
CONF_FILE = "flink-conf.yaml"  # Flink 1.19 still reads the flat legacy file

# A TaskManager's resources, as Flink's scripts would pass them (BashJavaUtils): one core,
# and memory whose JVM flags below add up: heap = framework + task heap, direct = framework
# + task off-heap + network (at least 256m: Beam's shuffles), metaspace.
TM_MEMORY = {
    "taskmanager.cpu.cores": "1.0",
    "external-resources": "none",
    "taskmanager.memory.framework.heap.size": "128m",
    "taskmanager.memory.task.heap.size": "512m",
    "taskmanager.memory.framework.off-heap.size": "128m",
    "taskmanager.memory.task.off-heap.size": "128m",
    "taskmanager.memory.network.min": "256m",
    "taskmanager.memory.network.max": "256m",
    "taskmanager.memory.managed.size": "128m",
    "taskmanager.memory.jvm-metaspace.size": "256m",
    "taskmanager.memory.jvm-overhead.min": "192m",
    "taskmanager.memory.jvm-overhead.max": "192m",
}
TM_JVM = ("-Xms640m", "-Xmx640m", "-XX:MaxDirectMemorySize=512m", "-XX:MaxMetaspaceSize=256m")
JM_MEMORY = {
    "jobmanager.memory.heap.size": "448m",
    "jobmanager.memory.off-heap.size": "128m",
    "jobmanager.memory.jvm-metaspace.size": "256m",
    "jobmanager.memory.jvm-overhead.min": "192m",
    "jobmanager.memory.jvm-overhead.max": "192m",
}
JM_JVM = ("-Xms448m", "-Xmx448m", "-XX:MaxMetaspaceSize=256m")
JOB_SERVER_JVM = ("-Xmx1g",)
# slf4j-simple (Beam's Flink runner brings no binding): timestamps make the logs readable.
LOG_JVM = (
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSS",
)


def flink_conf(spec: ClusterSpec) -> str:
    p = spec.ports
    values = {
        "jobmanager.rpc.address": HOST,
        "jobmanager.rpc.port": str(p.master),
        "jobmanager.bind-host": HOST,
        "rest.address": HOST,
        "rest.bind-address": HOST,
        "rest.port": str(p.web),
        "blob.server.port": str(p.blob),
        "taskmanager.host": HOST,
        "taskmanager.bind-host": HOST,
        "taskmanager.numberOfTaskSlots": "1",
        "parallelism.default": str(spec.members),
        "io.tmp.dirs": str(spec.paths.tmp_dir),
        **JM_MEMORY,
        **TM_MEMORY,
    }
    lines = ["# Written by trajgraph on every `trajgraph flink start`; edits are overwritten."]
    return "\n".join([*lines, *(f"{k}: {v}" for k, v in values.items())]) + "\n"


def write_config(spec: ClusterSpec) -> None:
    spec.paths.conf_dir.mkdir(parents=True, exist_ok=True)
    spec.paths.tmp_dir.mkdir(parents=True, exist_ok=True)
    (spec.paths.conf_dir / CONF_FILE).write_text(flink_conf(spec))


def task_manager_id(i: int) -> str:
    return f"trajgraph-tm-{i}"


def _registered(spec: ClusterSpec, i: int) -> bool:
    found = http_json(spec.ports.web, "/taskmanagers")
    if not isinstance(found, dict):
        return False
    return any(tm.get("id") == task_manager_id(i) for tm in found.get("taskmanagers", []))


def phases(spec: ClusterSpec) -> list[list[Member]]:
    """JobManager, then the TaskManagers (started together), then the job server."""
    java, conf = str(spec.java), str(spec.paths.conf_dir)
    classpath = f"{spec.paths.lib_dir}/*"
    jm = Member(
        role="jobmanager",
        title="Flink JobManager",
        command=[java, *JM_JVM, *LOG_JVM, "-cp", classpath, JOB_MANAGER, "--configDir", conf],
        markers=(JOB_MANAGER, conf),
        port=spec.ports.web,
        ready=lambda: isinstance(http_json(spec.ports.web, "/overview"), dict),
        not_ready=f"answer on its REST port {spec.ports.web}",
    )
    tms = [_task_manager(spec, i) for i in range(1, spec.members + 1)]
    server = job_server(
        spec,
        "Beam Flink job server",
        [
            java,
            *JOB_SERVER_JVM,
            *LOG_JVM,
            "-cp",
            classpath,
            JOB_SERVER,
            f"--flink-master={HOST}:{spec.ports.web}",
            f"--flink-conf-dir={conf}",
        ],
        markers=(JOB_SERVER, f"--flink-conf-dir={conf}"),
    )
    return [[jm], tms, [server]]


def _task_manager(spec: ClusterSpec, i: int) -> Member:
    conf = str(spec.paths.conf_dir)
    resource = f"taskmanager.resource-id={task_manager_id(i)}"
    return Member(
        role=f"taskmanager-{i}",
        title=f"Flink TaskManager {i}",
        command=[
            str(spec.java),
            *TM_JVM,
            *LOG_JVM,
            "-cp",
            f"{spec.paths.lib_dir}/*",
            TASK_MANAGER,
            "--configDir",
            conf,
            "-D",
            resource,
            "-D",
            f"taskmanager.rpc.port={spec.ports.member(i - 1)}",
        ],
        markers=(TASK_MANAGER, conf, resource),
        port=spec.ports.member(i - 1),
        ready=lambda: _registered(spec, i),
        not_ready="register with the JobManager",
        env=spec.worker_env,
    )
