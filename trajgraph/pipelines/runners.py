"""Runner set-up that Beam's own flags leave to us: Prism's binary, the Flink job server, and
whether a run's workers live in this process.

``--runner PrismRunner`` is Beam's portable runner in Go (pipelines/prism.py): Beam would
download its binary from GitHub, so :func:`prepare_beam_args` always passes one
(``--prism_location``: TRAJGRAPH_PRISM_LOCATION or the build cache), unless the user gave one
or a running job server (``--job_endpoint``); without a binary the run stops before it reads
anything, naming the build command.

``--runner FlinkRunner`` is Beam's portable Flink runner: the pipeline is sent over the Fn API
to a Java *job server* (``org.apache.beam:beam-runners-flink-<flink>-job-server`` at exactly
the installed Beam version), which runs it on Flink; with ``--flink_master=[local]`` that is
an embedded Flink mini-cluster, and ``--environment_type=LOOPBACK`` runs the Python DoFns in
this process. Left to itself, Beam downloads the jar from Maven Central with urllib into
``~/.apache_beam``; :func:`prepare_beam_args` fetches it with ``mvn`` instead, like the Neo4j
jars (both through trajgraph.core.jvm), so Maven's mirrors, proxies and local repository apply,
into ``<cache>/beam/<beam version>/``, checks the Java that will run it, and adds those flags
unless the user gave them.

``--runner FlinkRunner`` or ``SparkRunner`` with nothing that says where to run
(``--job_endpoint``, ``--flink_master``, a job-server jar, ``--environment_type``) while
``trajgraph flink start`` (or ``spark start``) has a local cluster running goes to that
cluster instead (pipelines/engines/flags.py). Any other runner's flags pass through
untouched.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from apache_beam.options.pipeline_options import FlinkRunnerOptions
from apache_beam.version import __version__ as BEAM_VERSION

from trajgraph.core.errors import ConfigError, RunnerError, ServerError
from trajgraph.core.jvm import Java, Log, MavenFailure, fetch_jar, find_java
from trajgraph.core.settings import Settings
from trajgraph.pipelines import prism
from trajgraph.pipelines.engines import flags as cluster_flags
from trajgraph.pipelines.engines.layout import paths as cluster_paths

BEAM_GROUP = "org.apache.beam"
FLINK_RUNNER_NAMES = frozenset({"flink", "flinkrunner"})
SPARK_RUNNER_NAMES = frozenset({"spark", "sparkrunner"})
PRISM_RUNNER_NAMES = frozenset({"prism", "prismrunner"})
# Runners whose DoFns run in the launching process (unless --direct_running_mode says
# multi_processing): the DirectRunner's names.
DIRECT_RUNNER_NAMES = frozenset(
    {"direct", "directrunner", "switchingdirectrunner", "bundlebaseddirectrunner"}
)
# Prism logs every job's progress at "info"; a nightly job's log wants its warnings only.
PRISM_LOG_LEVEL = "warn"
# Prism (2.77) splits a slow bundle and runs the rest as a new bundle at the same time, also
# in stages with state: then two bundles hold one key, each with its own state, and a
# stateful DoFn (the stream's assembly, its newest-version write) sees half of a key's
# elements. This experiment turns Prism's dynamic splitting off
# (tests/integration/pipelines/test_prism.py).
PRISM_NO_SPLIT = "prism_disable_sdf_split"
# Beam's own list of the Flink versions it publishes job servers for; the newest is its default.
FLINK_VERSIONS: tuple[str, ...] = tuple(FlinkRunnerOptions.PUBLISHED_FLINK_VERSIONS)
DEFAULT_FLINK_VERSION = FLINK_VERSIONS[-1]
LOCAL_MASTERS = ("[local]", "[auto]")  # Beam's "magic" masters: an embedded mini-cluster
# Beam's Java job servers need Java 11 or later; 21 is the newest Java Flink documents and 17
# is its recommendation.
JOB_SERVER_JAVA = (11, 21)
JOB_SERVER_JAVA_TEXT = "Java 11 to 21 (17 recommended)"


@dataclass(frozen=True)
class RunnerFlags:
    """The Beam flags that decide what a Prism or Flink run needs; None = not given."""

    runner: str | None = None
    flink_master: str | None = None
    flink_version: str | None = None
    flink_job_server_jar: str | None = None
    flink_submit_uber_jar: bool = False
    environment_type: str | None = None
    job_endpoint: str | None = None
    jar_cache_dir: str | None = None
    job_server_java_launcher: str | None = None
    prism_location: str | None = None
    prism_log_level: str | None = None
    direct_running_mode: str | None = None


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


def _runner_name(runner: str | None) -> str:
    return runner.rsplit(".", 1)[-1].lower() if runner else ""


def is_flink(runner: str | None) -> bool:
    """True for the names Beam resolves to its FlinkRunner (any case, short or dotted)."""
    return _runner_name(runner) in FLINK_RUNNER_NAMES


def is_spark(runner: str | None) -> bool:
    """True for the names Beam resolves to its SparkRunner (any case, short or dotted)."""
    return _runner_name(runner) in SPARK_RUNNER_NAMES


def is_prism(runner: str | None) -> bool:
    """True for the names Beam resolves to its PrismRunner (any case, short or dotted)."""
    return _runner_name(runner) in PRISM_RUNNER_NAMES


def workers_in_this_process(beam_args: Sequence[str]) -> bool:
    """True when the pipeline's DoFns run in this process, so that counters it keeps (the
    progress bar's) move: the DirectRunner (but not its multi_processing mode), and portable
    runners with LOOPBACK workers (Prism's default). Call it on :func:`prepare_beam_args`'s
    result, which adds LOOPBACK to a local Flink."""
    flags = parse_flags(beam_args)
    name = _runner_name(flags.runner) or "directrunner"
    if name in DIRECT_RUNNER_NAMES:
        return (flags.direct_running_mode or "in_memory") != "multi_processing"
    environment = flags.environment_type
    if environment is None and name in PRISM_RUNNER_NAMES:
        environment = "LOOPBACK"
    return (environment or "").upper() == "LOOPBACK"


def prism_defaults(
    flags: RunnerFlags, settings: Settings, beam_args: Sequence[str] = ()
) -> list[str]:
    """The flags to append to a Prism run: our binary (Beam would download one from
    GitHub) unless the user named one or a running job server, quieter logs, and no dynamic
    splitting (PRISM_NO_SPLIT)."""
    extra: list[str] = []
    if flags.prism_location is not None:
        if not _is_url(flags.prism_location) and not Path(flags.prism_location).is_file():
            raise RunnerError(f"--prism_location {flags.prism_location} is not a file")
    elif flags.job_endpoint is None:
        extra.append(f"--prism_location={prism.find(settings)}")
    if flags.prism_log_level is None:
        extra.append(f"--prism_log_level={PRISM_LOG_LEVEL}")
    if PRISM_NO_SPLIT not in _experiments(beam_args):
        extra.append(f"--experiments={PRISM_NO_SPLIT}")
    return extra


def given_flag_names(beam_args: Sequence[str]) -> list[str]:
    """The names of the ``--flags`` in Beam's argv (``--a=1`` and ``--a 1`` alike)."""
    return [a[2:].split("=", 1)[0] for a in beam_args if a.startswith("--") and len(a) > 2]


def _experiments(beam_args: Sequence[str]) -> set[str]:
    """Beam's ``--experiments`` (repeatable, each maybe comma-separated)."""
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    p.add_argument("--experiments", "--experiment", action="append", default=[])
    known, _ = p.parse_known_args(list(beam_args))
    return {e.strip() for value in known.experiments for e in value.split(",") if e.strip()}


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
    if master is None and flags.job_endpoint is None:
        # With a job endpoint the job server's own master applies: Beam sends "[auto]",
        # which it replaces, where "[local]" would run the job in an embedded mini-cluster.
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
    """Beam's argv, completed for the runner it names (Prism and Flink need something)."""
    flags = parse_flags(beam_args)
    if is_prism(flags.runner):
        return [*beam_args, *prism_defaults(flags, settings, beam_args)]
    log = log or _stderr
    if is_flink(flags.runner) or is_spark(flags.runner):
        engine = "flink" if is_flink(flags.runner) else "spark"
        local = cluster_flags.prepare(
            engine,
            cluster_paths(settings, engine),
            given_flag_names(beam_args),
            beam_version=BEAM_VERSION,
            log=log,
        )
        if local is not None:
            return [*beam_args, *local]
    if not is_flink(flags.runner):
        return list(beam_args)
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
            need=JOB_SERVER_JAVA,
            wanted=JOB_SERVER_JAVA_TEXT,
            what="the Beam Flink job server",
            java_home=settings.local.java_home,
            system_java_home=settings.local.system_java_home,
        )
    except ServerError as e:
        raise RunnerError(f"{e} (or pass --job_server_java_launcher=PATH/TO/java)") from e


def ensure_job_server_jar(
    coords: str, cache_dir: Path, *, log: Log | None = None, mvn: str | None = None
) -> Path:
    """The job-server jar in ``cache_dir``, fetched with ``mvn dependency:copy`` once."""
    return fetch_jar(coords, cache_dir, fail=_fetch_error, log=log or _stderr, mvn=mvn)


def _fetch_error(f: MavenFailure) -> RunnerError:
    where = f.repositories or (
        "the repositories of your Maven settings (Maven Central unless ~/.m2/settings.xml "
        "names a mirror)"
    )
    return RunnerError(
        f"cannot fetch the Flink job server {f.coords} (Beam {BEAM_VERSION}) with Maven from "
        f"{where}: {f.reason}.\n"
        "To run on Flink, do one of:\n"
        "  * pass --flink_job_server_jar=PATH (or URL) of that jar, fetched on a machine that "
        "reaches Maven Central's org.apache.beam artifacts;\n"
        "  * point Maven at a repository that serves it: a <mirror> in ~/.m2/settings.xml;\n"
        "  * pass --job_endpoint=HOST:PORT of a running Beam Flink job server.\n"
        "See docs/scale-out.md."
    )


def _is_url(value: str) -> bool:
    return bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", value))


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)
