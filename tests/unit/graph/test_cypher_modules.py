"""Where Cypher lives (issue 32): the write side's edge statements are generated from one
template over a fixed list, and the retrieval modes are declared once for every door."""

from __future__ import annotations

import argparse
import re
import typing

from trajgraph.graph import cypher
from trajgraph.graph.rows import ROW_KINDS
from trajgraph.graph.writer import STATEMENTS
from trajgraph.queries.retrieval.modes import MODES, Mode

EDGE = re.compile(
    r"\AUNWIND \$rows AS row\n"
    r"MATCH \(a:(?P<src>\w+) \{uid: row\.src\}\)\n"
    r"MATCH \(b:(?P<dst>\w+) \{uid: row\.dst\}\)\n"
    r"MERGE \(a\)-\[r:(?P<rel>\w+)\]->\(b\)\n"
    r"(?P<set>SET [^\n]*)\n\Z"
)


def test_every_edge_kind_has_one_generated_statement_of_its_shape() -> None:
    assert set(cypher.MERGE_EDGES) <= set(ROW_KINDS)
    assert set(STATEMENTS) == set(ROW_KINDS)
    seen = set()
    for kind, statement in cypher.MERGE_EDGES.items():
        m = EDGE.match(statement.lstrip("\n"))
        assert m, (kind, statement)
        # The row kind names its shape: causes_turn_state is (:Turn)-[:CAUSES]->(:State).
        rel, *ends = kind.split("_")
        assert m["rel"] == rel.upper()
        if ends:
            assert [m["src"].lower(), m["dst"].lower()] == ends
        else:
            assert (m["src"], m["dst"]) == ("State", "State")
        # Causal edges keep their reason and extractor; the others their turns only.
        expected = (
            "SET r.turns = row.turns, r.reason = row.reason, r.extractor = row.extractor"
            if m["rel"] == "CAUSES"
            else "SET r.turns = row.turns"
        )
        assert m["set"] == expected
        assert STATEMENTS[kind] is statement
        seen.add((m["src"], m["rel"], m["dst"]))
    assert len(seen) == len(cypher.MERGE_EDGES) == 8


def test_the_retrieval_modes_are_one_declaration_for_every_door() -> None:
    from trajgraph.api import RetrieveBody
    from trajgraph.cli import _parser
    from trajgraph.limits import Mode as LimitsMode

    assert MODES == ("auto", "embedding", "graph", "keyword", "code")
    assert typing.get_args(Mode) == MODES
    assert LimitsMode is Mode
    schema = RetrieveBody.model_json_schema()["properties"]["mode"]
    assert tuple(schema["enum"]) == MODES
    commands = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    search = commands.choices["search"]
    (mode,) = [a for a in search._actions if a.dest == "mode"]
    assert tuple(mode.choices or ()) == MODES
