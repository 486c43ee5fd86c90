"""Runner set-up that Beam's own flags leave to us: the Flink job server.

``--runner FlinkRunner`` is Beam's portable Flink runner: the pipeline is sent over the Fn API
to a Java *job server* (``org.apache.beam:beam-runners-flink-<flink>-job-server`` at exactly
the installed Beam version), which runs it on Flink; with ``--flink_master=[local]`` that is
an embedded Flink mini-cluster, and ``--environment_type=LOOPBACK`` runs the Python DoFns in
this process. Left to itself, Beam downloads the jar from Maven Central with urllib into
``~/.apache_beam``; :func:`prepare_beam_args` fetches it with ``mvn`` instead, like the Neo4j
jars (graph/local_server.py), so Maven's mirrors, proxies and local repository apply, into
``<cache>/beam/<beam version>/``, checks the Java that will run it, and adds those flags
unless the user gave them. Any other runner's flags pass through untouched.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from apache_beam.options.pipeline_options import FlinkRunnerOptions
from apache_beam.version import __version__ as BEAM_VERSION

from trajgraph.errors import ConfigError, RunnerError, ServerError
from trajgraph.graph.local_server import MVN_TIMEOUT_S, Java, find_java, run_mvn
from trajgraph.settings import Settings

Log = Callable[[str], None]

BEAM_GROUP = "org.apache.beam"
FLINK_RUNNER_NAMES = frozenset({"flink", "flinkrunner"})
# Beam's own list of the Flink versions it publishes job servers for; the newest is its default.
FLINK_VERSIONS: tuple[str, ...] = tuple(FlinkRunnerOptions.PUBLISHED_FLINK_VERSIONS)
DEFAULT_FLINK_VERSION = FLINK_VERSIONS[-1]
LOCAL_MASTERS = ("[local]", "[auto]")  # Beam's "magic" masters: an embedded mini-cluster
# Beam's Java job servers need Java 11 or later; 21 is the newest Java Flink documents and 17
# is its recommendation.
JOB_SERVER_JAVA = (11, 21)
JOB_SERVER_JAVA_TEXT = "Java 11 to 21 (17 recommended)"
MVN_ERROR_CHARS = 600
_REPO_RE = re.compile(r"\b(?:in|from/to|from|access) ([\w.\-]+) \((https?://[^,)\s]+)")


@dataclass(frozen=True)
class RunnerFlags:
    """The Beam flags that decide what a Flink run needs; None = not given."""

    runner: str | None = None
    flink_master: str | None = None
    flink_version: str | None = None
    flink_job_server_jar: str | None = None
    flink_submit_uber_jar: bool = False
    environment_type: str | None = None
    job_endpoint: str | None = None
    jar_cache_dir: str | None = None
    job_server_java_launcher: str | None = None


def parse_flags(beam_args: Sequence[str]) -> RunnerFlags:
    """Read the flags above from Beam's argv (``--flag value`` or ``--flag=value``)."""
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for name in RunnerFlags.__dataclass_fields__:
        if name == "flink_submit_uber_jar":
            p.add_argument(f"--{name}", action="store_true")
        else:
            p.add_argument(f"--{name}", default=None)
    known, _ = p.parse_known_args(list(beam_args))
    return RunnerFlags(**vars(known))


def is_flink(runner: str | None) -> bool:
    """True for the names Beam resolves to its FlinkRunner (any case, short or dotted)."""
    if not runner:
        return False
    return runner.rsplit(".", 1)[-1].lower() in FLINK_RUNNER_NAMES


def flink_version(flags: RunnerFlags) -> str:
    version = flags.flink_version or DEFAULT_FLINK_VERSION
    if version not in FLINK_VERSIONS:
        raise ConfigError(
            f"--flink_version {version!r} has no job server in Beam {BEAM_VERSION}: "
            f"use one of {', '.join(FLINK_VERSIONS)}"
        )
    return version


def job_server_artifact(flink: str) -> str:
    return f"beam-runners-flink-{flink}-job-server"


def job_server_coordinates(flink: str, beam_version: str = BEAM_VERSION) -> str:
    """Maven coordinates of the job server for a Flink version, at this Beam's version."""
    return f"{BEAM_GROUP}:{job_server_artifact(flink)}:{beam_version}"


def needs_local_job_server(flags: RunnerFlags) -> bool:
    """False when the user runs their own job server (``--job_endpoint``) or uploads an uber
    jar to a remote master: then neither a local jar fetch nor a local Java is needed."""
    if flags.job_endpoint:
        return False
    master = flags.flink_master or "[local]"
    return not (flags.flink_submit_uber_jar and master not in LOCAL_MASTERS)


def flink_defaults(flags: RunnerFlags, *, jar: str | None, java: str | None) -> list[str]:
    """The flags to append to a Flink run: an embedded mini-cluster and LOOPBACK workers
    unless the user chose otherwise, plus the job-server jar and Java when we found them.

    LOOPBACK (Python workers inside this process) is only added for a local master: a
    remote cluster's task managers cannot call back into this process, so there Beam's own
    default (or the user's ``--environment_type``) applies.
    """
    extra: list[str] = []
    master = flags.flink_master
    if master is None:
        master = "[local]"
        extra.append(f"--flink_master={master}")
    if flags.environment_type is None and master in LOCAL_MASTERS:
        extra.append("--environment_type=LOOPBACK")
    if jar is not None and flags.flink_job_server_jar is None:
        extra.append(f"--flink_job_server_jar={jar}")
    if java is not None and flags.job_server_java_launcher is None:
        extra.append(f"--job_server_java_launcher={java}")
    return extra


def jar_cache_dir(settings: Settings, flags: RunnerFlags) -> Path:
    """``--jar_cache_dir`` if given, else beside the Neo4j jars and the dead letters:
    ``<cache>/beam/<beam version>`` (``~/.cache/trajgraph/beam/2.77.0`` by default)."""
    if flags.jar_cache_dir:
        return Path(flags.jar_cache_dir).expanduser()
    return Path(settings.local.home).expanduser().absolute().parent / "beam" / BEAM_VERSION


def prepare_beam_args(
    beam_args: Sequence[str],
    settings: Settings,
    *,
    log: Log | None = None,
    mvn: str | None = None,
) -> list[str]:
    """Beam's argv, completed for the runner it names (only Flink needs anything)."""
    flags = parse_flags(beam_args)
    if not is_flink(flags.runner):
        return list(beam_args)
    log = log or _stderr
    version = flink_version(flags)
    jar: str | None = None
    java: str | None = None
    if needs_local_job_server(flags):
        if flags.job_server_java_launcher is None:
            java = str(find_job_server_java(settings).path)
        if flags.flink_job_server_jar is None:
            cache = jar_cache_dir(settings, flags)
            coords = job_server_coordinates(version)
            jar = str(ensure_job_server_jar(coords, cache, log=log, mvn=mvn))
        elif not _is_url(flags.flink_job_server_jar):
            given = Path(flags.flink_job_server_jar).expanduser()
            if not given.is_file():
                raise RunnerError(f"--flink_job_server_jar {given} is not a file")
    return [*beam_args, *flink_defaults(flags, jar=jar, java=java)]


def find_job_server_java(settings: Settings) -> Java:
    """The Java for the job server: TRAJGRAPH_JAVA_HOME, JAVA_HOME, then PATH (as for Neo4j)."""
    try:
        return find_java(
            settings.local,
            need=JOB_SERVER_JAVA,
            wanted=JOB_SERVER_JAVA_TEXT,
            what="the Beam Flink job server",
        )
    except ServerError as e:
        raise RunnerError(f"{e} (or pass --job_server_java_launcher=PATH/TO/java)") from e


# ---------------------------------------------------------------- fetching the jar


def cached_jar(coords: str, cache_dir: Path) -> Path:
    _group, artifact, version = coords.split(":")
    return cache_dir / f"{artifact}-{version}.jar"


def ensure_job_server_jar(
    coords: str, cache_dir: Path, *, log: Log | None = None, mvn: str | None = None
) -> Path:
    """The job-server jar in ``cache_dir``, fetched with ``mvn dependency:copy`` once."""
    log = log or _stderr
    target = cached_jar(coords, cache_dir)
    if _nonempty(target):
        return target
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunnerError(f"cannot create the jar cache {cache_dir}: {e}") from e
    with _locked(cache_dir / ".fetch.lock"):
        if _nonempty(target):  # another process fetched it while we waited
            return target
        exe = mvn or shutil.which("mvn")
        if exe is None:
            raise RunnerError(
                _fetch_failed(
                    coords,
                    "Maven (`mvn`) is not on PATH; install it (`apt-get install maven`)",
                    repository=None,
                )
            )
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
        try:
            out = run_mvn(cmd, cwd=cache_dir)  # no pom.xml there: Maven's stand-alone project
        except subprocess.TimeoutExpired as e:
            shutil.rmtree(partial, ignore_errors=True)
            raise RunnerError(
                _fetch_failed(coords, f"mvn did not finish within {MVN_TIMEOUT_S:.0f} s", None)
            ) from e
        except OSError as e:
            raise RunnerError(_fetch_failed(coords, f"cannot run mvn ({exe}): {e}", None)) from e
        fetched = partial / target.name
        text = out.stdout + out.stderr
        if out.returncode != 0 or not _nonempty(fetched):
            shutil.rmtree(partial, ignore_errors=True)
            raise RunnerError(
                _fetch_failed(coords, _mvn_reason(out.returncode, text), _repositories(text))
            )
        fetched.replace(target)  # atomic: an interrupted fetch never looks complete
        shutil.rmtree(partial, ignore_errors=True)
        log(f"Fetched {target.name} in {time.monotonic() - started:.1f} s")
    return target


def _fetch_failed(coords: str, reason: str, repository: str | None) -> str:
    where = repository or (
        "the repositories of your Maven settings (Maven Central unless ~/.m2/settings.xml "
        "names a mirror)"
    )
    return (
        f"cannot fetch the Flink job server {coords} (Beam {BEAM_VERSION}) with Maven from "
        f"{where}: {reason}.\n"
        "To run on Flink, do one of:\n"
        "  * pass --flink_job_server_jar=PATH (or URL) of that jar, fetched on a machine that "
        "reaches Maven Central's org.apache.beam artifacts;\n"
        "  * point Maven at a repository that serves it: a <mirror> in ~/.m2/settings.xml;\n"
        "  * pass --job_endpoint=HOST:PORT of a running Beam Flink job server.\n"
        "See docs/scale-out.md."
    )


def _repositories(mvn_output: str) -> str | None:
    """The repositories Maven names in its error lines: 'central (https://...)'."""
    found = dict.fromkeys(f"{m[1]} ({m[2]})" for m in _REPO_RE.finditer(mvn_output))
    return ", ".join(found) or None


def _mvn_reason(returncode: int, text: str) -> str:
    for line in text.splitlines():
        line = re.sub(r"\x1b\[[0-9;]*m", "", line).strip()
        if line.startswith("[ERROR]") and len(line) > len("[ERROR] "):
            reason = line[len("[ERROR] ") :]
            if len(reason) > MVN_ERROR_CHARS:
                reason = reason[:MVN_ERROR_CHARS] + "…"
            return f"mvn exit {returncode}: {reason.rstrip('.')}"
    return f"mvn exit {returncode} and no jar"


def _nonempty(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size > 0
    except OSError:
        return False


def _is_url(value: str) -> bool:
    return bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", value))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)
