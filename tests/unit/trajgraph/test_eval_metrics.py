"""The evaluation harness's scoring and baselines (no database)."""

from __future__ import annotations

from trajgraph.evaluation.harness import bm25, coverage, long_context, needle_recall, table
from trajgraph.evaluation.synthetic import generate
from trajgraph.pipelines.tokens import count_tokens


def test_needle_recall_and_coverage() -> None:
    ctx = "[ep turn 3 · state]\nretries=5\n[turn 7]\naction: pytest"
    assert needle_recall(ctx, [3, 7]) == 1.0
    assert needle_recall(ctx, [3, 9]) == 0.5
    assert needle_recall(ctx, []) is None  # a count has no needle turns
    assert coverage(ctx, "retries=5") == 1.0
    assert coverage(ctx, "timeout=30") == 0.0


def test_baselines_stay_within_budget_and_bm25_finds_the_needle() -> None:
    ep = generate(4, 16_000)
    qa = next(q for q in ep["qa_pairs"] if q["type"] == "recall")
    for method in (long_context, bm25):
        ctx = method(ep, qa["question"], 1500)
        assert count_tokens(ctx) <= 1500
    turn = next(t["idx"] for t in ep["turns"] if t["action"].startswith("sha256sum"))
    assert needle_recall(bm25(ep, "sha256sum checksum dist/app.tar.gz", 1500), [turn]) == 1.0


def test_table_has_a_row_per_method_and_a_column_per_capability() -> None:
    rows = [
        {"method": "a", "type": "recall", "needle_recall": 1.0, "coverage": 1.0},
        {"method": "a", "type": "causal", "needle_recall": 0.0, "coverage": 0.5},
        {"method": "b", "type": "recall", "needle_recall": 0.5, "coverage": 0.5},
    ]
    text = table(rows).splitlines()
    assert text[0].split() == ["needle_recall", "causal", "recall", "overall"]
    assert text[1].split() == ["a", "0.00", "1.00", "0.50"]
    assert text[2].split() == ["b", "-", "0.50", "0.50"]
