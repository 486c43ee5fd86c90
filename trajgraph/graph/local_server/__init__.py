"""A local Neo4j Community server run straight from Maven jars: fetch, start, stop, status.

The server runs as a detached `java` process whose pid file, config and logs live in a run
dir (default ``<home>/<version>/run``); nothing here keeps state in memory between calls, so
any process (CLI, tests, dev.sh) can start, inspect or stop the same server.

One module per concern:

- ``config``: where the server's files live, its neo4j.conf and its `java` command line;
- ``install``: the jars it runs (fetched with Maven) and the Java for them, through
  trajgraph.core.jvm, which the Flink runner shares;
- ``process``: the server described for trajgraph/core/process.py's ``LocalProcess`` (which
  launches, waits, signals and tails logs for the LLM server too) and the Bolt handshake;
- ``password``: giving a fresh data dir NEO4J_PASSWORD;
- ``lifecycle``: ``start``, ``stop``, ``status``;
- ``cli``: ``python -m trajgraph.graph.local_server fetch|start|stop|status|ping``.

The names below are the package's public surface (the CLI, tests and benchmarks use them).
Unix only (signals, sessions, fcntl locks), like the rest of the tooling.
"""

from trajgraph.graph.local_server.cli import main
from trajgraph.graph.local_server.config import (
    ENTRY_POINT,
    HOST,
    JVM_FLAGS,
    ServerPaths,
    bolt_uri,
    is_local_uri,
    java_command,
    neo4j_conf,
    paths,
    write_conf,
)
from trajgraph.graph.local_server.install import (
    ensure_jars,
    find_java,
    jars_ready,
    java_requirement,
    pom_xml,
)
from trajgraph.graph.local_server.lifecycle import ServerStatus, start, status, stop
from trajgraph.graph.local_server.password import (
    INITIAL_PASSWORD,
    INITIAL_USER,
    MIN_PASSWORD_LENGTH,
)
from trajgraph.graph.local_server.process import bolt_answers

__all__ = [
    "ENTRY_POINT",
    "HOST",
    "INITIAL_PASSWORD",
    "INITIAL_USER",
    "JVM_FLAGS",
    "MIN_PASSWORD_LENGTH",
    "ServerPaths",
    "ServerStatus",
    "bolt_answers",
    "bolt_uri",
    "ensure_jars",
    "find_java",
    "is_local_uri",
    "jars_ready",
    "java_command",
    "java_requirement",
    "main",
    "neo4j_conf",
    "paths",
    "pom_xml",
    "start",
    "status",
    "stop",
    "write_conf",
]
