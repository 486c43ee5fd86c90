"""The batch ingest pipeline: log files → canonical trajectories → windows → extraction → Neo4j.

Shaped like Beam's examples: :func:`run` splits the command line with ``parse_known_args``
into trajgraph's flags and Beam's (``--runner``, ``--direct_num_workers``, ... go to Beam
untouched), composes the named transforms and runs them::

    Read log records → Normalize trajectories → Build graph rows → Write graph
          └──────────────────┴──── rejects ────────────┴──→ Write dead letters

Every input record ends in the graph or in the dead-letter file with its reason.
``python -m trajgraph.pipelines.ingest_pipeline PATHS...`` runs the pipeline bare.
``trajgraph ingest`` runs it as a nightly job (trajgraph/jobs/ingest.py: manifest, summary,
metrics file, exit codes, signals, progress bar), through :func:`run_pipeline` on the files
the manifest picked.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.runners.runner import PipelineResult

from trajgraph.core import settings as settings_mod
from trajgraph.core.errors import ConfigError
from trajgraph.pipelines import dead_letter, files, launch, runners
from trajgraph.pipelines.adapters import FORMATS
from trajgraph.pipelines.preflight import PipelineConfig, add_pipeline_arguments, expand_paths
from trajgraph.pipelines.transforms import (
    BuildGraphRows,
    NormalizeTrajectories,
    ReadLogRecords,
    WriteGraph,
)
from trajgraph.schemas.ids import id_problem

DEFAULT_MAX_RECORD_BYTES = 64 * 1024 * 1024


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The pipeline's own flags (a job adds its flags after these)."""
    p.add_argument("paths", nargs="+", help="files, directories or globs of agent logs")
    p.add_argument("--format", choices=FORMATS, default=None, help="skip auto-detection")
    add_pipeline_arguments(p)
    p.add_argument("--llm-model", default=None, help="overrides TRAJGRAPH_LLM_MODEL")
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="ask the LLM again for every window (fresh replies still refresh the cache)",
    )
    p.add_argument(
        "--id-prefix",
        default="",
        metavar="PREFIX",
        help="prepended to every trajectory id (keeps runs of one benchmark apart)",
    )
    p.add_argument("--batch-size", type=int, default=None, help="rows per UNWIND batch")
    p.add_argument("--max-record-bytes", type=int, default=DEFAULT_MAX_RECORD_BYTES)


def build_parser(
    prog: str = "python -m trajgraph.pipelines.ingest_pipeline",
    description: str = "The batch ingest pipeline alone (`trajgraph ingest` runs it as a job).",
) -> argparse.ArgumentParser:
    """The pipeline's parser; a job (jobs/ingest.py) names itself and adds its flags."""
    p = argparse.ArgumentParser(
        prog=prog,
        description=f"{description} Unknown flags go to Beam, e.g. --runner, --direct_num_workers.",
    )
    add_arguments(p)
    return p


@dataclass(frozen=True)
class IngestConfig(PipelineConfig):
    """The pipeline's flags resolved against the settings: what it reads, and how it
    extracts and writes (the fields both pipelines take are preflight.PipelineConfig's)."""

    paths: tuple[str, ...]  # the input files the patterns matched
    fmt: str | None
    use_cache: bool
    id_prefix: str
    max_record_bytes: int

    @classmethod
    def from_args(cls, args: argparse.Namespace, settings: settings_mod.Settings) -> IngestConfig:
        """Checked before anything runs (the batch's own flags, PipelineConfig.checked, then
        the inputs): a bad flag or a pattern matching nothing fails here."""
        if args.max_record_bytes < 1:
            raise ConfigError(f"--max-record-bytes must be at least 1, got {args.max_record_bytes}")
        problem = id_problem(args.id_prefix) if args.id_prefix else None
        if problem is not None:  # the prefix is part of every id: the id rule applies to it
            raise ConfigError(f"--id-prefix {problem}")
        config = cls.checked(
            args,
            settings,
            paths=(),
            fmt=args.format,
            use_cache=not args.no_cache,
            id_prefix=args.id_prefix,
            max_record_bytes=args.max_record_bytes,
        )
        # The inputs last: a bad flag is its own error, whatever the paths match.
        return dataclasses.replace(config, paths=tuple(expand_paths(args.paths)))


def retry_rows(rows: Any) -> list[dict[str, Any]]:
    """The windows of one trajectory that the heuristic extracted because the LLM did not
    answer: a later run should extract them again."""
    if not rows.retry_windows:
        return []
    traj = rows.rows["trajectories"]
    source = str(traj[0]["props"].get("source") or "") if traj else ""
    return [
        {"source": source, "trajectory_uid": rows.trajectory_uid, "windows": rows.retry_windows}
    ]


def build_pipeline(
    p: beam.Pipeline,
    config: IngestConfig,
    *,
    paths: Sequence[str],
    dead_letter_prefix: str,
    retry_prefix: str | None = None,
) -> None:
    """Compose the pipeline on ``p``; with ``retry_prefix`` it also writes the windows to
    retry (``<retry_prefix>.jsonl``: the manifest marks their files degraded)."""
    read = p | "Read log records" >> ReadLogRecords(
        list(paths), config.fmt, config.max_record_bytes
    )
    norm = read["records"] | "Normalize trajectories" >> NormalizeTrajectories(
        config.tenant, config.id_prefix, tenant_from_records=config.tenant_from_records
    )
    built = norm["trajectories"] | "Build graph rows" >> BuildGraphRows(
        config.extractor, config.budget_tokens, config.llm, config.use_cache, config.embedder_name
    )
    _ = built["rows"] | "Write graph" >> WriteGraph(config.neo, config.batch_size, config.embedder)
    _ = (
        (read["bad"], norm["bad"], built["bad"], built["duplicates"])
        | "Collect dead letters" >> beam.Flatten()
        | "Write dead letters" >> dead_letter.WriteJsonLines(dead_letter_prefix)
    )
    if retry_prefix:
        _ = (
            built["rows"]
            | "Find windows to retry" >> beam.FlatMap(retry_rows)
            | "Write windows to retry" >> dead_letter.WriteJsonLines(retry_prefix)
        )


def run_pipeline(
    config: IngestConfig,
    beam_args: Sequence[str],
    *,
    paths: Sequence[str],
    dead_letter_prefix: str,
    retry_prefix: str | None = None,
) -> PipelineResult:
    """Build the pipeline with Beam's flags, run it and wait (launch.execute): Beam's result,
    or what a step raised."""
    if not runners.workers_in_this_process(beam_args):
        # Workers in other processes (a cluster's TaskManagers and executors) open the files
        # from their own working directory: local paths go to them absolute.
        paths = [_absolute(p) for p in paths]
        dead_letter_prefix = _absolute(dead_letter_prefix)
        retry_prefix = _absolute(retry_prefix) if retry_prefix else retry_prefix
    return launch.execute(
        lambda p: build_pipeline(
            p, config, paths=paths, dead_letter_prefix=dead_letter_prefix, retry_prefix=retry_prefix
        ),
        beam_args,
    )


def _absolute(path: str) -> str:
    return os.path.abspath(path) if files.is_local(path) else path


def run(
    argv: Sequence[str] | None = None, *, settings: settings_mod.Settings | None = None
) -> PipelineResult:
    """Parse trajgraph's flags (the rest are Beam's), check the inputs and the graph, run
    (launch.run)."""
    return launch.run(
        argv, settings, parser=build_parser(), configure=IngestConfig.from_args, launch=_launch
    )


def _launch(
    config: IngestConfig,
    beam_args: list[str],
    args: argparse.Namespace,
    settings: settings_mod.Settings,
) -> PipelineResult:
    """The batch's part of a run: every input file, dead letters in a folder of their own."""
    dl_dir = dead_letter.dead_letter_dir(args.dead_letter, settings)
    files.make_dirs(dl_dir)
    return run_pipeline(
        config, beam_args, paths=config.paths, dead_letter_prefix=files.join(dl_dir, "dead-letter")
    )


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    run()
