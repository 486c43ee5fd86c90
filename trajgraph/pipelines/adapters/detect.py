"""Format sniffing: which adapter a parsed JSON value belongs to.

Each predicate looks only at the top-level shape (a few keys, the first elements), never at
the whole log, so sniffing stays cheap on large files. Order matters where shapes overlap:
canonical (``turns``) and AMA-bench (``episode_id`` + ``trajectory``) are tried before
SWE-agent, whose ``.traj`` also has a ``trajectory`` list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trajgraph.schemas.field_hints import DOC, near_miss_hint

# What each format looks like, for error messages that tell the user what was tried.
SHAPES: dict[str, str] = {
    "canonical": "object with a 'turns' list",
    "ama-bench": "object with 'episode_id' and a 'trajectory' list",
    "swe-agent": "object with a 'trajectory' list of steps and 'history'/'info'",
    "mini-swe-agent": "object with 'messages' and trajectory_format 'mini-swe-agent*'",
    "openhands": "array of events with 'action'/'observation' (or object with such 'history')",
    "tau-bench": "object (or array of them) with a 'traj' message list",
    "spider-agent": "object (or array of them) with a 'conversation' message list",
    "claude-code": "JSONL of Claude Code transcript records ('type' user/assistant/..., "
    "'sessionId', 'uuid')",
    "codex": "JSONL of Codex CLI rollout lines ({'timestamp', 'type': session_meta / "
    "turn_context / response_item / event_msg / compacted, 'payload'})",
    "messages": "chat messages (OpenAI role/content/tool_calls, LangChain type/content, or "
    "Responses items: function_call/function_call_output), as an array or under "
    "'messages', 'input' or 'output'",
    "otel-genai": "OpenTelemetry spans with gen_ai.* attributes: OTLP/JSON 'resourceSpans', "
    "or SDK span JSON (a list of spans, or 'spans')",
}

# Record types of a Claude Code transcript: the one list (here, so that sniffing does not
# import the adapter).
_CLAUDE_CODE_TYPES = frozenset(
    {
        "user",
        "assistant",
        "file-history-snapshot",
        "queue-operation",
        "last-prompt",
        "system",
        "summary",
        "progress",
    }
)


def _is_list_of_dicts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, dict) for v in value[:5])


def is_canonical(obj: Any) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("turns"), list)


def is_ama_bench(obj: Any) -> bool:
    if not isinstance(obj, dict) or not _is_list_of_dicts(obj.get("trajectory")):
        return False
    steps = obj["trajectory"]
    return "episode_id" in obj or "qa_pairs" in obj or (bool(steps) and "turn_idx" in steps[0])


def is_swe_agent(obj: Any) -> bool:
    if not isinstance(obj, dict) or not _is_list_of_dicts(obj.get("trajectory")):
        return False
    steps = obj["trajectory"]
    has_steps = not steps or ("action" in steps[0] and "observation" in steps[0])
    return has_steps and ("history" in obj or "info" in obj or "environment" in obj)


def is_mini_swe_agent(obj: Any) -> bool:
    if not isinstance(obj, dict) or not _is_list_of_dicts(obj.get("messages")):
        return False
    if str(obj.get("trajectory_format", "")).startswith("mini-swe-agent"):
        return True
    info = obj.get("info")
    return isinstance(info, dict) and "mini_version" in info


def _is_event(value: Any) -> bool:
    return isinstance(value, dict) and ("action" in value or "observation" in value)


def is_openhands(obj: Any) -> bool:
    if isinstance(obj, list):
        return bool(obj) and all(_is_event(e) for e in obj[:20]) and _is_event(obj[-1])
    if isinstance(obj, dict):
        history = obj.get("history")
        return (
            isinstance(history, list) and bool(history) and all(_is_event(e) for e in history[:20])
        )
    return False


def is_tau_bench(obj: Any) -> bool:
    return isinstance(obj, dict) and _is_list_of_dicts(obj.get("traj"))


def is_spider_agent(obj: Any) -> bool:
    return isinstance(obj, dict) and _is_list_of_dicts(obj.get("conversation"))


def is_claude_code_record(obj: Any) -> bool:
    """One line of a Claude Code transcript."""
    if not isinstance(obj, dict) or obj.get("type") not in _CLAUDE_CODE_TYPES:
        return False
    if obj["type"] == "file-history-snapshot":
        return "snapshot" in obj or "messageId" in obj
    if obj["type"] == "summary":
        return "leafUuid" in obj
    return "sessionId" in obj and (
        "uuid" in obj or obj["type"] in ("queue-operation", "last-prompt")
    )


def is_claude_code(obj: Any) -> bool:
    """A JSON array of transcript records (JSONL files are sniffed line by line)."""
    if isinstance(obj, list):
        return bool(obj) and all(is_claude_code_record(r) for r in obj[:5])
    return is_claude_code_record(obj)


# Line types of a Codex rollout (codex.LINE_TYPES, kept here so that sniffing does not import
# the adapter).
_CODEX_TYPES = frozenset(
    {"session_meta", "turn_context", "response_item", "event_msg", "compacted"}
)


def is_codex_record(obj: Any) -> bool:
    """One line of a Codex CLI rollout: ``{"timestamp", "type", "payload": {...}}``."""
    return (
        isinstance(obj, dict)
        and obj.get("type") in _CODEX_TYPES
        and isinstance(obj.get("payload"), dict)
        and "timestamp" in obj
    )


def is_codex(obj: Any) -> bool:
    """A JSON array of rollout lines (JSONL files are sniffed line by line)."""
    if isinstance(obj, list):
        return bool(obj) and all(is_codex_record(r) for r in obj[:5])
    return is_codex_record(obj)


def _is_span(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("name"), str)
        and isinstance(value.get("context"), dict)
        and ("span_id" in value["context"] or "trace_id" in value["context"])
    )


def is_otel_genai(obj: Any) -> bool:
    """An OTLP/JSON export, an SDK span list (or ``{"spans": [...]}``), or one SDK span."""
    if isinstance(obj, dict) and isinstance(obj.get("resourceSpans"), list):
        return True
    if isinstance(obj, dict) and isinstance(obj.get("spans"), list):
        return bool(obj["spans"]) and all(_is_span(s) for s in obj["spans"][:5])
    if isinstance(obj, list):
        return bool(obj) and all(_is_span(s) for s in obj[:5])
    return _is_span(obj)


# Chat messages (pipelines/adapters/messages.py reads them): OpenAI Chat Completions roles,
# LangChain message types (model_dump) and class names (dumpd), OpenAI Responses items.
ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
# LangChain message types (model_dump) and class names (dumpd) -> OpenAI roles.
LANGCHAIN_TYPES = {
    "human": "user",
    "ai": "assistant",
    "tool": "tool",
    "system": "system",
    "function": "function",
    "chat": "user",
}
LANGCHAIN_CLASSES = {
    "HumanMessage": "user",
    "AIMessage": "assistant",
    "ToolMessage": "tool",
    "SystemMessage": "system",
    "FunctionMessage": "function",
    "ChatMessage": "user",
}
CONTAINER_KEYS = ("messages", "input", "output")


def is_message(obj: Any) -> bool:
    """One chat message or Responses item, in any of the three dialects."""
    if not isinstance(obj, dict):
        return False
    role, kind = obj.get("role"), obj.get("type")
    if role in ROLES and ("content" in obj or "tool_calls" in obj or "function_call" in obj):
        return True
    if isinstance(kind, str):
        if kind in LANGCHAIN_TYPES and ("content" in obj or isinstance(obj.get("data"), dict)):
            return True
        if kind == "message" and role in ROLES:
            return True
        if kind.endswith(("_call", "_call_output")) and ("call_id" in obj or "id" in obj):
            return True
        if kind == "reasoning" and "summary" in obj:
            return True
    if obj.get("lc") == 1 and isinstance(obj.get("id"), list) and obj["id"]:
        return str(obj["id"][-1]).removesuffix("Chunk") in LANGCHAIN_CLASSES
    return False


def is_message_list(value: Any) -> bool:
    """A non-empty list whose first elements are all messages."""
    return isinstance(value, list) and bool(value) and all(is_message(m) for m in value[:5])


def conversation_of(obj: Any) -> list[Any] | None:
    """The message list of a log (array or container object), or None when it holds none."""
    if is_message_list(obj):
        return list(obj)
    if not isinstance(obj, dict):
        return None
    found: list[Any] = []
    for key in CONTAINER_KEYS:
        value = obj.get(key)
        if isinstance(value, list) and is_message_list(value):
            found.extend(value)
        elif key == "input" and isinstance(value, str) and is_message_list(obj.get("output")):
            found.append({"role": "user", "content": value})  # Responses: input as text
    return found or None


def is_messages(obj: Any) -> bool:
    """A chat log: a message list, or an object holding one under messages/input/output."""
    return conversation_of(obj) is not None


PREDICATES: dict[str, Callable[[Any], bool]] = {
    "canonical": is_canonical,
    "ama-bench": is_ama_bench,
    "swe-agent": is_swe_agent,
    "mini-swe-agent": is_mini_swe_agent,
    "openhands": is_openhands,
    "tau-bench": is_tau_bench,
    "spider-agent": is_spider_agent,
    "claude-code": is_claude_code,
    "codex": is_codex,
    "otel-genai": is_otel_genai,
    "messages": is_messages,
}

# Formats whose one trajectory spans the lines of a JSONL file: such a file is one record.
LINE_FILE_FORMATS = ("claude-code", "codex", "otel-genai")
_SNIFF_LINES = 8


def sniff_line_file(data: bytes) -> str | None:
    """The format of a JSONL file whose lines together make trajectories (a Claude Code
    transcript, a Codex rollout, an OTLP file export), judged by its first parseable lines;
    None for files of one trajectory (or event) per line."""
    import json

    pos, seen = 0, 0
    while pos < len(data) and seen < _SNIFF_LINES:
        end = data.find(b"\n", pos)
        end = len(data) if end < 0 else end
        line = data[pos:end].strip()
        pos = end + 1
        if not line:
            continue
        seen += 1
        try:
            obj = json.loads(line)
        except (ValueError, UnicodeDecodeError, RecursionError):
            continue  # a torn, bad or too deeply nested line: the next one decides
        if is_claude_code_record(obj):
            return "claude-code"
        if is_codex_record(obj):
            return "codex"
        if isinstance(obj, dict) and (isinstance(obj.get("resourceSpans"), list) or _is_span(obj)):
            return "otel-genai"
        if is_message(obj):  # one message per line: the file is one conversation
            return "messages"
        return None
    return None


def sniff(obj: Any) -> str | None:
    """The format of one parsed record (a single trajectory), or None when nothing fits."""
    for name, pred in PREDICATES.items():
        if pred(obj):
            return name
    return None


def matches(fmt: str, obj: Any) -> bool:
    """Whether ``obj`` has the shape of ``fmt`` (for an explicit ``--format``)."""
    if fmt == "parquet":
        return is_canonical(obj)
    pred = PREDICATES.get(fmt)
    return pred is not None and pred(obj)


def describe(obj: Any) -> str:
    """A short description of a JSON value for error messages (type, keys seen)."""
    if isinstance(obj, dict):
        keys = sorted(str(k) for k in obj)
        shown = ", ".join(keys[:12]) + (", ..." if len(keys) > 12 else "")
        return f"a JSON object with keys [{shown}]"
    if isinstance(obj, list):
        first = f"; first element is {describe(obj[0])}" if obj else ""
        return f"a JSON array of {len(obj)} elements{first}"
    kinds = {str: "string", bool: "boolean", int: "number", float: "number"}
    return f"a JSON {kinds.get(type(obj), 'null')}"


def unknown_format(obj: Any, *, what: str = "") -> str:
    """Why no format fits ``obj``: what would make it canonical when little would, else every
    shape tried and where converting another format is shown."""
    head = f"unknown trajectory format: {what}{describe(obj)}"
    hint = near_miss_hint(obj)
    if hint is not None:
        return f"{head}; {hint}"
    return f"{head}; tried {tried()}; another format can be converted to canonical JSONL ({DOC})"


def tried() -> str:
    return "; ".join(f"{name}: {shape}" for name, shape in SHAPES.items())
