"""How `trajgraph stream` ends, for a supervisor (systemd, Kubernetes) and a pipe, as real
subprocesses against the real Neo4j: the end of stdin ends it like the end of --duration
(exit 0, or 3 with dead letters); SIGTERM stops the poll and writes what was already read
before it exits 143; bad flags are ``error`` and exit 2. ``--metrics`` says the same as the
exit code, and is rewritten while the stream runs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.integration.servers import child_env
from trajgraph.core.settings import Settings
from trajgraph.graph import governance
from trajgraph.graph import node_ids as ids

EXE = Path(sys.executable).with_name("trajgraph")


def _turns(driver: Any, tenant: str, tid: str) -> list[int]:
    return [
        r["i"]
        for r in driver.execute_query(
            "MATCH (t:Turn {trajectory_uid: $u}) RETURN t.idx AS i ORDER BY i",
            u=ids.trajectory_uid(tenant, tid),
        ).records
    ]


def _turn(tid: str, idx: int) -> str:
    return json.dumps(
        {"trajectory_id": tid, "idx": idx, "action": f"ls d{idx}", "observation": "x"}
    )


@pytest.mark.parametrize(("bad_line", "code", "status"), [("", 0, "ok"), ("{torn\n", 3, "partial")])
def test_the_end_of_stdin_ends_the_stream(
    bad_line: str,
    code: int,
    status: str,
    driver: Any,
    neo4j_settings: Settings,
    tmp_path: Path,
) -> None:
    """`agent | trajgraph stream -` without --duration: when the agent is done, the stream
    writes what it read and exits as at the end of --duration (it ran until killed)."""
    tenant = f"eof-{uuid.uuid4().hex[:6]}"
    metrics = tmp_path / "m.json"
    lines = "".join(_turn("piped", i) + "\n" for i in range(3)) + bad_line
    try:
        done = subprocess.run(
            [
                str(EXE),
                "stream",
                "-",
                "--dead-letter",
                str(tmp_path / "dl"),
                "--metrics",
                str(metrics),
            ],
            input=lines,
            text=True,
            env=child_env(neo4j_settings, TRAJGRAPH_TENANT=tenant),
            capture_output=True,
            timeout=120,
        )
        assert done.returncode == code, done.stderr[-2000:]
        printed = json.loads(done.stdout)
        assert printed["status"] == status and printed["events"] == 3 + bool(bad_line)
        assert _turns(driver, tenant, "piped") == [0, 1, 2]
        m = json.loads(metrics.read_text())
        assert m["schema"] == "trajgraph-stream-metrics/1"
        assert (m["status"], m["exit_code"], m["dead_lettered"]) == (
            status,
            code,
            int(bool(bad_line)),
        )
        assert m["finished_at"] and m["started_at"] <= m["finished_at"]
        assert "Traceback" not in done.stderr and "WARNING" not in done.stderr, done.stderr[-2000:]
    finally:
        governance.delete_tenant(driver, neo4j_settings.neo4j.database, tenant)


def test_sigterm_writes_what_was_read_then_exits_143(
    driver: Any, neo4j_settings: Settings, tmp_path: Path
) -> None:
    """A supervisor's SIGTERM between two polls: the lines read from stdin since the last
    poll still reach the graph (stdin cannot be read again by a restart), then exit 143 with
    the final counts. Meanwhile --metrics is a heartbeat with the counts so far."""
    tenant = f"term-{uuid.uuid4().hex[:6]}"
    metrics = tmp_path / "m.json"
    proc = subprocess.Popen(
        [
            *(str(EXE), "stream", "-", "--poll", "30", "--dead-letter", str(tmp_path / "dl")),
            *("--metrics", str(metrics), "--metrics-every", "0.3"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(neo4j_settings, TRAJGRAPH_TENANT=tenant),
    )
    assert proc.stdin is not None
    try:
        proc.stdin.write(_turn("held", 0) + "\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 90
        while _turns(driver, tenant, "held") != [0]:  # the first poll read it
            assert time.monotonic() < deadline and proc.poll() is None, "turn 0 never arrived"
            time.sleep(0.2)
        while not (metrics.exists() and json.loads(metrics.read_text()).get("events") == 1):
            assert time.monotonic() < deadline and proc.poll() is None, "no heartbeat"
            time.sleep(0.1)
        beat = json.loads(metrics.read_text())
        assert (beat["status"], beat["exit_code"], beat["finished_at"]) == ("running", None, None)
        # The next poll is 30 s away: these lines are read, not yet written.
        proc.stdin.write("".join(_turn("held", i) + "\n" for i in range(1, 5)))
        proc.stdin.flush()
        time.sleep(0.5)  # into the reader's queue
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err[-2000:]
        printed = json.loads(out)
        assert (printed["status"], printed["drained"], printed["events"]) == (
            "interrupted",
            True,
            5,
        )
        assert _turns(driver, tenant, "held") == [0, 1, 2, 3, 4]
        m = json.loads(metrics.read_text())
        assert (m["status"], m["exit_code"], m["events"]) == ("interrupted", 143, 5)
        assert err.strip().splitlines()[-1] == (
            "trajgraph: stream interrupted by SIGTERM (what was read is written)"
        )
        assert "Traceback" not in err and "ERROR" not in err, err[-2500:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        governance.delete_tenant(driver, neo4j_settings.neo4j.database, tenant)


def test_bad_flags_are_an_error_exit_2_in_the_output_and_the_metrics(
    neo4j_settings: Settings, tmp_path: Path
) -> None:
    """What the caller must change (exit 2, `error`), not what a restart may fix (exit 1,
    `failed`): a supervisor that restarts on failure must not loop on a typo."""
    metrics = tmp_path / "m.json"
    done = subprocess.run(
        [str(EXE), "stream", str(tmp_path), "--poll", "0", "--metrics", str(metrics)],
        text=True,
        env=child_env(neo4j_settings),
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert json.loads(done.stdout)["status"] == "error"
    m = json.loads(metrics.read_text())
    assert (m["status"], m["exit_code"]) == ("error", 2) and "--poll" in m["error"]
    assert done.stderr.strip().splitlines()[-1].startswith("trajgraph: error: --poll")


def test_a_restart_over_a_long_log_writes_it_once_and_never_shrinks_it(
    driver: Any, neo4j_settings: Settings, tmp_path: Path
) -> None:
    """A stream started on a log already written (a restart, or the first run over an
    existing file) reads it in one poll: one version of the whole trajectory, not one per
    line. Emitting after every line wrote all 120 prefixes of it, and during a restart the
    graph showed the trajectory shrunk to its first turns until the stream caught up."""
    tenant = f"rst-{uuid.uuid4().hex[:6]}"
    live = tmp_path / "live.jsonl"
    live.write_text("".join(_turn("long", i) + "\n" for i in range(120)))
    env = child_env(neo4j_settings, TRAJGRAPH_TENANT=tenant)
    command = [str(EXE), "stream", str(live), "--duration", "12"]
    command += ["--dead-letter", str(tmp_path / "dl")]
    try:
        first = subprocess.run(command, text=True, env=env, capture_output=True, timeout=180)
        assert first.returncode == 0, first.stderr[-2000:]
        counts = json.loads(first.stdout)
        assert counts["events"] == 120 and counts["trajectories_written"] == 1, counts
        assert _turns(driver, tenant, "long") == list(range(120))
        seen: list[int] = []
        restart = subprocess.Popen(
            command, text=True, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        while restart.poll() is None:  # what a reader sees during the restart
            seen.append(len(_turns(driver, tenant, "long")))
            time.sleep(0.05)
        out, err = restart.communicate()
        assert restart.returncode == 0, err[-2000:]
        again = json.loads(out)
        # One version, the whole log: the write finds it unchanged and writes no row.
        assert (again["trajectories_written"], again["trajectories_unchanged"]) == (1, 1), again
        assert again["rows_written"] == 0, again
        assert seen and set(seen) == {120}
    finally:
        governance.delete_tenant(driver, neo4j_settings.neo4j.database, tenant)
