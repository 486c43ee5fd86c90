"""`trajgraph stream`'s status and exit code at its own end (--duration, the end of stdin):
ingest's rule, stale vectors included (tests/unit/trajgraph/test_ingest_job.py)."""

from __future__ import annotations

from typing import Any

import pytest

from trajgraph.jobs import stream

BASE = {"events": 4, "trajectories_written": 4, "space_moved_to": None, "stale_vectors": 0}


@pytest.mark.parametrize(
    ("changes", "status", "code", "named"),
    [
        ({}, "ok", 0, {}),
        ({"dead_lettered": 1}, "partial", 3, {"dead_lettered": 1}),
        ({"windows_failed": 2}, "partial", 3, {"windows_failed": 2}),
        ({"windows_degraded": 1}, "partial", 3, {"windows_degraded": 1}),
        ({"embed_failed": 3}, "partial", 3, {"embed_failed": 3}),
        # A reembed moved the graph while the stream wrote vectors of the old model.
        ({"space_moved_to": "hash-32", "stale_vectors": 5}, "partial", 3, {"stale_vectors": 5}),
        ({"space_moved_to": "hash-32", "stale_vectors": 0}, "ok", 0, {}),
    ],
)
def test_the_end_of_a_stream_is_ok_or_partial_as_an_ingests(
    changes: dict[str, Any], status: str, code: int, named: dict[str, int]
) -> None:
    assert stream.finished({**BASE, **changes}) == (status, code, named)


def test_every_counter_a_monitor_reads_is_there_even_at_zero() -> None:
    counts = stream._counts({"events": 2})
    assert counts["events"] == 2
    assert all(counts[k] == 0 for k in stream.COUNTERS if k != "events")
    assert {"dead_lettered", "embed_failed", "windows_failed"} <= set(stream.COUNTERS)
