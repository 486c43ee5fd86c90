"""OpenTelemetry GenAI traces: spans with ``gen_ai.*`` attributes, as OTLP/JSON
(``{"resourceSpans": […]}``, also one export per line as the Collector's file exporter writes)
or as the Python SDK's span JSON (a list of spans, ``{"spans": […]}``, or one span per line).

What becomes what (docs/formats/otel-genai.md):

* **one trajectory per trace**, or per ``gen_ai.conversation.id`` when spans carry one (a
  conversation may span traces); id: the conversation id, else the trace id in hex;
* every ``execute_tool`` span (``gen_ai.operation.name``, or a span name starting with
  ``execute_tool``) is a turn, in start-time order: the action is ``tool(arguments)``
  (``gen_ai.tool.name``; ``gen_ai.tool.call.arguments`` or ``gen_ai.tool.args``, text as
  logged), the observation is the result (``gen_ai.tool.call.result`` or ``gen_ai.output``);
* a failed span (status ``ERROR``, or an ``error.type`` attribute, or an ``exception``
  event) adds the line ``Error: <error.type>: <status description>`` to the observation, so
  the failure is an error state;
* ``invoke_agent`` and chat (``chat``, ``call_llm``, ``text_completion``, ``generate_content``)
  spans are not turns: the first user message they were given is the task, the assistant
  text a chat answered with (not its tool calls) is context on the next turn (``thought``),
  and the last answer (not a list of tool calls) is kept as ``metadata.final_output``;
* the root span's status is the outcome (``ok`` / ``error``; none when unset).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from trajgraph.core.errors import InputError
from trajgraph.pipelines.adapters.base import LineFile, LogFormat, parse_json
from trajgraph.pipelines.adapters.canonical import (
    as_text,
    epoch_to_iso,
    new_trajectory,
    new_turn,
    small_json,
)
from trajgraph.pipelines.adapters.canonical import (
    field as object_field,
)

FORMAT = "otel-genai"

CHAT_OPERATIONS = frozenset(
    {"chat", "call_llm", "text_completion", "generate_content", "completion", "llm"}
)
_ARG_KEYS = ("gen_ai.tool.call.arguments", "gen_ai.tool.args", "tool.args", "input.value")
_RESULT_KEYS = ("gen_ai.tool.call.result", "gen_ai.output", "tool.output", "output.value")
_STATUS_NAMES = {0: "UNSET", 1: "OK", 2: "ERROR"}
FINAL_OUTPUT_CHARS = 2_000


@dataclass
class Span:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start_ns: int | None
    end_ns: int | None
    status: str  # UNSET | OK | ERROR
    status_message: str
    attributes: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)
    resource: dict[str, Any] = field(default_factory=dict)
    order: int = 0

    @property
    def operation(self) -> str:
        op = self.attributes.get("gen_ai.operation.name")
        if isinstance(op, str) and op:
            return op
        return self.name.split(" ", 1)[0]

    @property
    def failed(self) -> bool:
        return (
            self.status == "ERROR"
            or bool(self.attributes.get("error.type"))
            or any(e.get("name") == "exception" for e in self.events)
        )


# -- reading spans -------------------------------------------------------------------------------


def _hex(value: Any, width: int) -> str:
    if isinstance(value, bool) or value is None:
        return ""
    if isinstance(value, int):
        return f"{value:0{width}x}"
    text = str(value).strip().lower()
    text = text[2:] if text.startswith("0x") else text
    return text.zfill(width) if text and all(c in "0123456789abcdef" for c in text) else text


def _otlp_value(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    for key in ("stringValue", "boolValue", "doubleValue", "bytesValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            return value["intValue"]
    if "arrayValue" in value:
        return [_otlp_value(v) for v in (value["arrayValue"] or {}).get("values") or []]
    if "kvlistValue" in value:
        return _otlp_attributes((value["kvlistValue"] or {}).get("values"))
    return None


def _otlp_attributes(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs if isinstance(kvs, list) else []:
        if isinstance(kv, dict) and isinstance(kv.get("key"), str):
            out[kv["key"]] = _otlp_value(kv.get("value"))
    return out


_ISO_FRACTION = re.compile(r"^(.*?\d{2}:\d{2}:\d{2})(\.\d+)?(.*)$", re.DOTALL)


def _ns(value: Any) -> int | None:
    """Nanoseconds since the epoch from an int/numeric string, or an ISO 8601 string."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return int(value)
    text = str(value).strip()
    if text.isdigit():
        return int(text)
    from datetime import datetime, timedelta, timezone

    # Python 3.10's fromisoformat takes only 3 or 6 fraction digits and no "Z" (3.11 takes
    # any): exporters write 1 to 9 (nanoseconds), so they are cut or padded to 6 first.
    text = text.replace("Z", "+00:00")
    m = _ISO_FRACTION.match(text)
    if m and m.group(2):
        head, fraction, zone = m.groups()
        text = f"{head}.{fraction[1:7].ljust(6, '0')}{zone}"
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.astimezone()  # local time, as datetime.timestamp() reads a naive one
    # In integers: a float of ~1.7e18 ns is off by up to 128 ns.
    since = stamp - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return since // timedelta(microseconds=1) * 1000


def _status(raw: Any) -> tuple[str, str]:
    if not isinstance(raw, dict):
        return "UNSET", ""
    code = raw.get("code", raw.get("status_code"))
    message = as_text(raw.get("message", raw.get("description")))
    if isinstance(code, int) and not isinstance(code, bool):
        return _STATUS_NAMES.get(code, "UNSET"), message
    name = str(code or "UNSET").upper().removeprefix("STATUS_CODE_")
    return (name if name in ("OK", "ERROR") else "UNSET"), message


def _otlp_spans(export: dict[str, Any]) -> Iterator[Span]:
    for rs in export.get("resourceSpans") or []:
        if not isinstance(rs, dict):
            continue
        resource = _otlp_attributes((rs.get("resource") or {}).get("attributes"))
        for ss in rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []:
            for s in (ss or {}).get("spans") or []:
                if not isinstance(s, dict):
                    continue
                status, message = _status(s.get("status"))
                yield Span(
                    trace_id=_hex(s.get("traceId"), 32),
                    span_id=_hex(s.get("spanId"), 16),
                    parent_id=_hex(s.get("parentSpanId"), 16),
                    name=as_text(s.get("name")),
                    start_ns=_ns(s.get("startTimeUnixNano")),
                    end_ns=_ns(s.get("endTimeUnixNano")),
                    status=status,
                    status_message=message,
                    attributes=_otlp_attributes(s.get("attributes")),
                    events=[
                        {"name": e.get("name"), "attributes": _otlp_attributes(e.get("attributes"))}
                        for e in s.get("events") or []
                        if isinstance(e, dict)
                    ],
                    resource=resource,
                )


def _sdk_span(s: dict[str, Any]) -> Span:
    context = object_field(s, "context")
    parent = s.get("parent")
    parent_id = parent.get("span_id") if isinstance(parent, dict) else s.get("parent_id")
    status, message = _status(s.get("status"))
    attributes = object_field(s, "attributes")
    resource = s.get("resource")
    resource_attrs = resource.get("attributes") if isinstance(resource, dict) else None
    return Span(
        trace_id=_hex(context.get("trace_id"), 32),
        span_id=_hex(context.get("span_id"), 16),
        parent_id=_hex(parent_id, 16),
        name=as_text(s.get("name")),
        start_ns=_ns(s.get("start_time")),
        end_ns=_ns(s.get("end_time")),
        status=status,
        status_message=message,
        attributes=attributes,
        events=[e for e in s.get("events") or [] if isinstance(e, dict)],
        resource=resource_attrs if isinstance(resource_attrs, dict) else {},
    )


def is_sdk_span(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("name"), str)
        and isinstance(obj.get("context"), dict)
        and ("span_id" in obj["context"] or "trace_id" in obj["context"])
    )


def read_spans(obj: Any) -> list[Span]:
    """Every span of an OTLP export, an SDK span list, or a file of either, one per line."""
    if isinstance(obj, LineFile):
        items: list[Any] = []
        for line in obj.data.split(b"\n"):
            if line.strip():
                try:
                    items.append(parse_json(line))
                except ValueError:  # a torn last line of a file being written, or too deep
                    continue
        return [s for item in items for s in read_spans(item)]
    spans: list[Span] = []
    if isinstance(obj, dict) and isinstance(obj.get("resourceSpans"), list):
        spans.extend(_otlp_spans(obj))
    elif isinstance(obj, dict) and isinstance(obj.get("spans"), list):
        spans.extend(_sdk_span(s) for s in obj["spans"] if is_sdk_span(s))
    elif isinstance(obj, list):
        for item in obj:
            if is_sdk_span(item):
                spans.append(_sdk_span(item))
            elif isinstance(item, dict) and "resourceSpans" in item:
                spans.extend(_otlp_spans(item))
    elif is_sdk_span(obj):
        spans.append(_sdk_span(obj))
    for n, span in enumerate(spans):
        span.order = n
    return spans


# -- trajectories -------------------------------------------------------------------------------


def _messages(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        try:
            value = parse_json(value)  # a lone surrogate in it becomes U+FFFD
        except ValueError:
            return []
    return [m for m in value if isinstance(m, dict)] if isinstance(value, list) else []


def _message_text(message: dict[str, Any]) -> str:
    """Text of a GenAI message: ``content`` (string or parts) or the newer ``parts`` list."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts = message.get("parts") if isinstance(message.get("parts"), list) else content
    texts = []
    for part in parts if isinstance(parts, list) else []:
        if isinstance(part, dict) and part.get("type", "text") == "text":
            text = part.get("content", part.get("text"))
            if isinstance(text, str):
                texts.append(text)
    return "\n".join(texts)


def _task(spans: list[Span]) -> str:
    for span in spans:
        for key in ("gen_ai.input.messages", "gen_ai.prompt"):
            for m in _messages(span.attributes.get(key)):
                if m.get("role") == "user" and _message_text(m).strip():
                    return _message_text(m)
        for event in span.events:
            if event.get("name") == "gen_ai.user.message":
                attrs = object_field(event, "attributes")
                if isinstance(attrs.get("content"), str):
                    return str(attrs["content"])
    return ""


def _answer_text(span: Span) -> str:
    """What a chat span answered in words (its tool calls are the next turns)."""
    texts = [
        _message_text(m)
        for m in _messages(span.attributes.get("gen_ai.output.messages"))
        if m.get("role", "assistant") == "assistant"
    ]
    if texts:
        return "\n".join(t for t in texts if t.strip())
    output = span.attributes.get("gen_ai.output")
    if not isinstance(output, str) or span.attributes.get("gen_ai.output.type") == "json":
        return ""
    return output


def _tool_name(span: Span) -> str:
    name = span.attributes.get("gen_ai.tool.name")
    if isinstance(name, str) and name:
        return name
    parts = span.name.split(" ", 1)
    return parts[1] if len(parts) == 2 else "tool"


def _first(attrs: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if key in attrs and attrs[key] is not None:
            return attrs[key]
    return None


def _observation(span: Span) -> str:
    result = as_text(_first(span.attributes, _RESULT_KEYS))
    if not span.failed:
        return result
    kind = as_text(span.attributes.get("error.type"))
    message = span.status_message
    for event in span.events:
        if event.get("name") == "exception":
            attrs = object_field(event, "attributes")
            kind = kind or as_text(attrs.get("exception.type"))
            message = message or as_text(attrs.get("exception.message"))
    error = "Error: " + ": ".join(p for p in (kind or "ERROR", message) if p)
    return f"{result}\n{error}" if result else error


def _iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    try:
        return epoch_to_iso(ns / 1_000_000_000)
    except OverflowError:  # a time of hundreds of digits: none
        return None


def _attribute(spans: list[Span], key: str) -> str | None:
    return next((str(s.attributes[key]) for s in spans if s.attributes.get(key)), None)


def trajectory_of(key: str, spans: list[Span], *, source: str) -> dict[str, Any]:
    spans = sorted(spans, key=lambda s: (s.start_ns is None, s.start_ns or 0, s.order))
    turns: list[dict[str, Any]] = []
    context: list[str] = []
    final_output = ""
    usage = {"input_tokens": 0, "output_tokens": 0}
    failed = 0
    for span in spans:
        op = span.operation
        for k in usage:
            value = span.attributes.get(f"gen_ai.usage.{k}")
            if isinstance(value, int) and not isinstance(value, bool):
                usage[k] += value
        if op == "execute_tool":
            failed += span.failed
            args = _first(span.attributes, _ARG_KEYS)
            turns.append(
                new_turn(
                    len(turns),
                    f"{_tool_name(span)}({as_text(args if args is not None else {})})",
                    _observation(span),
                    thought="\n\n".join(context) or None,
                    timestamp=_iso(span.start_ns),
                    actor="agent",
                )
            )
            context = []
        elif op in CHAT_OPERATIONS:
            answer = _answer_text(span).strip()
            if answer:
                context.append(answer)
            output = as_text(span.attributes.get("gen_ai.output")).strip()
            if answer or (output and not output.startswith("[")):  # a list: its tool calls
                final_output = answer or output
    ids = {s.span_id for s in spans}
    roots = [s for s in spans if not s.parent_id or s.parent_id not in ids]
    agents = [s for s in spans if s.operation == "invoke_agent"]
    root = (agents or roots or spans)[0]
    outcome = {"OK": "ok", "ERROR": "error"}.get(root.status)
    models = [
        str(s.attributes[k])
        for s in spans
        for k in ("gen_ai.response.model", "gen_ai.request.model")
        if s.attributes.get(k)
    ]
    metadata: dict[str, Any] = {
        "trace_ids": sorted({s.trace_id for s in spans if s.trace_id})[:20],
        "conversation_id": _attribute(spans, "gen_ai.conversation.id"),
        "agent_name": _attribute(agents, "gen_ai.agent.name"),
        "model": models[0] if models else None,
        "service": root.resource.get("service.name"),
        "spans": len(spans),
        "tool_calls": len(turns),
        "failed_calls": failed,
        "usage": usage if any(usage.values()) else None,
    }
    if final_output:
        metadata["final_output"] = final_output[:FINAL_OUTPUT_CHARS]
    return new_trajectory(
        id=key,
        task=_task(spans),
        source=source,
        format=FORMAT,
        turns=turns,
        outcome=outcome,
        metadata={k: v for k, v in metadata.items() if v is not None and small_json(v)},
    )


def group_spans(spans: list[Span]) -> dict[str, list[Span]]:
    """Trajectory key → spans: the conversation id when the trace has one, else the trace."""
    conversation_of_trace: dict[str, str] = {}
    for span in spans:
        cid = span.attributes.get("gen_ai.conversation.id")
        if isinstance(cid, (str, int)) and str(cid) and span.trace_id not in conversation_of_trace:
            conversation_of_trace[span.trace_id] = str(cid)
    groups: dict[str, list[Span]] = {}
    for span in spans:
        cid = span.attributes.get("gen_ai.conversation.id")
        key = str(cid) if cid else conversation_of_trace.get(span.trace_id) or span.trace_id
        groups.setdefault(key or "trace", []).append(span)
    return groups


def to_trajectories(obj: Any, *, source: str) -> list[dict[str, Any]]:
    spans = read_spans(obj)
    if not spans:
        raise InputError("no OpenTelemetry spans found", source=source)
    if not any(k.startswith("gen_ai.") for s in spans for k in s.attributes):
        raise InputError(
            f"{len(spans)} spans, but none has gen_ai.* attributes (not a GenAI trace)",
            source=source,
        )
    return [trajectory_of(key, group, source=source) for key, group in group_spans(spans).items()]


def fits(obj: Any) -> bool:
    """An OTLP/JSON export, an SDK span list (or ``{"spans": [...]}``), or one SDK span."""
    if isinstance(obj, dict) and isinstance(obj.get("resourceSpans"), list):
        return True
    if isinstance(obj, dict) and isinstance(obj.get("spans"), list):
        return bool(obj["spans"]) and all(is_sdk_span(s) for s in obj["spans"][:5])
    if isinstance(obj, list):
        return bool(obj) and all(is_sdk_span(s) for s in obj[:5])
    return is_sdk_span(obj)


def fits_line(obj: Any) -> bool:
    """One line of an OTLP file export (an export request) or of an SDK span file."""
    if isinstance(obj, dict) and isinstance(obj.get("resourceSpans"), list):
        return True
    return is_sdk_span(obj)


LOG_FORMAT = LogFormat(
    name=FORMAT,
    read=to_trajectories,
    fits=fits,
    shape="OpenTelemetry spans with gen_ai.* attributes: OTLP/JSON 'resourceSpans', "
    "or SDK span JSON (a list of spans, or 'spans')",
    line=fits_line,
    spans_lines=True,
)
