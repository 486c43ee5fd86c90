"""The analyst Cypher library on an ingested graph: rows, db hits, wall time and plan warnings.

Runs every ``queries/*.cypher`` file against the Neo4j at ``NEO4J_URI`` (nothing is started or
written: ingest first, e.g. the 80 Django runs of ``../shared/corpora/...``), once under
``PROFILE`` for the db hits and the plan, then ``--repeat`` times plainly for the median wall
time (client side: the driver's round trip and the rows' transfer included). Prints one table
row per query and flags plan operators that read more than an index would:
``AllNodesScan``, ``CartesianProduct``, a variable-length expansion without an upper bound
and one that enumerates paths (``VarLengthExpand(All)``) rather than nodes breadth-first.

Parameters: each file's documented example (``// example: :param {...}``), tenant swapped,
updated with ``--params FILE`` (JSON: query name -> params).

    python -m bench.cypher_library --tenant big [--params bench/cypher_library_django.json]
        [--repeat 5] [--baseline main] [--json]

``--baseline REV`` runs each file as it was at git revision REV too (when it differs), right
before the current one, on the same graph and parameters: before and after side by side.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import neo4j

from trajgraph.core import settings as settings_mod
from trajgraph.graph.connection import open_driver
from trajgraph.queries import library

# Neo4j prints an expansion without an upper bound as *..2147483647 (or *, or *N..).
UNBOUNDED = re.compile(r"\*\d*\.\.(2147483647)?\]|\*\]|\*\d*\.\.2147483647")


def example_params(driver: neo4j.Driver, database: str, name: str) -> dict[str, Any]:
    """The file's ``// example: :param {...}`` map, parsed by Neo4j itself."""
    example = library.load(name).header.get("example", "")
    records, _, _ = driver.execute_query(
        f"RETURN {example.removeprefix(':param').strip()} AS params", database_=database
    )
    return dict(records[0]["params"])


def _walk(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(op for child in plan.get("children", []) for op in _walk(child))]


def plan_warnings(plan: dict[str, Any]) -> list[str]:
    found = []
    for op in _walk(plan):
        kind = op.get("operatorType", "").split("@")[0]
        details = str(op.get("args", {}).get("Details", ""))
        if kind in ("AllNodesScan", "CartesianProduct"):
            found.append(kind)
        elif "VarLengthExpand" in kind:
            if UNBOUNDED.search(details):
                found.append(f"{kind} unbounded")
            if "Pruning" not in kind:  # every path, not every node: exponential when dense
                found.append(f"{kind} (paths)")
    return sorted(set(found))


def baseline_text(rev: str, name: str) -> str | None:
    """The query file as it was at git revision ``rev`` (None when it did not exist)."""
    done = subprocess.run(
        ["git", "show", f"{rev}:queries/{name}.cypher"], capture_output=True, text=True
    )
    return done.stdout if done.returncode == 0 else None


def profile(
    driver: neo4j.Driver,
    database: str,
    name: str,
    params: dict[str, Any],
    repeat: int,
    text: str | None = None,
) -> dict[str, Any]:
    text = text or library.load(name).text
    with driver.session(database=database, default_access_mode=neo4j.READ_ACCESS) as s:
        result = s.run("PROFILE " + text, params)
        rows = len(list(result))
        plan = result.consume().profile or {}
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            list(s.run(text, params))
            times.append((time.perf_counter() - start) * 1000)
    return {
        "query": name,
        "rows": rows,
        "db_hits": sum(op.get("dbHits", 0) for op in _walk(plan)),
        "ms": round(statistics.median(times), 1),
        "warnings": plan_warnings(plan),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--tenant", required=True)
    p.add_argument("--params", type=Path, default=None, help="JSON: query name -> params")
    p.add_argument("--only", nargs="*", default=None, help="query names (default: all)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument(
        "--baseline", default=None, help="git revision: run its query files too, side by side"
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    settings = settings_mod.load()
    database = settings.neo4j.database
    overrides = json.loads(args.params.read_text("utf-8")) if args.params else {}
    driver = open_driver(settings.neo4j)
    out = []
    try:
        for name in args.only or library.names():
            params = example_params(driver, database, name)
            params.update(overrides.get(name, {}))
            params["tenant"] = args.tenant
            runs: list[tuple[str, str | None]] = [("", None)]
            old = baseline_text(args.baseline, name) if args.baseline else None
            if old is not None and old != library.load(name).text:
                runs = [(args.baseline, old), ("", None)]
            for rev, text in runs:
                out.append(profile(driver, database, name, params, args.repeat, text))
                out[-1]["revision"] = rev or "worktree"
                if not args.json:
                    r = out[-1]
                    label = f"{name} @{rev}" if rev else name
                    print(
                        f"{label:46} {r['rows']:>6} rows {r['db_hits']:>10} db hits "
                        f"{r['ms']:>9.1f} ms  {', '.join(r['warnings'])}",
                        flush=True,
                    )
    finally:
        driver.close()
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
