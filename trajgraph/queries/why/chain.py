"""The why-chain: what led to a turn or a state, upstream along CAUSES, rendered for people."""

from __future__ import annotations

from typing import Any

import neo4j

from trajgraph.core.errors import ConfigError, NotFoundError
from trajgraph.queries import library

MAX_DEPTH = 10
TEXT_CHARS = 160


def why_chain(
    driver: neo4j.Driver,
    *,
    database: str,
    tenant: str,
    trajectory: str,
    turn: int | None = None,
    state: str | None = None,
    depth: int = 3,
    timeout_s: float = library.QUERY_TIMEOUT_S,
) -> list[dict[str, Any]]:
    if (turn is None) == (state is None):
        raise ConfigError("give exactly one of --turn or --state")
    if not 1 <= depth <= MAX_DEPTH:
        raise ConfigError(f"--depth must be between 1 and {MAX_DEPTH}, got {depth}")
    found = library.run(
        driver,
        "trajectories",
        {"tenant": tenant, "trajectory": trajectory},
        database=database,
        timeout_s=timeout_s,
    )
    if not found:
        raise NotFoundError("trajectory", trajectory, tenant=tenant)
    if turn is not None and turn < 0:
        raise ConfigError(f"--turn must be a turn index (0 or more), got {turn}")
    return library.run(
        driver,
        "why_chain",
        {"tenant": tenant, "trajectory": trajectory, "turn": turn, "state": state, "depth": depth},
        database=database,
        timeout_s=timeout_s,
    )


def _one_line(text: str) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= TEXT_CHARS else flat[: TEXT_CHARS - 1] + "…"


def render_text(chain: list[dict[str, Any]], *, trajectory: str, target: str, depth: int) -> str:
    if not chain:
        return f"why {target} of {trajectory} (depth {depth}): no such turn or state in the graph"
    label_of = {row["uid"]: f"{row['kind']} at turn {row['turn']}" for row in chain}
    lines = [f"why {target} of {trajectory} (depth {depth}, {len(chain)} steps, oldest first):"]
    for row in chain:
        label = "action" if row["kind"] == "action" else "state "
        lines.append(f"  turn {row['turn']:>4}  {label}  {_one_line(row['text'])}")
        if row["identifiers"]:
            lines.append(f"{'':17}identifiers: {', '.join(row['identifiers'])}")
        leads = sorted({label_of[u] for u in row["leads_to"] if u in label_of})
        if leads:
            lines.append(f"{'':17}→ caused: {'; '.join(leads)}")
    return "\n".join(lines)
