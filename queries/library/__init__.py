"""The analyst Cypher library: ``queries/*.cypher`` files with a comment header.

Header lines (``// key: value``; continuation lines are indented) give name, purpose, params and
an example. Files run as written in Neo4j Browser; here they run in READ transactions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import neo4j

from trajgraph.errors import ConfigError, NotFoundError
from trajgraph.graph.connection import graph_errors

_HEADER = re.compile(r"^//\s?(\w+):\s*(.*)$")
QUERY_TIMEOUT_S = 30.0
MISSING_PARAMETER = "Neo.ClientError.Statement.ParameterMissing"


@dataclass(frozen=True)
class CypherQuery:
    name: str
    text: str
    header: dict[str, str]

    @property
    def purpose(self) -> str:
        return self.header.get("purpose", "")


def names() -> list[str]:
    return sorted(
        f.name.removesuffix(".cypher")
        for f in resources.files("trajgraph.queries").iterdir()
        if f.name.endswith(".cypher")
    )


def load(name: str) -> CypherQuery:
    if name not in names():
        raise NotFoundError("query", name, hint=f"available: {', '.join(names())}")
    text = resources.files("trajgraph.queries").joinpath(f"{name}.cypher").read_text("utf-8")
    header: dict[str, str] = {}
    key = None
    for line in text.splitlines():
        if not line.startswith("//"):
            break
        m = _HEADER.match(line)
        if m:
            key = m.group(1)
            header[key] = m.group(2).strip()
        elif key:
            header[key] += " " + line.lstrip("/ ").strip()
    return CypherQuery(name=name, text=text, header=header)


def run(
    driver: neo4j.Driver,
    name: str,
    params: dict[str, Any],
    *,
    database: str,
    timeout_s: float = QUERY_TIMEOUT_S,
) -> list[dict[str, Any]]:
    query = load(name)

    def work(tx: neo4j.ManagedTransaction) -> list[dict[str, Any]]:
        return [r.data() for r in tx.run(query.text, params)]

    with (
        graph_errors(f"query {name!r}"),
        driver.session(database=database, default_access_mode=neo4j.READ_ACCESS) as s,
    ):
        try:
            return s.execute_read(neo4j.unit_of_work(timeout=timeout_s)(work))
        except neo4j.exceptions.ClientError as e:
            if e.code != MISSING_PARAMETER:
                raise
            # The caller's to fix (exit 2 / ConfigError), not Neo4j failing (GraphError).
            raise ConfigError(
                f"query {name!r}: {e.message}; pass each as --param NAME=VALUE (null for none). "
                f"Its params: {query.header.get('params', '?')}"
            ) from e
