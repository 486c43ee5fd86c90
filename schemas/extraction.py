"""The extraction contract: what an extractor (heuristic or LLM) returns for one window,
and what the per-trajectory merge hands to the graph writer.

Endpoints of edges are string references so the same shape works as strict JSON for an LLM:
``turn:N`` is the action of turn N, ``state:KEY`` a state of this extraction, ``object:NAME``
an object by its verbatim name.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

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


class ObjectItem(_Strict):
    name: str = Field(description="The identifier exactly as it appears in the window text.")
    kind: ObjectKind
    turns: list[int] = Field(description="Turns whose action or observation mention it.")


class StateItem(_Strict):
    key: str = Field(description="Unique within this extraction, e.g. 's1'.")
    subject: str = Field(description="What the state is about: a verbatim identifier or label.")
    attribute: str = Field(description="Which property of the subject, e.g. 'exit_code'.")
    value: str = Field(description="The value, verbatim from the window.")
    kind: StateKind
    turn: int = Field(description="The turn whose observation shows this state.")
    text: str = Field(description="One readable line describing the state.")


class CauseItem(_Strict):
    src: str = Field(description="'turn:N' or 'state:KEY'.")
    dst: str = Field(description="'turn:N' or 'state:KEY'.")
    turns: list[int] = Field(description="Evidence turns.")
    reason: str = ""


class AssociationItem(_Strict):
    a: str = Field(description="'state:KEY' or 'object:NAME'.")
    b: str = Field(description="'state:KEY' or 'object:NAME'.")
    turns: list[int]


class WindowExtraction(_Strict):
    """One window (observation t-1, action t, observation t) → states, objects, edges."""

    turn: int
    states: list[StateItem] = Field(default_factory=list)
    objects: list[ObjectItem] = Field(default_factory=list)
    causes: list[CauseItem] = Field(default_factory=list)
    associations: list[AssociationItem] = Field(default_factory=list)
    extractor: str = "heuristic"


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
