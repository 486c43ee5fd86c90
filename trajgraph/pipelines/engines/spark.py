"""A local Spark standalone cluster as separate JVMs, and Beam's Spark job server in front.

The Master and each Worker are what Spark's ``sbin/start-master.sh`` and
``start-worker.sh`` would start, from the jars fetched for Beam's ``beam-runners-spark-3``
(Spark 3.5.0, Scala 2.12) instead of a Spark distribution. A Worker starts its executors
with Spark's launcher, which wants a ``SPARK_HOME`` holding ``jars/`` (plus a ``RELEASE``
file, so it takes that folder rather than a source build's) and ``SPARK_SCALA_VERSION``: the
run dir's ``spark-home`` is that, its ``jars`` a link to the lib dir. Executors inherit
their Worker's environment, so they start SDK workers with the cluster venv's python.

The job server (``SparkJobServerDriver``) is the Spark *driver* of every job (client
mode): Spark reads its ``spark.*`` settings from Java system properties, so the driver
binds to 127.0.0.1 and runs no web UI. Spark needs the module openings its own launcher
passes on Java 17 (the Master, Workers and driver get them here; Spark adds them to
executors itself).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from trajgraph.pipelines.engines.layout import HOST
from trajgraph.pipelines.engines.members import (
    ClusterSpec,
    Member,
    http_json,
    job_server,
)
from trajgraph.pipelines.engines.versions import SCALA, SPARK

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
JOB_SERVER = "org.apache.beam.runners.spark.SparkJobServerDriver"
WORKER_MEMORY = "1g"
EXECUTOR_MEMORY = "768m"
# Spark 3.5's JavaModuleOptions: what its launcher adds on Java 17.
JAVA_OPENS = (
    "-XX:+IgnoreUnrecognizedVMOptions",
    *(
        f"--add-opens=java.base/{pkg}=ALL-UNNAMED"
        for pkg in (
            "java.lang",
            "java.lang.invoke",
            "java.lang.reflect",
            "java.io",
            "java.net",
            "java.nio",
            "java.util",
            "java.util.concurrent",
            "java.util.concurrent.atomic",
            "sun.nio.ch",
            "sun.nio.cs",
            "sun.security.action",
            "sun.util.calendar",
        )
    ),
    "-Djdk.reflect.useDirectMethodHandle=false",
)
DRIVER_PROPERTIES = (
    f"-Dspark.driver.host={HOST}",
    f"-Dspark.driver.bindAddress={HOST}",
    "-Dspark.ui.enabled=false",
    f"-Dspark.executor.memory={EXECUTOR_MEMORY}",
)


def spark_home(spec: ClusterSpec) -> Path:
    return spec.paths.run_dir / "spark-home"


def write_config(spec: ClusterSpec) -> None:
    """The SPARK_HOME the Workers' launcher needs: RELEASE and jars/ → the lib dir."""
    home = spark_home(spec)
    home.mkdir(parents=True, exist_ok=True)
    (home / "RELEASE").write_text(f"Spark {SPARK} (jars fetched by trajgraph)\n")
    jars = home / "jars"
    with contextlib.suppress(FileNotFoundError):
        jars.unlink()
    os.symlink(spec.paths.lib_dir, jars)
    spec.paths.tmp_dir.mkdir(parents=True, exist_ok=True)


def _env(spec: ClusterSpec) -> dict[str, str]:
    return {
        "SPARK_HOME": str(spark_home(spec)),
        "SPARK_SCALA_VERSION": SCALA,
        "SPARK_LOCAL_IP": HOST,
        "SPARK_LOCAL_DIRS": str(spec.paths.tmp_dir),
        **spec.worker_env,
    }


def master_url(spec: ClusterSpec) -> str:
    return f"spark://{HOST}:{spec.ports.master}"


def _alive_worker(spec: ClusterSpec, port: int) -> bool:
    found = http_json(spec.ports.web, "/json/")
    if not isinstance(found, dict):
        return False
    return any(
        w.get("port") == port and w.get("state") == "ALIVE" for w in found.get("workers", [])
    )


def phases(spec: ClusterSpec) -> list[list[Member]]:
    """The Master, then the Workers (started together), then the job server."""
    java, classpath, env = str(spec.java), f"{spec.paths.lib_dir}/*", _env(spec)
    base = [java, "-Xmx512m", *JAVA_OPENS, "-cp", classpath]
    master = Member(
        role="master",
        title="Spark Master",
        command=[
            *base,
            MASTER,
            "--host",
            HOST,
            "--port",
            str(spec.ports.master),
            "--webui-port",
            str(spec.ports.web),
        ],
        markers=(MASTER, "--port", str(spec.ports.master)),
        port=spec.ports.master,
        ready=lambda: isinstance(http_json(spec.ports.web, "/json/"), dict),
        not_ready=f"answer on its web UI port {spec.ports.web}",
        env=env,
    )
    workers = [_worker(spec, i, base, env) for i in range(1, spec.members + 1)]
    server = job_server(
        spec,
        "Beam Spark job server",
        [
            java,
            "-Xmx1g",
            *JAVA_OPENS,
            *DRIVER_PROPERTIES,
            "-cp",
            classpath,
            JOB_SERVER,
            f"--spark-master-url={master_url(spec)}",
        ],
        markers=(JOB_SERVER, f"--spark-master-url={master_url(spec)}"),
        env=env,
    )
    return [[master], workers, [server]]


def _worker(spec: ClusterSpec, i: int, base: list[str], env: dict[str, str]) -> Member:
    port = spec.ports.member(i - 1)
    work = spec.paths.run_dir / f"worker-{i}" / "work"
    # A Worker copies every job's jars into its work dir: remove those of finished jobs.
    cleanup = ("-Dspark.worker.cleanup.enabled=true", "-Dspark.worker.cleanup.appDataTtl=3600")
    return Member(
        role=f"worker-{i}",
        title=f"Spark Worker {i}",
        command=[
            *base[:1],
            *cleanup,
            *base[1:],
            WORKER,
            "--host",
            HOST,
            "--port",
            str(port),
            "--webui-port",
            str(spec.ports.member_web(i - 1)),
            "--cores",
            "1",
            "--memory",
            WORKER_MEMORY,
            "--work-dir",
            str(work),
            master_url(spec),
        ],
        markers=(WORKER, str(work)),
        port=port,
        ready=lambda: _alive_worker(spec, port),
        not_ready="register with the Master",
        env=env,
    )
