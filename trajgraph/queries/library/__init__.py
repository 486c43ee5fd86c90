"""The analyst Cypher library: ``queries/*.cypher`` files with a comment header.

Header lines (``// key: value``; continuation lines are indented) give name, purpose, params and
an example. Files run as written in Neo4j Browser; here they run in READ transactions.

The ``params`` line is the contract of a query's parameters: ``name (description)`` items; a
description starting with ``int`` makes an integer parameter (``int 1..10``: a range; ``at
least N``: a lower bound), any other a string, and ``or null`` allows null. ``run`` checks
the values against it before Neo4j sees them, so a parameter left out, misspelt or of the wrong
type is the caller's ``ConfigError`` naming it, never an empty answer or a Neo4j message.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import neo4j

from trajgraph.core.errors import ConfigError, GraphError, NotFoundError
from trajgraph.graph.connection import graph_errors

_HEADER = re.compile(r"^//\s?(\w+):\s*(.*)$")
_RANGE = re.compile(r"^int (-?\d+)\.\.(-?\d+)")
_AT_LEAST = re.compile(r"\bat least (-?\d+)")
QUERY_TIMEOUT_S = 30.0
TIMED_OUT = "Neo.ClientError.Transaction.TransactionTimedOutClientConfiguration"
# Neo4j's integers are 64-bit; a larger one fails in the driver, not as an empty answer.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class Param:
    """One ``name (description)`` item of a query's ``params`` header."""

    name: str
    description: str
    kind: str  # "int" or "string"
    nullable: bool
    low: int | None = None
    high: int | None = None

    def check(self, query: str, value: Any) -> None:
        if value is None:
            if not self.nullable:
                raise ConfigError(
                    f"query {query!r}: {self.name} cannot be null ({self.name}: {self.description})"
                )
            return
        if self.kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise self._wrong(query, value, "an integer")
            low = INT_MIN if self.low is None else self.low
            high = INT_MAX if self.high is None else self.high
            if not low <= value <= high:
                raise ConfigError(
                    f"query {query!r}: {self.name} must be between {low} and {high}, got "
                    f"{value if abs(value) < 10**30 else 'a larger number'}"
                )
        elif not isinstance(value, str):
            raise self._wrong(query, value, "a string")

    def _wrong(self, query: str, value: Any, expected: str) -> ConfigError:
        shown = json.dumps(value, default=str)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        return ConfigError(
            f"query {query!r}: {self.name} must be {expected}"
            f"{' or null' if self.nullable else ''} ({self.name}: {self.description}), "
            f"got {type(value).__name__} {shown}"
        )


@dataclass(frozen=True)
class CypherQuery:
    name: str
    text: str
    header: dict[str, str]

    @property
    def purpose(self) -> str:
        return self.header.get("purpose", "")

    @property
    def params(self) -> dict[str, Param]:
        return {p.name: p for p in parse_params(self.header.get("params", ""))}


def parse_params(spec: str) -> list[Param]:
    """The items of a ``params`` header: 'a (string), b (int 1..10), c (x, or null)'."""
    items, depth, part = [], 0, ""
    for ch in spec + ",":
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            if part.strip():
                items.append(part.strip())
            part = ""
        else:
            part += ch
    params = []
    for item in items:
        name, _, rest = item.partition(" ")
        description = rest.strip().removeprefix("(").removesuffix(")")
        kind = "int" if description.startswith("int") else "string"
        low = high = None
        if m := _RANGE.match(description):
            low, high = int(m.group(1)), int(m.group(2))
        elif kind == "int" and (m := _AT_LEAST.search(description)):
            low = int(m.group(1))
        nullable = "or null" in description
        params.append(Param(name, description, kind, nullable, low, high))
    return params


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


def check_params(query: CypherQuery, params: dict[str, Any]) -> None:
    """ConfigError unless ``params`` are exactly the query's, each of its documented type."""
    spec = query.params
    hint = f"Its params: {query.header.get('params', '?')}"
    unknown = sorted(set(params) - set(spec))
    if unknown:
        raise ConfigError(
            f"query {query.name!r} has no parameter {', '.join(map(repr, unknown))}. {hint}"
        )
    missing = [name for name in spec if name not in params]
    if missing:
        raise ConfigError(
            f"query {query.name!r}: expected parameter(s) {', '.join(map(repr, missing))}; "
            f"pass each as --param NAME=VALUE (null for none). {hint}"
        )
    for name, param in spec.items():
        param.check(query.name, params[name])


def coerce_text_params(name: str, raw: dict[str, str]) -> dict[str, Any]:
    """Values typed on a command line, read by the query's header: ``null`` is null; an int
    parameter's text is an integer; a string parameter keeps its text (a trajectory id
    ``123`` stays a string; a JSON string literal is decoded). Unknown names pass as JSON or
    text, for ``check_params`` to name."""
    spec = load(name).params
    out: dict[str, Any] = {}
    for key, text in raw.items():
        param = spec.get(key)
        if text == "null":
            out[key] = None
        elif param is not None and param.kind == "string":
            out[key] = _json_or_text(text) if text.startswith('"') else text
        elif param is not None and re.fullmatch(r"-?\d+", text.strip()):
            out[key] = int(text)
        else:
            out[key] = _json_or_text(text)
    return out


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def run(
    driver: neo4j.Driver,
    name: str,
    params: dict[str, Any],
    *,
    database: str,
    timeout_s: float = QUERY_TIMEOUT_S,
) -> list[dict[str, Any]]:
    query = load(name)
    check_params(query, params)

    def work(tx: neo4j.ManagedTransaction) -> list[dict[str, Any]]:
        return [r.data() for r in tx.run(query.text, params)]

    with (
        graph_errors(f"query {name!r}"),
        driver.session(database=database, default_access_mode=neo4j.READ_ACCESS) as s,
    ):
        try:
            return s.execute_read(neo4j.unit_of_work(timeout=timeout_s)(work))
        except neo4j.exceptions.ClientError as e:
            if e.code != TIMED_OUT:
                raise
            raise GraphError(
                f"query {name!r} took longer than its {timeout_s:g} s limit and was stopped; "
                "narrow it (a trajectory instead of null, a smaller depth or limit)"
            ) from e
