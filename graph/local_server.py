"""A local Neo4j Community server run straight from Maven jars: fetch, start, stop, status.

Why jars and not a tarball or Docker: Maven Central is reachable wherever the project runs,
Maven caches artifacts in ~/.m2, and `org.neo4j:neo4j` pulls the whole Community server.
The server runs as a detached `java` process whose pid file, config and logs live in a run dir
(default ``<home>/<version>/run``); nothing here keeps state in memory between calls, so any
process (CLI, tests, dev.sh) can start, inspect or stop the same server.

Unix only (signals, sessions, fcntl locks), like the rest of the tooling.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from trajgraph.errors import ServerError, TrajgraphError
from trajgraph.settings import LocalServerSettings, Neo4jSettings

Log = Callable[[str], None]

ENTRY_POINT = "org.neo4j.server.CommunityEntryPoint"
HOST = "127.0.0.1"
INITIAL_USER = "neo4j"
INITIAL_PASSWORD = "neo4j"  # what a fresh data dir accepts once, before a password change
MIN_PASSWORD_LENGTH = 8  # Neo4j's dbms.security.auth_minimum_password_length default
JARS_MARKER = ".jars-complete"
MVN_TIMEOUT_S = 1800.0
LOG_TAIL_LINES = 40

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

_VERSION_RE = re.compile(r"^\d+(\.\d+){1,3}(-[A-Za-z0-9.]+)?$")
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


@dataclass(frozen=True)
class ServerStatus:
    running: bool  # our process is alive AND Bolt answers on the port
    pid: int | None  # set whenever our process is alive (also while it is still starting)
    bolt_uri: str
    version: str
    data_dir: Path
    log_path: Path


@dataclass(frozen=True)
class Java:
    path: Path
    major: int
    source: str  # where it was found, for messages: "TRAJGRAPH_JAVA_HOME", "JAVA_HOME", "PATH"


# ---------------------------------------------------------------- paths and small parsers


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


def bolt_uri(local: LocalServerSettings) -> str:
    return f"bolt://{HOST}:{local.bolt_port}"


def is_local_uri(uri: str) -> bool:
    """True when a Neo4j URI points at this machine, i.e. a server we could start ourselves."""
    host = urlsplit(uri if "://" in uri else f"bolt://{uri}").hostname or ""
    return host in {"127.0.0.1", "localhost", "::1", "0.0.0.0"}


def parse_java_version(text: str) -> int:
    """Major version from `java -version` output: '1.8.0_292' -> 8, '17.0.15' -> 17, '25' -> 25."""
    m = re.search(r'version "([^"]+)"', text)
    if not m:
        raise ServerError(f"cannot read the Java version from `java -version` output:\n{text}")
    parts = m.group(1).split(".")
    try:
        major = int(re.split(r"[^0-9]", parts[0])[0])
        if major == 1 and len(parts) > 1:  # Java 8 and older report 1.x
            major = int(re.split(r"[^0-9]", parts[1])[0])
    except ValueError as e:
        raise ServerError(f"cannot read the Java version from {m.group(1)!r}") from e
    return major


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


# ---------------------------------------------------------------- Java


def java_version(java: Path) -> int:
    try:
        out = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError as e:
        raise ServerError(f"cannot run {java}: {e}") from e
    except subprocess.TimeoutExpired as e:
        raise ServerError(f"`{java} -version` did not answer within 60 s") from e
    return parse_java_version(out.stderr + out.stdout)


def find_java(
    local: LocalServerSettings,
    *,
    need: tuple[int, int | None] | None = None,
    wanted: str | None = None,
    what: str | None = None,
) -> Java:
    """The Java to run Neo4j with, checked against the version's requirement.

    TRAJGRAPH_JAVA_HOME is an explicit choice, so a wrong one fails at once. Otherwise
    JAVA_HOME and then `java` on PATH are tried and the first suitable one wins. Other Java
    programs (the Beam job servers) pass their own ``need`` (min, max major), the ``wanted``
    text for messages and ``what`` names the program in them.
    """
    lo, hi = need or java_requirement(local.version)
    wanted = wanted or (f"Java {lo} or {hi}" if hi else f"Java {lo} or later")
    what = what or f"Neo4j {local.version}"
    suggest = 17 if lo <= 17 and (hi is None or hi >= 17) else lo
    install = f"apt-get install openjdk-{suggest}-jdk-headless"

    def ok(major: int) -> bool:
        return major >= lo and (hi is None or major <= hi)

    if local.java_home is not None:
        exe = Path(local.java_home) / "bin" / "java"
        if not os.access(exe, os.X_OK):
            raise ServerError(f"TRAJGRAPH_JAVA_HOME={local.java_home} has no executable bin/java")
        major = java_version(exe)
        if not ok(major):
            raise ServerError(
                f"{what} needs {wanted}, but TRAJGRAPH_JAVA_HOME={local.java_home} is Java {major}"
            )
        return Java(exe, major, "TRAJGRAPH_JAVA_HOME")

    candidates: list[tuple[Path, str]] = []
    if local.system_java_home is not None:
        exe = Path(local.system_java_home) / "bin" / "java"
        if os.access(exe, os.X_OK):
            candidates.append((exe, "JAVA_HOME"))
    on_path = shutil.which("java")
    if on_path:
        candidates.append((Path(on_path), "PATH"))
    if not candidates:
        raise ServerError(
            f"Java not found (no JAVA_HOME, no `java` on PATH); {what} needs "
            f"{wanted}. Install it (e.g. `{install}`) or set TRAJGRAPH_JAVA_HOME."
        )
    seen = []
    for exe, source in candidates:
        major = java_version(exe)
        if ok(major):
            return Java(exe, major, source)
        seen.append(f"{exe} ({source}) is Java {major}")
    raise ServerError(
        f"{what} needs {wanted}, but "
        + "; ".join(seen)
        + f". Install one (e.g. `{install}`) and/or set TRAJGRAPH_JAVA_HOME to it."
    )


# ---------------------------------------------------------------- jars


def pom_xml(version: str) -> str:
    _neo4j_major(version)  # validates: the version is pasted into XML
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by trajgraph: only used to fetch the Neo4j Community server jars. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.trajgraph</groupId>
  <artifactId>neo4j-local-server</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.neo4j</groupId>
      <artifactId>neo4j</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""


def jars_ready(local: LocalServerSettings) -> bool:
    p = paths(local)
    return (p.version_dir / JARS_MARKER).is_file() and any(p.lib_dir.glob("*.jar"))


def run_mvn(cmd: list[str], *, cwd: Path) -> subprocess.CompletedProcess[str]:
    """One Maven run: no stdin, output captured, at most MVN_TIMEOUT_S (TimeoutExpired and
    OSError are the caller's to explain)."""
    return subprocess.run(
        cmd,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=MVN_TIMEOUT_S,
        check=False,
    )


def ensure_jars(local: LocalServerSettings, *, log: Log = print) -> Path:
    """The lib dir with the server's jars, fetched with Maven on first use only."""
    p = paths(local)
    if jars_ready(local):
        return p.lib_dir
    _mkdirs(p.version_dir)
    with _locked(p.version_dir / ".fetch.lock"):
        if jars_ready(local):  # another process fetched while we waited for the lock
            return p.lib_dir
        mvn = shutil.which("mvn")
        if mvn is None:
            raise ServerError(
                "Maven (`mvn`) is not on PATH; it is needed once to fetch the Neo4j "
                f"{local.version} jars. Install it: `apt-get install maven` (Debian/Ubuntu) "
                "or `brew install maven` (macOS)."
            )
        (p.version_dir / "pom.xml").write_text(pom_xml(local.version))
        # Fetch into a scratch dir and rename: an interrupted fetch never looks complete.
        partial = p.version_dir / "lib.partial"
        shutil.rmtree(partial, ignore_errors=True)
        log(f"Fetching Neo4j {local.version} jars with Maven into {p.lib_dir} (first use only)")
        started = time.monotonic()
        cmd = [
            mvn,
            "-q",
            "-B",
            "-f",
            str(p.version_dir / "pom.xml"),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={partial}",
            "-DincludeScope=runtime",
        ]
        try:
            out = run_mvn(cmd, cwd=p.version_dir)
        except subprocess.TimeoutExpired as e:
            raise ServerError(
                f"mvn did not finish fetching the Neo4j jars within {MVN_TIMEOUT_S:.0f} s"
            ) from e
        except OSError as e:
            raise ServerError(f"cannot run mvn ({mvn}): {e}") from e
        jars = sorted(partial.glob("*.jar")) if partial.is_dir() else []
        if out.returncode != 0 or not jars:
            tail = _last_lines(out.stdout + out.stderr, LOG_TAIL_LINES) or "(no output)"
            raise ServerError(
                f"mvn failed (exit {out.returncode}) fetching org.neo4j:neo4j:{local.version}"
                f"{'' if jars else ' and produced no jars'}; last lines:\n{tail}"
            )
        shutil.rmtree(p.lib_dir, ignore_errors=True)
        partial.rename(p.lib_dir)
        (p.version_dir / JARS_MARKER).write_text(f"{len(jars)} jars\n")
        log(f"Fetched {len(jars)} jars in {time.monotonic() - started:.1f} s")
    return p.lib_dir


# ---------------------------------------------------------------- config


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
        "server.http.enabled=false",
        "server.https.enabled=false",
        "dbms.security.auth_enabled=true",
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


def write_conf(local: LocalServerSettings, *, database: str = "neo4j") -> Path:
    """Write <run_dir>/conf/neo4j.conf (strict validation stays on: typos fail loudly)."""
    p = paths(local)
    p.conf_file.parent.mkdir(parents=True, exist_ok=True)
    p.conf_file.write_text(neo4j_conf(local, database=database))
    return p.conf_file


def java_command(java: Path, local: LocalServerSettings) -> list[str]:
    p = paths(local)
    return [
        str(java),
        f"-Xms{local.heap}",
        f"-Xmx{local.heap}",
        *JVM_FLAGS,
        "-cp",
        f"{p.lib_dir}/*",
        ENTRY_POINT,
        f"--home-dir={p.run_dir}",
        f"--config-dir={p.conf_file.parent}",
    ]


# ---------------------------------------------------------------- process and port probes


def _read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError, OSError):
        # If we are its parent (tests start and stop in one process), reap it: a zombie
        # still answers kill(0).
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError, IndexError):
        if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def _is_ours(pid: int, local: LocalServerSettings) -> bool:
    """The pid is alive and is our Neo4j for this run dir (guards against pid reuse)."""
    if not _alive(pid):
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.parent.exists():  # no /proc (macOS): trust the pid file
        return True
    try:
        args = cmdline.read_bytes().split(b"\0")
    except OSError:
        return False
    home = f"--home-dir={paths(local).run_dir}".encode()
    return ENTRY_POINT.encode() in args and home in args


def _our_pid(local: LocalServerSettings) -> int | None:
    pid = _read_pid(paths(local).pid_file)
    return pid if pid is not None and _is_ours(pid, local) else None


def _port_open(port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def bolt_answers(port: int, timeout: float = 2.0) -> bool:
    """Does a Bolt server answer the handshake on the port? Sends no credentials.

    Used instead of a driver login for liveness, so probing never counts as a failed login.
    """
    # Magic preamble, then four version proposals: 5.8..5.0, 4.4..4.2, none, none.
    hello = bytes.fromhex("6060B01700080805000204040000000000000000")
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(hello)
            reply = b""
            while len(reply) < 4:
                chunk = s.recv(4 - len(reply))
                if not chunk:
                    return False
                reply += chunk
    except OSError:
        return False
    # A Bolt server answers 4 bytes starting with 0 (a version, or zeros for "none agreed");
    # an HTTP server or anything else answers text or nothing.
    return reply[0] == 0


# ---------------------------------------------------------------- status, start, stop


def status(neo: Neo4jSettings, local: LocalServerSettings) -> ServerStatus:
    """State of the server managed from local's run dir (neo is taken for symmetry with start)."""
    del neo  # status never logs in: liveness is the pid plus a Bolt handshake
    p = paths(local)
    pid = _our_pid(local)
    return ServerStatus(
        running=pid is not None and bolt_answers(local.bolt_port),
        pid=pid,
        bolt_uri=bolt_uri(local),
        version=local.version,
        data_dir=p.data_dir,
        log_path=p.log_path,
    )


def start(neo: Neo4jSettings, local: LocalServerSettings, *, log: Log = print) -> ServerStatus:
    """Start the server if needed; return once neo.user/neo.password can run `RETURN 1`."""
    if len(neo.password) < MIN_PASSWORD_LENGTH or neo.password == INITIAL_PASSWORD:
        raise ServerError(
            f"NEO4J_PASSWORD must have at least {MIN_PASSWORD_LENGTH} characters and not be "
            f"{INITIAL_PASSWORD!r} for the local server (Neo4j refuses weaker ones)"
        )
    p = paths(local)
    _mkdirs(p.run_dir)
    deadline = time.monotonic() + local.start_timeout_s
    with _locked(p.run_dir / ".lock"):
        pid = _our_pid(local)
        log_offset = _size(p.log_path)
        console_offset = _size(p.console_log)
        if pid is None:
            p.pid_file.unlink(missing_ok=True)  # stale: its process is gone
            if _port_open(local.bolt_port):
                what = (
                    "a Bolt server (another Neo4j?)"
                    if bolt_answers(local.bolt_port)
                    else ("another program")
                )
                raise ServerError(
                    f"port {local.bolt_port} on {HOST} is already taken by {what}, not by the "
                    f"trajgraph Neo4j managed from {p.run_dir}. Stop it, or choose another port "
                    "with TRAJGRAPH_NEO4J_PORT (or the port in NEO4J_URI)."
                )
            java = find_java(local)
            ensure_jars(local, log=log)
            _mkdirs(p.data_dir, p.logs_dir, p.conf_file.parent)
            write_conf(local, database=neo.database)
            log(
                f"Starting Neo4j {local.version} (Java {java.major}) on {bolt_uri(local)}; "
                f"data {p.data_dir}, log {p.log_path}"
            )
            pid = _spawn(java_command(java.path, local), p)
        elif not bolt_answers(local.bolt_port):
            log(f"Neo4j (pid {pid}) is starting; waiting for it")
        t0 = time.monotonic()
        _wait_for_bolt(pid, local, deadline, log_offset, console_offset)
        _ensure_password(neo, local, deadline, log)
        if time.monotonic() - t0 > 0.5:
            log(f"Neo4j is up on {bolt_uri(local)} (pid {pid}) after {time.monotonic() - t0:.1f} s")
    return status(neo, local)


def stop(local: LocalServerSettings, *, timeout: float = 60.0) -> bool:
    """SIGTERM the server, SIGKILL it after timeout; True if one was running."""
    p = paths(local)
    if not p.run_dir.is_dir():
        return False
    with _locked(p.run_dir / ".lock"):
        pid = _our_pid(local)
        if pid is None:
            p.pid_file.unlink(missing_ok=True)
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)  # Neo4j shuts down cleanly on TERM
        if not _wait_dead(pid, timeout):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if not _wait_dead(pid, 15.0):
                raise ServerError(f"Neo4j (pid {pid}) did not exit even after SIGKILL")
        p.pid_file.unlink(missing_ok=True)
        return True


def _spawn(cmd: list[str], p: ServerPaths) -> int:
    """Start cmd fully detached and return its pid.

    A new session keeps the server alive past this process and a Ctrl-C in the calling shell.
    A short-lived `sh` launches it in the background and exits, so the server is not our
    child: no zombie to reap and nothing to wait for (the CLI exits, tests keep running).
    """
    launcher = 'log="$1"; shift; "$@" </dev/null >>"$log" 2>&1 & echo $!'
    try:
        out = subprocess.run(
            ["/bin/sh", "-c", launcher, "sh", str(p.console_log), *cmd],
            cwd=p.run_dir,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            start_new_session=True,
            timeout=30,
            check=True,
        )
        pid = int(out.stdout.strip())
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        raise ServerError(f"cannot launch {cmd[0]}: {e}") from e
    p.pid_file.write_text(f"{pid}\n")
    return pid


def _wait_for_bolt(
    pid: int, local: LocalServerSettings, deadline: float, log_offset: int, console_offset: int
) -> None:
    p = paths(local)
    while not bolt_answers(local.bolt_port, timeout=1.0):
        if not _alive(pid):
            p.pid_file.unlink(missing_ok=True)
            raise ServerError(
                f"Neo4j exited during start-up.\n{_failure_logs(p, log_offset, console_offset)}"
            )
        if time.monotonic() > deadline:
            raise ServerError(
                f"Neo4j (pid {pid}) did not open Bolt on port {local.bolt_port} within "
                f"{local.start_timeout_s:.0f} s; it is left running (stop it with "
                f"`trajgraph neo4j stop`).\n{_failure_logs(p, log_offset, console_offset)}"
            )
        time.sleep(0.25)


def _ensure_password(
    neo: Neo4jSettings, local: LocalServerSettings, deadline: float, log: Log
) -> None:
    """Make neo.user/neo.password work, changing the initial password on a fresh data dir.

    Auth failures are never retried: Neo4j locks a user after a few failed logins.
    """
    from neo4j.exceptions import AuthError

    uri = bolt_uri(local)
    try:
        _query_until_ready(uri, (neo.user, neo.password), neo.database, deadline)
        return
    except AuthError as configured_rejected:
        if neo.user != INITIAL_USER:
            raise ServerError(
                f"Neo4j on {uri} rejected user {neo.user!r}; the local server only sets up "
                f"user {INITIAL_USER!r} (set NEO4J_USER={INITIAL_USER})"
            ) from configured_rejected
    try:
        _query_until_ready(
            uri,
            (INITIAL_USER, INITIAL_PASSWORD),
            "system",
            deadline,
            query="ALTER CURRENT USER SET PASSWORD FROM $old TO $new",
            params={"old": INITIAL_PASSWORD, "new": neo.password},
        )
    except AuthError as e:
        raise ServerError(
            f"Neo4j on {uri} rejects NEO4J_PASSWORD: its data dir {paths(local).data_dir} was "
            "set up with another password. Set NEO4J_PASSWORD to that one, or stop the server "
            "and delete the data dir to start empty."
        ) from e
    log(f"Set the initial password of user {INITIAL_USER!r} from NEO4J_PASSWORD")
    try:
        _query_until_ready(uri, (neo.user, neo.password), neo.database, deadline)
    except AuthError as e:
        raise ServerError(f"Neo4j on {uri} rejected the password it was just given") from e


def _query_until_ready(
    uri: str,
    auth: tuple[str, str],
    database: str,
    deadline: float,
    *,
    query: str = "RETURN 1",
    params: dict[str, str] | None = None,
) -> None:
    """Run one auto-commit query, retrying while the server is still coming up.

    Raises neo4j AuthError untouched (the caller decides); other errors are retried until
    the deadline, then reported with the last one.
    """
    import neo4j
    from neo4j.exceptions import AuthError, DriverError, Neo4jError

    last: Exception | None = None
    while True:
        try:
            with (
                neo4j.GraphDatabase.driver(
                    uri, auth=auth, connection_timeout=5.0, connection_acquisition_timeout=10.0
                ) as driver,
                driver.session(database=database) as session,
            ):
                session.run(query, params or {}).consume()
            return
        except AuthError:
            raise
        except (Neo4jError, DriverError, OSError) as e:
            code = getattr(e, "code", None) or ""
            if code.startswith("Neo.ClientError.Security."):
                # e.g. a rate-limited or locked user: retrying would only extend the lock.
                raise ServerError(f"Neo4j on {uri} refused user {auth[0]!r}: {e}") from e
            last = e
        if time.monotonic() > deadline:
            raise ServerError(
                f"Neo4j on {uri} answers Bolt but `{query}` on database {database!r} kept "
                f"failing until the start timeout: {last}"
            )
        time.sleep(0.5)


def _wait_dead(pid: int, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.2)
    return True


# ---------------------------------------------------------------- helpers


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock, so concurrent start/stop/fetch calls queue up."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _mkdirs(*dirs: Path) -> None:
    for d in dirs:
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ServerError(f"cannot create directory {d}: {e}") from e


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _last_lines(text: str, n: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


def _tail(path: Path, n: int, offset: int = 0) -> str:
    """Last n lines of a file written after offset (logs append across runs)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset if offset <= _size(path) else 0)
            return _last_lines(f.read().decode("utf-8", "replace"), n)
    except OSError:
        return ""


def _failure_logs(p: ServerPaths, log_offset: int, console_offset: int) -> str:
    parts = []
    for path, offset in ((p.console_log, console_offset), (p.log_path, log_offset)):
        text = _tail(path, LOG_TAIL_LINES, offset)
        if text:
            parts.append(f"--- last lines of {path} ---\n{text}")
    parts.append(f"(more detail in {p.logs_dir / 'debug.log'})")
    return "\n".join(parts)


# ---------------------------------------------------------------- command line


def _print_status(st: ServerStatus) -> None:
    state = "running" if st.running else ("starting or hung" if st.pid else "not running")
    print(f"state:   {state}" + (f" (pid {st.pid})" if st.pid else ""))
    print(f"bolt:    {st.bolt_uri}")
    print(f"version: Neo4j {st.version}")
    print(f"data:    {st.data_dir}")
    print(f"log:     {st.log_path}")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m trajgraph.graph.local_server fetch|start|stop|status|ping`.

    Exit codes: 0 ok (status: running), 1 error, 2 usage, 3 status: not running / ping: no answer.
    """
    from trajgraph.settings import load

    args = list(sys.argv[1:] if argv is None else argv)
    commands = ("fetch", "start", "stop", "status", "ping")
    if len(args) != 1 or args[0] not in commands:
        usage = f"usage: python -m trajgraph.graph.local_server {{{'|'.join(commands)}}}"
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
            _print_status(start(neo, local))
        elif cmd == "stop":
            print("Neo4j stopped" if stop(local) else "Neo4j was not running")
        elif cmd == "status":
            st = status(neo, local)
            _print_status(st)
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


if __name__ == "__main__":
    sys.exit(main())
