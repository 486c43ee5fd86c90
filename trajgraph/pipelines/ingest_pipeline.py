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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineResult

from trajgraph.core import settings as settings_mod
from trajgraph.core.errors import ConfigError
from trajgraph.extractors import EXTRACTORS, get_extractor, llm_for, resolve
from trajgraph.graph.embedders import embedder_name
from trajgraph.pipelines import dead_letter, files, progress, runners
from trajgraph.pipelines.adapters import FORMATS
from trajgraph.pipelines.preflight import (
    check_graph,
    checked_budget,
    checked_tenant,
    embedder_for,
    expand_paths,
)
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
    p.add_argument(
        "--extractor",
        choices=EXTRACTORS,
        default="auto",
        help="llm (OpenAI-compatible server), heuristic (offline), or auto (default): llm when "
        "TRAJGRAPH_LLM_MODEL is set, else heuristic",
    )
    p.add_argument("--llm-model", default=None, help="overrides TRAJGRAPH_LLM_MODEL")
    p.add_argument(
        "--embedder",
        choices=(*settings_mod.EMBEDDERS, "none"),
        default=None,
        help="node embeddings: static (default, MiniLM distilled, offline), local (MiniLM, "
        "offline), openai, hash (fast, lexical) or none; overrides TRAJGRAPH_EMBEDDER",
    )
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="ask the LLM again for every window (fresh replies still refresh the cache)",
    )
    p.add_argument(
        "--dead-letter",
        default=None,
        metavar="DIR",
        help="where rejected records go: a folder, local or on a filesystem every worker "
        "reaches (gs://, s3://, hdfs://; default: a new local folder per run)",
    )
    p.add_argument(
        "--tenant",
        default=None,
        help="the tenant every record is written to (default TRAJGRAPH_TENANT); a record's own "
        '"tenant" field is overridden (counted) unless --tenant-from-records',
    )
    p.add_argument(
        "--tenant-from-records",
        action="store_true",
        help='let records choose their tenant with their own "tenant" field (--tenant is then '
        "the tenant of records that name none); off by default, so one run writes one tenant",
    )
    p.add_argument(
        "--id-prefix",
        default="",
        metavar="PREFIX",
        help="prepended to every trajectory id (keeps runs of one benchmark apart)",
    )
    p.add_argument(
        "--budget",
        type=int,
        default=None,
        metavar="TOKENS",
        help="token budget of one window (default TRAJGRAPH_TOKEN_BUDGET or 2048)",
    )
    p.add_argument("--batch-size", type=int, default=None, help="rows per UNWIND batch")
    p.add_argument("--max-record-bytes", type=int, default=DEFAULT_MAX_RECORD_BYTES)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m trajgraph.pipelines.ingest_pipeline",
        description="The batch ingest pipeline alone (`trajgraph ingest` runs it as a job). "
        "Unknown flags go to Beam, e.g. --runner, --direct_num_workers.",
    )
    add_arguments(p)
    return p


@dataclass(frozen=True)
class IngestConfig:
    """The pipeline's flags resolved against the settings: how it reads, extracts and writes."""

    fmt: str | None
    extractor: str  # heuristic | llm
    extractor_fingerprint: str  # extractor, model and prompt version: part of the manifest key
    llm: settings_mod.LLMSettings
    use_cache: bool
    tenant: str
    id_prefix: str
    tenant_from_records: bool
    budget_tokens: int
    batch_size: int
    max_record_bytes: int
    neo: settings_mod.Neo4jSettings
    embedder: settings_mod.EmbedderSettings | None

    @classmethod
    def from_args(cls, args: argparse.Namespace, settings: settings_mod.Settings) -> IngestConfig:
        """Checked before anything runs: a bad extractor name, a missing model or a budget
        too small for a window fail here, with a ConfigError."""
        llm = settings.llm
        if args.llm_model:
            llm = dataclasses.replace(llm, model=args.llm_model)
        llm = llm_for(args.extractor, llm, settings.local_llm)
        extractor = resolve(args.extractor, llm)
        fingerprint = get_extractor(extractor, llm=llm).fingerprint
        budget = checked_budget(args.budget or settings.token_budget)
        if args.max_record_bytes < 1:
            raise ConfigError(f"--max-record-bytes must be at least 1, got {args.max_record_bytes}")
        problem = id_problem(args.id_prefix) if args.id_prefix else None
        if problem is not None:  # the prefix is part of every id: the id rule applies to it
            raise ConfigError(f"--id-prefix {problem}")
        return cls(
            fmt=args.format,
            extractor=extractor,
            extractor_fingerprint=fingerprint,
            llm=llm,
            use_cache=not args.no_cache,
            tenant=checked_tenant(args.tenant or settings.tenant),
            id_prefix=args.id_prefix,
            tenant_from_records=args.tenant_from_records,
            budget_tokens=budget,
            batch_size=args.batch_size or settings.write_batch_size,
            max_record_bytes=args.max_record_bytes,
            neo=settings.neo4j,
            embedder=embedder_for(args.embedder, settings),
        )

    @property
    def embedder_name(self) -> str:
        return embedder_name(self.embedder) if self.embedder else ""


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
    """Build the pipeline with Beam's flags, run it and wait: Beam's result, or what a step
    raised."""
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    options = PipelineOptions(list(beam_args))
    progress.reset()
    p = beam.Pipeline(options=options)
    build_pipeline(
        p, config, paths=paths, dead_letter_prefix=dead_letter_prefix, retry_prefix=retry_prefix
    )
    result = p.run()
    result.wait_until_finish()
    return result


def run(
    argv: Sequence[str] | None = None, *, settings: settings_mod.Settings | None = None
) -> PipelineResult:
    """Parse trajgraph's flags (the rest are Beam's), check the inputs and the graph, run."""
    args, beam_args = build_parser().parse_known_args(argv)
    settings = settings or settings_mod.load()
    config = IngestConfig.from_args(args, settings)
    paths = expand_paths(args.paths)
    check_graph(config.neo, config.embedder)
    # --runner PrismRunner: our Prism binary; FlinkRunner: the job server, its Java, a local
    # cluster.
    beam_args = runners.prepare_beam_args(beam_args, settings)
    dl_dir = dead_letter.dead_letter_dir(args.dead_letter, settings)
    files.make_dirs(dl_dir)
    return run_pipeline(
        config, beam_args, paths=paths, dead_letter_prefix=files.join(dl_dir, "dead-letter")
    )


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    run()
