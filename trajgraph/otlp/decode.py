"""An OTLP/HTTP trace request's body → the spans it holds, as one OTLP/JSON export.

Both encodings go through the official protobuf classes (``opentelemetry-proto``): a
protobuf body is parsed as ``ExportTraceServiceRequest``; a JSON body is read into the same
message (ids written in hex, as OTLP/JSON has them, unknown fields ignored as the spec asks).
What comes out is the OTLP/JSON the file adapter reads (pipelines/adapters/otel_genai.py),
so a span the receiver spools and the same span in a file become the same turn.

Spans whose trace or span id is not a valid id (wrong length, all zeros) are rejected one by
one (the reply's ``partialSuccess``); a body that cannot be read at all is an InputError, and
nothing of it is kept.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import zlib
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from trajgraph.core.errors import InputError

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
# The ids OTLP/JSON writes in hex (proto3's JSON mapping would have base64).
_ID_FIELDS = ("traceId", "spanId", "parentSpanId")
_ID_BYTES = {"traceId": 16, "spanId": 8, "parentSpanId": 8}


class UnsupportedMediaError(InputError):
    """A content type or encoding the receiver does not read (HTTP 415)."""


class TooLargeError(InputError):
    """A body over the limit once decompressed (HTTP 413)."""


@dataclass
class Decoded:
    export: dict[str, Any]  # {"resourceSpans": [...]}, OTLP/JSON, valid spans only
    span_ids: list[tuple[str, str]] = field(default_factory=list)  # (trace, span), hex
    rejected: int = 0
    reasons: list[str] = field(default_factory=list)


def media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def inflate(body: bytes, encoding: str, max_bytes: int) -> bytes:
    """The body without its ``Content-Encoding`` (none, gzip or deflate), at most
    ``max_bytes`` of it: a small gzip bomb is refused, not inflated into memory."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate"):
        raise UnsupportedMediaError(f"Content-Encoding {encoding[:40]!r}: send gzip or none")
    inflater = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
    try:
        out = inflater.decompress(body, max_bytes + 1)
    except zlib.error as e:
        raise InputError(f"the body is not valid {encoding}") from e
    if len(out) > max_bytes:
        raise TooLargeError(f"the body is over {max_bytes} bytes once decompressed")
    if not inflater.eof:
        raise InputError(f"the body is not valid {encoding} (truncated)")
    return out


def decode(body: bytes, content_type: str) -> Decoded:
    """The request's valid spans as OTLP/JSON, and how many were rejected and why."""
    kind = media_type(content_type)
    request = ExportTraceServiceRequest()
    if kind == PROTOBUF:
        try:
            request.ParseFromString(body)
        except (DecodeError, RecursionError) as e:
            raise InputError("the body is not an OTLP ExportTraceServiceRequest") from e
    elif kind == JSON:
        try:
            obj = json.loads(body)
        except (ValueError, RecursionError) as e:
            raise InputError("the body is not JSON") from e
        if not isinstance(obj, dict):
            raise InputError("the body is not an OTLP/JSON ExportTraceServiceRequest object")
        try:
            json_format.ParseDict(_ids_to_base64(obj), request, ignore_unknown_fields=True)
        except (json_format.ParseError, RecursionError, TypeError, ValueError) as e:
            raise InputError("the body is not an OTLP/JSON ExportTraceServiceRequest") from e
    else:
        raise UnsupportedMediaError(f"send {PROTOBUF} or {JSON}")
    return _valid_spans(request)


def _ids_to_base64(obj: Any) -> Any:
    """OTLP/JSON's hex ids as proto3 JSON's base64, anywhere in the request (spans and
    links). A value that is not hex is left for the parser (base64 from a proto3 encoder
    is read as such)."""
    if isinstance(obj, list):
        return [_ids_to_base64(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out = {}
    for key, value in obj.items():
        if key in _ID_FIELDS and isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = base64.b64encode(bytes.fromhex(value)).decode()
        out[key] = _ids_to_base64(value)
    return out


def _valid_spans(request: ExportTraceServiceRequest) -> Decoded:
    decoded = Decoded({"resourceSpans": []})
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            keep = []
            for span in ss.spans:
                problem = _id_problem(span.trace_id, span.span_id, span.parent_span_id)
                if problem:
                    decoded.rejected += 1
                    if problem not in decoded.reasons:
                        decoded.reasons.append(problem)
                    continue
                keep.append(span)
                decoded.span_ids.append((span.trace_id.hex(), span.span_id.hex()))
            del ss.spans[:]
            ss.spans.extend(keep)
    as_json = json_format.MessageToDict(request, use_integers_for_enums=True)
    decoded.export = _hex_ids(as_json) if decoded.span_ids else {"resourceSpans": []}
    return decoded


def _id_problem(trace_id: bytes, span_id: bytes, parent_id: bytes) -> str | None:
    if len(trace_id) != 16 or not any(trace_id):
        return "a span without a valid 16-byte traceId"
    if len(span_id) != 8 or not any(span_id):
        return "a span without a valid 8-byte spanId"
    if parent_id and len(parent_id) != 8:
        return "a span whose parentSpanId is not 8 bytes"
    return None


def _hex_ids(obj: Any) -> Any:
    if isinstance(obj, list):
        return [_hex_ids(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out = {}
    for key, value in obj.items():
        if key in _ID_BYTES and isinstance(value, str):
            with contextlib.suppress(binascii.Error, ValueError):
                value = base64.b64decode(value).hex()
        out[key] = _hex_ids(value)
    return out


def drop_spans(export: dict[str, Any], keep: set[tuple[str, str]]) -> dict[str, Any]:
    """``export`` with only the spans whose (trace, span) id is in ``keep``, and no empty
    resource or scope left."""
    resources = []
    for rs in export.get("resourceSpans") or []:
        scopes = []
        for ss in rs.get("scopeSpans") or []:
            spans = [s for s in ss.get("spans") or [] if (s["traceId"], s["spanId"]) in keep]
            if spans:
                scopes.append({**ss, "spans": spans})
        if scopes:
            resources.append({**rs, "scopeSpans": scopes})
    return {"resourceSpans": resources}


def reply(kind: str, rejected: int, message: str) -> tuple[bytes, str]:
    """The success reply in the request's own encoding, with ``partialSuccess`` when spans
    were rejected (an empty message otherwise, as the spec asks)."""
    response = ExportTraceServiceResponse()
    if rejected:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    if kind == PROTOBUF:
        return response.SerializeToString(), PROTOBUF
    return json.dumps(json_format.MessageToDict(response)).encode(), JSON
