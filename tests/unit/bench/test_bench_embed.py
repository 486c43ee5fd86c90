"""bench/embed_ingest.py reads AMA-Bench episodes for the harness and averages coverage per
capability; bench/write_path.py's raw side writes every row kind the writer writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.embed_ingest import coverage_table, episode_files, load_episodes, report
from bench.write_path import RAW, RAW_ORDER, build_graph_rows, raw_rows, synthetic_trajectory
from tests.trajectories import ama_episode
from trajgraph.graph.rows import ROW_KINDS

EPISODE = ama_episode(
    "7",
    "Put a clean mug on the shelf.",
    "ALFWorld",
    [
        ("go to sink 1", "You see a mug 2."),
        ("take mug 2", {"inventory": ["mug 2"]}),
    ],
    qa_pairs=[
        {"question": "What did the agent take at step 1?", "answer": "mug 2", "type": "A"},
        {"question": "Why could it take the mug?", "answer": "it was at sink 1", "type": "B"},
        {"question": "Odd one", "answer": "x", "type": "Z"},
    ],
)


def test_ama_episodes_are_read_as_the_evaluation_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "alfworld-7.json"
    path.write_text(json.dumps(EPISODE))
    (tmp_path / "README.md").write_text("not an episode")
    assert episode_files(tmp_path) == [path]
    (ep,) = load_episodes([path])
    assert ep["id"] == "alfworld-7"  # the file's name: episode ids repeat across domains
    assert [t["idx"] for t in ep["turns"]] == [0, 1]
    assert '"inventory"' in ep["turns"][1]["observation"]
    assert [q["type"] for q in ep["qa_pairs"]][:2] == ["recall", "causal"]


def test_coverage_is_averaged_per_capability_and_overall() -> None:
    rows: list[dict[str, Any]] = [
        {"method": "trajgraph_auto", "type": "recall", "coverage": 1.0},
        {"method": "trajgraph_auto", "type": "recall", "coverage": 0.0},
        {"method": "trajgraph_auto", "type": "causal", "coverage": 0.5},
        {"method": "trajgraph_embedding", "type": "causal", "coverage": 0.25},
        {"method": "trajgraph_embedding", "type": "causal", "coverage": None},
    ]
    table = coverage_table(rows)
    assert table["trajgraph_auto"] == {"causal": 0.5, "overall": 0.5, "recall": 0.5}
    assert table["trajgraph_embedding"] == {"causal": 0.25, "overall": 0.25}


def test_the_report_checks_coverage_against_minilm_and_lists_answer_turn_recall() -> None:
    def result(cov: float, atr: float | None) -> dict[str, Any]:
        rows = [
            {
                "episode": "ep",
                "question": "q",
                "method": "trajgraph_auto",
                "type": "recall",
                "coverage": cov,
                "answer_turn_recall": atr,
            }
        ]
        return {
            "wall_s": 10.0,
            "turns": 100,
            "embedded": 200,
            "model_texts": 150,
            "peak_mib": 300.0,
            "coverage": coverage_table(rows),
            "answer_turn_recall": coverage_table(rows, "answer_turn_recall"),
            "rows": rows,
        }

    out = report({"local": result(0.5, 1.0), "static": result(0.48, None)}, "local")
    assert "static: lowest difference to local -0.020 (NOT within 0.01" in out
    assert "recall: -0.020 - one episode: no interval" in out  # one episode: no spread
    atr = out.split("answer turn recall, trajgraph_auto")[1]
    assert "1.000" in atr and "lowest difference" not in atr  # the goal is on coverage
    assert atr.splitlines()[-1].split() == ["static", "-", "-"]  # no step in its answers


def test_the_raw_side_writes_every_row_kind_and_each_identifier_once() -> None:
    assert set(RAW) == {*ROW_KINDS, "identifiers"} == set(RAW_ORDER)
    assert RAW_ORDER.index("identifiers") < RAW_ORDER.index("objects")
    trajectories = [synthetic_trajectory(i, 12) for i in range(3)]
    graph_rows = build_graph_rows(trajectories, "bench.jsonl", 2048, "")
    raw = raw_rows(graph_rows)
    objects = [o for g in graph_rows for o in g.rows["objects"]]
    assert len(raw["objects"]) == len(objects) > 0
    assert len(raw["identifiers"]) == len({o["identifier_uid"] for o in objects})
    assert len(raw["identifiers"]) < len(objects)  # shared by the tenant's trajectories
    assert len(raw["turns"]) == 36
