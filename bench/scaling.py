"""Scaling benchmark: 10× more turns → how much more time and peak memory, per runner.

Writes synthetic episodes (trajgraph/evaluation/synthetic.py) as AMA-Bench JSONL files
(several episodes per file) for N turns and for ``factor``·N turns, and ingests each set with
the real pipeline (heuristic extractor) into a temporary tenant that is deleted afterwards, on each
runner of ``--runners``: the DirectRunner, and Beam's portable Prism runner (LOOPBACK workers,
so the SDK harness runs in the child too; skipped with a note when no Prism binary is built).
Each size runs in a fresh child process that reports its own peak RSS (``ru_maxrss``, the
high-water mark of that process alone: the DirectRunner and Prism's LOOPBACK workers run the
pipeline in-process). For Prism the child also starts the Prism job server (a Go process)
and reports that process's own peak (``VmHWM``), so the Go side is measured apart from the
Python side. The parent's RUSAGE_CHILDREN would be the maximum over all children, so it is
not used. Prints every run and the ratios side by side; the goals are time ≤ 11× and peak
RSS ≤ 1.2× for 10× the turns.

    python -m bench.scaling [--turns 2000] [--factor 10] [--episodes-per-file 10]
                            [--runners direct,prism] [Beam flags]

The larger set holds more episodes of the same size, not longer episodes: a trajectory is
extracted as a whole, so memory per trajectory grows with its length by design.
Node embeddings are off by default (``--embedder none``): the database's vector space is
fixed by its first embedder, and the local model (about 50 ms a turn on two cores) would
measure the embedder, not the pipeline.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

GOAL_TIME = 1.1  # × the turns ratio: 11× the time for 10× the turns
GOAL_RSS = 1.2
TARGET_TOKENS = 8000  # one episode: about 60 turns
CHILD_TIMEOUT_S = 900.0
TENANT_CLEANUP = (
    "MATCH (n {tenant: $tenant}) WITH n LIMIT 10000 DETACH DELETE n RETURN count(*) AS n"
)


def ama_episode(ep: dict[str, Any], episode_id: str) -> dict[str, Any]:
    """A synthetic episode in AMA-Bench's shape (docs/formats.md), QA pairs included."""
    return {
        "episode_id": episode_id,
        "task": ep["task"],
        "trajectory": [
            {"turn_idx": t["idx"], "action": t["action"], "observation": t["observation"]}
            for t in ep["turns"]
        ],
        "qa_pairs": ep.get("qa_pairs", []),
    }


def write_episodes(folder: Path, turns: int, per_file: int, seed0: int = 0) -> tuple[int, int]:
    """Episodes with seeds seed0, seed0+1, ... until ``turns`` turns, ``per_file`` episodes
    to a JSONL file; returns (episodes, turns)."""
    from trajgraph.evaluation.synthetic import generate

    folder.mkdir(parents=True, exist_ok=True)
    episodes = total = 0
    while total < turns:
        path = folder / f"episodes-{episodes // per_file:05d}.jsonl"
        with path.open("w", encoding="utf-8") as out:
            for _ in range(per_file):
                if total >= turns:
                    break
                ep = generate(seed0 + episodes, TARGET_TOKENS)
                out.write(json.dumps(ama_episode(ep, f"scale-{seed0 + episodes:06d}")) + "\n")
                episodes += 1
                total += len(ep["turns"])
    return episodes, total


def _peak_rss_mib() -> float:
    # Linux reports ru_maxrss in KiB. The child runs the pipeline in its own process; if a
    # runner option started worker processes, their high-water mark counts too.
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, kids) / 1024


def _current_rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _vm_hwm_mib(pid: int) -> float:
    """Peak resident set of a running process (``VmHWM``, Linux), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def child(argv: list[str], prism_binary: str | None = None) -> int:
    """One ingest in this (fresh) process; prints one JSON line with time and memory. With
    ``prism_binary`` the run goes to a Prism job server this process starts and measures."""
    from trajgraph.jobs import ingest  # imports first, so the baseline holds them

    with contextlib.ExitStack() as stack:
        prism_pid = None
        if prism_binary:
            from tests.integration.servers import prism_job_server

            server = stack.enter_context(prism_job_server(Path(prism_binary)))
            prism_pid = server.pid
            argv = [*argv, "--runner", "PrismRunner", "--job_endpoint", server.endpoint]
        baseline = _current_rss_mib()
        started = time.perf_counter()
        summary = ingest.run(argv)
        wall = time.perf_counter() - started
        print(
            json.dumps(
                {
                    "turns": summary.turns,
                    "records": summary.records,
                    "ingested": summary.ingested,
                    "dead_lettered": summary.dead_lettered,
                    "rows": summary.rows_written,
                    "pipeline_s": summary.seconds,
                    "run_s": wall,
                    "baseline_mib": baseline,
                    "peak_mib": _peak_rss_mib(),
                    "prism_peak_mib": _vm_hwm_mib(prism_pid) if prism_pid else None,
                }
            )
        )
    return 0


def _run_child(
    folder: Path, tenant: str, dl: Path, extra: list[str], prism_binary: str | None = None
) -> dict[str, Any]:
    argv = [
        str(folder),
        "--tenant",
        tenant,
        "--progress",
        "off",
        "--dead-letter",
        str(dl),
        "--extractor",
        "heuristic",
        *extra,
    ]
    prism = ["--prism", prism_binary] if prism_binary else []
    cmd = [sys.executable, "-m", "bench.scaling", "--child", *prism, "--", *argv]
    repo = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        cmd,
        cwd=repo,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"ingest child failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _cleanup(tenant: str) -> None:
    from trajgraph.core import settings as settings_mod
    from trajgraph.graph.connection import open_driver

    settings = settings_mod.load()
    driver = open_driver(settings.neo4j)
    try:
        while driver.execute_query(
            TENANT_CLEANUP, tenant=tenant, database_=settings.neo4j.database
        ).records[0]["n"]:
            pass
    finally:
        driver.close()


def _prism_binary() -> tuple[str | None, str]:
    """The binary `trajgraph ingest --runner PrismRunner` would use, or why there is none."""
    from trajgraph.core import settings as settings_mod
    from trajgraph.core.errors import RunnerError
    from trajgraph.pipelines import prism

    try:
        return str(prism.find(settings_mod.load())), ""
    except RunnerError as e:
        return None, " ".join(str(e).split())


def _prism_ratio(s: dict[str, Any], lg: dict[str, Any]) -> float | None:
    if not (s.get("prism_peak_mib") and lg.get("prism_peak_mib")):
        return None
    return float(lg["prism_peak_mib"] / s["prism_peak_mib"])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        rest, prism_binary = argv[1:], None
        if rest[:1] == ["--prism"]:
            prism_binary, rest = rest[1], rest[2:]
        return child(rest[1:] if rest[:1] == ["--"] else rest, prism_binary)
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--turns", type=int, default=2000, help="turns of the small run")
    p.add_argument("--factor", type=int, default=10, help="the large run has factor× turns")
    p.add_argument("--episodes-per-file", type=int, default=10)
    p.add_argument(
        "--embedder", default="none", choices=("none", "static", "hash", "local", "openai")
    )
    p.add_argument(
        "--runners",
        default="direct,prism",
        help="comma-separated: direct, prism (default both; prism is skipped without a binary)",
    )
    args, beam_args = p.parse_known_args(argv)
    wanted = [r.strip() for r in args.runners.split(",") if r.strip()]
    if not set(wanted) <= {"direct", "prism"}:
        p.error(f"--runners: unknown runner in {args.runners!r} (direct, prism)")
    binaries: dict[str, str | None] = {"direct": None}
    if "prism" in wanted:
        binary, why = _prism_binary()
        if binary is None:
            print(f"prism: skipped: {why}", file=sys.stderr)
            wanted.remove("prism")
        binaries["prism"] = binary

    tenant = f"bench-scale-{uuid.uuid4().hex[:8]}"
    extra = ["--embedder", args.embedder, *beam_args]
    results: dict[str, dict[str, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="trajgraph-scale-") as tmp:
        root = Path(tmp)
        sizes = {}
        for name, turns, seed0 in (
            ("small", args.turns, 0),
            ("large", args.turns * args.factor, 1_000_000),
        ):
            started = time.perf_counter()
            episodes, total = write_episodes(root / name, turns, args.episodes_per_file, seed0)
            sizes[name] = episodes
            print(
                f"generated {name}: {total} turns in {episodes} episodes "
                f"({time.perf_counter() - started:.1f}s)",
                file=sys.stderr,
            )
        tenants = [f"{tenant}-{runner}-{name}" for runner in wanted for name in sizes]
        try:
            for runner in wanted:
                results[runner] = {}
                for name in ("small", "large"):
                    # One tenant per run: every run writes everything, skips nothing.
                    r = _run_child(
                        root / name,
                        f"{tenant}-{runner}-{name}",
                        root / f"dl-{runner}-{name}",
                        extra,
                        binaries[runner],
                    )
                    if r["dead_lettered"] or r["ingested"] != sizes[name]:
                        raise SystemExit(
                            f"{runner} {name}: {r['ingested']} of {sizes[name]} episodes "
                            f"ingested, {r['dead_lettered']} dead-lettered: the numbers would "
                            "not compare"
                        )
                    results[runner][name] = r
                    print(f"{runner} {name}: done", file=sys.stderr)
        finally:
            for t in tenants:
                _cleanup(t)

    for runner, runs in results.items():
        for name, r in runs.items():
            prism = (
                f", Prism process {r['prism_peak_mib']:4.0f} MiB" if r.get("prism_peak_mib") else ""
            )
            print(
                f"{runner:6} {name:5}  {r['turns']:6} turns  {r['ingested']:4} trajectories  "
                f"{r['rows']:7} rows  pipeline {r['pipeline_s']:6.1f}s  "
                f"({r['turns'] / r['pipeline_s']:6.0f} turns/s)  "
                f"peak RSS {r['peak_mib']:6.0f} MiB (after imports {r['baseline_mib']:4.0f} MiB, "
                f"+{r['peak_mib'] - r['baseline_mib']:.0f} MiB){prism}"
            )
    for runner, runs in results.items():
        s, lg = runs["small"], runs["large"]
        turn_r = lg["turns"] / s["turns"]
        time_r = lg["pipeline_s"] / s["pipeline_s"]
        rss_r = lg["peak_mib"] / s["peak_mib"]
        prism_r = _prism_ratio(s, lg)
        time_goal = GOAL_TIME * turn_r
        print(f"{runner}: turns ratio     {turn_r:5.2f}×")
        print(
            f"{runner}: time ratio      {time_r:5.2f}×  (goal ≤ {time_goal:.2f}×)  "
            f"{'met' if time_r <= time_goal else 'NOT met'}"
        )
        print(
            f"{runner}: peak RSS ratio  {rss_r:5.2f}×  (goal ≤ {GOAL_RSS:.2f}×)  "
            f"{'met' if rss_r <= GOAL_RSS else 'NOT met'}"
            + ("  (the Python process: launcher and LOOPBACK workers)" if prism_r else "")
        )
        if prism_r is not None:
            both_s = s["peak_mib"] + s["prism_peak_mib"]
            both_lg = lg["peak_mib"] + lg["prism_peak_mib"]
            print(
                f"{runner}: Prism process peak RSS ratio {prism_r:5.2f}×  "
                f"({s['prism_peak_mib']:.0f} → {lg['prism_peak_mib']:.0f} MiB); both processes "
                f"{both_s:.0f} → {both_lg:.0f} MiB = {both_lg / both_s:.2f}×"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
