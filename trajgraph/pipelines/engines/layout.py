"""Where a local cluster's files live and which ports it takes: pure functions of the
trajgraph cache dir, the engine and a base port (nothing here starts or fetches anything).

Everything sits beside the Neo4j jars and the Prism binary, under ``<cache>/engines/``:
the jars per engine and version (fetched once), and one run dir per engine holding its
config, pid files, logs and the state file that ``status`` and ``--runner FlinkRunner``
read. Ports are consecutive from a base, so one number moves a whole cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trajgraph.core.settings import Settings
from trajgraph.pipelines.engines.versions import FLINK_JARS, SPARK_JARS, EngineJars

HOST = "127.0.0.1"
ENGINES = ("flink", "spark")
DEFAULT_BASE_PORTS = {"flink": 18100, "spark": 18300}
DEFAULT_MEMBERS = 2  # TaskManagers or Workers: the least that proves work crosses processes
MAX_MEMBERS = 16
JARS = {"flink": FLINK_JARS, "spark": SPARK_JARS}


def cache_root(settings: Settings) -> Path:
    """``<cache>``: the folder of the Neo4j jars (``~/.cache/trajgraph`` by default)."""
    return Path(settings.local.home).expanduser().absolute().parent


@dataclass(frozen=True)
class Ports:
    """A cluster's ports from ``base``: the job server's three, then the engine's own.

    Flink: JobManager RPC, REST (the job server's ``--flink-master``) and blob server, and
    TaskManager ``i``'s RPC at ``base + 10 + i``. Spark: the Master and its web UI (whose
    JSON tells which Workers registered), and Worker ``i``'s port and web UI at
    ``base + 10 + 2i`` and the next."""

    base: int

    @property
    def job(self) -> int:
        return self.base

    @property
    def artifact(self) -> int:
        return self.base + 1

    @property
    def expansion(self) -> int:
        return self.base + 2

    @property
    def master(self) -> int:  # Flink: JobManager RPC; Spark: the Master
        return self.base + 3

    @property
    def web(self) -> int:  # Flink: REST; Spark: the Master's web UI
        return self.base + 4

    @property
    def blob(self) -> int:  # Flink only
        return self.base + 5

    def member(self, i: int) -> int:
        """TaskManager ``i``'s RPC port (Flink) or Worker ``i``'s port (Spark)."""
        return self.base + 10 + 2 * i

    def member_web(self, i: int) -> int:
        return self.base + 11 + 2 * i

    def last(self, members: int) -> int:
        return self.member_web(members - 1)


@dataclass(frozen=True)
class ClusterPaths:
    jars: EngineJars
    lib_dir: Path  # <cache>/engines/<jars name>/lib: every JVM's classpath
    run_dir: Path  # <cache>/engines/<engine>: config, pid files, logs, state
    conf_dir: Path
    logs_dir: Path
    state_file: Path
    tmp_dir: Path


def paths(settings: Settings, engine: str, instance: str | None = None) -> ClusterPaths:
    """``instance`` names another run dir than the engine's (the tests' own cluster runs
    beside a user's, on the same jars)."""
    jars = JARS[engine]
    root = cache_root(settings) / "engines"
    run_dir = root / (instance or engine)
    return ClusterPaths(
        jars=jars,
        lib_dir=root / jars.name / "lib",
        run_dir=run_dir,
        conf_dir=run_dir / "conf",
        logs_dir=run_dir / "logs",
        state_file=run_dir / "cluster.json",
        tmp_dir=run_dir / "tmp",
    )
