"""Streaming assembly: events → trajectories, with TestStream for order, duplicates, late and
missing events, and the event parser's errors."""

from __future__ import annotations

import json
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to

from trajgraph.core.errors import InputError
from trajgraph.pipelines.stream_transforms import (
    AssembleTrajectoryFn,
    Line,
    apply_event,
    parse_event,
    trajectory_of,
)


def ev(idx: int | None = None, tid: str = "t1", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"trajectory_id": tid, **extra}
    if idx is not None:
        body.update(idx=idx, action=f"cmd {idx}", observation=f"out {idx}")
    line = Line("/logs/a.jsonl", f"line {idx}", json.dumps(body).encode())
    return parse_event(line, "default")


def test_parse_event_names_file_and_line() -> None:
    with pytest.raises(InputError, match=r"/x\.jsonl \[line 3\]: not JSON"):
        parse_event(Line("/x.jsonl", "line 3", b"{nope"), "default")
    with pytest.raises(InputError, match="trajectory_id"):
        parse_event(Line("/x.jsonl", "line 1", b'{"idx": 1}'), "default")
    with pytest.raises(InputError, match="integer idx"):
        parse_event(Line("/x.jsonl", "line 1", b'{"trajectory_id": "t", "idx": -1}'), "d")
    with pytest.raises(InputError, match="type must be"):
        parse_event(Line("/x.jsonl", "line 1", b'{"trajectory_id": "t", "type": "x"}'), "d")
    e = parse_event(Line("/x.jsonl", "line 1", b'{"trajectory_id": "t", "idx": 0}'), "team")
    assert (e["type"], e["tenant"], e["source"], e["locator"]) == (
        "turn",
        "team",
        "/x.jsonl",
        "line 1",
    )


def test_apply_event_orders_dedupes_and_replaces() -> None:
    rec: dict[str, Any] = {"turns": {}, "header": {}, "footer": {}}
    assert apply_event(rec, ev(2))
    assert apply_event(rec, ev(0))
    assert not apply_event(rec, ev(2))  # identical duplicate
    assert apply_event(rec, {**ev(2), "observation": "corrected"})  # same idx, new content
    assert apply_event(rec, ev(tid="t1", type="header", task="fix it"))
    assert apply_event(rec, ev(tid="t1", type="footer", outcome="passed"))
    assert not apply_event(rec, ev(tid="t1", type="footer", outcome="passed"))
    traj = trajectory_of(("default", "t1"), rec)
    assert [t["idx"] for t in traj["turns"]] == [0, 2]
    assert traj["turns"][1]["observation"] == "corrected"
    assert (traj["task"], traj["outcome"], traj["tenant"]) == ("fix it", "passed", "default")


def test_teststream_out_of_order_duplicate_late_and_missing_events() -> None:
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    stream = (
        TestStream()
        .add_elements([ev(1), ev(0)])  # out of order
        .advance_watermark_to(10)
        .add_elements([ev(1), ev(3)])  # a duplicate, then a gap (2 is missing)
        .advance_watermark_to(20)
        .add_elements([ev(2), ev(tid="t1", type="footer", outcome="ok")])  # late fill, footer
        .add_elements([ev(0, tid="t2")])  # another trajectory is independent
        .advance_watermark_to_infinity()
    )
    with TestPipeline(options=options) as p:
        emitted = (
            p
            | stream
            | beam.Map(lambda e: (f"{e['tenant']}\x1f{e['trajectory_id']}", e)).with_output_types(
                beam.typehints.KV[str, Any]
            )
            | beam.ParDo(AssembleTrajectoryFn())
            | beam.Map(
                lambda loc: (
                    loc.trajectory["id"],
                    tuple(t["idx"] for t in loc.trajectory["turns"]),
                    loc.trajectory.get("outcome"),
                )
            )
        )
        assert_that(
            emitted,
            equal_to(
                # One emission per bundle (a batch of TestStream elements, as a poll's
                # lines are one bundle), after its last event for the trajectory.
                [
                    ("t1", (0, 1), None),
                    ("t1", (0, 1, 3), None),  # the duplicate of 1 changed nothing
                    ("t1", (0, 1, 2, 3), "ok"),
                    ("t2", (0,), None),
                ]
            ),
        )
