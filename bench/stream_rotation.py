"""Events written vs in the graph when a followed log is rotated under `trajgraph stream`
(issue 31): a writer appends one turn event every ``--every-ms`` to ``live/events.jsonl``
and rotates it every ``--rotate-s`` seconds, either by **rename** (``events.jsonl`` →
``events.jsonl.N``; the writer goes on appending to the renamed file for ``--reopen-ms``
before it reopens the name, as a writer told by a signal does) or by **copy-truncate** (a
copy ``events.jsonl.N``, the file emptied in place, the writer goes on). The stream
(``--poll`` 1 s) runs the whole time; right after each rotation the writer writes
``--burst`` events at once (catching up: the file is past its old size within one poll).
At its end the turns in the graph are counted.

    python -m bench.stream_rotation                          # this checkout, both modes
    python -m bench.stream_rotation --code /tmp/old-checkout # another one (PYTHONPATH)

Prints one JSON line per mode: events written, turns in the graph, dead letters, exit code
(143: the stream is ended by SIGTERM once the writer is done, and drains first).
Needs a Neo4j at NEO4J_URI.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from trajgraph.core import settings as settings_mod
from trajgraph.graph import governance
from trajgraph.graph import node_ids as ids
from trajgraph.graph.connection import open_driver


def write_and_rotate(
    live: Path,
    tid: str,
    mode: str,
    seconds: float,
    every_s: float,
    rotate_s: float,
    reopen_s: float,
    burst_after: int = 0,
) -> int:
    """Append events 1, 2, ... to ``live`` for ``seconds``, rotating it; returns how many
    events the file has had (event 0 included)."""
    written = 1  # event 0 is written before
    rotations = 0
    f = live.open("ab")
    last_rotation = time.monotonic()
    reopen_at: float | None = None
    end = time.monotonic() + seconds
    burst = 0
    while time.monotonic() < end:
        for _ in range(1 + burst):
            event = {"trajectory_id": tid, "idx": written, "action": f"step {written}"}
            f.write(json.dumps({**event, "observation": "ok"}).encode() + b"\n")
            written += 1
        f.flush()
        burst = 0
        now = time.monotonic()
        if reopen_at is not None and now >= reopen_at:
            f.close()
            f = live.open("ab")
            reopen_at = None
        if now - last_rotation >= rotate_s:
            rotations += 1
            rotated = live.with_name(f"{live.name}.{rotations}")
            if mode == "rename":
                live.rename(rotated)  # the writer still holds the renamed file
                live.touch()
                reopen_at = now + reopen_s
            else:
                shutil.copyfile(live, rotated)
                os.truncate(live, 0)  # O_APPEND: the writer goes on at the new end
            last_rotation = now
            burst = burst_after  # a writer catching up: past the old offset within one poll
        time.sleep(every_s)
    f.close()
    return written


def run_mode(
    mode: str, args: argparse.Namespace, settings: settings_mod.Settings
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"stream-rotation-{mode}-"))
    live = work / "live" / "events.jsonl"
    live.parent.mkdir()
    live.touch()
    tenant = f"bench-rot-{uuid.uuid4().hex[:6]}"
    tid = f"rotation-{mode}"
    env = dict(os.environ)
    if args.code:
        env["PYTHONPATH"] = str(Path(args.code).resolve())
    duration = args.seconds + 300  # ended by SIGTERM once the writer is done (it drains)
    stream = subprocess.Popen(
        [
            sys.executable, "-m", "trajgraph.cli", "stream", str(live.parent),
            "--tenant", tenant, "--poll", str(args.poll), "--duration", str(duration),
            "--extractor", "heuristic", "--embedder", "none",
            "--dead-letter", str(work / "dl"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    driver = open_driver(settings.neo4j)
    uid = ids.trajectory_uid(tenant, tid)

    def in_graph() -> list[int]:
        return [
            r["i"]
            for r in driver.execute_query(
                "MATCH (t:Turn {trajectory_uid: $u}) RETURN t.idx AS i ORDER BY i",
                u=uid,
                database_=settings.neo4j.database,
            ).records
        ]

    # Event 0 first, and nothing more until it is in the graph: the stream is up and follows
    # the file (a file rotated away before the stream ever saw it is not its to know).
    start = {"trajectory_id": tid, "idx": 0, "action": "start", "observation": "ok"}
    live.write_bytes(json.dumps(start).encode() + b"\n")
    deadline = time.monotonic() + 120
    while not in_graph() and time.monotonic() < deadline:
        time.sleep(0.5)
    written = write_and_rotate(
        live,
        tid,
        mode,
        args.seconds,
        args.every_ms / 1000,
        args.rotate_s,
        args.reopen_ms / 1000,
        args.burst,
    )
    time.sleep(4 * args.poll + 2)  # the last events' poll, extraction and write
    stream.send_signal(signal.SIGTERM)
    out, _ = stream.communicate(timeout=180)
    summary = json.loads(out or b"{}")
    try:
        idx = in_graph()
        governance.delete_tenant(driver, settings.neo4j.database, tenant)
    finally:
        driver.close()
    missing = sorted(set(range(written)) - set(idx))
    shutil.rmtree(work, ignore_errors=True)
    return {
        "mode": mode,
        "burst": args.burst,
        "code": args.code or "this checkout",
        "written": written,
        "in_graph": len(idx),
        "missing": len(missing),
        "first_missing": missing[:10],
        "dead_lettered": summary.get("dead_lettered"),
        "exit_code": stream.returncode,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--code", default=None, help="a checkout whose trajgraph/ to run")
    p.add_argument("--modes", default="rename,copytruncate")
    p.add_argument("--seconds", type=float, default=12.0, help="how long the writer writes")
    p.add_argument("--every-ms", type=float, default=20.0)
    p.add_argument("--rotate-s", type=float, default=2.5)
    p.add_argument("--reopen-ms", type=float, default=300.0)
    p.add_argument("--poll", type=float, default=1.0)
    p.add_argument(
        "--burst", type=int, default=200, help="events written at once right after a rotation"
    )
    args = p.parse_args(argv)
    settings = settings_mod.load()
    for mode in args.modes.split(","):
        print(json.dumps(run_mode(mode, args, settings)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
