"""``trajgraph stream``: the streaming pipeline (pipelines/stream.py), then its counters and
dead-letter file as JSON on stdout, with ingest's exit codes (jobs/summary.py)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from apache_beam.metrics.metric import MetricsFilter

from trajgraph import settings as settings_mod
from trajgraph.errors import one_line
from trajgraph.jobs import signals
from trajgraph.jobs.summary import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_TERMINATED,
    partial_counts,
)
from trajgraph.pipelines import progress
from trajgraph.pipelines import stream as pipeline
from trajgraph.pipelines.preflight import check_graph
from trajgraph.pipelines.transforms import NS


def build_parser() -> argparse.ArgumentParser:
    """The job adds no flags of its own to the pipeline's."""
    return pipeline.build_parser()


def run(
    argv: Sequence[str] | None = None,
    *,
    settings: settings_mod.Settings | None = None,
    known: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Stream until the duration ends or Ctrl-C; the run's counters and dead-letter path.
    ``known`` gets the dead-letter path as soon as it is known, for a run that raises."""
    args, beam_args = build_parser().parse_known_args(argv)
    settings = settings or settings_mod.load()
    config = pipeline.StreamConfig.from_args(args, settings)
    if known is not None:
        known["dead_letter_path"] = config.dead_letter_path
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
    """Stream, then print the counters as JSON with a ``status``:

    - ``ok`` (exit 0), or ``partial`` (exit 3, one line on stderr) when lines were
      dead-lettered or windows failed or degraded;
    - ``interrupted`` (exit 130 on Ctrl-C, 143 on SIGTERM): what this process counted so
      far; a restart re-reads the source, so what was in flight is not lost;
    - ``failed`` with the error (Neo4j lost for longer than the write path's retries), then
      the CLI's one-line report (exit 1: run it again, for the same reason).
    """
    known: dict[str, Any] = {}
    with signals.ending_the_run():
        try:
            summary = run(argv, known=known)
        except BaseException as e:
            # Beam re-raises what interrupted a bundle as another error: the handler saw it.
            if isinstance(e, KeyboardInterrupt) or signals.received:
                _interrupted({**progress.snapshot(), **known})
            if not isinstance(e, Exception):
                raise
            failed = {**progress.snapshot(), **known, "status": "failed", "error": one_line(e)}
            print(json.dumps(failed, indent=2, default=str), file=sys.stdout)
            raise
    if signals.received:  # a runner that cancels on Ctrl-C returns (pipelines/stream.py)
        _interrupted(summary)
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


def _interrupted(counters: dict[str, Any]) -> NoReturn:
    terminated = signal.SIGTERM in signals.received
    print(json.dumps({**counters, "status": "interrupted"}, indent=2, default=str))
    sig = "SIGTERM" if terminated else "SIGINT"
    print(f"trajgraph: stream interrupted by {sig}", file=sys.stderr)
    # Beam's worker threads may still be busy: leave now, with the counters printed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_TERMINATED if terminated else EXIT_INTERRUPTED)
