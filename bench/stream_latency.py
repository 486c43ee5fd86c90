"""Streaming latency: from a turn event appended to a file to its Turn node in Neo4j.

Runs `trajgraph stream` (in-process, Beam streaming mode on the local runner) on a fresh
directory, appends N turn events at a steady rate from another thread, polls Neo4j for each
turn, and prints p50/p95/max latency for two poll intervals, side by side.

    python -m bench.stream_latency [--turns 40] [--interval 0.5] [--polls 0.2 0.5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

from trajgraph.core import settings as settings_mod
from trajgraph.graph import governance
from trajgraph.graph import node_ids as ids
from trajgraph.graph.connection import open_driver
from trajgraph.pipelines import stream_pipeline as stream


def _measure(
    settings: settings_mod.Settings, turns: int, interval: float, poll: float
) -> list[float]:
    driver = open_driver(settings.neo4j)
    tenant = f"bench-stream-{uuid.uuid4().hex[:6]}"
    tid = "live"
    uid = ids.trajectory_uid(tenant, tid)
    latencies: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        live = Path(tmp) / "live"
        live.mkdir()
        log = live / "events.jsonl"
        log.write_text("")

        def append() -> None:
            time.sleep(3.0)  # the pipeline starts polling
            for i in range(turns):
                event = {
                    "trajectory_id": tid,
                    "idx": i,
                    "action": f"pytest tests/test_{i % 5}.py -q",
                    "observation": f"{i % 3} failed, {i} passed in 0.{i}s",
                }
                with log.open("a") as f:
                    f.write(json.dumps(event) + "\n")
                t0 = time.monotonic()
                while not driver.execute_query(
                    "MATCH (t:Turn {trajectory_uid: $u, idx: $i}) RETURN count(t) AS n", u=uid, i=i
                ).records[0]["n"]:
                    if time.monotonic() - t0 > 60:
                        break
                    time.sleep(0.02)
                latencies.append(time.monotonic() - t0)
                time.sleep(max(0.0, interval - latencies[-1]))

        writer = threading.Thread(target=append)
        writer.start()
        stream.run(
            [
                str(live),
                "--tenant",
                tenant,
                "--poll",
                str(poll),
                "--duration",
                str(turns * interval + 15),
                "--dead-letter",
                str(Path(tmp) / "dl"),
            ],
            settings=settings,
        )
        writer.join()
    governance.delete_tenant(driver, settings.neo4j.database, tenant)
    driver.close()
    return latencies


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="turn event → graph latency of trajgraph stream")
    p.add_argument("--turns", type=int, default=40)
    p.add_argument("--interval", type=float, default=0.5, help="seconds between turn events")
    p.add_argument("--polls", type=float, nargs="+", default=[0.2, 0.5])
    args = p.parse_args(argv)
    settings = settings_mod.load()
    print(f"{'poll s':>7}{'turns':>7}{'p50 s':>8}{'p95 s':>8}{'max s':>8}")
    for poll in args.polls:
        lat = sorted(_measure(settings, args.turns, args.interval, poll))
        p95 = lat[min(len(lat) - 1, round(0.95 * (len(lat) - 1)))]
        print(f"{poll:>7.2f}{len(lat):>7}{statistics.median(lat):>8.2f}{p95:>8.2f}{lat[-1]:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
