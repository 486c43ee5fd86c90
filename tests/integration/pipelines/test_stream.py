"""`trajgraph stream` against the real Neo4j: turns appended to a real file reach the graph
within seconds, and after out-of-order and duplicate events and a restart the graph equals a
batch ingest of the same trajectory (`trajgraph digest`)."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.integration.ingesting import Ingest
from tests.integration.servers import child_env
from trajgraph.core.settings import Settings
from trajgraph.graph import governance
from trajgraph.graph import node_ids as ids
from trajgraph.graph.digest import trajectory_digest
from trajgraph.pipelines import stream_pipeline as stream
from trajgraph.pipelines.adapters import normalize, split_records

LATENCY_BOUND_S = 5.0  # generous for CI; bench/stream_latency.py reports the real numbers


def _events(traj: dict[str, Any]) -> list[dict[str, Any]]:
    tid = traj["id"]
    out: list[dict[str, Any]] = [
        {
            "trajectory_id": tid,
            "type": "header",
            "task": traj.get("task", ""),
            "metadata": traj.get("metadata", {}),
        }
    ]
    out += [{"trajectory_id": tid, **t} for t in traj["turns"]]
    out.append({"trajectory_id": tid, "type": "footer", "outcome": traj.get("outcome")})
    return out


def _canonical(traj: dict[str, Any]) -> dict[str, Any]:
    keep = ("id", "task", "outcome", "metadata", "turns")
    return {k: traj[k] for k in keep if k in traj}


def _turn_in_graph(driver: Any, tenant: str, tid: str, idx: int) -> bool:
    return bool(
        driver.execute_query(
            "MATCH (t:Turn {trajectory_uid: $u, idx: $i}) RETURN count(t) AS n",
            u=ids.trajectory_uid(tenant, tid),
            i=idx,
        ).records[0]["n"]
    )


def _stream(directory: Path, tenant: str, settings: Settings, seconds: float, dl: Path) -> None:
    stream.run(
        [
            str(directory),
            "--tenant",
            tenant,
            "--duration",
            str(seconds),
            "--poll",
            "0.2",
            "--dead-letter",
            str(dl),
        ],
        settings=settings,
    )


def test_stream_latency_restart_and_equality_with_batch(
    shared_dir: Path, driver: Any, neo4j_settings: Settings, ingested: Ingest, tmp_path: Path
) -> None:
    path = shared_dir / "mini-swe-agent" / "django__django-16255.traj.json"
    (real,) = [t for rec in split_records(str(path), path.read_bytes()) for t in normalize(rec)]
    traj = _canonical(real)
    tid = traj["id"]
    events = _events(traj)
    rng = random.Random(3)
    first, rest = events[:9], events[9:]
    shuffled = rest[:]
    rng.shuffle(shuffled)
    shuffled += rng.sample(rest, 4)  # duplicates
    streamed = f"st-{uuid.uuid4().hex[:6]}"
    live = tmp_path / "live"
    live.mkdir()
    log = live / "events.jsonl"
    log.write_text("")
    db = neo4j_settings.neo4j.database
    try:
        # Run 1: events are appended while the stream runs; each turn must show up quickly.
        latencies: list[float] = []

        def append() -> None:
            time.sleep(3.0)  # let the pipeline start polling
            for e in first:
                with log.open("a") as f:
                    f.write(json.dumps(e) + "\n")
                if "idx" in e:
                    t0 = time.monotonic()
                    while not _turn_in_graph(driver, streamed, tid, e["idx"]):
                        if time.monotonic() - t0 > 30:
                            break
                        time.sleep(0.05)
                    latencies.append(time.monotonic() - t0)

        writer = threading.Thread(target=append)
        writer.start()
        _stream(live, streamed, neo4j_settings, 20.0, tmp_path / "dl")
        writer.join()
        assert len(latencies) == 8
        assert max(latencies) < LATENCY_BOUND_S, latencies

        # Run 2 (a restart): the rest arrives out of order, with duplicates and a bad line.
        with log.open("a") as f:
            for e in shuffled:
                f.write(json.dumps(e) + "\n")
            f.write("{broken\n")
        _stream(live, streamed, neo4j_settings, 8.0, tmp_path / "dl")
        letters = (tmp_path / "dl" / "dead-letter.jsonl").read_text().splitlines()
        assert len(letters) == 1 and json.loads(letters[0])["stage"] == "parse"
        assert str(log) in letters[0]

        # The same trajectory, batch-ingested: the two graphs are identical.
        batch = ingested(traj, args=("--format", "canonical"))
        assert batch.summary.ingested == 1
        assert trajectory_digest(driver, db, streamed, tid) == trajectory_digest(
            driver, db, batch.tenant, tid
        )
    finally:
        governance.delete_tenant(driver, db, streamed)


@pytest.mark.parametrize("bad", ["not a dir"])
def test_stream_source_must_exist(bad: str, neo4j_settings: Settings) -> None:
    from trajgraph.core.errors import InputError

    with pytest.raises(InputError, match="not a directory"):
        stream.run([f"/nonexistent/{bad}"], settings=neo4j_settings)


@pytest.mark.parametrize(
    ("bad_line", "code", "status"), [("", 0, "ok"), ("{broken\n", 3, "partial")]
)
def test_stream_from_stdin(
    bad_line: str, code: int, status: str, driver: Any, neo4j_settings: Settings, tmp_path: Path
) -> None:
    """Events piped in reach the graph; a line that is no event is dead-lettered, the rest
    still arrive, and the stream exits 3 (partial) like an ingest that dead-lettered."""
    tenant = f"sin-{uuid.uuid4().hex[:6]}"
    neo = neo4j_settings.neo4j
    env = child_env(neo4j_settings, TRAJGRAPH_TENANT=tenant)
    events = [
        {"trajectory_id": "piped", "idx": 1, "action": "cat a.txt", "observation": "hello"},
        {"trajectory_id": "piped", "idx": 0, "action": "ls", "observation": "a.txt"},
        {"trajectory_id": "piped", "type": "footer", "outcome": "done"},
    ]
    exe = Path(sys.executable).with_name("trajgraph")
    try:
        proc = subprocess.run(
            [str(exe), "stream", "-", "--duration", "8", "--dead-letter", str(tmp_path / "dl")],
            input=bad_line + "".join(json.dumps(e) + "\n" for e in events),
            text=True,
            env=env,
            capture_output=True,
            timeout=120,
        )
        assert proc.returncode == code, proc.stderr[-2000:]
        assert json.loads(proc.stdout)["status"] == status
        assert ("dead lettered 1" in proc.stderr) == bool(bad_line), proc.stderr[-2000:]
        row = driver.execute_query(
            "MATCH (t:Trajectory {tenant: $t, id: 'piped'}) RETURN t.turn_count AS n, "
            "t.outcome AS outcome, t.source AS source",
            t=tenant,
        ).records[0]
        assert (row["n"], row["outcome"], row["source"]) == (2, "done", "<stdin>")
    finally:
        governance.delete_tenant(driver, neo.database, tenant)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stopped_stream_prints_its_counters(
    sig: signal.Signals, code: int, driver: Any, neo4j_settings: Settings, tmp_path: Path
) -> None:
    """Ctrl-C, or a supervisor's SIGTERM, ends a stream with what it counted (status
    interrupted), one line on stderr and ingest's exit code, never a traceback."""
    tenant = f"sig-{uuid.uuid4().hex[:6]}"
    live = tmp_path / "live"
    live.mkdir()
    event = {"trajectory_id": "stopped", "idx": 0, "action": "ls", "observation": "a.txt"}
    (live / "events.jsonl").write_text(json.dumps(event) + "\n")
    exe = Path(sys.executable).with_name("trajgraph")
    proc = subprocess.Popen(
        [str(exe), "stream", str(live), "--dead-letter", str(tmp_path / "dl")],
        env=child_env(neo4j_settings, TRAJGRAPH_TENANT=tenant),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A shell's background job ignores SIGINT; this one must not inherit that.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 90
        while not _turn_in_graph(driver, tenant, "stopped", 0):
            if proc.poll() is not None:  # died before the write: say how, with its stderr
                _, err = proc.communicate(timeout=30)
                pytest.fail(
                    f"the stream ended ({proc.returncode}) before the turn arrived: {err[-3000:]}"
                )
            assert time.monotonic() < deadline, "the turn never arrived"
            time.sleep(0.2)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == code, err[-2000:]
        summary = json.loads(out)
        # The event was parsed in an earlier stage than the write (the turn's own counts are
        # bumped after its write, so a signal may land between the two).
        assert summary["status"] == "interrupted" and summary.get("events") == 1, (summary, err)
        assert summary["dead_letter_path"] == str(tmp_path / "dl" / "dead-letter.jsonl")
        assert err.strip().splitlines()[-1] == (
            f"trajgraph: stream interrupted by {sig.name} (what was read is written)"
        )
        assert "Traceback" not in err and "ERROR" not in err, err[:2500]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        governance.delete_tenant(driver, neo4j_settings.neo4j.database, tenant)
