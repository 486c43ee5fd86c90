"""One bad file never sinks a run (issue 31), against the real Neo4j: a lone surrogate in a
Claude Code session (its id, a tool's command or output), an OTel span nested 800 levels, a
file name that is not UTF-8. Each is a dead letter or a kept turn with U+FFFD; the rest of
the run lands, and records = ingested + dead-lettered. Before, each ended the whole run with
a Beam traceback (exit 1, records 10 / ingested 0), and a stream of the folder exited 1
before writing the good events (a supervisor restarting it looped for ever)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.integration.ingesting import NO_MODELS, Ingest
from tests.integration.servers import child_env
from tests.strategies import deep_span_file
from trajgraph.core.settings import Settings
from trajgraph.graph import node_ids as ids

LONE = "\ud83d"  # half an emoji: json.dumps writes it as the escape a truncating log writes


def _session(sid: str, command: str = "ls", output: str = "a.py") -> bytes:
    records = [
        {"type": "user", "sessionId": sid, "uuid": "u1", "message": {"content": "Fix it"}},
        {
            "type": "assistant",
            "sessionId": sid,
            "message": {
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": command}}
                ]
            },
        },
        {
            "type": "user",
            "sessionId": sid,
            "message": {
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": output}]
            },
        },
    ]
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def _turns(driver: Any, tenant: str) -> dict[str, list[tuple[str, str]]]:
    records = driver.execute_query(
        "MATCH (t:Trajectory {tenant: $tenant}) OPTIONAL MATCH (u:Turn {trajectory_uid: t.uid}) "
        "WITH t, u ORDER BY u.idx RETURN t.id AS id, collect([u.action, u.observation]) AS turns",
        tenant=tenant,
    ).records
    return {r["id"]: [tuple(x) for x in r["turns"]] for r in records}


def test_a_bad_session_among_good_ones_leaves_the_run_whole(
    ingested: Ingest, tenant: str, driver: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "projects"
    folder.mkdir()
    for n in range(8):
        (folder / f"s{n}.jsonl").write_bytes(_session(f"ob-good-{n}"))
    (folder / "bad-id.jsonl").write_bytes(_session("ob-bad" + LONE))
    (folder / "bad-tool.jsonl").write_bytes(
        _session("ob-tool", command="echo " + LONE, output="out " + LONE)
    )
    (folder / "deep.json").write_bytes(deep_span_file(800))
    (folder / "deep-lines.jsonl").write_bytes(deep_span_file(200))  # the variant, a line file
    os.mkdir(os.fsencode(folder) + b"/odd\xff")  # a folder name that is not UTF-8 either
    (Path(os.fsdecode(os.fsencode(folder) + b"/odd\xff")) / "x.jsonl").write_bytes(
        _session("ob-odd")
    )
    run = ingested(folder, args=NO_MODELS, tenant=tenant)
    s = run.summary
    assert (s.records, s.ingested, s.dead_lettered) == (13, 10, 3), s
    assert s.records == s.ingested + s.dead_lettered
    rows = [json.loads(line) for line in (run.dead_letter / "dead-letter.jsonl").open()]
    reasons = sorted((Path(r["source"]).name, r["reason"].split(": ", 2)[-1]) for r in rows)
    assert [name for name, _ in reasons] == ["deep-lines.jsonl", "deep.json", "x.jsonl"]
    assert "nested too deeply" in reasons[1][1] and "not valid UTF-8" in reasons[2][1]
    turns = _turns(driver, tenant)
    assert turns["ob-bad\ufffd"] == [("ls", "a.py")]
    assert turns["ob-tool"] == [("echo \ufffd", "out \ufffd")]
    assert {f"ob-good-{n}" for n in range(8)} <= turns.keys()


def test_a_stream_of_the_folder_writes_the_good_events_and_does_not_fail(
    neo4j_settings: Settings, tenant: str, driver: Any, tmp_path: Path
) -> None:
    live = tmp_path / "live"
    live.mkdir()
    (live / "bad.jsonl").write_bytes(_session("ob-stream" + LONE, output="x" + LONE))
    events = [
        {"trajectory_id": "ob-events", "idx": i, "action": f"ls {i}", "observation": "ok"}
        for i in range(3)
    ]
    (live / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (Path(os.fsdecode(os.fsencode(live) + b"/name\xfe.jsonl"))).write_bytes(_session("ob-n"))
    env = child_env(neo4j_settings, PYTHONPATH=str(Path(__file__).resolve().parents[3]))
    out = subprocess.run(
        [
            sys.executable, "-m", "trajgraph.cli", "stream", str(live), "--tenant", tenant,
            "--duration", "8", "--extractor", "heuristic", "--embedder", "none",
            "--dead-letter", str(tmp_path / "dl"),
        ],
        env=env,
        capture_output=True,
        timeout=300,
    )  # fmt: skip
    assert out.returncode == 3, out.stderr  # partial: the odd name, dead-lettered once
    summary = json.loads(out.stdout)
    assert (summary["status"], summary["dead_lettered"]) == ("partial", 1)
    assert b"Traceback" not in out.stderr
    uid = ids.trajectory_uid(tenant, "ob-events")
    got = driver.execute_query(
        "MATCH (u:Turn {trajectory_uid: $uid}) RETURN count(u) AS n", uid=uid
    ).records[0]["n"]
    assert got == 3
    assert _turns(driver, tenant)["ob-stream\ufffd"] == [("ls", "x\ufffd")]
