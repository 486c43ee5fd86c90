"""Keyword search inside one trajectory at the cost of that trajectory, not of its tenant.

The full-text indexes span every tenant. Ranking the whole index and filtering by trajectory
afterwards costs what the tenant costs: at 1 M nodes a common word ("test") matches most of
the tenant's turns, and the engine fetched up to 100,000 hits to keep k of one trajectory
(453 ms p95). The indexes also hold each node's ``trajectory_uid`` (graph/schema.py
FULLTEXT), so the question's Lucene query is asked with a required clause on it:
``+trajectory_uid:tr_… ^0 +(action:(…) observation:(…))``. Lucene then walks only that
trajectory's postings, and the clause's boost of 0 leaves every hit's score exactly what the
tenant-wide query gives it (BM25 statistics are per field, and the question's fields are
named explicitly so that its words never match the uid field): the ranking, and so the
answers, do not change.

A graph whose indexes predate the uid field (created before this, not yet migrated by
``ensure_schema``) is asked the tenant-wide way: ``Retriever.fulltext_scoped`` says which.
The Cypher is queries/retrieval/cypher.py's (``TRAJECTORY_FULLTEXT_HITS``, ``FULLTEXT_SCOPED``).
"""

from __future__ import annotations

import re

# The fields of each full-text index that hold text (the question's words are matched in
# these, by name), and the one that scopes a query to a trajectory.
TEXT_FIELDS: dict[str, tuple[str, ...]] = {
    "turn_text": ("action", "observation"),
    "state_text": ("text", "subject", "value"),
}
SCOPE_FIELD = "trajectory_uid"

# A trajectory uid is "tr_" and 32 hex digits (graph/node_ids.py): one Lucene term as it stands.
_UID = re.compile(r"tr_[0-9a-f]{32}")


def text_query(index: str, query: str) -> str:
    """``query`` over the text fields of ``index`` by name: unnamed, Lucene would also match
    its words against the uid field (and count a clause more per term and field)."""
    return " ".join(f"{f}:({query})" for f in TEXT_FIELDS[index])


def scoped_query(index: str, query: str, tuid: str) -> str:
    """``query`` (a Lucene query of terms and phrases, its special characters escaped, as
    lexical.lucene_query builds it) over the text fields of ``index``, restricted to the
    trajectory ``tuid`` by a clause that adds nothing to the score."""
    if not _UID.fullmatch(tuid):
        raise ValueError(f"not a trajectory uid: {tuid!r}")
    return f"+{SCOPE_FIELD}:{tuid}^0 +({text_query(index, query)})"
