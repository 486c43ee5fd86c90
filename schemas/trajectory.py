"""The canonical trajectory contract: JSON Schema file, typed views, matching Arrow schema."""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources
from typing import Any, TypedDict

import jsonschema
import pyarrow as pa

from trajgraph.errors import SchemaValidationError
from trajgraph.schemas.field_hints import schema_hint
from trajgraph.schemas.ids import id_problem

DEFAULT_TENANT = "default"


class Turn(TypedDict, total=False):
    idx: int
    action: str
    observation: str
    thought: str | None
    reward: float | None
    timestamp: str | None
    actor: str | None


class Trajectory(TypedDict, total=False):
    id: str
    task: str
    source: str
    format: str
    outcome: str | None
    tenant: str
    metadata: dict[str, Any]
    turns: list[Turn]


@lru_cache(maxsize=1)
def json_schema() -> dict[str, Any]:
    schema_file = resources.files("trajgraph.schemas").joinpath("trajectory.schema.json")
    text = schema_file.read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@lru_cache(maxsize=1)
def _validator() -> jsonschema.protocols.Validator:
    schema = json_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def max_turn_idx() -> int:
    """The largest turn idx the contract allows (2^53 - 1: exact in JSON everywhere)."""
    limit: int = json_schema()["$defs"]["turn"]["properties"]["idx"]["maximum"]
    return limit


def validate(traj: dict[str, Any], *, locator: str = "") -> Trajectory:
    """Check one trajectory against the contract; fill defaults. Raises SchemaValidationError."""
    source = str(traj.get("source", "")) if isinstance(traj, dict) else ""
    errors = sorted(_validator().iter_errors(traj), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        path = "/".join(str(p) for p in first.absolute_path) or "(root)"
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        problem = id_problem(traj.get("id")) if list(first.absolute_path) == ["id"] else None
        message = f"id {problem}" if problem else first.message[:300]
        hint = schema_hint(
            str(first.validator),
            list(first.absolute_path),
            first.instance,
            first.schema if isinstance(first.schema, dict) else {},
        )
        message += f": {hint}" if hint else ""
        raise SchemaValidationError(
            f"schema-invalid at {path}: {message}{more}", source=source, locator=locator
        )
    last = -1
    for n, turn in enumerate(traj["turns"]):
        reward = turn.get("reward")
        if isinstance(reward, float) and not math.isfinite(reward):
            raise SchemaValidationError(
                f"schema-invalid at turns/{n}/reward: {reward} is not a finite number",
                source=source,
                locator=locator,
            )
        if turn["idx"] <= last:
            raise SchemaValidationError(
                f"turn idx {turn['idx']} is not after {last}: turns must be strictly increasing",
                source=source,
                locator=locator,
            )
        last = turn["idx"]
    traj.setdefault("tenant", DEFAULT_TENANT)
    traj.setdefault("outcome", None)
    return traj  # type: ignore[return-value]


TURN_ARROW_TYPE = pa.struct(
    [
        pa.field("idx", pa.int64(), nullable=False),
        pa.field("action", pa.large_string(), nullable=False),
        pa.field("observation", pa.large_string(), nullable=False),
        pa.field("thought", pa.large_string()),
        pa.field("reward", pa.float64()),
        pa.field("timestamp", pa.string()),
        pa.field("actor", pa.string()),
    ]
)

# metadata is free-form JSON in the contract, so Arrow carries it as JSON text.
ARROW_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("task", pa.large_string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("format", pa.string(), nullable=False),
        pa.field("outcome", pa.string()),
        pa.field("tenant", pa.string()),
        pa.field("metadata", pa.large_string(), nullable=False),
        pa.field("turns", pa.list_(TURN_ARROW_TYPE), nullable=False),
    ]
)

TURN_FIELDS = tuple(f.name for f in TURN_ARROW_TYPE)


def to_arrow(trajectories: list[Trajectory]) -> pa.Table:
    rows = []
    for t in trajectories:
        row = dict(t)
        row["metadata"] = json.dumps(t.get("metadata") or {}, sort_keys=True, ensure_ascii=False)
        row["turns"] = [{k: turn.get(k) for k in TURN_FIELDS} for turn in t["turns"]]
        row.setdefault("outcome", None)
        row.setdefault("tenant", DEFAULT_TENANT)
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=ARROW_SCHEMA)


def from_arrow_row(row: dict[str, Any]) -> dict[str, Any]:
    """One Arrow/Parquet row back to the JSON shape (metadata text decoded, null extras dropped)."""
    out = dict(row)
    meta = out.get("metadata")
    if isinstance(meta, str):
        out["metadata"] = json.loads(meta) if meta else {}
    elif meta is None:
        out["metadata"] = {}
    if out.get("tenant") is None:
        out.pop("tenant", None)
    out["turns"] = [
        {k: v for k, v in turn.items() if v is not None or k in ("action", "observation")}
        for turn in (out.get("turns") or [])
    ]
    return out
