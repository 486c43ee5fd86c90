"""Scale-out benchmark: one corpus on the DirectRunner, Prism, local Flink clusters of 1 and 2
TaskManagers and a local Spark cluster of 2 Workers, in one run.

Every ingest is the cluster venv's ``trajgraph ingest`` (apache-beam 2.62.0, the job
servers' version: docs/scale-out.md) as a child process, into a fresh tenant deleted
afterwards. For each runner: wall time of the whole ingest, rows written per second of it,
and CPU-seconds of every process involved: the launcher and whatever it starts and reaps
(Prism's Go process, LOOPBACK workers) from ``RUSAGE_CHILDREN``, plus, on a cluster, every
member JVM and its descendants (the SDK workers the TaskManagers and executors start and
reap, through the children's times in ``/proc/<pid>/stat``), before and after the ingest.
The clusters are started (not timed) by trajgraph.pipelines.engines under their own run dirs
and ports, one at a time, and stopped. The digests of all runs must agree; the table gives
each runner's ratios to the DirectRunner's.

    python -m bench.scale_out [PATHS...] [--runners direct,prism,flink1,flink2,spark]

PATHS default to ../shared/trajectories. Prism needs its binary for Beam 2.62.0 in the
cache (``GOFLAGS=-mod=mod GOBIN=~/.cache/trajgraph/prism/2.62.0 go install
github.com/apache/beam/sdks/v2/go/cmd/prism@v2.62.0``); without it that row is skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import neo4j

from trajgraph.core import settings as settings_mod
from trajgraph.graph import governance
from trajgraph.pipelines.engines import control
from trajgraph.pipelines.engines.cluster import ClusterState, stop
from trajgraph.pipelines.engines.flags import ingest_flags
from trajgraph.pipelines.engines.layout import cache_root, paths
from trajgraph.pipelines.engines.versions import BEAM

REPO = Path(__file__).resolve().parent.parent
CLUSTER_BIN = REPO / ".venv-cluster" / "bin"
RUNNERS = ("direct", "prism", "flink1", "flink2", "spark")
TICK = os.sysconf("SC_CLK_TCK")


def _proc_cpu(pid: int) -> float:
    """CPU-seconds of a process and its reaped children (utime+stime+cutime+cstime)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / TICK


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        found.extend(int(k) for k in kids)
        todo.extend(int(k) for k in kids)
    return found


def _cluster_cpu(state: ClusterState | None) -> dict[int, float]:
    """CPU-seconds per pid of every member and live descendant (a reaped one is in its
    parent's children's times)."""
    if state is None:
        return {}
    pids = [p.pid for p in state.processes if p.pid is not None]
    return {pid: _proc_cpu(pid) for root in pids for pid in (root, *_descendants(root))}


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _run(
    inputs: list[str], tenant: str, beam: list[str], state: ClusterState | None
) -> dict[str, Any]:
    before, cpu0, t0 = _cluster_cpu(state), _children_cpu(), time.perf_counter()
    out = subprocess.run(
        [str(CLUSTER_BIN / "trajgraph"), "ingest", *inputs, "--tenant", tenant, "--json", *beam],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - t0
    after = _cluster_cpu(state)
    cluster = sum(after.values()) - sum(before.get(pid, 0.0) for pid in after)
    if out.returncode not in (0, 3):
        raise SystemExit(f"ingest failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    summary = json.loads(out.stdout)
    digest = subprocess.run(
        [str(CLUSTER_BIN / "trajgraph"), "digest", "--tenant", tenant],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    return {
        "wall_s": wall,
        "rows": summary["rows_written"],
        "rows_per_s": summary["rows_written"] / wall,
        "cpu_s": _children_cpu() - cpu0 + cluster,
        "digest": digest,
    }


def _cluster(settings: settings_mod.Settings, runner: str) -> ClusterState | None:
    if runner == "direct" or runner == "prism":
        return None
    engine, members = ("spark", 2) if runner == "spark" else ("flink", int(runner[-1]))
    spec = control.spec(
        settings, engine, members=members, base_port=19100 if engine == "flink" else 19300,
        python_bin=CLUSTER_BIN, base_path=os.environ.get("PATH", ""), instance=f"{engine}-bench",
    )  # fmt: skip
    return control.start(spec, log=lambda m: print(m, file=sys.stderr))


def _beam_flags(runner: str, state: ClusterState | None, prism: Path) -> list[str]:
    if runner == "prism":
        return ["--runner=PrismRunner", f"--prism_location={prism}"]
    if state is not None:
        return ["--runner=PortableRunner", *ingest_flags(state)]
    return []


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("paths", nargs="*", default=[str(REPO.parent / "shared" / "trajectories")])
    p.add_argument("--runners", default=",".join(RUNNERS))
    args = p.parse_args(argv)
    wanted = [r for r in args.runners.split(",") if r]
    settings = settings_mod.load()
    prism = cache_root(settings) / "prism" / BEAM / "prism"
    if "prism" in wanted and not prism.is_file():
        print(f"prism: skipped: no Prism binary for Beam {BEAM} at {prism}", file=sys.stderr)
        wanted.remove("prism")
    inputs = [str(Path(x).resolve()) for x in args.paths]
    results: dict[str, dict[str, Any]] = {}
    driver = neo4j.GraphDatabase.driver(
        settings.neo4j.uri, auth=(settings.neo4j.user, settings.neo4j.password)
    )
    try:
        for runner in wanted:
            state = _cluster(settings, runner)
            tenant = f"bench-scale-out-{runner}-{uuid.uuid4().hex[:8]}"
            try:
                results[runner] = _run(inputs, tenant, _beam_flags(runner, state, prism), state)
                print(f"{runner}: {results[runner]}", file=sys.stderr)
            finally:
                governance.delete_tenant(driver, settings.neo4j.database, tenant)
                if state is not None:
                    stop(paths(settings, state.engine, f"{state.engine}-bench"), state.engine)
    finally:
        driver.close()
    _report(results)
    return 0 if len({r["digest"] for r in results.values()}) == 1 else 1


def _report(results: dict[str, dict[str, Any]]) -> None:
    base = results.get("direct")
    print("| runner | wall | rows/s | CPU-s | wall ÷ Direct | CPU ÷ Direct | digest |")
    print("|---|---|---|---|---|---|---|")
    for runner, r in results.items():
        wall = f"{r['wall_s'] / base['wall_s']:.1f}×" if base else ""
        cpu = f"{r['cpu_s'] / base['cpu_s']:.1f}×" if base else ""
        print(
            f"| {runner} | {r['wall_s']:.1f} s | {r['rows_per_s']:.1f} | {r['cpu_s']:.1f} | "
            f"{wall} | {cpu} | `{r['digest'][:12]}` |"
        )


if __name__ == "__main__":
    raise SystemExit(main())
