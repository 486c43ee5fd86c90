"""The limits of every request the HTTP API and the MCP server take, defined once.

Each argument a remote caller can send is one annotated type here; the API's bodies and query
parameters and the MCP tools' signatures both use them, so a question, an id, a budget or a
piece of code is bounded the same way whichever door it comes in by (the OpenAPI document
and the MCP tool schemas show the same bounds). Out-of-range values are refused with a
validation error (HTTP 422, an MCP tool error), never clamped.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from trajgraph.queries import lessons as lessons_mod
from trajgraph.queries.memory import brief as brief_mod
from trajgraph.queries.memory.remind import MAX_ACTION_CHARS
from trajgraph.queries.memory.store import MAX_TURN
from trajgraph.queries.retrieval.base import MAX_BUDGET, MAX_DEPTH, MAX_K
from trajgraph.queries.retrieval.modes import Mode as Mode  # the API and MCP take it from here
from trajgraph.schemas.ids import MAX_ID_CHARS, check_id
from trajgraph.schemas.trajectory import max_turn_idx

MAX_BODY_BYTES = 64 * 1024  # one HTTP request body (MCP over HTTP: one JSON-RPC message)
# An OTLP trace export (POST /v1/traces): a batch of spans, as received and once inflated.
OTLP_MAX_BODY_BYTES = 4 * 1024 * 1024
OTLP_MAX_INFLATED_BYTES = 16 * 1024 * 1024
BODY_TIMEOUT_S = 10.0  # to receive a whole body once its headers arrived
HEADER_TIMEOUT_S = 10.0  # from a connection's start (or its last answer) to a request's headers
REQUEST_TIMEOUT_S = 30.0  # one request's work (HTTP 504 after it)
MAX_QUESTION_CHARS = 4000
MAX_CODE_CHARS = 20_000
MAX_IDENTIFIER_CHARS = 1000
MIN_BUDGET = 50
# An error text in a URL (GET /v1/lessons); a longer traceback goes in a POST body.
MAX_QUERY_ERROR_CHARS = 4000

Question = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_QUESTION_CHARS,
        description=f"A question in plain words (1 to {MAX_QUESTION_CHARS} characters).",
    ),
]
TrajectoryId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_ID_CHARS,
        description=f"A trajectory id: 1 to {MAX_ID_CHARS} characters, no control characters; "
        "'/' is allowed.",
    ),
    AfterValidator(check_id),
]
Budget = Annotated[
    int, Field(ge=MIN_BUDGET, le=MAX_BUDGET, description="Tokens of evidence to return.")
]
K = Annotated[int, Field(ge=1, le=MAX_K, description="Similarity seeds to start from.")]
Depth = Annotated[int, Field(ge=1, le=MAX_DEPTH, description="Hops along causal edges.")]
Turn = Annotated[int, Field(ge=0, le=max_turn_idx(), description="A turn's idx.")]
BeforeTurn = Annotated[
    int,
    Field(ge=0, le=MAX_TURN, description="Answer as of before this turn (replays)."),
]
BriefBudget = Annotated[
    int,
    Field(
        ge=brief_mod.MIN_BUDGET, le=brief_mod.MAX_BUDGET, description="Tokens the brief may use."
    ),
]
Code = Annotated[
    str,
    Field(
        max_length=MAX_CODE_CHARS,
        description="Python over `turns`, run in the sandbox; assign the answer to `result`.",
    ),
]
NextAction = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_ACTION_CHARS,
        description="The action the agent is about to take, as it would be logged.",
    ),
]
Identifier = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_IDENTIFIER_CHARS,
        description="An exact identifier: a path, command, selector or error string.",
    ),
]
ErrorText = Annotated[
    str,
    Field(
        min_length=1,
        max_length=lessons_mod.MAX_ERROR_CHARS,
        description="An error text as logged (a whole traceback is fine).",
    ),
]
QueryErrorText = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_QUERY_ERROR_CHARS,
        description="An error text as logged; longer ones: POST the same fields as JSON.",
    ),
]
LessonsBudget = Annotated[
    int,
    Field(
        ge=lessons_mod.MIN_BUDGET,
        le=lessons_mod.MAX_BUDGET,
        description="Tokens the lessons may use.",
    ),
]
