"""Scaling benchmark: 10× more turns → how much more time and peak memory.

Writes synthetic episodes (bench/synthetic.py) as AMA-Bench JSONL files (several episodes
per file) for N turns and for ``factor``·N turns, and ingests each set with the real
pipeline (DirectRunner, heuristic extractor) into a temporary tenant that is deleted
afterwards. Each size runs in a fresh child process that reports its own peak RSS
(``ru_maxrss``, the high-water mark of that process alone: Beam's DirectRunner runs the
pipeline in-process). The parent's RUSAGE_CHILDREN would be the maximum over both children,
so it is not used. Prints both runs and the
ratios; the goals are time ≤ 11× and peak RSS ≤ 1.2× for 10× the turns.

    python -m bench.scaling [--turns 2000] [--factor 10] [--episodes-per-file 10] [Beam flags]

The larger set holds more episodes of the same size, not longer episodes: a trajectory is
extracted as a whole, so memory per trajectory grows with its length by design.
Node embeddings are off by default (``--embedder none``): the database's vector space is
fixed by its first embedder, and the local model (about 50 ms a turn on two cores) would
measure the embedder, not the pipeline.
"""

from __future__ import annotations

import argparse
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


def child(argv: list[str]) -> int:
    """One ingest in this (fresh) process; prints one JSON line with time and memory."""
    from trajgraph.pipelines import ingest  # imports first, so the baseline holds them

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
            }
        )
    )
    return 0


def _run_child(folder: Path, tenant: str, dl: Path, extra: list[str]) -> dict[str, Any]:
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
    cmd = [sys.executable, "-m", "bench.scaling", "--child", "--", *argv]
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
    from trajgraph import settings as settings_mod
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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        return child(argv[2:] if argv[1:2] == ["--"] else argv[1:])
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--turns", type=int, default=2000, help="turns of the small run")
    p.add_argument("--factor", type=int, default=10, help="the large run has factor× turns")
    p.add_argument("--episodes-per-file", type=int, default=10)
    p.add_argument(
        "--embedder", default="none", choices=("none", "static", "hash", "local", "openai")
    )
    args, beam_args = p.parse_known_args(argv)

    tenant = f"bench-scale-{uuid.uuid4().hex[:8]}"
    extra = ["--embedder", args.embedder, *beam_args]
    results: dict[str, dict[str, Any]] = {}
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
        try:
            for name in ("small", "large"):
                # One tenant per size: the large run writes everything, skips nothing.
                r = _run_child(root / name, f"{tenant}-{name}", root / f"dl-{name}", extra)
                if r["dead_lettered"] or r["ingested"] != sizes[name]:
                    raise SystemExit(
                        f"{name}: {r['ingested']} of {sizes[name]} episodes ingested, "
                        f"{r['dead_lettered']} dead-lettered: the numbers would not compare"
                    )
                results[name] = r
        finally:
            for name in ("small", "large"):
                _cleanup(f"{tenant}-{name}")

    s, lg = results["small"], results["large"]
    for name, r in results.items():
        print(
            f"{name:5}  {r['turns']:6} turns  {r['ingested']:4} trajectories  "
            f"{r['rows']:7} rows  pipeline {r['pipeline_s']:6.1f}s  "
            f"({r['turns'] / r['pipeline_s']:6.0f} turns/s)  "
            f"peak RSS {r['peak_mib']:6.0f} MiB (after imports {r['baseline_mib']:4.0f} MiB, "
            f"+{r['peak_mib'] - r['baseline_mib']:.0f} MiB)"
        )
    turn_ratio = lg["turns"] / s["turns"]
    time_ratio = lg["pipeline_s"] / s["pipeline_s"]
    rss_ratio = lg["peak_mib"] / s["peak_mib"]
    time_goal = GOAL_TIME * turn_ratio
    print(f"turns ratio     {turn_ratio:5.2f}×")
    print(
        f"time ratio      {time_ratio:5.2f}×  (goal ≤ {time_goal:.2f}×)  "
        f"{'met' if time_ratio <= time_goal else 'NOT met'}"
    )
    print(
        f"peak RSS ratio  {rss_ratio:5.2f}×  (goal ≤ {GOAL_RSS:.2f}×)  "
        f"{'met' if rss_ratio <= GOAL_RSS else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
