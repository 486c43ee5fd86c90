"""``python -m trajgraph.graph.local_server fetch|start|stop|status|ping`` (deploy/dev.sh uses
it; ``trajgraph neo4j ...`` is the same for users)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from trajgraph.core.errors import ServerError, TrajgraphError
from trajgraph.core.settings import Neo4jSettings
from trajgraph.graph.local_server.config import is_local_uri
from trajgraph.graph.local_server.install import ensure_jars, find_java
from trajgraph.graph.local_server.lifecycle import ServerStatus, start, status, stop

COMMANDS = ("fetch", "start", "stop", "status", "ping")


def print_status(st: ServerStatus) -> None:
    state = "running" if st.running else ("starting or hung" if st.pid else "not running")
    print(f"state:   {state}" + (f" (pid {st.pid})" if st.pid else ""))
    print(f"bolt:    {st.bolt_uri}")
    print(f"version: Neo4j {st.version}")
    print(f"data:    {st.data_dir}")
    print(f"log:     {st.log_path}")


def main(argv: Sequence[str] | None = None) -> int:
    """Exit codes: 0 ok (status: running), 1 error, 2 usage, 3 status: not running / ping: no
    answer."""
    from trajgraph.core.settings import load

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0] not in COMMANDS:
        usage = f"usage: python -m trajgraph.graph.local_server {{{'|'.join(COMMANDS)}}}"
        print(usage, file=sys.stderr)
        return 2
    try:
        settings = load()
        neo, local = settings.neo4j, settings.local
        cmd = args[0]
        if cmd == "fetch":
            java = find_java(local)
            lib = ensure_jars(local)
            print(f"Neo4j {local.version} jars: {lib} (Java {java.major} from {java.source})")
        elif cmd == "start":
            if not is_local_uri(neo.uri):
                raise ServerError(f"NEO4J_URI={neo.uri} is not on this machine; not starting")
            print_status(start(neo, local))
        elif cmd == "stop":
            print("Neo4j stopped" if stop(local) else "Neo4j was not running")
        elif cmd == "status":
            st = status(neo, local)
            print_status(st)
            return 0 if st.running else 3
        else:  # ping: does the configured server (local or not) accept our credentials?
            return 0 if _ping(neo) else 3
    except TrajgraphError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _ping(neo: Neo4jSettings) -> bool:
    import neo4j
    from neo4j.exceptions import DriverError, Neo4jError

    try:
        with neo4j.GraphDatabase.driver(
            neo.uri, auth=(neo.user, neo.password), connection_timeout=5.0
        ) as driver:
            driver.verify_connectivity()
    except (Neo4jError, DriverError, OSError, ValueError) as e:
        print(f"Neo4j at {neo.uri}: {e}", file=sys.stderr)
        return False
    print(f"Neo4j at {neo.uri} accepts user {neo.user!r}")
    return True
