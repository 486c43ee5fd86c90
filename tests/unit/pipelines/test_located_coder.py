"""The shuffle coder of normalized trajectories: lossless, smaller, and the one Beam picks."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.coders import FastPrimitivesCoder

from trajgraph.pipelines.adapters.base import Located
from trajgraph.pipelines.transforms import LocatedCoder


def _located() -> Located:
    turns = [
        {"idx": i, "action": f"pytest tests/test_{i % 7}.py -q", "observation": "1 passed\n" * 40}
        for i in range(60)
    ]
    traj = {"id": "t-1", "tenant": "a", "task": "fix it ✓", "turns": turns, "metadata": {}}
    return Located("/logs/x.jsonl", "line 3", traj)


def test_round_trip_and_compression() -> None:
    item = _located()
    coder = LocatedCoder()
    encoded = coder.encode(item)
    assert coder.decode(encoded) == item
    assert len(encoded) * 4 < len(FastPrimitivesCoder().encode(item))


def test_the_group_by_trajectory_uses_it() -> None:
    coder = beam.coders.registry.get_coder(beam.typehints.KV[str, Located])
    assert isinstance(coder, beam.coders.TupleCoder)
    assert isinstance(coder.coders()[1], LocatedCoder)
