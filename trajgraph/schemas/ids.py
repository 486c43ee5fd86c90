"""The one rule for trajectory ids, shared by ingest, the HTTP API, MCP and the CLI.

The rule is the ``trajectory_id`` definition of ``trajectory.schema.json`` (the contract);
this module reads it from there, so ingest (schema validation), request validation and the
CLI cannot drift apart: 1 to 512 characters, none of them a control character (C0, DEL,
C1), a line or paragraph separator, a bidirectional override or a lone surrogate. Anything
else is allowed, ``/`` included: tau-bench ids are ``<file>/task0-trial0`` and
``--id-prefix gpt-4o/`` is the README's own example. How such ids travel in a URL is the
HTTP API's business (trajgraph/api/paths.py, docs/serving.md).

The same character class decides what the CLI escapes before printing: a log is untrusted,
and an ESC or a CSI (``\\x9b``) in it must not reach a terminal raw.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

# The characters no id may hold (and the CLI never prints raw): the schema's "not" pattern,
# which is core's class (tests/unit/schemas tie them).
from trajgraph.core.text import UNPRINTABLE as UNPRINTABLE
from trajgraph.core.text import escape_char
from trajgraph.core.text import escape_unprintable as escape_unprintable


class InvalidId(ValueError):
    """A trajectory id the rule refuses. A ValueError, so request models (pydantic) report
    it as a validation error; the CLI reports it as a bad argument."""


@lru_cache(maxsize=1)
def _definition() -> dict[str, Any]:
    # Beside this module, read as a file: importlib.resources costs the hook client (which
    # escapes what it prints with this module) about 8 ms of imports on every tool call.
    text = Path(__file__).with_name("trajectory.schema.json").read_text(encoding="utf-8")
    definition: dict[str, Any] = json.loads(text)["$defs"]["trajectory_id"]
    return definition


MAX_ID_CHARS: int = _definition()["maxLength"]


def id_problem(value: object) -> str | None:
    """Why ``value`` is not a valid trajectory id, or None when it is."""
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__}"
    if not value:
        return "must not be empty"
    if len(value) > MAX_ID_CHARS:
        return f"is {len(value)} characters, over {MAX_ID_CHARS}"
    bad = UNPRINTABLE.search(value)
    if bad is not None:
        return f"holds the control character {escape_char(bad.group())} at position {bad.start()}"
    return None


def check_id(value: str, what: str = "trajectory id") -> str:
    """``value`` when it is a valid id; InvalidId (saying why) otherwise."""
    problem = id_problem(value)
    if problem is not None:
        raise InvalidId(f"{what} {problem}")
    return value
