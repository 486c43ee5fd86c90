"""The versions a local cluster is made of, and the poms that fetch them.

They go together: Beam's portable job servers only run jobs of a Python SDK at their own
version, and 2.62.0 is the newest Beam whose whole job-server set Maven Central serves here
(``beam-runners-java-job-service`` stops at 2.65.0; the ``*-job-server`` uber jars are not
served at all), so the job servers are assembled from the runner libraries and their
dependencies, and the workers' Python runs apache-beam 2.62.0 (``.venv-cluster``, from
``deploy/locks/py3.11-cluster.txt``). Flink is the version Beam's ``flink-1.19`` runner is
built against; Spark 3.5.0 with Scala 2.12, as Beam's Spark 3 runner is.
"""

from __future__ import annotations

from dataclasses import dataclass

BEAM = "2.62.0"
FLINK = "1.19"
SPARK = "3.5.0"
SCALA = "2.12"
# Beam's runner libraries bring no SLF4J binding for Flink (its logs would vanish) and
# SLF4J 1.7 for Spark, whose own log4j2 binding wants 2.x; Spark's Jackson must not be
# raised by Beam's (else NoClassDefFoundError: ...StreamReadConstraints).
FLINK_SLF4J = "1.7.30"
SPARK_SLF4J = "2.0.7"
SPARK_JACKSON = "2.15.2"


@dataclass(frozen=True)
class Dependency:
    group: str
    artifact: str
    version: str
    scope: str = ""  # "import" for a BOM under dependencyManagement
    kind: str = ""  # "pom" for a BOM

    def xml(self) -> str:
        extra = (f"<type>{self.kind}</type>" if self.kind else "") + (
            f"<scope>{self.scope}</scope>" if self.scope else ""
        )
        return (
            f"<dependency><groupId>{self.group}</groupId><artifactId>{self.artifact}"
            f"</artifactId><version>{self.version}</version>{extra}</dependency>"
        )


@dataclass(frozen=True)
class EngineJars:
    """What one engine's JVMs run: the jars of ``dependencies`` (with theirs), versions held
    by ``managed``; everything in one lib dir, the classpath of every process of the
    cluster (JobManager, TaskManagers, job server; Master, Workers, executors)."""

    name: str  # "flink-1.19-beam-2.62.0": the lib dir's folder
    dependencies: tuple[Dependency, ...]
    managed: tuple[Dependency, ...] = ()

    @property
    def coords(self) -> str:
        """The runner's coordinates: how messages name the fetch."""
        first = self.dependencies[0]
        return f"{first.group}:{first.artifact}:{first.version}"

    def pom(self) -> str:
        managed = "".join(f"\n      {d.xml()}" for d in self.managed)
        deps = "".join(f"\n    {d.xml()}" for d in self.dependencies)
        management = (
            f"\n  <dependencyManagement><dependencies>{managed}\n  </dependencies>"
            "</dependencyManagement>"
            if managed
            else ""
        )
        return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by trajgraph: only used to fetch the jars of a local {self.name} cluster. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.trajgraph</groupId>
  <artifactId>cluster-{self.name}</artifactId>
  <version>1</version>
  <packaging>pom</packaging>{management}
  <dependencies>{deps}
  </dependencies>
</project>
"""


FLINK_JARS = EngineJars(
    name=f"flink-{FLINK}-beam-{BEAM}",
    dependencies=(
        Dependency("org.apache.beam", f"beam-runners-flink-{FLINK}", BEAM),
        Dependency("org.slf4j", "slf4j-simple", FLINK_SLF4J),
    ),
)

SPARK_JARS = EngineJars(
    name=f"spark-{SPARK}-beam-{BEAM}",
    dependencies=(
        Dependency("org.apache.beam", "beam-runners-spark-3", BEAM),
        *(
            Dependency("org.apache.spark", f"spark-{m}_{SCALA}", SPARK)
            for m in ("core", "streaming", "sql")
        ),
    ),
    managed=(
        Dependency("com.fasterxml.jackson", "jackson-bom", SPARK_JACKSON, "import", "pom"),
        Dependency("org.slf4j", "slf4j-api", SPARK_SLF4J),
    ),
)
