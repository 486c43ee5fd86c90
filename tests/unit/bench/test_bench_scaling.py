"""bench/scaling.py writes AMA-Bench episode files the pipeline's adapters read back whole."""

from __future__ import annotations

from pathlib import Path

from bench.scaling import write_episodes
from trajgraph.pipelines.adapters import normalize, split_records


def test_episode_files_hold_the_turns_they_claim(tmp_path: Path) -> None:
    episodes, turns = write_episodes(tmp_path, 150, per_file=2, seed0=7)
    files = sorted(tmp_path.glob("*.jsonl"))
    assert len(files) == (episodes + 1) // 2
    found = []
    for f in files:
        for rec in split_records(str(f), f.read_bytes()):
            found.extend(normalize(rec))
    assert len(found) == episodes and turns >= 150
    assert sum(len(t["turns"]) for t in found) == turns
    assert {t["format"] for t in found} == {"ama-bench"}
    assert found[0]["id"] == "scale-000007"
