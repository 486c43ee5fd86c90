"""The Beam transforms without Neo4j: TestPipeline + assert_that."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from trajgraph.demo import DEMO_ID, sample_trajectory
from trajgraph.graph.rows import GraphRows
from trajgraph.pipelines.adapters.base import RawRecord
from trajgraph.pipelines.transforms import BuildGraphRows, NormalizeTrajectories, ReadLogRecords


def _line(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def test_normalize_routes_bad_records_to_dead_letter_with_locators() -> None:
    good = sample_trajectory()
    no_turn_list = {**good, "id": "x", "turns": "oops"}
    records = [
        RawRecord("a.jsonl", "line 1", None, _line(good)),
        RawRecord("a.jsonl", "line 2", None, b'{"id": "trunc'),
        RawRecord("a.jsonl", "line 3", None, b"[1, 2]"),
        RawRecord("a.jsonl", "line 4", "canonical", _line(no_turn_list)),
    ]
    with BeamTestPipeline() as p:
        out = p | beam.Create(records) | NormalizeTrajectories("t1")
        assert_that(
            out["trajectories"] | beam.Map(lambda i: (i.trajectory["id"], i.trajectory["tenant"])),
            equal_to([(DEMO_ID, "t1")]),
            label="good",
        )
        assert_that(
            out["bad"] | beam.Map(lambda d: (d["source"], d["locator"], d["stage"])),
            _stages_ok,
            label="bad",
        )


def _stages_ok(actual: list[tuple[str, str, str]]) -> None:
    assert sorted(a[1] for a in actual) == ["line 2", "line 3", "line 4"]
    assert all(a[0] == "a.jsonl" for a in actual)
    assert {a[2] for a in actual} <= {"normalize", "validate"}


def test_read_then_build_rows_on_a_file(tmp_path: Path) -> None:
    path = tmp_path / "demo.jsonl"
    path.write_text(json.dumps(sample_trajectory()) + "\n{not json\n", encoding="utf-8")

    def check(rows: list[GraphRows]) -> None:
        assert len(rows) == 1
        r = rows[0].rows
        assert len(r["trajectories"]) == 1
        assert [t["props"]["idx"] for t in r["turns"]] == list(range(6))
        assert len(r["next"]) == 5
        assert r["states"] and r["objects"] and r["causes_turn_state"]
        assert r["complete"][0]["content_hash"] == rows[0].content_hash

    with BeamTestPipeline() as p:
        read = p | ReadLogRecords([str(path)], None, 1 << 20)
        norm = read["records"] | NormalizeTrajectories("default")
        built = norm["trajectories"] | BuildGraphRows("heuristic", 512)
        assert_that(built["rows"], check, label="rows")
        assert_that(
            norm["bad"] | beam.Map(lambda d: d["locator"]), equal_to(["line 2"]), label="bad"
        )


def test_duplicate_ids_keep_the_first_and_dead_letter_the_rest(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(json.dumps(sample_trajectory()) + "\n", encoding="utf-8")
    b.write_text(json.dumps(sample_trajectory()) + "\n", encoding="utf-8")
    with BeamTestPipeline() as p:
        read = p | ReadLogRecords([str(a), str(b)], None, 1 << 20)
        norm = read["records"] | NormalizeTrajectories("default")
        built = norm["trajectories"] | BuildGraphRows("heuristic", 512)
        assert_that(
            built["rows"] | beam.Map(lambda g: g.trajectory_uid) | beam.combiners.Count.Globally(),
            equal_to([1]),
            label="one",
        )
        assert_that(
            built["duplicates"] | beam.Map(lambda d: (d["source"], "duplicate" in d["reason"])),
            equal_to([(str(b), True)]),
            label="dup",
        )


def test_id_prefix_keeps_runs_of_one_benchmark_apart() -> None:
    record = RawRecord("run/a.jsonl", "line 1", None, _line(sample_trajectory()))
    with BeamTestPipeline() as p:
        out = p | beam.Create([record]) | NormalizeTrajectories("default", "gpt-4o/")
        assert_that(
            out["trajectories"] | beam.Map(lambda i: i.trajectory["id"]),
            equal_to([f"gpt-4o/{DEMO_ID}"]),
        )


def test_a_schema_invalid_trajectory_is_dead_lettered_with_its_file_and_record() -> None:
    bad = sample_trajectory()
    bad["turns"] = [bad["turns"][1], bad["turns"][0]]  # idx 1 before idx 0
    record = RawRecord("b.jsonl", "line 7", None, _line(bad))
    with BeamTestPipeline() as p:
        out = p | beam.Create([record]) | NormalizeTrajectories("default")
        assert_that(
            out["bad"] | beam.Map(lambda d: (d["stage"], d["source"], d["locator"], d["preview"])),
            equal_to([("validate", "b.jsonl", "line 7", DEMO_ID)]),
        )
