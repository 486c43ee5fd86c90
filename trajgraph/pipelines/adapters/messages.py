"""Chat message logs, the shape most agent frameworks can export: one conversation is one
trajectory.

Three dialects of the same thing are read and brought to OpenAI Chat Completions messages,
whose turns ``canonical.turns_from_chat`` makes (the rules of Spider-agent and tau-bench):

* **OpenAI Chat Completions** (and every OpenAI-compatible agent): ``role`` system /
  developer / user / assistant / tool, assistant ``tool_calls`` (``function.name``,
  ``function.arguments``), ``tool`` messages answering by ``tool_call_id``; the legacy
  ``function_call`` / ``function`` role too.
* **LangChain / LangGraph**: ``type`` human / ai / tool / system (``model_dump()``), the same
  wrapped as ``{"type", "data"}`` (``messages_to_dict``) or serialized with ``dumpd``
  (``{"lc": 1, "id": [..., "AIMessage"], "kwargs": {...}}``); ``tool_calls`` as
  ``{name, args, id}``.
* **OpenAI Responses API / Agents SDK** items (``to_input_list()``, a response's
  ``output``): ``message`` items, ``function_call`` / ``function_call_output`` joined by
  ``call_id``, any other ``*_call`` item with its ``*_call_output`` (or its own ``output``),
  ``reasoning`` summaries as the thought of the call that follows.

A log is a JSON array of messages, an object holding them under ``messages`` (a request
body, a LangGraph state, a fine-tuning line), ``input`` and/or ``output`` (Responses), or a
JSONL file of one message per line (the whole file is one record, a ``LineFile``).

The first user message is the task; each tool call is a turn whose observation is its
result; an assistant message without calls is a turn answered by the next user message.
``id``: the container's ``id`` / ``thread_id`` / ``conversation_id`` / ``session_id``,
else the file stem.
"""

from __future__ import annotations

from typing import Any

from trajgraph.core.errors import InputError
from trajgraph.pipelines.adapters.base import LineFile, Lines, LogFormat, read_lines, split_lines
from trajgraph.pipelines.adapters.canonical import (
    field,
    file_stem,
    new_trajectory,
    text_of,
    turns_from_chat,
)

FORMAT = "messages"

# Keys a container names its conversation by, in order of preference.
ID_KEYS = ("id", "thread_id", "conversation_id", "session_id", "run_id", "trace_id")
MAX_BAD_LINES = 20
_META_KEYS = ("model", "thread_id", "conversation_id", "session_id", "run_id", "status")


# -- detection: the three dialects -------------------------------------------------------------

# OpenAI Chat Completions roles.
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


# -- dialects -> OpenAI Chat Completions messages -----------------------------------------------


def _langchain(msg: dict[str, Any]) -> dict[str, Any] | None:
    """A LangChain message (any of its serializations) as an OpenAI message, else None."""
    if msg.get("lc") == 1 and isinstance(msg.get("id"), list) and msg["id"]:
        role = LANGCHAIN_CLASSES.get(str(msg["id"][-1]).removesuffix("Chunk"))
        body = field(msg, "kwargs")
    elif msg.get("type") in LANGCHAIN_TYPES and "role" not in msg:
        role = LANGCHAIN_TYPES[msg["type"]]
        body = field(msg, "data") if isinstance(msg.get("data"), dict) else msg
    else:
        return None
    if role is None:
        return None
    out: dict[str, Any] = {"role": role, "content": body.get("content")}
    calls = body.get("tool_calls") or field(body, "additional_kwargs").get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = calls
    if body.get("tool_call_id") is not None:
        out["tool_call_id"] = body["tool_call_id"]
    return out


def _call_args(item: dict[str, Any]) -> Any:
    for key in ("arguments", "input", "action", "code", "query", "queries"):
        if key in item:
            return item[key]
    skip = {"type", "id", "call_id", "status", "name", "output", "outputs"}
    return {k: v for k, v in item.items() if k not in skip} or None


def _responses_item(
    item: dict[str, Any], reasoning: list[str]
) -> tuple[list[dict[str, Any]], bool]:
    """A Responses item as OpenAI messages; the flag says it was one (else the caller tries
    the other dialects). Reasoning summaries wait in ``reasoning`` for the next call."""
    kind = item.get("type")
    if not isinstance(kind, str):
        return [], False
    if kind == "reasoning":
        summary = item.get("summary")
        text = text_of(summary) if isinstance(summary, list) else ""
        text = text or text_of(item.get("content"))
        if text.strip():
            reasoning.append(text.strip())
        return [], True
    if kind.endswith("_call_output"):
        content = text_of(item.get("output"))  # text, content parts, or JSON of the rest
        return [{"role": "tool", "tool_call_id": item.get("call_id"), "content": content}], True
    if kind.endswith("_call"):
        call_id = item.get("call_id") or item.get("id")
        name = item.get("name") or kind.removesuffix("_call")
        args = _call_args(item)
        thought = "\n".join(reasoning)
        reasoning.clear()
        call: dict[str, Any] = {"id": call_id, "function": {"name": name, "arguments": args}}
        out: list[dict[str, Any]] = [
            {"role": "assistant", "content": thought, "tool_calls": [call]}
        ]
        result = item.get("output", item.get("outputs"))
        if result is not None:  # hosted tools (mcp_call, code_interpreter_call) carry it
            out.append({"role": "tool", "tool_call_id": call_id, "content": text_of(result)})
        return out, True
    if kind == "message" and item.get("role") in ROLES:
        return [{"role": item["role"], "content": item.get("content")}], True
    return [], False


def _openai(msg: dict[str, Any]) -> dict[str, Any] | None:
    if msg.get("role") not in ROLES:
        return None
    out = dict(msg)
    if msg["role"] == "developer":
        out["role"] = "system"
    legacy = msg.get("function_call")
    if not msg.get("tool_calls") and isinstance(legacy, dict):
        out["tool_calls"] = [{"function": legacy}]
    return out


def to_chat(messages: list[Any]) -> tuple[list[dict[str, Any]], int]:
    """Any mix of the three dialects as OpenAI Chat Completions messages, and the number of
    elements that are no message (skipped, counted in metadata)."""
    chat: list[dict[str, Any]] = []
    reasoning: list[str] = []
    skipped = 0
    for msg in messages:
        if not isinstance(msg, dict):
            skipped += 1
            continue
        converted, done = _responses_item(msg, reasoning)
        if done:
            chat.extend(converted)
            continue
        one = _langchain(msg) or _openai(msg)
        if one is None:
            skipped += 1
            continue
        chat.append(one)
    return chat, skipped


def _task(chat: list[dict[str, Any]]) -> str:
    for msg in chat:
        if msg.get("role") == "user":
            return text_of(msg.get("content")).strip()
    return ""


def _ident(obj: Any, source: str) -> str:
    if isinstance(obj, dict):
        for key in ID_KEYS:
            value = obj.get(key)
            if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
                return str(value)
    return file_stem(source)


def _lines_of(obj: Any) -> list[Any] | None:
    """The records of a JSONL file of messages: every line counts (others are skipped)."""
    return obj.records if isinstance(obj, Lines) else None


def conversation_to_trajectory(
    obj: Any, *, source: str, bad_lines: list[int] | None = None, torn: bool = False
) -> dict[str, Any]:
    messages = lines if (lines := _lines_of(obj)) is not None else conversation_of(obj)
    if not messages:
        raise InputError(
            "a chat log needs a list of messages (role/content, LangChain type/content, or "
            "Responses items) as the file, or under 'messages', 'input' or 'output'",
            source=source,
        )
    chat, skipped = to_chat(messages)
    turns, orphans = turns_from_chat(chat, join_by_id=True, first_user_is_task=True)
    meta = {k: obj.get(k) for k in _META_KEYS} if isinstance(obj, dict) else {}
    meta = {k: v for k, v in meta.items() if isinstance(v, (str, int, float))}
    return new_trajectory(
        id=_ident(obj, source),
        task=_task(chat),
        source=source,
        format=FORMAT,
        turns=turns,
        metadata={
            **meta,
            "messages": len(messages),
            "skipped_messages": skipped or None,
            "unmatched_tool_results": orphans or None,
            "bad_lines": (bad_lines or [])[:MAX_BAD_LINES] or None,
            "torn_last_line": torn or None,
        },
    )


def to_trajectories(obj: Any, *, source: str) -> list[dict[str, Any]]:
    """A conversation (array, container object, or a JSONL file of one message per line)."""
    if isinstance(obj, LineFile):
        lines = read_lines(split_lines(obj.data))
        return [
            conversation_to_trajectory(
                lines, source=source, bad_lines=lines.bad_lines, torn=lines.torn_last_line
            )
        ]
    return [conversation_to_trajectory(obj, source=source)]


LOG_FORMAT = LogFormat(
    name=FORMAT,
    read=to_trajectories,
    fits=is_messages,
    shape="chat messages (OpenAI role/content/tool_calls, LangChain type/content, or "
    "Responses items: function_call/function_call_output), as an array or under "
    "'messages', 'input' or 'output'",
    episodes_per_array=True,
    # One message per line: the file is one conversation (only when its first line is one).
    line=is_message,
)
