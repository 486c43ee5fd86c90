"""Load benchmark for the HTTP API: N concurrent clients for T seconds on 127.0.0.1, over the
real logs of ../shared/trajectories.

Ingests the shared logs into a bench tenant of the configured Neo4j (heuristic extraction,
the configured embedder), starts `trajgraph serve` as a separate process (so the clients do
not share its interpreter; its log goes to a file), and runs N client threads that each send
a mix of every endpoint back to back for T seconds: retrieval (why, counting, current-value
and identifier questions), keyword search, a trajectory, its brief, a why-chain and a
reminder, on every ingested trajectory (tau-bench ids hold '/': they are sent %2F-encoded).
Prints, per endpoint and overall: requests, throughput, p50/p95/p99 latency and errors (any
answer but 200, or a dropped connection). Bounded: N <= 200, T <= 300 s.

    python -m bench.serve_load [--clients 20] [--seconds 30] [--logs ../shared/trajectories]

Goal: 0 errors at 20 clients for 30 s.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import secrets
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from trajgraph.core import settings as settings_mod
from trajgraph.graph import governance
from trajgraph.graph.connection import open_driver
from trajgraph.jobs import ingest

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = [
    "Why did the test fail?",
    "How many times did the agent run a command?",
    "What is the current value of the setting?",
    "Which files did the agent edit?",
    "What happened after the error?",
]
SEARCHES = ["error", "Traceback", "SELECT", "reservation", "pytest"]


def _requests(ids: list[tuple[str, int]], rng: random.Random) -> tuple[str, str, str, Any]:
    """One request of the mix: (endpoint name, method, path, body)."""
    tid, turns = rng.choice(ids)
    path = "/v1/trajectories/" + urllib.parse.quote(tid, safe="")
    kind = rng.choice(["retrieve", "retrieve", "search", "trajectory", "brief", "why", "remind"])
    if kind == "retrieve":
        return kind, "POST", "/v1/retrieve", {"question": rng.choice(QUESTIONS), "trajectory": tid}
    if kind == "search":
        return kind, "GET", "/v1/search?q=" + urllib.parse.quote(rng.choice(SEARCHES)), None
    if kind == "trajectory":
        return kind, "GET", path, None
    if kind == "brief":
        return kind, "GET", path + "/brief", None
    if kind == "why":
        return kind, "GET", f"{path}/why?turn={rng.randrange(max(turns, 1))}", None
    return kind, "POST", path + "/remind", {"next_action": "pytest -x"}


def _client(
    port: int,
    key: str,
    stop: float,
    ids: list[tuple[str, int]],
    seed: int,
    out: dict[str, list[float]],
    errors: list[str],
) -> None:
    rng = random.Random(seed)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    while time.monotonic() < stop:
        kind, method, path, body = _requests(ids, rng)
        data = json.dumps(body) if body is not None else None
        headers = {"authorization": f"Bearer {key}"}
        if data is not None:
            headers["content-type"] = "application/json"
        t0 = time.perf_counter()
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                errors.append(f"{kind}: HTTP {resp.status}")
                continue
        except Exception as e:  # a dropped connection is an error to count, then reconnect
            errors.append(f"{kind}: {type(e).__name__}")
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            continue
        out[kind].append((time.perf_counter() - t0) * 1000)
    conn.close()


def _pct(s: list[float], p: float) -> float:
    s = sorted(s)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))] if s else float("nan")


def _ids(port: int, key: str) -> list[tuple[str, int]]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/trajectories", headers={"authorization": f"Bearer {key}"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        rows = json.loads(resp.read())["trajectories"]
    return [(r["id"], int(r["turns"])) for r in rows]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="concurrent clients against trajgraph serve")
    p.add_argument("--clients", type=int, nargs="+", default=[20])
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--port", type=int, default=8181)
    p.add_argument("--logs", default=str(REPO.parent / "shared" / "trajectories"))
    args = p.parse_args(argv)
    if max(args.clients) > 200 or args.seconds > 300:
        p.error("at most 200 clients and 300 seconds")
    if not Path(args.logs).exists():
        p.error(f"no logs at {args.logs} (see ../shared/trajectories/README.md)")

    settings = settings_mod.load()
    tenant = f"bench-serve-{uuid.uuid4().hex[:6]}"
    key = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory() as tmp:
        summary = ingest.run(
            [
                args.logs,
                "--tenant",
                tenant,
                "--extractor",
                "heuristic",
                "--progress",
                "off",
                "--dead-letter",
                str(Path(tmp) / "dl"),
            ],
            settings=settings,
        )
        print(f"ingested {summary.ingested} trajectories ({summary.turns} turns) from {args.logs}")
        env = {**os.environ, "TRAJGRAPH_API_KEYS": f"{key}:{tenant}"}
        log = Path(tmp) / "serve.log"
        with log.open("wb") as sink:  # a file: a pipe nobody reads would block the server
            server = subprocess.Popen(
                [sys.executable, "-m", "trajgraph.cli", "serve", "--port", str(args.port)],
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        rows = []
        try:
            deadline = time.monotonic() + 90
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{args.port}/readyz", timeout=2)
                    break
                except OSError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise SystemExit(f"the server did not start:\n{log.read_text()}") from None
                    time.sleep(0.2)
            ids = _ids(args.port, key)
            for n in args.clients:
                lat: dict[str, list[float]] = defaultdict(list)
                errors: list[str] = []
                stop = time.monotonic() + args.seconds
                threads = [
                    threading.Thread(
                        target=_client, args=(args.port, key, stop, ids, seed, lat, errors)
                    )
                    for seed in range(n)
                ]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                rows.append((n, dict(lat), errors))
        finally:
            server.terminate()
            server.wait(timeout=30)
            driver = open_driver(settings.neo4j)
            governance.delete_tenant(driver, settings.neo4j.database, tenant)
            driver.close()

    for n, lat, errors in rows:
        print(f"\n{n} clients for {args.seconds:g} s, {len(ids)} trajectories")
        print(
            f"{'endpoint':>12}{'requests':>10}{'req/s':>8}{'p50 ms':>9}{'p95 ms':>9}"
            f"{'p99 ms':>9}{'errors':>8}"
        )
        everything = [x for values in lat.values() for x in values]
        by_kind = Counter(e.split(":")[0] for e in errors)
        for kind, values in [*sorted(lat.items()), ("all", everything)]:
            errs = len(errors) if kind == "all" else by_kind.get(kind, 0)
            print(
                f"{kind:>12}{len(values):>10}{len(values) / args.seconds:>8.1f}"
                f"{_pct(values, 50):>9.1f}{_pct(values, 95):>9.1f}{_pct(values, 99):>9.1f}"
                f"{errs:>8}"
            )
        if errors:
            print(f"errors: {dict(Counter(errors))}")
        print(f"goal: 0 errors: {'met' if not errors else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
