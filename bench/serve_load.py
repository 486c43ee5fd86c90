"""Load benchmark for the HTTP API: N concurrent clients for T seconds on 127.0.0.1.

Ingests the demo trajectory into a bench tenant of the configured Neo4j, starts
`trajgraph serve` as a separate process (so the clients do not share its interpreter), and
runs N client threads that each send `POST /v1/retrieve` (a mix of why, counting, current
value and keyword questions) back to back for T seconds. Prints requests, throughput,
p50/p95/p99 latency and errors for each N, side by side. Bounded: N <= 200, T <= 300 s.

    python -m bench.serve_load [--clients 1 10 50] [--seconds 20] [--port 8181]

Goal: 0 errors at 50 clients.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

from trajgraph import settings as settings_mod
from trajgraph.demo import DEMO_ID, write_sample
from trajgraph.graph import governance
from trajgraph.graph.connection import open_driver
from trajgraph.jobs import ingest

QUESTIONS = [
    "Why did the test fail?",
    "How many times did the agent run pytest?",
    "What is the current value of the result?",
    "Where does `src/calc.py` appear?",
    "What happened after the edit?",
]


def _client(port: int, key: str, stop: float, out: list[float], errors: list[str]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    i = 0
    while time.monotonic() < stop:
        body = json.dumps({"question": QUESTIONS[i % len(QUESTIONS)], "trajectory": DEMO_ID})
        i += 1
        t0 = time.perf_counter()
        try:
            conn.request(
                "POST",
                "/v1/retrieve",
                body=body,
                headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
            )
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                errors.append(f"HTTP {resp.status}")
                continue
        except Exception as e:  # a dropped connection is an error to count, then reconnect
            errors.append(type(e).__name__)
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            continue
        out.append((time.perf_counter() - t0) * 1000)
    conn.close()


def _pct(s: list[float], p: float) -> float:
    s = sorted(s)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))] if s else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="concurrent clients against trajgraph serve")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 10, 50])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--port", type=int, default=8181)
    args = p.parse_args(argv)
    if max(args.clients) > 200 or args.seconds > 300:
        p.error("at most 200 clients and 300 seconds")

    settings = settings_mod.load()
    tenant = f"bench-serve-{uuid.uuid4().hex[:6]}"
    key = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory() as tmp:
        sample = write_sample(Path(tmp))
        ingest.run(
            [
                str(sample),
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
    env = {**os.environ, "TRAJGRAPH_API_KEYS": f"{key}:{tenant}"}
    exe = Path(sys.executable).with_name("trajgraph")
    server = subprocess.Popen(
        [str(exe), "serve", "--port", str(args.port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    rows = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{args.port}/readyz", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the server did not start") from None
                time.sleep(0.2)
        for n in args.clients:
            lat: list[float] = []
            errors: list[str] = []
            stop = time.monotonic() + args.seconds
            threads = [
                threading.Thread(target=_client, args=(args.port, key, stop, lat, errors))
                for _ in range(n)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            rows.append((n, len(lat), len(lat) / args.seconds, lat, errors))
    finally:
        server.terminate()
        server.wait(timeout=30)
        driver = open_driver(settings.neo4j)
        governance.delete_tenant(driver, settings.neo4j.database, tenant)
        driver.close()

    print(
        f"{'clients':>8}{'requests':>10}{'req/s':>8}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}"
        f"{'errors':>8}"
    )
    for n, count, rate, lat, errors in rows:
        print(
            f"{n:>8}{count:>10}{rate:>8.1f}{statistics.median(lat) if lat else float('nan'):>9.1f}"
            f"{_pct(lat, 95):>9.1f}{_pct(lat, 99):>9.1f}{len(errors):>8}"
        )
        if errors:
            print(f"         errors: {sorted(set(errors))}")
    at50 = [r for r in rows if r[0] == 50]
    if at50:
        print(f"goal: 0 errors at 50 clients: {'met' if not at50[0][4] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
