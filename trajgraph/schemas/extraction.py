"""The extraction contract: what an extractor (heuristic or LLM) returns for one window,
and what the per-trajectory merge hands to the graph writer.

Endpoints of edges are string references so the same shape works as strict JSON for an LLM:
``turn:N`` is the action of turn N, ``state:KEY`` a state of this extraction, ``object:NAME``
an object by its verbatim name.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

ObjectKind = Literal[
    "path",
    "url",
    "command",
    "sql",
    "table",
    "column",
    "element",
    "error",
    "quoted",
    "number",
    "symbol",
    "key",
    "other",
]

StateKind = Literal[
    "exit_code",
    "error",
    "line_added",
    "line_removed",
    "value",
    "file_changed",
    "status",
    "other",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# Bounds of an LLM's reply, in its JSON Schema only (``json_schema_extra``: pydantic does not
# enforce them, so the heuristic's own findings are never cut). They let a grammar-constrained
# small model stop: without them SmolLM2 copied a whole `cat` output into one value and ran
# into max_tokens with truncated JSON. Replies are not held to them (see llm_reply._validator).
MAX_WINDOWS_PER_REQUEST = 16
MAX_NAME = 200  # identifiers, subjects
MAX_TEXT = 300  # values, one-line texts, reasons
MAX_REF = 220  # "turn:N", "state:KEY", "object:NAME"
MAX_TURNS = 8  # evidence turns of one item


def _chars(n: int) -> Any:
    return {"maxLength": n}


def _items(n: int) -> Any:
    return {"maxItems": n}


class ObjectItem(_Strict):
    name: str = Field(
        description="The identifier exactly as it appears in the window text.",
        json_schema_extra=_chars(MAX_NAME),
    )
    kind: ObjectKind
    turns: list[int] = Field(
        description="Turns whose action or observation mention it.",
        json_schema_extra=_items(MAX_TURNS),
    )


class StateItem(_Strict):
    key: str = Field(
        description="Unique within the reply, e.g. 's1'.", json_schema_extra=_chars(32)
    )
    subject: str = Field(
        description="What the state is about: a verbatim identifier or label.",
        json_schema_extra=_chars(MAX_NAME),
    )
    attribute: str = Field(
        description="Which property of the subject, e.g. 'exit_code'.",
        json_schema_extra=_chars(64),
    )
    value: str = Field(
        description="The value, verbatim from the window.", json_schema_extra=_chars(MAX_TEXT)
    )
    kind: StateKind
    turn: int = Field(description="The turn whose observation shows this state.")
    text: str = Field(
        description="One readable line describing the state.", json_schema_extra=_chars(MAX_TEXT)
    )
    # Provenance, stamped by trajgraph (never asked of a model, so not in the JSON Schema).
    extractor: SkipJsonSchema[str | None] = Field(default=None, exclude_if=lambda v: v is None)


class CauseItem(_Strict):
    src: str = Field(description="'turn:N' or 'state:KEY'.", json_schema_extra=_chars(MAX_REF))
    dst: str = Field(description="'turn:N' or 'state:KEY'.", json_schema_extra=_chars(MAX_REF))
    turns: list[int] = Field(description="Evidence turns.", json_schema_extra=_items(MAX_TURNS))
    reason: str = Field(default="", json_schema_extra=_chars(MAX_TEXT))


class AssociationItem(_Strict):
    a: str = Field(description="'state:KEY' or 'object:NAME'.", json_schema_extra=_chars(MAX_REF))
    b: str = Field(description="'state:KEY' or 'object:NAME'.", json_schema_extra=_chars(MAX_REF))
    turns: list[int] = Field(json_schema_extra=_items(MAX_TURNS))


class WindowFindings(_Strict):
    """What a model reports for one window (observation t-1, action t, observation t)."""

    turn: int = Field(description="The turn N of the window (its action and observation).")
    states: list[StateItem] = Field(default_factory=list, json_schema_extra=_items(12))
    objects: list[ObjectItem] = Field(default_factory=list, json_schema_extra=_items(16))
    causes: list[CauseItem] = Field(default_factory=list, json_schema_extra=_items(8))
    associations: list[AssociationItem] = Field(default_factory=list, json_schema_extra=_items(8))


class WindowExtraction(WindowFindings):
    """One window's findings plus which extractor produced them."""

    extractor: str = "heuristic"


class ExtractionReply(_Strict):
    """The LLM's reply to one request: one item per window it was asked about."""

    windows: list[WindowFindings] = Field(json_schema_extra=_items(MAX_WINDOWS_PER_REQUEST))


class SupersedesItem(_Strict):
    newer: str = Field(description="'state:KEY' of the later state.")
    older: str = Field(
        description="'state:KEY' of the earlier state of the same subject+attribute."
    )
    turns: list[int]


class TrajectoryExtraction(_Strict):
    """All windows of one trajectory merged: state keys are unique trajectory-wide, objects are
    one per verbatim name, and SUPERSEDES chains link states of the same subject+attribute."""

    states: list[StateItem] = Field(default_factory=list)
    objects: list[ObjectItem] = Field(default_factory=list)
    causes: list[CauseItem] = Field(default_factory=list)
    associations: list[AssociationItem] = Field(default_factory=list)
    supersedes: list[SupersedesItem] = Field(default_factory=list)


# Keywords strict structured outputs reject ("default") or that only cost prompt tokens on
# every request: the extraction prompt explains the fields once, the schema gives the shape.
_DROPPED = ("default", "title", "description")


def strict_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON Schema of ``model`` in the strict form structured-output servers require: every
    object closed (``additionalProperties: false``) with all its properties required, and no
    defaults or prose. Replies are validated against exactly this schema."""
    return _strict(model.model_json_schema())


def _strict(node: Any) -> Any:
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k in _DROPPED:
            continue
        named = k in ("properties", "$defs")  # maps of names to schemas, not schemas
        out[k] = {n: _strict(sub) for n, sub in v.items()} if named else _strict(v)
    if out.get("type") == "object" or "properties" in out:
        out["additionalProperties"] = False
        out["required"] = list(out.get("properties", {}))
    return out


def reply_json_schema() -> dict[str, Any]:
    """The strict schema of an LLM extraction reply (see ExtractionReply)."""
    return strict_json_schema(ExtractionReply)
