"""A user whose agent logs are in none of the benchmark formats, against the real Neo4j: chat
message logs (OpenAI Chat Completions, LangGraph, Agents SDK items, one message per line, a
fine-tuning JSONL) are ingested as they are and answer why-questions; almost-canonical lines
and a CSV are dead-lettered, each with the fix in its reason; nothing is lost.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import neo4j

from tests.chat_logs import CHAT, ITEMS, LANGCHAIN
from tests.integration.ingesting import NO_MODELS, Ingest

GOOD = {"idx": 0, "action": "ls", "observation": "a"}
# line -> what its dead letter must tell the user to do (None: the line is fine)
CANONICAL_LINES: list[tuple[dict[str, Any], str | None]] = [
    ({"id": "ok-1", "task": "t", "turns": [GOOD]}, None),
    ({"turns": [GOOD]}, None),  # no id: <stem>/line-2
    ({"turns": [GOOD]}, None),  # no id either, and no duplicate of line 2
    ({"id": "r4", "steps": [GOOD]}, "rename that key to 'turns'"),
    ({"id": "r5", "turns": [{"idx": 0, "action": "ls", "output": "a"}]}, "rename 'output'"),
    ({"id": "r6", "turns": [{**GOOD, "idx": "3"}]}, "idx must be a JSON integer"),
    ({"id": "r7", "model": "m", "turns": [GOOD]}, "put 'model' under 'metadata'"),
]


def _write(path: Path, value: Any) -> str:
    path.write_text(json.dumps(value), "utf-8")
    return str(path)


def test_logs_in_no_benchmark_format(
    ingested: Ingest, tenant: str, tmp_path: Path, driver: neo4j.Driver
) -> None:
    logs = [
        _write(tmp_path / "openai_chat.json", CHAT),
        _write(tmp_path / "langgraph.json", {"thread_id": "thread-7", "messages": LANGCHAIN}),
        _write(tmp_path / "agents_sdk.json", ITEMS),
    ]
    (tmp_path / "chat_log.jsonl").write_text("\n".join(json.dumps(m) for m in CHAT) + "\n")
    (tmp_path / "finetune.jsonl").write_text(
        "\n".join(json.dumps({"messages": m}) for m in (CHAT, LANGCHAIN)) + "\n"
    )
    (tmp_path / "runs.jsonl").write_text(
        "\n".join(json.dumps(line) for line, _ in CANONICAL_LINES) + "\n"
    )
    (tmp_path / "steps.csv").write_text("step,action,observation\n0,ls,a\n")
    logs += [str(tmp_path / n) for n in ("chat_log.jsonl", "finetune.jsonl", "runs.jsonl")]
    logs.append(str(tmp_path / "steps.csv"))

    run = ingested(*logs, tenant=tenant, args=NO_MODELS)
    s = run.summary
    refused = [fix for _, fix in CANONICAL_LINES if fix is not None]
    assert s.records == 3 + 1 + 2 + len(CANONICAL_LINES) + 1
    assert s.dead_lettered == len(refused) + 1 and s.balanced and s.exit_code == 3

    rows = [
        json.loads(x) for x in (run.dead_letter / "dead-letter.jsonl").read_text().split("\n") if x
    ]
    by_locator = {(Path(r["source"]).name, r["locator"]): r["reason"] for r in rows}
    for n, (_, fix) in enumerate(CANONICAL_LINES, start=1):
        if fix is not None:
            assert fix in by_locator["runs.jsonl", f"line {n}"]
    assert "does not start like JSON" in by_locator["steps.csv", "file"]
    assert len(s.dead_letter_reasons) == 3  # shown under the summary

    with run.client() as tg:
        ids = {t["id"] for t in tg.trajectories()}
        assert ids == {
            "openai_chat",
            "thread-7",
            "agents_sdk",
            "chat_log",
            "finetune/line-1",
            "finetune/line-2",
            "ok-1",
            "runs/line-2",
            "runs/line-3",
        }
        assert tg.trajectory("openai_chat")["turns"] == 6
        # Why did the agent run the tests again at turn 4? The failure of turn 0 is upstream.
        chain = tg.why("chat_log", turn=4, depth=3)
        assert {0, 4} <= {n["turn"] for n in chain}
        assert any(n["kind"] == "state" and n["turn"] == 0 and "failed" in n["text"] for n in chain)
        found = tg.retrieve(
            'syntax error at or near "order"', trajectory="thread-7", mode="keyword"
        )
        assert found.counts["keyword_hits"] > 0
        assert "SELECT count(*) FROM order" in found.context
        found = tg.retrieve("make: *** [build] Error 1", trajectory="agents_sdk", mode="keyword")
        assert found.counts["keyword_hits"] > 0 and 'shell({"command": ["make"]})' in found.context
