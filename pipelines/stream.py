"""``trajgraph stream SOURCE``: the streaming ingest (see pipelines/streaming.py).

Beam streaming mode on the local runner: a PeriodicImpulse polls the source, stateful DoFns
assemble trajectories, and the batch transforms extract and write them. Flags it does not
know go to Beam. Runs until ``--duration`` seconds have passed, or until interrupted.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.transforms.periodicsequence import PeriodicImpulse
from apache_beam.utils.timestamp import MAX_TIMESTAMP

from trajgraph import settings as settings_mod
from trajgraph.errors import ConfigError, InputError
from trajgraph.extractors import EXTRACTORS, get_extractor, resolve
from trajgraph.graph.embedders import embedder_name
from trajgraph.pipelines import progress
from trajgraph.pipelines.ingest import check_graph, embedder_for
from trajgraph.pipelines.streaming import (
    READ_FAILURES,
    STDIN,
    AppendDeadLetterFn,
    AssembleTrajectoryFn,
    TailSourceFn,
    parse_event,
)
from trajgraph.pipelines.transforms import (
    FAILURES,
    NS,
    ExtractTrajectoryFn,
    ValidateFn,
    WriteGraph,
    describe_failure,
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="trajgraph stream",
        description="Stream turn events (JSONL lines appended to files in a directory, or "
        "stdin as -) into the graph as they arrive.",
    )
    p.add_argument("source", help="a directory of growing *.jsonl files, or - for stdin")
    p.add_argument("--tenant", default=None)
    p.add_argument("--extractor", choices=EXTRACTORS, default="auto")
    p.add_argument("--embedder", choices=(*settings_mod.EMBEDDERS, "none"), default=None)
    p.add_argument("--poll", type=float, default=0.5, metavar="SECONDS", help="default 0.5")
    p.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop after this long (default: run until interrupted)",
    )
    p.add_argument("--budget", type=int, default=None, metavar="TOKENS")
    p.add_argument("--dead-letter", default=None, metavar="DIR")
    return p


def build_stream_pipeline(
    p: beam.Pipeline,
    *,
    source: str,
    poll_s: float,
    stop_at: float | None,
    tenant: str,
    extractor: str,
    llm: settings_mod.LLMSettings,
    budget: int,
    neo: settings_mod.Neo4jSettings,
    batch_size: int,
    embedder: settings_mod.EmbedderSettings | None,
    dead_letter_path: str,
) -> None:
    ticks = p | "Poll the source" >> PeriodicImpulse(
        fire_interval=poll_s, stop_timestamp=stop_at if stop_at else MAX_TIMESTAMP
    )
    read = (
        ticks
        | "Key the reader" >> beam.Map(lambda _: ("source", None))
        | "Read new lines"
        >> beam.ParDo(TailSourceFn(source)).with_outputs(READ_FAILURES, main="lines")
    )
    lines = read.lines
    events, bad_events = (
        lines | "Parse events" >> beam.ParDo(_ParseFn(tenant)).with_exception_handling()
    )
    assembled = (
        events
        | "Key by trajectory"
        >> beam.Map(lambda e: (f"{e['tenant']}\x1f{e['trajectory_id']}", e)).with_output_types(
            beam.typehints.KV[str, Any]
        )
        | "Assemble trajectories" >> beam.ParDo(AssembleTrajectoryFn())
    )
    valid, bad_valid = (
        assembled | "Validate against schema" >> beam.ParDo(ValidateFn()).with_exception_handling()
    )
    built = (
        valid
        | "One trajectory per batch" >> beam.Map(lambda item: [item])
        | "Extract and merge windows"
        >> beam.ParDo(
            ExtractTrajectoryFn(
                extractor, budget, llm, True, 1, embedder_name(embedder) if embedder else ""
            )
        ).with_outputs(FAILURES, main="rows")
    )
    _ = built.rows | "Write graph" >> WriteGraph(neo, batch_size, embedder)
    _ = (
        (
            read[READ_FAILURES],
            bad_events | "Describe bad events" >> beam.Map(describe_failure, "parse"),
            bad_valid | "Describe validation failures" >> beam.Map(describe_failure, "validate"),
            built[FAILURES],
        )
        | "Collect dead letters" >> beam.Flatten()
        | "Append dead letters" >> beam.ParDo(AppendDeadLetterFn(dead_letter_path))
    )


class _ParseFn(beam.DoFn):
    def __init__(self, tenant: str) -> None:
        self._tenant = tenant

    def process(self, line: Any) -> Any:
        progress.bump("events")
        beam.metrics.Metrics.counter(NS, "events").inc()
        yield parse_event(line, self._tenant)


def run(
    argv: Sequence[str] | None = None, *, settings: settings_mod.Settings | None = None
) -> dict[str, Any]:
    args, beam_args = build_parser().parse_known_args(argv)
    settings = settings or settings_mod.load()
    if args.source != STDIN and not Path(args.source).is_dir():
        raise InputError(
            "not a directory (give a folder of .jsonl files, or - for stdin)", source=args.source
        )
    if args.poll <= 0:
        raise ConfigError("--poll must be positive")
    extractor = resolve(args.extractor, settings.llm)
    get_extractor(extractor, llm=settings.llm)
    embedder = embedder_for(args.embedder, settings)
    check_graph(settings.neo4j, embedder)
    dl_dir = (
        Path(args.dead_letter)
        if args.dead_letter
        else (
            settings.local.home.parent
            / "dead-letter"
            / f"stream-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}"
        )
    )
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    options = PipelineOptions(beam_args)
    options.view_as(StandardOptions).streaming = True
    progress.reset()
    stop_at = time.time() + args.duration if args.duration else None
    p = beam.Pipeline(options=options)
    build_stream_pipeline(
        p,
        source=args.source,
        poll_s=args.poll,
        stop_at=stop_at,
        tenant=args.tenant or settings.tenant,
        extractor=extractor,
        llm=settings.llm,
        budget=args.budget or settings.token_budget,
        neo=settings.neo4j,
        batch_size=settings.write_batch_size,
        embedder=embedder,
        dead_letter_path=str(dl_dir / "dead-letter.jsonl"),
    )
    result = p.run()
    try:
        result.wait_until_finish()
    except KeyboardInterrupt:
        result.cancel()
    counters: dict[str, Any] = {}
    try:
        for c in result.metrics().query(MetricsFilter().with_namespace(NS))["counters"]:
            counters[c.key.metric.name] = counters.get(c.key.metric.name, 0) + int(
                c.committed or c.attempted or 0
            )
    except Exception:  # the streaming DirectRunner's metrics can fail: use the local tally
        counters = dict(progress.snapshot())
    counters["dead_letter_path"] = str(dl_dir / "dead-letter.jsonl")
    return counters


def main(argv: Sequence[str] | None = None) -> int:
    summary = run(argv)
    print(json.dumps(summary, indent=2, default=str), file=sys.stdout)
    return 0
