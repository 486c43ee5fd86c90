"""What a local server runs: the Neo4j Community jars, fetched with Maven, and a Java for them.

Why jars and not a tarball or Docker: Maven Central is reachable wherever the project runs,
Maven caches artifacts in ~/.m2, and ``org.neo4j:neo4j`` pulls the whole Community server.
The fetching and the Java search are trajgraph.core.jvm's (shared with the Flink runner); this
module knows which artifact and which Java majors a Neo4j version needs.
"""

from __future__ import annotations

import re
from pathlib import Path

from trajgraph.core import jvm
from trajgraph.core.errors import ServerError
from trajgraph.core.jvm import Java, Log, MavenFailure
from trajgraph.core.settings import LocalServerSettings
from trajgraph.graph.local_server.config import make_dirs, paths

NEO4J_ARTIFACT = "org.neo4j:neo4j"

_VERSION_RE = re.compile(r"^\d+(\.\d+){1,3}(-[A-Za-z0-9.]+)?$")


def java_requirement(neo4j_version: str) -> tuple[int, int | None]:
    """(min, max) Java major versions a Neo4j version runs on; max None means no upper bound."""
    major = _neo4j_major(neo4j_version)
    if major >= 2025:  # calendar versions: Java 21 and later (25 from 2025.10)
        return 21, None
    if major == 5:
        return 17, 21
    raise ServerError(
        f"Neo4j {neo4j_version} is not supported by the local server: use 5.x or 2025.x and later"
    )


def _neo4j_major(version: str) -> int:
    if not _VERSION_RE.match(version):
        raise ServerError(f"not a Neo4j version: {version!r} (expected e.g. 5.26.30 or 2025.10.1)")
    return int(version.split(".", 1)[0])


def find_java(local: LocalServerSettings) -> Java:
    """The Java to run this Neo4j version with: TRAJGRAPH_JAVA_HOME, JAVA_HOME, then PATH."""
    return jvm.find_java(
        need=java_requirement(local.version),
        what=f"Neo4j {local.version}",
        java_home=local.java_home,
        system_java_home=local.system_java_home,
    )


def coordinates(version: str) -> str:
    _neo4j_major(version)  # validates: the version is pasted into XML
    return f"{NEO4J_ARTIFACT}:{version}"


def pom_xml(version: str) -> str:
    return jvm.pom_xml(coordinates(version))


def jars_ready(local: LocalServerSettings) -> bool:
    return jvm.jars_ready(paths(local).lib_dir)


def ensure_jars(local: LocalServerSettings, *, log: Log = print) -> Path:
    """The lib dir with the server's jars, fetched with Maven on first use only."""
    p = paths(local)
    if jars_ready(local):
        return p.lib_dir
    make_dirs(p.version_dir)
    return jvm.fetch_with_dependencies(coordinates(local.version), p.lib_dir, fail=_error, log=log)


def _error(f: MavenFailure) -> ServerError:
    if f.returncode is None:
        return ServerError(f"cannot fetch the Neo4j server jars ({f.coords}): {f.reason}")
    return ServerError(
        f"mvn failed (exit {f.returncode}) fetching {f.coords}"
        f"{'' if f.jars else ' and produced no jars'}; last lines:\n{f.tail()}"
    )
