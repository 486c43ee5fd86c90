"""The Beam flags that send a job to a local cluster, and when ``--runner FlinkRunner`` or
``SparkRunner`` goes there without them.

A job reaches a running cluster through its job server (``--job_endpoint``), and its
Python DoFns run in SDK workers that the TaskManagers or executors start as processes of
their own with Beam's boot program (``--environment_type=PROCESS``). Flink and Spark start
one environment per task and stop it when the task ends; ``--environment_cache_millis``
keeps it for the job's next tasks instead of paying a Python start-up for each.

``prepare`` is what pipelines/runners.py asks: with ``--runner FlinkRunner`` (or
``SparkRunner``) and none of the flags that choose another place to run (a job endpoint, a
Flink master, a job-server jar), a running local cluster of that engine takes the job.
Its Beam version must be the launcher's: a job server only runs its own version's jobs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from trajgraph.core.errors import RunnerError
from trajgraph.core.jvm import Log
from trajgraph.pipelines.engines.cluster import ClusterState, status
from trajgraph.pipelines.engines.layout import ClusterPaths

ENVIRONMENT_CACHE_MS = 600_000  # a batch job's environments live through its stages
# Flags by which the user picked where the job runs; any of them leaves the flags alone.
PLACEMENT_FLAGS = (
    "job_endpoint",
    "flink_master",
    "flink_job_server_jar",
    "spark_job_server_jar",
    "spark_master_url",
    "environment_type",
)


def environment_config(boot: str) -> str:
    return json.dumps({"command": boot})


def ingest_flags(state: ClusterState, *, portable: bool = False) -> list[str]:
    """The Beam flags for a job on this cluster (``portable``: with --runner PortableRunner,
    what a user with their own cluster writes; else only what the runner flag lacks)."""
    flags = [
        f"--job_endpoint={state.job_endpoint}",
        "--environment_type=PROCESS",
        f"--environment_config={environment_config(state.boot)}",
        f"--environment_cache_millis={ENVIRONMENT_CACHE_MS}",
    ]
    return ["--runner=PortableRunner", *flags] if portable else flags


def shell_flags(state: ClusterState) -> str:
    """``ingest_flags`` for a shell: the JSON quoted."""
    return " ".join(f"'{f}'" if "{" in f else f for f in ingest_flags(state, portable=True))


def placement_given(given: Sequence[str]) -> bool:
    """Did the user name where the job runs? ``given`` holds the flag names they passed."""
    return any(name in given for name in PLACEMENT_FLAGS)


def running_cluster(paths: ClusterPaths, engine: str) -> ClusterState | None:
    state = status(paths, engine)
    return state if state is not None and state.running else None


def prepare(
    engine: str,
    paths: ClusterPaths,
    given: Sequence[str],
    *,
    beam_version: str,
    log: Log | None = None,
) -> list[str] | None:
    """The flags that send a ``--runner FlinkRunner``/``SparkRunner`` job to the running
    local cluster of ``engine``; None when the user chose a place, or none runs."""
    if placement_given(given):
        return None
    state = running_cluster(paths, engine)
    if state is None:
        return None
    if beam_version != state.beam_version:
        raise RunnerError(
            f"the local {engine} cluster runs Beam {state.beam_version}'s job server, but "
            f"this Python has apache-beam {beam_version}: a job server only runs jobs of its "
            f"own version. Run the cluster venv's trajgraph (.venv-cluster/bin/trajgraph, made "
            f"by `bash deploy/dev.sh clusters`), or pass --job_endpoint or --flink_master to "
            "run elsewhere (docs/scale-out.md)"
        )
    if log is not None:
        log(f"running on the local {engine} cluster (job server {state.job_endpoint})")
    return ingest_flags(state)
