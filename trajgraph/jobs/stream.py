"""``trajgraph stream``: the streaming pipeline (pipelines/stream_pipeline.py), then its
counters and dead-letter file as JSON on stdout (and in ``--metrics``), with ingest's
statuses and exit codes (jobs/summary.py, docs/streaming.md#ending-and-exit-codes)."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, NoReturn

from apache_beam.metrics.metric import MetricsFilter

from trajgraph.core import errors
from trajgraph.core import settings as settings_mod
from trajgraph.core.errors import ConfigError, one_line
from trajgraph.jobs import signals
from trajgraph.jobs.manifest import now_iso
from trajgraph.jobs.summary import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_TERMINATED,
    PARTIAL_COUNTERS,
    partial_counts,
    write_metrics_json,
)
from trajgraph.pipelines import launch, progress, runners, stream_transforms
from trajgraph.pipelines import stream_pipeline as pipeline
from trajgraph.pipelines.transforms import NS

METRICS_SCHEMA = "trajgraph-stream-metrics/1"
# Always in the output and the metrics, 0 when nothing counted them (a monitor reads keys).
COUNTERS = (
    "events",
    "trajectories_written",
    "trajectories_unchanged",
    "turns",
    "rows_written",
    *PARTIAL_COUNTERS,
)

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    """The pipeline's flags, and the job's: where its metrics go."""
    p = pipeline.build_parser()
    p.add_argument(
        "--metrics",
        default=None,
        metavar="PATH",
        help="a JSON metrics file: rewritten every --metrics-every seconds while the stream "
        'runs ("status": "running"), and at its end with the status and exit code',
    )
    p.add_argument(
        "--metrics-every",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="default 30",
    )
    return p


def run(
    argv: Sequence[str] | None = None,
    *,
    settings: settings_mod.Settings | None = None,
    known: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Stream until the duration ends, stdin ends, or a signal; the run's counters and
    dead-letter path. ``known`` gets the dead-letter path as soon as it is known, for a run
    that raises, and ``drains`` while a signal would end the run by draining it."""
    known = {} if known is None else known
    args, beam_args = build_parser().parse_known_args(argv)
    if not 0 < args.metrics_every < math.inf:
        raise ConfigError(f"--metrics-every must be a positive number, got {args.metrics_every}")
    settings = settings or settings_mod.load()
    config = pipeline.StreamConfig.from_args(args, settings)
    known["dead_letter_path"] = config.dead_letter_path
    beam_args = launch.ready(config, beam_args, settings)
    # A signal stops the poll and lets the pipeline finish what it read, where the poll
    # can hear it (its workers are in this process); elsewhere it ends the run at once.
    known["drains"] = runners.workers_in_this_process(beam_args)
    try:
        result = pipeline.run_pipeline(config, beam_args)
    finally:
        known["drains"] = False
    counters = _counts(_counters(result))
    counters["dead_letter_path"] = config.dead_letter_path
    counters["space_moved_to"], counters["stale_vectors"] = None, 0
    moved = launch.moved_during(config, counters)
    if moved is not None:
        counters["space_moved_to"], counters["stale_vectors"] = moved
    return counters


def _counters(result: Any) -> dict[str, Any]:
    """The stream's counters from Beam's metrics, or this process's tally."""
    counters: dict[str, Any] = {}
    try:
        for c in result.metrics().query(MetricsFilter().with_namespace(NS))["counters"]:
            counters[c.key.metric.name] = counters.get(c.key.metric.name, 0) + int(
                c.committed or c.attempted or 0
            )
    except Exception:  # the streaming DirectRunner's metrics can fail: use the local tally
        counters = dict(progress.snapshot())
    return counters


def main(argv: Sequence[str] | None = None) -> int:
    """Stream, then print the counters as JSON with a ``status`` (and write them to
    ``--metrics`` with the exit code):

    - the end of ``--duration`` or of stdin: ``ok`` (exit 0), or ``partial`` (exit 3, one
      line on stderr) when lines were dead-lettered, windows failed or degraded, vectors
      could not be made, or vectors of the model `trajgraph reembed` moved away from remain;
    - SIGTERM or Ctrl-C: the poll stops, what was read is written, then ``interrupted``
      (exit 143 on SIGTERM, 130 on Ctrl-C) with the final counts; a second signal (or a
      runner whose workers are elsewhere) ends it at once with what was counted so far;
    - ``failed`` with the error (Neo4j lost for longer than the write path's retries; exit
      1: run it again) or ``error`` (bad flags or settings; exit 2), then the CLI's
      one-line report.
    """
    known: dict[str, Any] = {"drains": False}
    metrics = _Metrics(argv, known)

    def drain() -> bool:
        if not known.get("drains"):
            return False
        stream_transforms.request_stop()
        # os.write: safe in a signal handler (print may be mid-write on the main thread).
        os.write(
            sys.stderr.fileno(),
            b"trajgraph: stopping the stream: writing what was read (signal again to stop "
            b"at once)\n",
        )
        return True

    with signals.ending_the_run(drain=drain):
        try:
            metrics.start()
            summary = run(argv, known=known)
        except BaseException as e:
            metrics.stop()
            # Beam re-raises what interrupted a bundle as another error: the handler saw it.
            if isinstance(e, KeyboardInterrupt) or signals.received:
                _interrupted(
                    {**_counts(progress.snapshot()), **_public(known)}, metrics, drained=False
                )
            if not isinstance(e, Exception):
                raise
            config_error = errors.exit_code(e) == EXIT_CONFIG
            failed = {
                **_counts(progress.snapshot()),
                **_public(known),
                "status": "error" if config_error else "failed",
                "error": one_line(e),
            }
            try:
                metrics.write(failed, EXIT_CONFIG if config_error else EXIT_FAILED)
            except Exception as me:  # do not hide the error that stopped the run
                log.error("could not write metrics %s: %s", metrics.path, one_line(me))
            print(json.dumps(failed, indent=2, default=str), file=sys.stdout)
            raise
    metrics.stop()
    if signals.received:  # drained: what was read is in the graph or dead-lettered
        _interrupted(summary, metrics, drained=True)
    status, code, partial = finished(summary)
    metrics.write({**summary, "status": status}, code)
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


def finished(summary: dict[str, Any]) -> tuple[str, int, dict[str, int]]:
    """Status, exit code, and the counts that make it partial, of a stream that ended by
    itself (--duration, the end of stdin): ingest's rule (IngestSummary.set_status)."""
    partial = partial_counts(summary)
    if summary.get("stale_vectors"):
        partial["stale_vectors"] = int(summary["stale_vectors"])
    return ("partial", EXIT_PARTIAL, partial) if partial else ("ok", EXIT_OK, {})


def _counts(counters: dict[str, Any]) -> dict[str, Any]:
    return {**dict.fromkeys(COUNTERS, 0), **counters}


def _public(known: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in known.items() if k != "drains"}


def _interrupted(counters: dict[str, Any], metrics: _Metrics, *, drained: bool) -> NoReturn:
    terminated = signal.SIGTERM in signals.received
    code = EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    final = {**counters, "status": "interrupted", "drained": drained}
    try:
        metrics.write(final, code)
    except Exception as e:  # the exit code still says what happened
        print(f"trajgraph: could not write metrics: {one_line(e)}", file=sys.stderr)
    print(json.dumps(final, indent=2, default=str))
    sig = "SIGTERM" if terminated else "SIGINT"
    what = "what was read is written" if drained else "what was in flight is not written"
    print(f"trajgraph: stream interrupted by {sig} ({what})", file=sys.stderr)
    # Beam's worker threads may still be busy: leave now, with the counters printed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class _Metrics:
    """``--metrics``: the counts so far every ``--metrics-every`` seconds while the stream
    runs (in this process's tally: workers elsewhere do not add to it), the outcome at its
    end. A heartbeat a monitor can watch: ``updated_at`` stops moving when the stream hangs."""

    def __init__(self, argv: Sequence[str] | None, known: dict[str, Any]) -> None:
        try:
            args, _ = build_parser().parse_known_args(argv)
        except SystemExit:
            args = argparse.Namespace(metrics=None, metrics_every=30.0)
        self.path: str | None = args.metrics
        self.every = args.metrics_every
        self.known = known
        self.started_at = now_iso()
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.path and 0 < self.every < math.inf:
            self._thread = threading.Thread(
                target=self._beat, name="trajgraph-stream-metrics", daemon=True
            )
            self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.write(
                    {**_counts(progress.snapshot()), **_public(self.known), "status": "running"}
                )
            except Exception as e:  # a full disk must not end the stream
                log.warning("could not write metrics %s: %s", self.path, one_line(e))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def write(self, fields: dict[str, Any], exit_code: int | None = None) -> None:
        if not self.path:
            return
        ended = exit_code is not None
        write_metrics_json(
            self.path,
            METRICS_SCHEMA,
            {
                **fields,
                "exit_code": exit_code,
                "started_at": self.started_at,
                "updated_at": now_iso(),
                "finished_at": now_iso() if ended else None,
                "duration_s": round(time.monotonic() - self.started, 3),
            },
        )
