"""The streaming ingest pipeline (the DoFns are in pipelines/stream_transforms.py).

Beam streaming mode on the local runner: a PeriodicImpulse polls the source, stateful DoFns
assemble trajectories, and the batch transforms extract and write them. Shaped like Beam's
examples: :func:`run` parses trajgraph's flags with ``parse_known_args`` (the rest go to
Beam), composes the transforms and runs until ``--duration`` seconds have passed, or until
interrupted. ``trajgraph stream`` runs it through trajgraph/jobs/stream.py, which prints the
run's counters.
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.runners.runner import PipelineResult
from apache_beam.utils.timestamp import MAX_TIMESTAMP, Timestamp

from trajgraph.core import settings as settings_mod
from trajgraph.core.errors import ConfigError, InputError
from trajgraph.pipelines import dead_letter, files, launch, progress, runners
from trajgraph.pipelines.preflight import (
    PipelineConfig,
    add_pipeline_arguments,
    dead_letter_root,
    utc_stamp,
)
from trajgraph.pipelines.stream_transforms import (
    READ_FAILURES,
    SESSION_TRAJECTORIES,
    STDIN,
    AssembleTrajectoryFn,
    PollUntilStoppedFn,
    TailSourceFn,
    WriteNewestVersions,
    parse_event,
    reset_stop,
)
from trajgraph.pipelines.transforms import (
    FAILURES,
    NS,
    TENANT_COUNTERS,
    ExtractTrajectoryFn,
    ValidateFn,
    choose_tenant,
    describe_failure,
)


def build_parser() -> argparse.ArgumentParser:
    """The stream's parser: its source and timing, and the flags both pipelines take."""
    p = launch.parser(
        "trajgraph stream",
        "Stream turn events (JSONL lines appended to files in a directory, or stdin as -) "
        "into the graph as they arrive.",
    )
    p.add_argument(
        "source",
        help="a growing file, a directory of growing *.jsonl files (searched recursively; "
        "Claude Code sessions and OTLP exports are recognized), or - for stdin",
    )
    add_pipeline_arguments(p)
    p.add_argument("--poll", type=float, default=0.5, metavar="SECONDS", help="default 0.5")
    p.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop after this long (default: run until interrupted)",
    )
    return p


@dataclass(frozen=True)
class StreamConfig(PipelineConfig):
    """The stream's flags resolved against the settings and checked (the fields both
    pipelines take are preflight.PipelineConfig's)."""

    source: str  # a file, a directory, or "-" for stdin
    poll_s: float
    duration_s: float | None
    dead_letter_path: str  # appended to as bad lines arrive

    @classmethod
    def from_args(cls, args: argparse.Namespace, settings: settings_mod.Settings) -> StreamConfig:
        """Checked before anything runs: the source and the timing flags here, the rest by
        PipelineConfig.checked, as for a batch run."""
        if args.source != STDIN and not Path(args.source).exists():
            raise InputError(
                "not a directory or a file (give a folder of .jsonl files, a growing file, "
                "or - for stdin)",
                source=args.source,
            )
        if not 0 < args.poll < math.inf:  # NaN too: it fails every comparison
            raise ConfigError(f"--poll must be a positive number of seconds, got {args.poll}")
        if args.duration is not None and not 0 < args.duration < math.inf:
            raise ConfigError(
                f"--duration must be a positive number of seconds (leave it out to run until "
                f"interrupted), got {args.duration}"
            )
        dl_dir = args.dead_letter or str(dead_letter_root(settings) / f"stream-{utc_stamp()}")
        return cls.checked(
            args,
            settings,
            source=args.source,
            poll_s=args.poll,
            duration_s=args.duration,
            dead_letter_path=files.join(dl_dir, "dead-letter.jsonl"),
        )

    def prepare_beam_args(
        self, beam_args: Sequence[str], settings: settings_mod.Settings
    ) -> list[str]:
        """Beam's flags completed for the runner (PipelineConfig.prepare_beam_args); stdin
        can only be read by workers in this process."""
        beam_args = super().prepare_beam_args(beam_args, settings)
        if self.source == STDIN and not runners.workers_in_this_process(beam_args):
            raise ConfigError(
                "the stream source - (stdin) is only readable by workers in this process: use "
                "the DirectRunner or LOOPBACK workers, or give a directory the workers can read"
            )
        return beam_args


def build_pipeline(p: beam.Pipeline, config: StreamConfig, *, stop_at: float | None) -> None:
    """Compose the stream on ``p``; the impulse stops at ``stop_at`` (a Unix time), if any."""
    embedder = config.embedder
    ticks = p | "Poll the source" >> PollTheSource(config.poll_s, stop_at)
    read = (
        ticks
        | "Key the reader" >> beam.Map(lambda _: ("source", None))
        | "Read new lines"
        >> beam.ParDo(TailSourceFn(config.source, config.tenant)).with_outputs(
            READ_FAILURES, SESSION_TRAJECTORIES, main="lines"
        )
    )
    lines = read.lines
    events, bad_events = (
        lines
        | "Parse events"
        >> beam.ParDo(_ParseFn(config.tenant, config.tenant_from_records)).with_exception_handling()
    )
    assembled = (
        events
        | "Key by trajectory"
        >> beam.Map(lambda e: (f"{e['tenant']}\x1f{e['trajectory_id']}", e)).with_output_types(
            beam.typehints.KV[str, Any]
        )
        | "Assemble trajectories" >> beam.ParDo(AssembleTrajectoryFn())
    )

    def extract() -> ExtractTrajectoryFn:  # the event and the session branches extract alike
        return ExtractTrajectoryFn(
            config.extractor, config.budget_tokens, config.llm, True, 1, config.embedder_name
        )

    valid, bad_valid = (
        assembled | "Validate against schema" >> beam.ParDo(ValidateFn()).with_exception_handling()
    )
    built = (
        valid
        | "One trajectory per batch" >> beam.Map(lambda item: [item])
        | "Extract and merge windows" >> beam.ParDo(extract()).with_outputs(FAILURES, main="rows")
    )
    _ = built.rows | "Write graph" >> WriteNewestVersions(config.neo, config.batch_size, embedder)
    # Session files (Claude Code, OTLP exports) come out of the reader already adapted. They
    # take their own branch to the same transforms: a second stateful step flattened into the
    # event branch held its watermark back (turns took 15-30 s to appear).
    session_valid, bad_session_valid = (
        read[SESSION_TRAJECTORIES]
        | "Validate session trajectories" >> beam.ParDo(ValidateFn()).with_exception_handling()
    )
    built_sessions = (
        session_valid
        | "One session trajectory per batch" >> beam.Map(lambda item: [item])
        | "Extract and merge session windows"
        >> beam.ParDo(extract()).with_outputs(FAILURES, main="rows")
    )
    _ = built_sessions.rows | "Write session graph" >> WriteNewestVersions(
        config.neo, config.batch_size, embedder
    )
    _ = (
        (
            read[READ_FAILURES],
            bad_session_valid
            | "Describe session validation failures" >> beam.Map(describe_failure, "validate"),
            built_sessions[FAILURES],
            bad_events | "Describe bad events" >> beam.Map(describe_failure, "parse"),
            bad_valid | "Describe validation failures" >> beam.Map(describe_failure, "validate"),
            built[FAILURES],
        )
        | "Collect dead letters" >> beam.Flatten()
        | "Append dead letters"
        >> beam.ParDo(dead_letter.AppendDeadLetterFn(config.dead_letter_path))
    )


class PollTheSource(beam.PTransform):
    """A tick every ``poll_s`` seconds until ``stop_at`` (a Unix time, or never), or until
    the stream is asked to stop (the end of stdin, a signal): PeriodicImpulse's ticks from a
    DoFn that can end early (streaming.PollUntilStoppedFn)."""

    def __init__(self, poll_s: float, stop_at: float | None) -> None:
        super().__init__()
        self._poll_s = poll_s
        self._stop_at = stop_at

    def expand(self, pbegin: Any) -> Any:
        end = Timestamp.of(self._stop_at) if self._stop_at else MAX_TIMESTAMP
        poll_s = self._poll_s
        return (
            pbegin
            | "Start" >> beam.Impulse()
            | "From now" >> beam.Map(lambda _: (Timestamp.now(), end, poll_s))
            | "Tick" >> beam.ParDo(PollUntilStoppedFn())
        )


class _ParseFn(beam.DoFn):
    def __init__(self, tenant: str, tenant_from_records: bool = False) -> None:
        self._tenant = tenant
        self._records_choose = tenant_from_records

    def process(self, line: Any) -> Iterator[dict[str, Any]]:
        progress.bump("events")
        beam.metrics.Metrics.counter(NS, "events").inc()
        event = parse_event(line, self._tenant)
        event["tenant"], why = choose_tenant(
            event["tenant"], self._tenant, records_choose=self._records_choose
        )
        if why in TENANT_COUNTERS:
            progress.bump(TENANT_COUNTERS[why])
            beam.metrics.Metrics.counter(NS, TENANT_COUNTERS[why]).inc()
        yield event


def run_pipeline(config: StreamConfig, beam_args: Sequence[str]) -> PipelineResult:
    """Run the stream in Beam's streaming mode until ``duration_s`` has passed or Ctrl-C
    (which cancels it; launch.execute); Beam's result."""
    reset_stop()
    stop_at = time.time() + config.duration_s if config.duration_s else None
    return launch.execute(
        lambda p: build_pipeline(p, config, stop_at=stop_at), beam_args, streaming=True
    )


def run(
    argv: Sequence[str] | None = None, *, settings: settings_mod.Settings | None = None
) -> PipelineResult:
    """Parse trajgraph's flags (the rest are Beam's), check the source and the graph, run
    (launch.run)."""
    return launch.run(
        argv,
        settings,
        parser=build_parser(),
        configure=StreamConfig.from_args,
        launch=lambda config, beam_args, _args, _settings: run_pipeline(config, beam_args),
    )


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    run()
