"""Java programs from Maven Central: the Java that runs them and the jars they need.

Two parts of trajgraph run a Java program: the local Neo4j server (graph/local_server/: the
Community server's jars with their dependencies) and Beam's Flink runner
(pipelines/runners.py: the job-server jar). Both find Java the same way (TRAJGRAPH_JAVA_HOME,
then JAVA_HOME, then ``java`` on PATH; each program states the majors it runs on) and fetch
with ``mvn`` rather than a plain download, so the mirrors, proxies and local repository of
``~/.m2/settings.xml`` apply.

A fetch may be interrupted or run by several processes at once: it holds a lock in the
target's folder, lets Maven write to a scratch name and renames that into place, so a
half-fetched artifact never looks complete. A failed fetch is described by a
:class:`MavenFailure` that the caller words as its own error (the local server names the
Neo4j version and Maven's last lines, the Flink runner the repository and its remedies):
this module knows neither caller. Finding Java raises :class:`ServerError`, which a caller
that is not the local server re-raises as its own.

Unix only (fcntl locks), like the rest of the tooling.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from trajgraph.core.errors import ServerError

Log = Callable[[str], None]

MVN_TIMEOUT_S = 1800.0
MVN_ERROR_CHARS = 600  # of the first [ERROR] line quoted in a failure's reason
LOG_TAIL_LINES = 40  # of Maven's output quoted in a failure's message
JARS_MARKER = ".jars-complete"  # beside a lib dir whose fetch finished
MVN_MISSING = "Maven (`mvn`) is not on PATH; install it (`apt-get install maven`)"

_COORD_PART_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")
_REPO_RE = re.compile(r"\b(?:in|from/to|from|access) ([\w.\-]+) \((https?://[^,)\s]+)")


# ---------------------------------------------------------------- Java


@dataclass(frozen=True)
class Java:
    path: Path
    major: int
    source: str  # where it was found, for messages: "TRAJGRAPH_JAVA_HOME", "JAVA_HOME", "PATH"


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
    *,
    need: tuple[int, int | None],
    what: str,
    wanted: str | None = None,
    java_home: Path | None = None,
    system_java_home: Path | None = None,
) -> Java:
    """The Java to run ``what`` with: major ``need`` = (min, max), max None = no upper bound.

    ``java_home`` (TRAJGRAPH_JAVA_HOME) is an explicit choice, so a wrong one fails at once.
    Otherwise ``system_java_home`` (JAVA_HOME) and then `java` on PATH are tried and the first
    suitable one wins. ``wanted`` words the need in messages (default "Java 17 or 21").
    """
    lo, hi = need
    wanted = wanted or (f"Java {lo} or {hi}" if hi else f"Java {lo} or later")
    suggest = 17 if lo <= 17 and (hi is None or hi >= 17) else lo
    install = f"apt-get install openjdk-{suggest}-jdk-headless"

    def ok(major: int) -> bool:
        return major >= lo and (hi is None or major <= hi)

    if java_home is not None:
        exe = Path(java_home) / "bin" / "java"
        if not os.access(exe, os.X_OK):
            raise ServerError(f"TRAJGRAPH_JAVA_HOME={java_home} has no executable bin/java")
        major = java_version(exe)
        if not ok(major):
            raise ServerError(
                f"{what} needs {wanted}, but TRAJGRAPH_JAVA_HOME={java_home} is Java {major}"
            )
        return Java(exe, major, "TRAJGRAPH_JAVA_HOME")

    candidates: list[tuple[Path, str]] = []
    if system_java_home is not None:
        exe = Path(system_java_home) / "bin" / "java"
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


# ---------------------------------------------------------------- Maven


@dataclass(frozen=True)
class MavenFailure:
    """Why a fetch failed, for the caller to word as its own error.

    ``reason`` is one line (Maven missing, a timeout, or mvn's exit code with its first
    ``[ERROR]`` line); a run of mvn that finished also leaves its exit code, its output and
    how many jars it produced.
    """

    coords: str
    reason: str
    returncode: int | None = None
    output: str = ""
    jars: int = 0

    @property
    def repositories(self) -> str | None:
        """The repositories Maven names in its error lines: 'central (https://...)'."""
        found = dict.fromkeys(f"{m[1]} ({m[2]})" for m in _REPO_RE.finditer(self.output))
        return ", ".join(found) or None

    def tail(self, n: int = LOG_TAIL_LINES) -> str:
        return last_lines(self.output, n) or "(no output)"


Fail = Callable[[MavenFailure], Exception]


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


def pom_xml(coords: str) -> str:
    """A stand-alone pom whose one dependency is ``group:artifact:version``."""
    group, artifact, version = split_coords(coords)
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by trajgraph: only used to fetch {coords} and its dependencies. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.trajgraph</groupId>
  <artifactId>fetch-{artifact}</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>{group}</groupId>
      <artifactId>{artifact}</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""


def split_coords(coords: str) -> tuple[str, str, str]:
    """``group:artifact:version``, each part checked: they are pasted into XML and paths."""
    parts = coords.split(":")
    if len(parts) != 3 or not all(_COORD_PART_RE.match(p) for p in parts):
        raise ValueError(f"not Maven coordinates group:artifact:version: {coords!r}")
    return parts[0], parts[1], parts[2]


def jars_ready(lib_dir: Path) -> bool:
    """A lib dir that :func:`fetch_with_dependencies` completed."""
    return (lib_dir.parent / JARS_MARKER).is_file() and any(lib_dir.glob("*.jar"))


def fetch_with_dependencies(
    coords: str,
    lib_dir: Path,
    *,
    fail: Fail,
    log: Log = print,
    mvn: str | None = None,
    pom: str | None = None,
) -> Path:
    """``coords`` and its runtime dependencies as jars in ``lib_dir``, fetched with
    ``mvn dependency:copy-dependencies`` of a generated pom on first use only.

    ``pom`` replaces the generated one when a program needs several artifacts or pinned
    versions (the Spark job server: Spark itself beside it, Jackson held to Spark's);
    ``coords`` then only names the fetch in messages. The pom, the lock and the completion
    marker live beside ``lib_dir``.
    """
    if jars_ready(lib_dir):
        return lib_dir
    home = lib_dir.parent
    with file_lock(home / ".fetch.lock"):
        if jars_ready(lib_dir):  # another process fetched while we waited for the lock
            return lib_dir
        exe = _mvn(coords, mvn, fail)
        pom_file = home / "pom.xml"
        pom_file.write_text(pom if pom is not None else pom_xml(coords))
        partial = lib_dir.with_name(lib_dir.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        log(f"Fetching {coords} with Maven into {lib_dir} (first use only)")
        started = time.monotonic()
        cmd = [
            exe,
            "-q",
            "-B",
            "-f",
            str(pom_file),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={partial}",
            "-DincludeScope=runtime",
        ]
        out = _run(cmd, home, coords, partial, fail)
        jars = sorted(partial.glob("*.jar")) if partial.is_dir() else []
        if out.returncode != 0 or not jars:
            raise fail(_failed(coords, out, len(jars)))
        shutil.rmtree(lib_dir, ignore_errors=True)
        partial.rename(lib_dir)
        (home / JARS_MARKER).write_text(f"{len(jars)} jars\n")
        log(f"Fetched {len(jars)} jars in {time.monotonic() - started:.1f} s")
    return lib_dir


def cached_jar(coords: str, cache_dir: Path) -> Path:
    _group, artifact, version = split_coords(coords)
    return cache_dir / f"{artifact}-{version}.jar"


def fetch_jar(
    coords: str, cache_dir: Path, *, fail: Fail, log: Log = print, mvn: str | None = None
) -> Path:
    """The jar of ``coords`` alone, as ``cache_dir/<artifact>-<version>.jar``, fetched with
    ``mvn dependency:copy`` on first use only."""
    target = cached_jar(coords, cache_dir)
    if _nonempty(target):
        return target
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise fail(MavenFailure(coords, f"cannot create the jar cache {cache_dir}: {e}")) from e
    with file_lock(cache_dir / ".fetch.lock"):
        if _nonempty(target):  # another process fetched it while we waited
            return target
        exe = _mvn(coords, mvn, fail)
        partial = cache_dir / f".{target.name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        log(f"Fetching {coords} with Maven into {cache_dir} (first use only)")
        started = time.monotonic()
        cmd = [
            exe,
            "-B",
            "-U",  # a failure cached by an earlier try (a *.lastUpdated file) is retried
            "dependency:copy",
            f"-Dartifact={coords}",
            f"-DoutputDirectory={partial}",
        ]
        # No pom.xml in cache_dir: Maven runs its stand-alone project.
        out = _run(cmd, cache_dir, coords, partial, fail)
        fetched = partial / target.name
        if out.returncode != 0 or not _nonempty(fetched):
            shutil.rmtree(partial, ignore_errors=True)
            raise fail(_failed(coords, out, 0))
        fetched.replace(target)  # atomic: an interrupted fetch never looks complete
        shutil.rmtree(partial, ignore_errors=True)
        log(f"Fetched {target.name} in {time.monotonic() - started:.1f} s")
    return target


def _mvn(coords: str, given: str | None, fail: Fail) -> str:
    exe = given or shutil.which("mvn")
    if exe is None:
        raise fail(MavenFailure(coords, MVN_MISSING))
    return exe


def _run(
    cmd: list[str], cwd: Path, coords: str, partial: Path, fail: Fail
) -> subprocess.CompletedProcess[str]:
    try:
        return run_mvn(cmd, cwd=cwd)
    except subprocess.TimeoutExpired as e:
        shutil.rmtree(partial, ignore_errors=True)
        raise fail(MavenFailure(coords, f"mvn did not finish within {MVN_TIMEOUT_S:.0f} s")) from e
    except OSError as e:
        raise fail(MavenFailure(coords, f"cannot run mvn ({cmd[0]}): {e}")) from e


def _failed(coords: str, out: subprocess.CompletedProcess[str], jars: int) -> MavenFailure:
    text = out.stdout + out.stderr
    return MavenFailure(coords, _mvn_reason(out.returncode, text), out.returncode, text, jars)


def _mvn_reason(returncode: int, text: str) -> str:
    for line in text.splitlines():
        line = re.sub(r"\x1b\[[0-9;]*m", "", line).strip()
        if line.startswith("[ERROR]") and len(line) > len("[ERROR] "):
            reason = line[len("[ERROR] ") :]
            if len(reason) > MVN_ERROR_CHARS:
                reason = reason[:MVN_ERROR_CHARS] + "…"
            return f"mvn exit {returncode}: {reason.rstrip('.')}"
    return f"mvn exit {returncode} and no jar"


# ---------------------------------------------------------------- small helpers


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (created with its folder): concurrent fetches,
    and the local server's start and stop, queue up."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def last_lines(text: str, n: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


def _nonempty(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size > 0
    except OSError:
        return False
