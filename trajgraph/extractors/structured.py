"""Structured output on every OpenAI-compatible server: which request shape each one understands.

Servers that all speak the chat-completions protocol disagree on how a JSON Schema is sent:

- ``json_schema``: ``response_format: {type: json_schema, json_schema: {strict: true, ...}}``
  (OpenAI, vLLM, llama.cpp's ``llama-server``, Ollama >= 0.5, LM Studio);
- ``json_object_schema``: ``response_format: {type: json_object, schema: S}`` (llama-cpp-python's
  server, whose grammar then enforces S);
- ``guided_json``: ``guided_json: S`` in the request body (vLLM before ``response_format``
  schemas);
- ``json_object``: JSON mode, S written into the system prompt (most servers);
- ``prompt``: nothing but S in the prompt (any chat server).

One probe per server (``GET /models``, cached for the process) tells which server it is (the
models' ``owned_by``), and so which dialect to try first; a request the server rejects *for its
format* — 400 or 422, or a 500 whose message names the format, as llama-cpp-python answers a
``json_schema`` — moves down that server's chain, and the dialect that worked is kept for the
server. Replies are validated against the full schema in every dialect: structured output only
makes invalid replies rarer.

Bounds. The contract's schemas carry ``maxLength``/``maxItems`` (schemas/extraction.py): without
them a small model copies a whole ``cat`` output into one value and stops at ``max_tokens`` with
truncated JSON. OpenAI's strict mode refuses those keywords, so its dialect sends the schema
without them (the reply is still validated with them). A reply cut off anyway is salvaged by
``salvage_truncated``: the last complete items are kept, the rest dropped.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# The ways a server can be asked for JSON: declared with the setting that picks one
# (TRAJGRAPH_LLM_RESPONSE_FORMAT), so that settings need not import this stage.

# What each kind of server is asked in turn (the first is what the probe's answer suggests).
CHAINS: dict[str, tuple[str, ...]] = {
    "openai": ("json_schema", "json_object", "prompt"),
    "llama-cpp-python": ("json_object_schema", "json_object", "prompt"),
    "llama.cpp": ("json_schema", "json_object_schema", "json_object", "prompt"),
    "vllm": ("json_schema", "guided_json", "json_object", "prompt"),
    "ollama": ("json_schema", "json_object", "prompt"),
    "lmstudio": ("json_schema", "prompt"),
    "unknown": ("json_schema", "json_object_schema", "json_object", "prompt"),
}
# owned_by in GET /models → server kind (first match wins; compared lower-case).
_OWNERS = (
    ("llamacpp", "llama.cpp"),
    ("vllm", "vllm"),
    ("library", "ollama"),
    ("ollama", "ollama"),
    ("organization_owner", "lmstudio"),
    ("openai", "openai"),
    ("system", "openai"),
)
BOUND_KEYWORDS = frozenset({"maxLength", "minLength", "maxItems", "minItems"})
# The largest bound a schema may carry: llama.cpp turns {0,n} into n nested grammar rules, and
# its parser *aborts the server process* past about 2,000 ("number of rules that are going to
# be repeated ... exceeds sane defaults"): a maxLength of 2000 killed llama-cpp-python 0.3.36.
MAX_BOUND = 1000
SCHEMA_IN_PROMPT = "\nReply with one JSON object only, valid against this JSON Schema:\n"
# Error text that says the request's *format* was refused (not the prompt, not the model).
_FORMAT_WORDS = re.compile(
    r"response_format|json_schema|json_object|guided_json|grammar|schema|format|'text'",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Shape:
    """What one dialect adds to a chat request."""

    dialect: str
    response_format: dict[str, Any] | None
    extra_body: dict[str, Any] | None
    schema_in_prompt: bool
    schema_sent: dict[str, Any] | None  # the schema as a request parameter (for token counts)


def shape(dialect: str, name: str, schema: dict[str, Any], server: str = "unknown") -> Shape:
    """The request fields of ``dialect`` for ``schema`` on a server of kind ``server``."""
    if dialect == "json_schema":
        sent = without_bounds(schema) if server == "openai" else schema
        fmt = {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": sent}}
        return Shape(dialect, fmt, None, False, sent)
    if dialect == "json_object_schema":
        return Shape(dialect, {"type": "json_object", "schema": schema}, None, False, schema)
    if dialect == "guided_json":
        return Shape(dialect, None, {"guided_json": schema}, False, schema)
    if dialect == "json_object":
        return Shape(dialect, {"type": "json_object"}, None, True, None)
    if dialect == "prompt":
        return Shape(dialect, None, None, True, None)
    raise ValueError(f"unknown structured-output dialect {dialect!r}")


def with_schema_in_prompt(
    messages: Sequence[dict[str, str]], schema: dict[str, Any]
) -> list[dict[str, str]]:
    """``messages`` with the schema appended to the system message (one is added if none)."""
    text = SCHEMA_IN_PROMPT + json.dumps(schema, separators=(",", ":"))
    out = [dict(m) for m in messages]
    for m in out:
        if m.get("role") == "system":
            m["content"] = m["content"] + text
            return out
    return [{"role": "system", "content": text.lstrip()}, *out]


def without_bounds(schema: Any) -> Any:
    """``schema`` without length and size keywords (OpenAI's strict mode refuses them)."""
    if isinstance(schema, list):
        return [without_bounds(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    return {
        k: (
            {n: without_bounds(s) for n, s in v.items()}
            if k in ("properties", "$defs")
            else without_bounds(v)
        )
        for k, v in schema.items()
        if k not in BOUND_KEYWORDS
    }


def server_kind(base_url: str | None, owners: Sequence[str]) -> str:
    """Which server answers at ``base_url``, from the ``owned_by`` of its models (the probe)."""
    if not base_url or "api.openai.com" in base_url:
        return "openai"
    lowered = [o.lower() for o in owners if isinstance(o, str)]
    if lowered and all(o == "me" for o in lowered):
        return "llama-cpp-python"  # its /models says owned_by "me"
    for needle, kind in _OWNERS:
        if any(needle in o for o in lowered):
            return kind
    return "unknown"


def is_format_rejection(status: int | None, message: str) -> bool:
    """Did the server refuse the request's structured-output format (so another may work)?

    A 400 or 422 (how servers refuse a parameter) or a 500 (llama-cpp-python's answer to
    ``json_schema``), each only when its message names the format: a 400 for a prompt that is
    too long, or a 500 of an outage, is not a reason to change dialects."""
    if status is None or not (status in (400, 422) or status >= 500):
        return False
    return bool(_FORMAT_WORDS.search(message))


class Negotiator:
    """Per server (base URL and model), the kind and the dialect that works, shared by every
    client in the process so that each server is probed once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kind: dict[str, str] = {}
        self._position: dict[str, int] = {}

    def kind(self, key: str) -> str | None:
        with self._lock:
            return self._kind.get(key)

    def set_kind(self, key: str, kind: str) -> None:
        with self._lock:
            self._kind.setdefault(key, kind)

    def position(self, key: str) -> int:
        with self._lock:
            return self._position.get(key, 0)

    def settle(self, key: str, position: int) -> None:
        """``position`` in the chain worked (a later position wins: an earlier one failed)."""
        with self._lock:
            self._position[key] = max(self._position.get(key, 0), position)

    def forget(self) -> None:
        with self._lock:
            self._kind.clear()
            self._position.clear()


NEGOTIATOR = Negotiator()


def loads_reply(text: str) -> Any:
    """A model's JSON reply. Control characters inside strings are allowed (``strict=False``):
    llama.cpp's JSON grammar lets a model write a raw newline or tab in a string, which the
    strict parser refuses (SmolLM2 did, on real windows); the value is the same either way."""
    return json.loads(text, strict=False)


# -- truncated replies ------------------------------------------------------------------------


def salvage_truncated(text: str, schema: dict[str, Any], *, tries: int = 64) -> Any | None:
    """The longest prefix of a reply cut off at ``max_tokens`` that closes into a value valid
    against ``schema``: the last complete items are kept, the partial one dropped, and required
    lists that were never reached are empty. None when no such prefix exists."""
    import jsonschema

    start = text.find("{")
    if start < 0:
        return None
    cuts = _cut_points(text, start)
    for end, closers in reversed(cuts[-tries:]):
        try:
            value = loads_reply(text[start:end] + closers)
        except json.JSONDecodeError:
            continue
        value = _fill_required(value, schema, schema)
        try:
            jsonschema.validate(value, schema)
        except jsonschema.ValidationError:
            continue
        return value
    return None


def _cut_points(text: str, start: int) -> list[tuple[int, str]]:
    """Places where the text can be cut and closed: before a comma between items, and just
    after an opening bracket; each with the closing brackets needed there."""
    stack: list[str] = []
    out: list[tuple[int, str]] = []
    in_string = escaped = False
    for i in range(start, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
            continue
        if c == '"':
            in_string = True
        elif c in "{[":
            stack.append("}" if c == "{" else "]")
            out.append((i + 1, "".join(reversed(stack))))
        elif c in "}]":
            if not stack:
                break
            stack.pop()
            if not stack:
                out.append((i + 1, ""))
                break
        elif c == ",":
            out.append((i, "".join(reversed(stack))))
    return out


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return target if isinstance(target, dict) else {}
    return node


def _fill_required(value: Any, node: dict[str, Any], root: dict[str, Any]) -> Any:
    node = _resolve(node, root)
    if isinstance(value, dict):
        props = node.get("properties", {})
        out = {k: _fill_required(v, props.get(k, {}), root) for k, v in value.items()}
        for name in node.get("required", []):
            if name not in out and _resolve(props.get(name, {}), root).get("type") == "array":
                out[name] = []
        return out
    if isinstance(value, list):
        items = node.get("items", {})
        return [_fill_required(v, items, root) for v in value]
    return value
