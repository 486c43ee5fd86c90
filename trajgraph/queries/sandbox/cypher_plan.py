"""The plan check of the caller's read-only Cypher (queries/retrieval/caller_cypher.py).

User code and user Cypher are one security boundary: the Python runs in the sandbox's child
process, the Cypher in a READ transaction with a timeout, and its plan is checked first here
for what a READ transaction allows but is not the graph.
"""

from __future__ import annotations

import re
from typing import Any

# The procedures the caller's Cypher may call: reads of this database's graph and schema.
# Every other one is refused, db.* included (db.stats.* collects and returns other sessions'
# queries and the JVM's details, db.clearQueryCaches and db.prepareForReplanning act on the
# server, db.awaitIndex* wait).
GRAPH_PROCEDURES = frozenset(
    {
        "db.labels",
        "db.relationshipTypes",
        "db.propertyKeys",
        "db.schema.visualization",
        "db.schema.nodeTypeProperties",
        "db.schema.relTypeProperties",
        "db.index.fulltext.queryNodes",
        "db.index.fulltext.queryRelationships",
        "db.index.vector.queryNodes",
        "db.index.vector.queryRelationships",
    }
)


def outside_the_graph(plan: dict[str, Any] | None, database: str) -> str | None:
    """What in a query plan reaches beyond ``database``'s graph, though a READ transaction
    allows it: LOAD CSV (reads the server's files, fetches URLs), SHOW and administration
    commands, TERMINATE TRANSACTIONS (other sessions' work), procedures outside
    GRAPH_PROCEDURES (``dbms.listConfig`` is the server's configuration), another database,
    in the plan's operators or in the nested plans of its expressions. None when there is
    nothing of the kind."""
    stack = [plan] if plan else []
    while stack:
        op = stack.pop()
        kind, _, where = str(op.get("operatorType", "")).partition("@")
        details = str((op.get("args") or {}).get("Details", ""))
        # A subquery inside an expression (`[x IN l | COLLECT { ... }]`, CASE, reduce) is a
        # nested plan: no operator of the tree, only text in its operator's Details.
        if kind == "LoadCSV" or _NESTED_LOAD_CSV.search(details):
            return "LOAD CSV"
        if kind.startswith("Show"):
            return "SHOW " + kind.removeprefix("Show")
        if kind.startswith("Terminate"):
            return "TERMINATE " + kind.removeprefix("Terminate").upper()
        if kind.startswith("Administration") or (where and where.lower() != database.lower()):
            return f"an administration command or another database ({where or kind})"
        called = _NESTED_CALL.findall(details)
        if kind.startswith("ProcedureCall"):
            called.append(details.split("(")[0].strip())
        for name in called:
            if name not in GRAPH_PROCEDURES:
                return f"the procedure {name or '?'}"
        stack.extend(op.get("children") or [])
    return None


# How a plan's Details show a nested plan's LOAD CSV and procedure call (string literals are
# parameters there, so the text of a value cannot match).
_NESTED_LOAD_CSV = re.compile(r"\bLOAD\s+CSV\b", re.IGNORECASE)
_NESTED_CALL = re.compile(r"ResolvedCall\(\s*([^\s(]*)\s*\(")
