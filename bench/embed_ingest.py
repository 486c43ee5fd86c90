"""Embedders side by side: ingest speed, peak memory and retrieval quality on real episodes.

Ingests the AMA-Bench episodes of ``--data`` (default ``../shared/ama-dev``) once per embedder,
each in a fresh child process (so ``ru_maxrss`` is that embedder's own peak), into a private
Neo4j this benchmark starts (its own data folder and port: each embedder needs an empty
embedding space). Prints turns/s, texts/s (State and Turn nodes embedded per second of the
ingest's wall time), distinct texts the model actually ran on, peak RSS, and answer-term
coverage overall and per capability from the real-data evaluation
(``trajgraph.evaluation.harness.evaluate`` over the same episodes, methods
``trajgraph_auto`` and ``trajgraph_embedding``, at ``--budget`` tokens).

Embedders (``--embedders``, in the order run):

* ``local-uncached``: MiniLM with ``TRAJGRAPH_EMBED_CACHE=off`` and ``TRAJGRAPH_EMBED_BATCH=1``
  (one text per model call): the default before issue 20 (speed only: its vectors, and so
  its quality, are ``local``'s);
* ``local``: MiniLM through the embedding cache (a fresh, empty cache file: a cold run);
* ``static``: the static table distilled from MiniLM (derived before the runs if missing;
  the derivation time is printed separately);
* ``hash``: lexical feature hashing.

The extractor is the offline heuristic one in every run. The quality pass reuses the timed
run's cache file, so its own ingest does not embed again what the timed run embedded.

    python -m bench.embed_ingest [--data ../shared/ama-dev] [--embedders local-uncached static]
        [--budget 2000] [--no-quality] [--port 7698]

Quality: the episodes are read as `trajgraph eval` reads them (AMA-Bench files as they are,
trajgraph.evaluation.episodes) and scored by the harness's answer-term coverage.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "ama-dev"
EMBEDDERS: dict[str, dict[str, str]] = {
    # Speed only: its vectors are local's (the cache stores the model's float32 output), and
    # a quality pass without the cache would embed everything a second time.
    # One text per model call and no cache: exactly the work of the default before issue 20.
    "local-uncached": {
        "TRAJGRAPH_EMBEDDER": "local",
        "TRAJGRAPH_EMBED_CACHE": "off",
        "TRAJGRAPH_EMBED_BATCH": "1",
    },
    "local": {"TRAJGRAPH_EMBEDDER": "local"},
    "static": {"TRAJGRAPH_EMBEDDER": "static"},
    "hash": {"TRAJGRAPH_EMBEDDER": "hash"},
}
METHODS = ("trajgraph_auto", "trajgraph_embedding")
CHILD_TIMEOUT_S = 3600.0
RESET = "MATCH (n) WITH n LIMIT 20000 DETACH DELETE n RETURN count(*) AS n"
DROP_VECTOR_INDEX = {
    "state_embedding": "DROP INDEX state_embedding IF EXISTS",
    "turn_embedding": "DROP INDEX turn_embedding IF EXISTS",
}


def episode_files(data: Path) -> list[Path]:
    return sorted(p for p in data.glob("*.json") if p.is_file())


def load_episodes(files: list[Path]) -> list[dict[str, Any]]:
    """The episodes as the evaluation reads them (AMA-Bench files as they are)."""
    from trajgraph.evaluation.episodes import load_episodes as load

    return load([str(f) for f in files])


def coverage_table(
    rows: list[dict[str, Any]], metric: str = "coverage"
) -> dict[str, dict[str, float]]:
    """{method: {capability or "overall": mean ``metric``}}, every question counted once; a
    question without a value (no key term, no step in its answer) is left out."""
    acc: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows:
        if r.get(metric) is None:
            continue
        for cap in (str(r.get("type") or "other"), "overall"):
            acc[(r["method"], cap)].append(float(r[metric]))
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for (method, cap), values in sorted(acc.items()):
        out[method][cap] = statistics.mean(values)
    return dict(out)


ROW_KEYS = ("episode", "question", "method", "type", "domain", "coverage", "answer_turn_recall")
GOAL = 0.01  # the tolerance against MiniLM


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def child(data: Path, budget: int, quality: bool, methods: list[str]) -> int:
    """One embedder (from the environment) in this fresh process: a timed ingest, its peak
    RSS, then the quality pass. Prints one JSON line."""
    import logging

    from trajgraph.core import settings as settings_mod
    from trajgraph.evaluation import harness
    from trajgraph.jobs import ingest

    logging.getLogger("neo4j.notifications").setLevel(logging.ERROR)
    settings = settings_mod.load()
    with tempfile.TemporaryDirectory(prefix="trajgraph-embed-bench-") as tmp:
        started = time.perf_counter()
        summary = ingest.run(
            [
                str(data),
                "--tenant",
                f"bench-{uuid.uuid4().hex[:8]}",
                "--extractor",
                "heuristic",
                "--progress",
                "off",
                "--dead-letter",
                str(Path(tmp) / "dl"),
            ],
            settings=settings,
        )
        wall = time.perf_counter() - started
    peak = _peak_rss_mib()
    out: dict[str, Any] = {
        "embedder_name": _embedder_name(settings),
        "turns": summary.turns,
        "ingested": summary.ingested,
        "dead_lettered": summary.dead_lettered,
        "embedded": summary.counters.get("embedded", 0),
        "model_texts": summary.counters.get("embedded_texts"),
        "cache_hits_memory": summary.counters.get("embed_cache_hits_memory", 0),
        "cache_hits_disk": summary.counters.get("embed_cache_hits_disk", 0),
        "pipeline_s": summary.seconds,
        "wall_s": wall,
        "peak_mib": peak,
    }
    if quality:
        episodes = load_episodes(episode_files(data))
        t0 = time.perf_counter()
        rows = harness.evaluate(episodes, settings, budget, methods=methods)
        out["quality_s"] = time.perf_counter() - t0
        out["questions"] = sum(1 for r in rows if r["method"] == methods[0])
        out["coverage"] = coverage_table(rows)
        out["answer_turn_recall"] = coverage_table(rows, "answer_turn_recall")
        # Per question, for the paired intervals (trajgraph/evaluation/compare.py).
        out["rows"] = [{k: r.get(k) for k in ROW_KEYS} for r in rows]
    print(json.dumps(out))
    return 0


def _embedder_name(settings: Any) -> str:
    from trajgraph.graph.embedders import embedder_name

    return embedder_name(settings.embedder)


def _reset(neo: Any) -> None:
    """Empty the private database and its vector indexes: the next embedder claims it anew."""
    from trajgraph.graph.connection import open_driver

    driver = open_driver(neo)
    try:
        while driver.execute_query(RESET, database_=neo.database).records[0]["n"]:
            pass
        for statement in DROP_VECTOR_INDEX.values():
            driver.execute_query(statement, database_=neo.database)
    finally:
        driver.close()


def _run_child(
    name: str, env: dict[str, str], args: argparse.Namespace, cache: Path
) -> dict[str, Any]:
    child_env = {
        **env,
        **EMBEDDERS[name],
        "TRAJGRAPH_LLM_MODEL": "",  # offline: the heuristic extractor and no LLM router
    }
    if child_env.get("TRAJGRAPH_EMBED_CACHE") != "off":
        child_env["TRAJGRAPH_EMBED_CACHE"] = str(cache)  # new and empty: a cold run
    cmd = [sys.executable, "-m", "bench.embed_ingest", "--child", "--data", str(args.data)]
    cmd += ["--budget", str(args.budget), "--methods", *args.methods]
    if args.no_quality or name == "local-uncached":
        cmd.append("--no-quality")
    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        cmd,
        cwd=repo,
        env=child_env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{name}: child failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _ensure_static_table(env: dict[str, str]) -> str:
    """Derive the static table before the timed runs (a one-time cost, reported apart)."""
    from trajgraph.core import settings as settings_mod
    from trajgraph.graph.static_embedder import DEFAULT_DIM, load_or_derive

    s = settings_mod.load(env).embedder
    t0 = time.perf_counter()
    load_or_derive(s.static_dir, s.dim or DEFAULT_DIM, say=lambda m: print(m, file=sys.stderr))
    return f"static table ready in {time.perf_counter() - t0:.1f}s (derived once, then cached)"


def report(results: dict[str, dict[str, Any]], reference: str | None) -> str:
    """The table; speed-ups against ``reference`` (the first embedder by default), quality
    differences against local MiniLM when it ran with quality, else the reference."""
    lines = [
        f"{'embedder':<16}{'wall s':>8}{'turns/s':>9}{'texts/s':>9}{'model texts':>12}"
        f"{'peak RSS':>10}{'speed-up':>9}",
    ]
    ref = results.get(reference or "")
    for name, r in results.items():
        speed = f"{ref['wall_s'] / r['wall_s']:.1f}×" if ref else "-"
        model_texts = r["model_texts"] if r["model_texts"] is not None else r["embedded"]
        lines.append(
            f"{name:<16}{r['wall_s']:8.1f}{r['turns'] / r['wall_s']:9.1f}"
            f"{r['embedded'] / r['wall_s']:9.1f}{model_texts:12d}"
            f"{r['peak_mib']:8.0f} MiB{speed:>9}"
        )
    for metric in ("coverage", "answer_turn_recall"):
        lines += _quality_lines(results, metric, reference)
    return "\n".join(lines)


def _quality_lines(
    results: dict[str, dict[str, Any]], metric: str, reference: str | None
) -> list[str]:
    """Per method, a row per embedder; for coverage also the goal check (within 0.01 of
    local MiniLM on every column)."""
    lines: list[str] = []
    quality = {n: r[metric] for n, r in results.items() if metric in r}
    if not quality:
        return lines
    methods = list(dict.fromkeys(m for q in quality.values() for m in q))
    caps = sorted({c for q in quality.values() for m in q.values() for c in m} - {"overall"})
    cols = [*caps, "overall"]
    for method in methods:
        lines.append(f"\n{metric.replace('_', ' ')}, {method}")
        lines.append(f"{'embedder':<16}" + "".join(f"{c:>19}" for c in cols))
        for name, q in quality.items():
            row = q.get(method, {})
            lines.append(
                f"{name:<16}"
                + "".join(f"{row[c]:19.3f}" if c in row else f"{'-':>19}" for c in cols)
            )
        if metric != "coverage":
            continue
        against = "local" if "local" in quality else reference
        base = quality.get(against or "", {}).get(method)
        for name, q in quality.items():
            if base is None or name == against or method not in q:
                continue
            worst = min(q[method].get(c, 0.0) - base.get(c, 0.0) for c in cols)
            lines.append(
                f"  {name}: lowest difference to {against} {worst:+.3f} "
                f"({'within' if worst >= -GOAL else 'NOT within'} {GOAL} on every column)"
            )
            lines += _intervals(results, name, against or "", method)
    return lines


def _intervals(
    results: dict[str, dict[str, Any]], name: str, against: str, method: str
) -> list[str]:
    """The differences again, each with its 95 % interval: a difference smaller than the
    interval's width is not one this split can tell."""
    from trajgraph.evaluation.compare import paired

    a, b = results[name].get("rows"), results.get(against, {}).get("rows")
    if not a or not b:
        return []
    gaps, unpaired = paired(a, b, a_method=method, b_method=method, names=(name, against))
    lines = [f"    {g.group}: {g.diff:+.3f} {g.interval()} {g.label(GOAL)}" for g in gaps]
    if unpaired:
        lines.append(f"    ({unpaired} question(s) scored by one embedder only are left out)")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument(
        "--embedders",
        nargs="+",
        choices=tuple(EMBEDDERS),
        default=["local-uncached", "local", "static"],
    )
    p.add_argument("--reference", default=None, help="speed-up and quality against this one")
    p.add_argument("--budget", type=int, default=2000)
    p.add_argument("--methods", nargs="+", default=list(METHODS))
    p.add_argument("--no-quality", action="store_true", help="speed and memory only")
    p.add_argument("--port", type=int, default=7698, help="Bolt port of the private Neo4j")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = p.parse_args(argv)
    if args.child:
        return child(args.data, args.budget, not args.no_quality, args.methods)
    files = episode_files(args.data)
    if not files:
        print(f"no AMA-Bench episodes (*.json) in {args.data}: nothing to measure")
        return 1

    import logging

    from trajgraph.core import settings as settings_mod
    from trajgraph.graph import local_server

    logging.getLogger("neo4j.notifications").setLevel(logging.ERROR)
    base = settings_mod.load()
    tmp = Path(tempfile.mkdtemp(prefix="trajgraph-embed-bench-"))
    local = dataclasses.replace(
        base.local, data_dir=tmp / "data", run_dir=tmp / "run", bolt_port=args.port
    )
    neo = dataclasses.replace(base.neo4j, uri=f"bolt://127.0.0.1:{args.port}")
    env = {**os.environ, "NEO4J_URI": neo.uri, "TRAJGRAPH_NEO4J_PORT": str(args.port)}
    print(f"{len(files)} episode files in {args.data}", file=sys.stderr)
    if "static" in args.embedders:
        print(_ensure_static_table(env), file=sys.stderr)
    results: dict[str, dict[str, Any]] = {}
    local_server.start(neo, local, log=lambda m: print(m, file=sys.stderr))
    try:
        # A fresh server plans its queries and fills its caches on the first ingest: that
        # cost must not land on whichever embedder happens to run first.
        _reset(neo)
        warm = _run_child(
            "hash",
            env,
            argparse.Namespace(**{**vars(args), "no_quality": True}),
            tmp / "cache-warm-up.sqlite3",
        )
        print(f"warm-up ingest (hash, not counted): {warm['wall_s']:.1f}s", file=sys.stderr)
        for name in args.embedders:
            _reset(neo)
            print(f"{name}: ingesting ...", file=sys.stderr, flush=True)
            results[name] = r = _run_child(name, env, args, tmp / f"cache-{name}.sqlite3")
            print(
                f"{name}: {r['turns']} turns in {r['wall_s']:.1f}s, peak {r['peak_mib']:.0f} MiB"
                + (f", quality pass {r['quality_s']:.0f}s" if "quality_s" in r else ""),
                file=sys.stderr,
                flush=True,
            )
    finally:
        local_server.stop(local)
        shutil.rmtree(tmp, ignore_errors=True)
    reference = args.reference or (args.embedders[0] if len(args.embedders) > 1 else None)
    print(report(results, reference))
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
