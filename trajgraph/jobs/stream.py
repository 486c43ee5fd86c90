"""``trajgraph stream``: the streaming pipeline (pipelines/stream.py), then its counters and
dead-letter file as JSON on stdout. Exit codes are ingest's (jobs/summary.py): 0 ok, 3 when
it finished with records dead-lettered or windows failed or degraded, and errors reach the
CLI's one-line report."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from apache_beam.metrics.metric import MetricsFilter

from trajgraph import settings as settings_mod
from trajgraph.errors import one_line
from trajgraph.jobs.summary import EXIT_OK, EXIT_PARTIAL, partial_counts
from trajgraph.pipelines import progress
from trajgraph.pipelines import stream as pipeline
from trajgraph.pipelines.preflight import check_graph
from trajgraph.pipelines.transforms import NS


def build_parser() -> argparse.ArgumentParser:
    """The job adds no flags of its own to the pipeline's."""
    return pipeline.build_parser()


def run(
    argv: Sequence[str] | None = None, *, settings: settings_mod.Settings | None = None
) -> dict[str, Any]:
    """Stream until the duration ends or Ctrl-C; the run's counters and dead-letter path."""
    args, beam_args = build_parser().parse_known_args(argv)
    settings = settings or settings_mod.load()
    config = pipeline.StreamConfig.from_args(args, settings)
    check_graph(config.neo, config.embedder)
    # --runner PrismRunner: our Prism binary; FlinkRunner: the job server (pipelines/runners).
    result = pipeline.run_pipeline(config, pipeline.prepare_beam_args(config, beam_args, settings))
    counters: dict[str, Any] = {}
    try:
        for c in result.metrics().query(MetricsFilter().with_namespace(NS))["counters"]:
            counters[c.key.metric.name] = counters.get(c.key.metric.name, 0) + int(
                c.committed or c.attempted or 0
            )
    except Exception:  # the streaming DirectRunner's metrics can fail: use the local tally
        counters = dict(progress.snapshot())
    counters["dead_letter_path"] = config.dead_letter_path
    return counters


def main(argv: Sequence[str] | None = None) -> int:
    """Stream, then print the counters as JSON; a stream that stopped on an error (Neo4j
    lost for longer than the write path's retries) prints them too, with ``status`` failed
    and the error, before the CLI reports it (exit 1: run it again; a restart re-reads the
    source, so nothing is lost)."""
    try:
        summary = run(argv)
    except Exception as e:
        failed = {**progress.snapshot(), "status": "failed", "error": one_line(e)}
        print(json.dumps(failed, indent=2, default=str), file=sys.stdout)
        raise
    partial = partial_counts(summary)
    status = "partial" if partial else "ok"
    print(json.dumps({**summary, "status": status}, indent=2, default=str), file=sys.stdout)
    if not partial:
        return EXIT_OK
    # As for a nightly ingest: a scheduler sees that something needs a look without
    # parsing the JSON (each such record is in the dead-letter output with its reason).
    counts = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in partial.items())
    print(
        f"trajgraph: stream finished partial ({counts}); the reasons are in "
        f"{summary['dead_letter_path']}",
        file=sys.stderr,
    )
    return EXIT_PARTIAL
