"""The evaluation harness around the scores: episode files, the LLM judge, tables and plots."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI
from trajgraph.core.errors import TrajgraphError
from trajgraph.core.settings import LLMSettings
from trajgraph.evaluation.harness import (
    by_horizon,
    domain_table,
    load_episodes,
    markdown,
    markdown_real,
    plot,
)
from trajgraph.evaluation.judge import Judge
from trajgraph.extractors.base import Stats
from trajgraph.extractors.llm_client import ChatClient


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


def test_plot_without_matplotlib_fails_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A user's install has no matplotlib (it is the `eval` extra): --plot must say so at once,
    # not after minutes of ingest and retrieval whose tables are then lost.
    from trajgraph.evaluation import harness

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError

    def ran(*_a: object, **_k: object) -> None:
        raise AssertionError("the evaluation ran although the plot could not be drawn")

    monkeypatch.setattr(harness, "evaluate", ran)
    argv = ["--synthetic", "--horizons", "8000", "--plot", str(tmp_path / "p.png")]
    with pytest.raises(TrajgraphError, match=re.escape("pip install 'trajgraph[eval]'")):
        harness.main(argv)


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


def _ama(episode_id: int, domain: str) -> dict[str, Any]:
    return {
        "episode_id": episode_id,
        "task": "Put a book on the desk.",
        "domain": domain,
        "num_turns": 2,
        "trajectory": [
            {"turn_idx": 0, "action": "look", "observation": "You see a desk 1."},
            {"turn_idx": 1, "action": "go to desk 1", "observation": "On the desk 1: a book 3."},
        ],
        "qa_pairs": [
            {"question": "What is on desk 1 at step 1?", "answer": "book 3", "type": "C"},
            {"question": "What did the agent do first?", "answer": "look", "type": "A"},
        ],
    }


def test_ama_bench_files_load_as_they_are(tmp_path: Path) -> None:
    (tmp_path / "alfworld-3.json").write_text(json.dumps(_ama(3, "Embodied AI")))
    (tmp_path / "webarena-3.json").write_text(json.dumps(_ama(3, "Web Task Execution")))
    (tmp_path / "README.md").write_text("not an episode")
    eps = load_episodes([str(tmp_path)])
    # One episode per file: the file name is its id (AMA-Bench ids repeat across domains).
    assert [e["id"] for e in eps] == ["alfworld-3", "webarena-3"]
    ep = eps[0]
    assert ep["domain"] == "Embodied AI" and ep["task"] == "Put a book on the desk."
    assert [(t["idx"], t["action"]) for t in ep["turns"]] == [(0, "look"), (1, "go to desk 1")]
    assert [q["type"] for q in ep["qa_pairs"]] == ["state_updating", "recall"]
    bad = _ama(4, "x")
    bad["trajectory"][1]["turn_idx"] = "one"
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(TrajgraphError, match=re.escape(f"{tmp_path / 'bad.json'}: record 1")):
        load_episodes([str(tmp_path)])


def test_the_real_data_tables_report_capabilities_domains_and_the_ceiling() -> None:
    rows = [
        {"episode": e, "question": q, "method": m, "type": t, "domain": d, "coverage": c}
        for e, q, t, d in (("e1", "q1", "recall", "Web"), ("e2", "q2", "causal", "Games"))
        for m, c in (("bm25", 0.25), ("trajgraph_auto", 0.5), ("whole_trajectory", 1.0))
    ]
    rows.append(
        {
            "episode": "e2",
            "question": "q3",
            "method": "bm25",
            "type": "causal",
            "domain": "Games",
            "coverage": None,
        }
    )
    md = markdown_real(rows).splitlines()
    assert md[0] == "| coverage (2 questions) | recall | causal | overall | × ceiling |"
    assert md[3] == "| trajgraph_auto | 0.500 | 0.500 | 0.500 | 0.50 |"
    assert md[4] == "| whole_trajectory | 1.000 | 1.000 | 1.000 | 1.00 |"
    assert md[6] == "| by domain | Games | Web |"
    assert md[8] == "| bm25 | 0.250 | 0.250 |"
    by_domain = domain_table(rows).splitlines()
    assert by_domain[0].split() == ["coverage", "Games", "Web", "overall"]
    assert by_domain[2].split() == ["trajgraph_auto", "0.50", "0.50", "0.50"]
