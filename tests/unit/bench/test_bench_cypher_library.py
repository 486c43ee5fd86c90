"""bench/cypher_library.py: the plan warnings the library's plan test relies on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.cypher_library import plan_warnings
from trajgraph.queries import library

PARAMS = Path(__file__).resolve().parents[3] / "bench" / "cypher_library_django.json"


def _op(kind: str, details: str = "", *children: dict[str, Any]) -> dict[str, Any]:
    return {"operatorType": f"{kind}@neo4j", "args": {"Details": details}, "children": children}


def test_plan_warnings_name_scans_products_and_path_walks() -> None:
    clean = _op(
        "ProduceResults",
        "",
        _op("VarLengthExpand(Pruning,BFS,All)", "(t)<-[:CAUSES*0..10]-(n)"),
        _op("NodeIndexSeek", "RANGE INDEX t:Turn(trajectory_uid, idx)"),
    )
    assert plan_warnings(clean) == []
    bad = _op(
        "ProduceResults",
        "",
        _op("CartesianProduct", "", _op("AllNodesScan", "n")),
        _op("VarLengthExpand(All)", "(a)-[anon_2:CAUSES*..12]->(b)"),
        _op("VarLengthExpand(Pruning,BFS,All)", "(s)-[:SUPERSEDES*..2147483647]->(old)"),
    )
    assert plan_warnings(bad) == [
        "AllNodesScan",
        "CartesianProduct",
        "VarLengthExpand(All) (paths)",
        "VarLengthExpand(Pruning,BFS,All) unbounded",
    ]


def test_the_django_params_name_library_queries_and_their_params() -> None:
    params = json.loads(PARAMS.read_text("utf-8"))
    assert sorted(params) == library.names()
    for name, values in params.items():
        spec = library.load(name).params
        library.check_params(library.load(name), {"tenant": "t", **values})
        assert set(values) == set(spec) - {"tenant"}
