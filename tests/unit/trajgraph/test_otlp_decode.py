"""The OTLP receiver's decoding and spool, without a server: protobuf and JSON bodies give
the same OTLP/JSON the file adapter reads, invalid spans are counted, bombs are refused, and
the spool keeps each span once."""

from __future__ import annotations

import base64
import gzip
import json
import zlib
from pathlib import Path

import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from trajgraph.core.errors import InputError
from trajgraph.otlp.decode import (
    JSON,
    PROTOBUF,
    TooLargeError,
    UnsupportedMediaError,
    decode,
    drop_spans,
    inflate,
    reply,
)
from trajgraph.otlp.spool import SPANS_FILE, Spool, tenant_dir
from trajgraph.pipelines.adapters import otel_genai


def _spans() -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "unit-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("unit")
    agent = tracer.start_as_current_span("invoke_agent a", attributes={"gen_ai.agent.name": "a"})
    tool = tracer.start_as_current_span(
        "execute_tool bash",
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "bash",
            "gen_ai.tool.call.arguments": '{"cmd": "ls"}',
            "gen_ai.tool.call.result": "README.md",
            "gen_ai.usage.input_tokens": 7,
        },
    )
    with agent, tool as span:
        span.set_status(Status(StatusCode.ERROR, "exit 2"))
    provider.shutdown()
    return list(memory.get_finished_spans())


def _hex_json(pb: bytes) -> bytes:
    """The OTLP/JSON an exporter sends: proto3 JSON with hex ids instead of base64."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest.FromString(pb)
    obj = json_format.MessageToDict(request)
    for rs in obj["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for k in ("traceId", "spanId", "parentSpanId"):
                    if k in s:
                        s[k] = base64.b64decode(s[k]).hex()
    return json.dumps(obj).encode()


def test_protobuf_and_json_decode_to_the_same_spans_the_adapter_reads() -> None:
    spans = _spans()
    pb = encode_spans(spans).SerializeToString()
    from_pb = decode(pb, PROTOBUF)
    from_json = decode(_hex_json(pb), "application/json; charset=utf-8")
    assert from_pb.export == from_json.export
    assert from_pb.rejected == 0
    assert sorted(from_pb.span_ids) == sorted(
        (f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in spans
    )
    read = {s.name: s for s in otel_genai.read_spans(from_pb.export)}
    tool = read["execute_tool bash"]
    assert tool.trace_id == f"{spans[0].context.trace_id:032x}"
    assert tool.parent_id == read["invoke_agent a"].span_id
    assert tool.attributes["gen_ai.usage.input_tokens"] == 7
    assert (tool.status, tool.status_message) == ("ERROR", "exit 2")
    assert tool.resource["service.name"] == "unit-agent"
    (trajectory,) = otel_genai.to_trajectories(from_pb.export, source="otlp")
    assert trajectory["turns"][0]["action"] == 'bash({"cmd": "ls"})'
    assert "Error: ERROR: exit 2" in trajectory["turns"][0]["observation"]


def test_spans_with_invalid_ids_are_rejected_one_by_one() -> None:
    body = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "5b8aa5a2d2c872e8321cf37308d69df2",
                                "spanId": "051581bf3cb55c13",
                                "name": "ok",
                            },
                            {"traceId": "0" * 32, "spanId": "051581bf3cb55c14", "name": "zero"},
                            {
                                "traceId": "5b8aa5a2d2c872e8321cf37308d69df2",
                                "spanId": "",
                                "name": "no id",
                            },
                        ]
                    }
                ]
            }
        ]
    }
    decoded = decode(json.dumps(body).encode(), JSON)
    assert decoded.rejected == 2 and len(decoded.span_ids) == 1
    assert len(decoded.reasons) == 2
    content, media = reply(JSON, decoded.rejected, "; ".join(decoded.reasons))
    assert media == JSON and json.loads(content)["partialSuccess"]["rejectedSpans"] == "2"
    content, media = reply(PROTOBUF, 0, "")
    assert media == PROTOBUF
    assert not ExportTraceServiceResponse.FromString(content).HasField("partial_success")


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b"\xff\xff\xff", PROTOBUF),
        (b"{", JSON),
        (b"[]", JSON),
        (b'{"resourceSpans": 3}', JSON),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": 5}]}]}]}', JSON),
        (b"[" * 100_000, JSON),
    ],
)
def test_unreadable_bodies_are_input_errors(body: bytes, kind: str) -> None:
    with pytest.raises(InputError):
        decode(body, kind)


def test_inflate_limits_and_encodings() -> None:
    data = b"x" * 1000
    assert inflate(gzip.compress(data), "gzip", 1000) == data
    assert inflate(zlib.compress(data), "deflate", 1000) == data
    assert inflate(data, "", 10) == data  # the received size is the guard's limit
    with pytest.raises(TooLargeError):
        inflate(gzip.compress(b"\0" * 10_000_000), "gzip", 1_000_000)
    with pytest.raises(UnsupportedMediaError):
        inflate(data, "br", 1000)
    with pytest.raises(UnsupportedMediaError):
        decode(data, "text/plain")
    with pytest.raises(InputError):
        inflate(gzip.compress(data)[:-10], "gzip", 1000)
    with pytest.raises(InputError):
        inflate(b"not gzip", "gzip", 1000)


def test_spool_keeps_each_span_once_and_cuts_a_torn_tail(tmp_path: Path) -> None:
    pb = encode_spans(_spans()).SerializeToString()
    decoded = decode(pb, PROTOBUF)
    spool = Spool(tmp_path)
    tenant = spool.of("team/../a")
    assert tenant.folder.parent == tmp_path  # no tenant name reaches outside the spool
    assert tenant.append(decoded.export, decoded.span_ids) == 2
    assert tenant.append(decoded.export, decoded.span_ids) == 0  # a retried export
    path = tenant_dir(tmp_path, "team/../a") / SPANS_FILE
    assert len(path.read_bytes().splitlines()) == 1
    assert Spool(tmp_path).tenants_on_disk() == ["team/../a"]

    # A crash mid-line: a new spool (a restarted server) cuts it and still knows the ids.
    with path.open("ab") as f:
        f.write(b'{"resourceSpans": [{"scop')
    again = Spool(tmp_path).of("team/../a")
    one = drop_spans(decoded.export, {decoded.span_ids[0]})
    assert again.append(one, decoded.span_ids[:1]) == 0
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 2
    assert otel_genai.read_spans(json.loads(lines[0]))
