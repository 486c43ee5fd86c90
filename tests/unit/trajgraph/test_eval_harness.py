"""The evaluation harness around the scores: episode files, the LLM judge, tables and plots."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI
from trajgraph.errors import TrajgraphError
from trajgraph.evaluation.harness import by_horizon, load_episodes, markdown, plot
from trajgraph.evaluation.judge import Judge
from trajgraph.extractors.base import Stats
from trajgraph.extractors.llm_client import ChatClient
from trajgraph.settings import LLMSettings


def _rows() -> list[dict[str, Any]]:
    rows = []
    for horizon, good, bad in ((8000, 1.0, 0.5), (32000, 1.0, 0.0)):
        for method, score in (("trajgraph_auto", good), ("bm25", bad)):
            for cap in ("causal", "recall"):
                rows.append(
                    {"horizon": horizon, "method": method, "type": cap, "needle_recall": score}
                )
            rows.append(
                {"horizon": horizon, "method": method, "type": "count", "needle_recall": None}
            )
    return rows


def test_series_and_markdown_leave_out_questions_without_needles() -> None:
    series = by_horizon(_rows(), "needle_recall")
    assert "count" not in series  # no needles: no needle recall
    assert series["overall"]["bm25"] == {8000: 0.5, 32000: 0.0}
    md = markdown(_rows(), "needle_recall", ("causal", "overall")).splitlines()
    assert md[0] == "| method (causal · overall) | 8k | 32k |"
    assert md[2] == "| trajgraph_auto | 1.00 · 1.00 | 1.00 · 1.00 |"
    assert md[3] == "| bm25 | 0.50 · 0.50 | 0.00 · 0.00 |"


def test_plot_writes_a_png(tmp_path: Path) -> None:
    out = tmp_path / "img" / "eval.png"
    plot(_rows(), out, metric="needle_recall", title="t")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_episode_files_need_turns_and_qa_pairs_and_errors_name_file_and_record(
    tmp_path: Path,
) -> None:
    good = {
        "id": "e1",
        "turns": [{"action": "ls", "observation": "a"}],
        "qa_pairs": [{"question": "q?", "answer": "a", "type": "recall"}],
    }
    path = tmp_path / "eps.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "qa_pairs": []}) + "\n")
    with pytest.raises(TrajgraphError, match=re.escape(f"{path}: record 2: no qa_pairs")):
        load_episodes([str(path)])
    path.write_text(json.dumps([good]))
    (ep,) = load_episodes([str(path)])
    assert ep["turns"][0]["idx"] == 0 and ep["task"] == ""


def _answer_from_evidence(body: dict[str, Any]) -> dict[str, str]:
    user = body["messages"][-1]["content"]
    m = re.search(r"retries=\d+", user)
    return {"answer": m.group(0) if m else "not in the evidence"}


def _judge_by_gold(body: dict[str, Any]) -> dict[str, Any]:
    asked = json.loads(body["messages"][-1]["content"])
    return {"correct": asked["gold"] in asked["answer"], "reason": "compared"}


def test_the_judge_answers_from_the_context_then_grades_against_gold() -> None:
    with FakeOpenAI() as server:
        server.schema_replies = {
            "trajgraph_answer": _answer_from_evidence,
            "trajgraph_judge": _judge_by_gold,
        }
        settings = LLMSettings(base_url=server.url, model="judge-model", max_attempts=1)
        judge = Judge(ChatClient(settings, Stats()))
        assert judge.score("current retries?", "[turn 4] retries=5", "retries=5") is True
        assert judge.score("current retries?", "[turn 4] timeout=3", "retries=5") is False
        server.script("invalid_json")
        assert judge.score("current retries?", "[turn 4] retries=5", "retries=5") is False
        assert judge.invalid == 1
        asked = [r.body for r in server.chat_requests]
    first = asked[0]
    assert first["response_format"]["json_schema"]["strict"] is True
    assert (
        "<<<EVIDENCE>>>\n[turn 4] retries=5\n<<<END EVIDENCE>>>" in first["messages"][1]["content"]
    )
    assert "[turn 4]" not in first["messages"][0]["content"]  # evidence never in the system prompt
