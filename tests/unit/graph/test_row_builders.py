"""graph/rows.py builds rows one node or edge kind at a time (``BUILDERS``): each builder
writes only the kinds it declares, the kinds are the writer's statements in write order,
and the edge kinds are exactly the generated edge statements of graph/cypher.py."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from trajgraph.extractors import get_extractor
from trajgraph.extractors.merge import merge
from trajgraph.extractors.windows import build_windows
from trajgraph.graph import cypher, rows
from trajgraph.graph.writer import STATEMENTS
from trajgraph.pipelines.adapters import normalize, split_records
from trajgraph.schemas.trajectory import validate


def _real_trajectory(shared_dir: Path) -> tuple[dict[str, Any], Any]:
    path = shared_dir / "swe-agent" / "pydicom__pydicom-1458.traj"
    [record] = split_records(str(path), path.read_bytes())
    [traj] = normalize(record)
    traj = dict(validate(traj, locator=record.locator))
    extractor = get_extractor("heuristic")
    try:
        batch = extractor.extract_windows(build_windows(traj, budget_tokens=2000), task="")
    finally:
        extractor.close()
    return traj, merge(traj["turns"], batch.extractions)


def test_each_builder_writes_only_its_own_kinds(shared_dir: Path) -> None:
    traj, extraction = _real_trajectory(shared_dir)
    b = rows.Build.start(traj, extraction, extractor="heuristic", content_hash="h")
    for builder in rows.BUILDERS:
        before = copy.deepcopy(b.rows)
        builder.build(b)
        changed = {k for k in b.rows if b.rows[k] != before[k]}
        assert changed <= set(builder.kinds), (builder.kinds, changed)
    # The log is rich enough that this says something: nodes and causal edges were built.
    assert b.rows["turns"] and b.rows["states"] and any(b.rows[k] for k in rows.BUILDERS[5].kinds)
    whole = rows.build_rows(traj, extraction, extractor="heuristic", content_hash="h")
    assert whole.rows == b.rows and whole.dropped == b.out.dropped


def test_row_kinds_are_the_builders_kinds_in_write_order() -> None:
    kinds = list(rows.ROW_KINDS)
    assert kinds == [k for builder in rows.BUILDERS for k in builder.kinds]
    assert len(set(kinds)) == len(kinds) and set(STATEMENTS) == set(kinds)
    assert kinds[-1] == "complete"
    at = kinds.index
    # An edge statement MATCHes its endpoints: they are written before it.
    assert at("turns") < at("next")
    assert all(max(at("turns"), at("states"), at("objects")) < at(k) for k in cypher.MERGE_EDGES)
    assert max(at("turns"), at("resolutions")) < at("resolution_steps")


def test_edge_kinds_are_the_generated_edge_statements() -> None:
    built = {
        k
        for b in rows.BUILDERS
        for k in b.kinds
        if k.startswith(("causes_", "associated_", "supersedes"))
    }
    assert built == set(cypher.MERGE_EDGES)
