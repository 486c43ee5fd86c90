"""Contracts agree with each other, and extraction stays verbatim on every real log."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajgraph.extractors import get_extractor
from trajgraph.extractors.base import verbatim_violations
from trajgraph.extractors.windows import build_windows
from trajgraph.pipelines.adapters import normalize, split_records
from trajgraph.schemas.parquet import ARROW_SCHEMA, TURN_ARROW_TYPE
from trajgraph.schemas.trajectory import json_schema


def test_arrow_schema_matches_the_json_schema() -> None:
    schema = json_schema()
    assert [f.name for f in ARROW_SCHEMA] == list(schema["properties"])
    turn_props = schema["$defs"]["turn"]["properties"]
    assert [f.name for f in TURN_ARROW_TYPE] == list(turn_props)
    required = set(schema["required"])
    for f in ARROW_SCHEMA:
        if f.name in required and f.name != "metadata":
            assert not f.nullable, f.name
    for f in TURN_ARROW_TYPE:
        assert f.nullable == (f.name not in schema["$defs"]["turn"]["required"]), f.name


@pytest.mark.parametrize("budget", [256, 2048])
def test_every_identifier_and_value_is_verbatim_in_its_window_on_real_logs(
    shared_dir: Path, budget: int
) -> None:
    extractor = get_extractor("heuristic")
    files = sorted(p for p in shared_dir.rglob("*") if p.is_file() and p.name != "README.md")
    windows = states = objects = 0
    for f in files:
        for record in split_records(str(f), f.read_bytes()):
            for traj in normalize(record):
                traj["tenant"] = "t"
                for window in build_windows(traj, budget_tokens=budget):
                    extraction = extractor.extract(window)
                    assert verbatim_violations(extraction, window) == [], (f.name, window.turn)
                    assert window.tokens <= budget
                    windows += 1
                    states += len(extraction.states)
                    objects += len(extraction.objects)
    assert windows == 93
    assert states > 50 and objects > 200
