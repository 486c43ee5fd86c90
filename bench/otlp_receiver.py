"""The OTLP receiver against the file path: spans/s accepted and span → queryable latency.

Both paths get the same spans (generated with the OpenTelemetry SDK: per trace one
``invoke_agent``, then ``--steps`` pairs of ``chat`` and ``execute_tool``), one trace per
export, sent back to back after a warm-up trace:

- **receiver**: `trajgraph serve` as its own process, the SDK's OTLP/HTTP exporter (protobuf,
  gzip) posting to ``/v1/traces``; the server spools and its tenant stream writes the graph;
- **file**: the same spans as OTLP/JSON lines appended (and fsynced) to a file that a
  `trajgraph stream` process tails, the way the Collector's file exporter feeds trajgraph.

Accepted spans/s: spans over the wall time of the sends (with ``--interval``, paced: then
only the latency is meaningful). Latency: from a trace's send
returning to all its turns being in Neo4j (polled every 20 ms), p50 / p95 / max.

    python -m bench.otlp_receiver [--traces 40] [--steps 5] [--interval 0]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from trajgraph.core import settings as settings_mod
from trajgraph.graph import governance
from trajgraph.graph import node_ids as ids
from trajgraph.graph.connection import open_driver
from trajgraph.otlp.decode import PROTOBUF, decode
from trajgraph.otlp.streams import stream_argv


def make_traces(n: int, steps: int) -> list[list[ReadableSpan]]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "bench-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench")
    for t in range(n):
        with tracer.start_as_current_span(
            "invoke_agent bench", attributes={"gen_ai.operation.name": "invoke_agent"}
        ):
            for s in range(steps):
                with tracer.start_as_current_span(
                    "chat m", attributes={"gen_ai.operation.name": "chat", "gen_ai.output": "ok"}
                ):
                    pass
                with tracer.start_as_current_span(
                    "execute_tool bash",
                    attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": "bash",
                        "gen_ai.tool.call.arguments": json.dumps({"cmd": f"pytest -k t{t}_{s}"}),
                        "gen_ai.tool.call.result": f"{s} failed, {t} passed",
                    },
                ):
                    pass
    provider.shutdown()
    by_trace: dict[int, list[ReadableSpan]] = {}
    for span in memory.get_finished_spans():
        by_trace.setdefault(span.context.trace_id, []).append(span)
    return list(by_trace.values())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(
    name: str,
    traces: list[list[ReadableSpan]],
    send: Callable[[list[ReadableSpan]], None],
    tenant: str,
    steps: int,
    settings: settings_mod.Settings,
    interval: float,
) -> dict[str, Any]:
    driver = open_driver(settings.neo4j)

    def queryable(spans: list[ReadableSpan]) -> bool:
        uid = ids.trajectory_uid(tenant, f"{spans[0].context.trace_id:032x}")
        n = driver.execute_query(
            "MATCH (t:Turn {trajectory_uid: $u}) RETURN count(t) AS n", u=uid
        ).records[0]["n"]
        return bool(n == steps)

    def wait(spans: list[ReadableSpan], since: float, out: list[float]) -> None:
        while not queryable(spans):
            if time.monotonic() - since > 300:
                raise RuntimeError(f"{name}: a trace did not become queryable in 300 s")
            time.sleep(0.02)
        out.append(time.monotonic() - since)

    warm: list[float] = []
    send(traces[0])  # starts the stream (Beam's start-up is not what is measured)
    wait(traces[0], time.monotonic(), warm)
    latencies: list[float] = []
    waiters = []
    start = time.monotonic()
    for spans in traces[1:]:
        send(spans)
        w = threading.Thread(target=wait, args=(spans, time.monotonic(), latencies))
        w.start()
        waiters.append(w)
        time.sleep(interval)
    sent_s = time.monotonic() - start
    for w in waiters:
        w.join()
    governance.delete_tenant(driver, settings.neo4j.database, tenant)
    driver.close()
    spans_sent = sum(len(s) for s in traces[1:])
    latencies.sort()
    return {
        "path": name,
        "spans": spans_sent,
        "spans_per_s": spans_sent / sent_s,
        "p50_s": statistics.median(latencies),
        "p95_s": latencies[max(0, round(0.95 * len(latencies)) - 1)],
        "max_s": latencies[-1],
    }


def receiver_path(
    traces: list[list[ReadableSpan]],
    steps: int,
    settings: settings_mod.Settings,
    tmp: Path,
    interval: float,
) -> dict[str, Any]:
    key, tenant, port = (
        secrets.token_urlsafe(24),
        f"bench-otlp-{uuid.uuid4().hex[:6]}",
        _free_port(),
    )
    env = {**os.environ, "TRAJGRAPH_API_KEYS": f"{key}:{tenant}"}
    env["TRAJGRAPH_OTLP_SPOOL"] = str(tmp / "spool")
    server = subprocess.Popen(
        [sys.executable, "-m", "trajgraph", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("trajgraph serve did not start") from None
                time.sleep(0.2)
        exporter = OTLPSpanExporter(
            endpoint=f"http://127.0.0.1:{port}/v1/traces",
            headers={"Authorization": f"Bearer {key}"},
            compression=Compression.Gzip,
        )

        def send(spans: list[ReadableSpan]) -> None:
            if exporter.export(spans) is not SpanExportResult.SUCCESS:
                raise RuntimeError("the receiver refused an export")

        return _run("receiver", traces, send, tenant, steps, settings, interval)
    finally:
        server.terminate()
        server.wait(timeout=90)


def file_path(
    traces: list[list[ReadableSpan]],
    steps: int,
    settings: settings_mod.Settings,
    tmp: Path,
    interval: float,
) -> dict[str, Any]:
    tenant = f"bench-otlp-file-{uuid.uuid4().hex[:6]}"
    folder = tmp / "file"
    folder.mkdir()
    log = folder / "spans.jsonl"
    log.write_text("")
    stream = subprocess.Popen(
        stream_argv(folder, tenant, 0.2, tmp / "file-dl"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def send(spans: list[ReadableSpan]) -> None:
        export = decode(encode_spans(spans).SerializeToString(), PROTOBUF).export
        with log.open("a") as f:
            f.write(json.dumps(export, separators=(",", ":")) + "\n")
            f.flush()
            os.fsync(f.fileno())

    try:
        return _run("file", traces, send, tenant, steps, settings, interval)
    finally:
        stream.terminate()
        stream.wait(timeout=90)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.otlp_receiver")
    p.add_argument("--traces", type=int, default=40)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument(
        "--interval", type=float, default=0.0, help="seconds between traces (0: back to back)"
    )
    args = p.parse_args(argv)
    settings = settings_mod.load()
    traces = make_traces(args.traces + 1, args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [
            receiver_path(traces, args.steps, settings, Path(tmp), args.interval),
            file_path(traces, args.steps, settings, Path(tmp), args.interval),
        ]
    print(
        f"{args.traces} traces of {1 + 2 * args.steps} spans ({args.steps} tool calls), load "
        f"average {os.getloadavg()[0]:.1f}"
    )
    print(f"{'path':<10} {'spans':>6} {'spans/s':>9} {'p50 s':>7} {'p95 s':>7} {'max s':>7}")
    for r in rows:
        print(
            f"{r['path']:<10} {r['spans']:>6} {r['spans_per_s']:>9.0f} {r['p50_s']:>7.2f} "
            f"{r['p95_s']:>7.2f} {r['max_s']:>7.2f}"
        )
    rec, fil = rows
    print(
        f"receiver / file: spans/s {rec['spans_per_s'] / fil['spans_per_s']:.2f}x, "
        f"p95 latency {rec['p95_s'] / fil['p95_s']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
