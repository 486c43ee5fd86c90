"""The content hash decides whether a re-ingest rewrites a trajectory or skips it."""

from __future__ import annotations

import pytest

from trajgraph.graph import rows
from trajgraph.schemas.extraction import TrajectoryExtraction


def test_a_new_graph_model_rewrites_trajectories_of_unchanged_input(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An upgrade that writes other nodes or properties from the same extraction must not
    # find the old subgraph "unchanged" (docs/nightly.md: --rescan after upgrading).
    traj = {"id": "t", "source": "/a", "turns": [{"idx": 0, "action": "ls", "observation": "x"}]}
    extraction = TrajectoryExtraction()
    before = rows.content_hash(traj, extraction, extractor="heuristic")
    assert rows.content_hash({**traj, "source": "/b"}, extraction, extractor="heuristic") == before
    monkeypatch.setattr(rows, "GRAPH_MODEL", rows.GRAPH_MODEL + 1)
    assert rows.content_hash(traj, extraction, extractor="heuristic") != before
