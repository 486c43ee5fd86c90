"""`trajgraph eval` end to end: synthetic and user episodes, the real Neo4j, every method."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from trajgraph.evaluation import harness as evaluation
from trajgraph.evaluation.synthetic import generate
from trajgraph.settings import Settings


def test_trajgraph_finds_the_needles_a_similarity_baseline_misses(
    neo4j_settings: Settings,
) -> None:
    episode = generate(3, 16_000)
    rows = evaluation.evaluate(
        [episode], neo4j_settings, 2000, methods=["bm25", "long_context", "trajgraph_auto"]
    )
    assert len(rows) == 3 * len(episode["qa_pairs"])

    def mean(method: str, kind: str) -> float:
        values = [
            r["needle_recall"]
            for r in rows
            if r["method"] == method and r["type"] == kind and r["needle_recall"] is not None
        ]
        return statistics.mean(values)

    # The failing run names the test; only the graph links it to the edit that broke it.
    assert mean("trajgraph_auto", "causal") >= 0.9 > mean("bm25", "causal")
    assert mean("trajgraph_auto", "state_updating") >= 0.9
    assert mean("long_context", "causal") < 0.5
    assert all(0 <= r["coverage"] <= 1 for r in rows)


def test_the_command_scores_a_users_episode_file(
    neo4j_settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    episode = {
        "id": "user-episode",
        "task": "fix the port",
        "turns": [
            {"action": "cat app.env", "observation": "PORT=8081\nHOST=0.0.0.0"},
            {"action": "ls", "observation": "app.env\nserver.py"},
            {"action": "sed -i 's/^PORT=.*/PORT=8080/' app.env", "observation": ""},
            {"action": "python server.py", "observation": "listening on 0.0.0.0:8080"},
        ],
        "qa_pairs": [
            {
                "question": "What is the current PORT in app.env?",
                "answer": "PORT=8080",
                "type": "state_updating",
                "needles": [2],
            },
            {
                "question": "Which address did the server listen on?",
                "answer": "0.0.0.0:8080",
                "type": "recall",
            },
        ],
    }
    path = tmp_path / "episodes.json"
    path.write_text(json.dumps([episode]))
    code = evaluation.main(
        [str(path), "--methods", "bm25", "trajgraph_auto", "--budget", "500", "--json"]
    )
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    assert {(r["method"], r["type"]) for r in rows} == {
        (m, t) for m in ("bm25", "trajgraph_auto") for t in ("state_updating", "recall")
    }
    ours = {r["type"]: r for r in rows if r["method"] == "trajgraph_auto"}
    assert ours["state_updating"]["needle_recall"] == 1.0
    assert ours["recall"]["needle_recall"] is None  # no needles given: coverage only
    assert ours["recall"]["coverage"] == 1.0
