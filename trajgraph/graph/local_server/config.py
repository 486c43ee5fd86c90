"""Where a local server's files live, its neo4j.conf and its `java` command line.

Pure functions of LocalServerSettings (plus creating folders): nothing here starts, probes or
fetches anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from trajgraph.core.errors import ServerError
from trajgraph.core.settings import LocalServerSettings

ENTRY_POINT = "org.neo4j.server.CommunityEntryPoint"
HOST = "127.0.0.1"

# JVM flags the official `neo4j` launcher adds from its default neo4j.conf. Starting the entry
# point directly skips the launcher, so pass them ourselves: the --add-opens avoid the slow
# "fallback mode" page cache and let vector indexes use direct buffers.
JVM_FLAGS = (
    "-XX:+UseG1GC",
    "-XX:-OmitStackTraceInFastThrow",
    "-XX:+DisableExplicitGC",
    "-Djdk.nio.maxCachedBufferSize=1024",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--enable-native-access=ALL-UNNAMED",
    "-Dlog4j2.disable.jmx=true",
    "-Dfile.encoding=UTF-8",
)

_SIZE_RE = re.compile(r"^\d+[kKmMgG]?$")


@dataclass(frozen=True)
class ServerPaths:
    version_dir: Path  # <home>/<version>: pom.xml, lib/, default data/ and run/
    lib_dir: Path
    data_dir: Path
    run_dir: Path  # Neo4j's --home-dir: conf/, logs/, pid file, console output
    conf_file: Path
    pid_file: Path
    logs_dir: Path
    log_path: Path  # Neo4j's own neo4j.log
    console_log: Path  # the JVM's stdout/stderr: crashes before logging starts land here


def paths(local: LocalServerSettings) -> ServerPaths:
    # Absolute: the run dir is matched against the running process's --home-dir argument.
    version_dir = Path(local.home).expanduser().absolute() / local.version
    run_dir = Path(local.run_dir).expanduser().absolute() if local.run_dir else version_dir / "run"
    data_dir = (
        Path(local.data_dir).expanduser().absolute() if local.data_dir else version_dir / "data"
    )
    logs_dir = run_dir / "logs"
    return ServerPaths(
        version_dir=version_dir,
        lib_dir=version_dir / "lib",
        data_dir=data_dir,
        run_dir=run_dir,
        conf_file=run_dir / "conf" / "neo4j.conf",
        pid_file=run_dir / "neo4j.pid",
        logs_dir=logs_dir,
        log_path=logs_dir / "neo4j.log",
        console_log=run_dir / "console.log",
    )


def make_dirs(*dirs: Path) -> None:
    for d in dirs:
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ServerError(f"cannot create directory {d}: {e}") from e


def bolt_uri(local: LocalServerSettings) -> str:
    return f"bolt://{HOST}:{local.bolt_port}"


def is_local_uri(uri: str) -> bool:
    """True when a Neo4j URI points at this machine, i.e. a server we could start ourselves."""
    host = urlsplit(uri if "://" in uri else f"bolt://{uri}").hostname or ""
    return host in {"127.0.0.1", "localhost", "::1", "0.0.0.0"}


def neo4j_conf(local: LocalServerSettings, *, database: str = "neo4j") -> str:
    for name, value in (("heap", local.heap), ("pagecache", local.pagecache)):
        if not _SIZE_RE.match(value):
            raise ServerError(f"local server {name} size {value!r} is not like 512m or 1g")
    p = paths(local)
    addr = f"{HOST}:{local.bolt_port}"
    lines = [
        "# Written by trajgraph on every start; edits are overwritten.",
        f"server.default_listen_address={HOST}",
        "server.bolt.enabled=true",
        f"server.bolt.listen_address={addr}",
        f"server.bolt.advertised_address={addr}",
        *(_browser_conf(local) if local.browser else ["server.http.enabled=false"]),
        "server.https.enabled=false",
        "dbms.security.auth_enabled=true",
        # Nothing of trajgraph loads CSV; a caller's Cypher that slipped a file:// LOAD CSV past
        # the retrieval engine's plan check must still not read the server's own files.
        "dbms.security.allow_csv_import_from_file_urls=false",
        # Only read when the data dir is created: makes NEO4J_DATABASE the default database.
        f"initial.dbms.default_database={database}",
        f"server.directories.data={p.data_dir}",
        f"server.directories.logs={p.logs_dir}",
        f"server.directories.run={p.run_dir}",
        # Read by the launcher only; we pass -Xms/-Xmx ourselves, kept here for the record.
        f"server.memory.heap.initial_size={local.heap}",
        f"server.memory.heap.max_size={local.heap}",
        f"server.memory.pagecache.size={local.pagecache}",
        # A dev/test server: no phoning home, and transaction logs that stay small.
        "dbms.usage_report.enabled=false",
        "db.tx_log.preallocate=false",
        "db.tx_log.rotation.size=64M",
        "db.tx_log.rotation.retention_policy=2 files",
    ]
    return "\n".join(lines) + "\n"


def _browser_conf(local: LocalServerSettings) -> list[str]:
    """HTTP on the loopback only (auth stays on: the Browser asks for the password), and the
    trajgraph guide played after connecting (graph/local_server/browser.py)."""
    http = f"{HOST}:{local.http_port}"
    return [
        "server.http.enabled=true",
        f"server.http.listen_address={http}",
        f"server.http.advertised_address={http}",
        f"browser.post_connect_cmd=play http://{http}/browser/trajgraph-guide.html",
        f"browser.remote_content_hostname_whitelist={HOST}",
    ]


def write_conf(local: LocalServerSettings, *, database: str = "neo4j") -> Path:
    """Write <run_dir>/conf/neo4j.conf (strict validation stays on: typos fail loudly)."""
    p = paths(local)
    p.conf_file.parent.mkdir(parents=True, exist_ok=True)
    p.conf_file.write_text(neo4j_conf(local, database=database))
    return p.conf_file


def java_command(java: Path, local: LocalServerSettings) -> list[str]:
    from trajgraph.graph.local_server.browser import browser_dir

    p = paths(local)
    return [
        str(java),
        f"-Xms{local.heap}",
        f"-Xmx{local.heap}",
        *JVM_FLAGS,
        "-cp",
        f"{p.lib_dir}/*" + (f":{browser_dir(local)}" if local.browser else ""),
        ENTRY_POINT,
        f"--home-dir={p.run_dir}",
        f"--config-dir={p.conf_file.parent}",
    ]
