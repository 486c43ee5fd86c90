"""The canonical trajectory as Arrow (Parquet files): the one module that imports pyarrow for
the contract, so that the API, the MCP server and the hook, which never read Parquet, do not
pay for it (0.4 s and its memory). Its columns are the JSON Schema's
(tests/unit/schemas/test_contracts.py)."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from trajgraph.core.env import DEFAULT_TENANT
from trajgraph.schemas.trajectory import Trajectory

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
