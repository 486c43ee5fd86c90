"""Batch ingest: log files → canonical trajectories → windows → extraction → Neo4j.

``run(argv)`` takes trajgraph's own flags and passes everything else to Beam untouched
(``--runner``, ``--direct_num_workers``, ...).

For nightly jobs (docs/nightly.md): ``--manifest PATH`` reads only new, changed or failed
files (pipelines/manifest.py), ``--metrics PATH`` writes a JSON metrics file, also when the
run fails, and ``main`` exits 0 (ok), 1 (failed), 2 (bad configuration or input), 3 (done,
but some records were dead-lettered or some windows must be extracted again), 130/143
(interrupted by SIGINT/SIGTERM).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from trajgraph import settings as settings_mod
from trajgraph.errors import ConfigError, InputError, TrajgraphError
from trajgraph.extractors import EXTRACTORS, get_extractor, resolve
from trajgraph.graph.embedders import embedder_name
from trajgraph.pipelines import dead_letter, progress, runners
from trajgraph.pipelines.adapters import FORMATS
from trajgraph.pipelines.manifest import (
    Manifest,
    Plan,
    config_fingerprint,
    file_key,
    now_iso,
    write_json_atomic,
)
from trajgraph.pipelines.transforms import (
    NS,
    BuildGraphRows,
    NormalizeTrajectories,
    ReadLogRecords,
    WriteGraph,
)

DEFAULT_MAX_RECORD_BYTES = 64 * 1024 * 1024
METRICS_SCHEMA = "trajgraph-ingest-metrics/1"

# Exit codes of `trajgraph ingest` (README "Nightly ingest", docs/nightly.md).
EXIT_OK = 0  # every record is in the graph
EXIT_FAILED = 1  # the run did not finish (Neo4j lost, crash, ...): nothing is marked done
EXIT_CONFIG = 2  # bad flags, settings or inputs (no file matches, wrong embedder, ...)
EXIT_PARTIAL = 3  # finished, but records were dead-lettered or windows must be retried
EXIT_INTERRUPTED = 130  # SIGINT
EXIT_TERMINATED = 143  # SIGTERM (e.g. a CronJob's deadline)

# Walking a directory picks up the files an adapter can read; other files are not records.
LOG_SUFFIXES = (".json", ".jsonl", ".ndjson", ".traj", ".parquet")


@dataclass
class IngestSummary:
    files: int = 0  # files read by this run
    files_input: int = 0  # files the paths matched
    files_skipped: int = 0  # unchanged since a run recorded in the manifest
    files_retry: list[str] = field(default_factory=list)  # read again by the next manifest run
    files_missing: list[str] = field(default_factory=list)  # in the manifest, gone from disk
    records: int = 0
    ingested: int = 0
    unchanged: int = 0
    dead_lettered: int = 0
    turns: int = 0
    windows: int = 0
    windows_failed: int = 0
    windows_degraded: int = 0  # extracted by the heuristic because the LLM did not answer
    rows_written: int = 0
    seconds: float = 0.0  # the pipeline
    dead_letter_path: str = ""
    extractor: str = ""
    counters: dict[str, int] = field(default_factory=dict)
    tenant: str = ""
    id_prefix: str = ""
    manifest_path: str = ""
    status: str = "ok"  # ok | partial | failed | error | interrupted
    exit_code: int = EXIT_OK
    error: str | None = None
    error_type: str | None = None
    started_at: str = ""
    finished_at: str = ""
    duration_s: float = 0.0  # the whole run: listing, manifest, pipeline
    phases_s: dict[str, float] = field(default_factory=dict)

    @property
    def balanced(self) -> bool:
        return self.records == self.ingested + self.dead_lettered

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["balanced"] = self.balanced
        d["llm"] = self.llm
        return d

    def render(self) -> str:
        if self.error is None:
            return "\n".join(self._render_counts())
        lines = [f"ingest {self.status} after {self.duration_s:.1f}s (exit {self.exit_code})"]
        lines.append(f"  error              {self.error}")
        if self.records or self.files:
            lines.append("  counted before it stopped:")
            lines.extend(self._render_counts()[1:])
        return "\n".join(lines)

    def _render_counts(self) -> list[str]:
        lines = [
            f"ingest finished in {self.seconds:.1f}s with extractor {self.extractor!r}",
            f"  files              {self.files}"
            + (
                f" read, {self.files_skipped} unchanged per manifest {self.manifest_path}"
                if self.manifest_path
                else ""
            ),
            f"  records            {self.records} = {self.ingested} ingested + "
            f"{self.dead_lettered} dead-lettered"
            + ("" if self.balanced or self.error else "  (MISMATCH)"),
            f"  unchanged          {self.unchanged} (already in the graph, skipped)",
            f"  turns              {self.turns}",
            f"  windows extracted  {self.windows}"
            + (f" ({self.windows_failed} failed, see dead letters)" if self.windows_failed else "")
            + (
                f" ({self.windows_degraded} by the heuristic: the LLM did not answer)"
                if self.windows_degraded
                else ""
            ),
            f"  graph rows written {self.rows_written}",
        ]
        if self.dead_lettered or self.windows_failed:
            lines.append(f"  dead letters       {self.dead_letter_path}")
        if self.files_retry:
            lines.append(f"  retried next run   {len(self.files_retry)} files")
            lines.extend(f"    {f}" for f in self.files_retry)
        if self.files_missing:
            lines.append(
                f"  missing            {len(self.files_missing)} files of the manifest are gone "
                "(their trajectories stay; `trajgraph delete --source PATH` removes them)"
            )
            lines.extend(f"    {f}" for f in self.files_missing)
        lines.extend(self._render_llm())
        return lines

    @property
    def llm(self) -> dict[str, int]:
        """The LLM extractor's counters, without the ``llm_`` prefix."""
        return {k[4:]: v for k, v in sorted(self.counters.items()) if k.startswith("llm_")}

    def _render_llm(self) -> list[str]:
        c = self.llm
        if not c:
            return []
        retries = {k[len("retries_") :]: v for k, v in c.items() if k.startswith("retries_")}
        retry_text = ", ".join(f"{v}x {k}" for k, v in retries.items() if v) or "none"
        by_llm = c.get("windows", 0)
        missing = c.get("usage_missing", 0)
        usage = f", {missing} replies without usage" if missing else ""
        return (
            [
                "  LLM",
                f"    calls            {c.get('calls', 0)} (retries: {retry_text}; "
                f"repairs {c.get('repairs', 0)}; splits {c.get('splits', 0)})",
                f"    tokens           prompt {c.get('prompt_tokens', 0)} "
                f"(tiktoken {c.get('prompt_tokens_local', 0)}), "
                f"completion {c.get('completion_tokens', 0)}{usage}",
                f"    windows          {by_llm} from replies, {c.get('cache_hits', 0)} cache hits, "
                f"{c.get('fallbacks', 0)} by the heuristic instead",
                f"    rejected         {c.get('rejected_identifiers', 0)} identifiers/values not "
                f"verbatim, {c.get('rejected_refs', 0)} bad references",
            ]
            + (
                [
                    f"    schema           json_schema rejected, used json_object "
                    f"({c['schema_downgrades']}x)"
                ]
                if c.get("schema_downgrades")
                else []
            )
            + ([f"    errors           {c['errors']} requests failed"] if c.get("errors") else [])
        )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="trajgraph ingest",
        description="Ingest agent logs into the Neo4j causality graph "
        "(Apache Beam batch pipeline). "
        "Unknown flags go to Beam, e.g. --runner, --direct_num_workers.",
    )
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
        help="where rejected records go (default: a new folder per run)",
    )
    p.add_argument("--tenant", default=None, help="tenant for records that do not name one")
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
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--manifest",
        default=None,
        metavar="PATH",
        help="JSON file of the files already ingested (per tenant and id prefix): read only new, "
        "changed or failed files, and record this run's outcome after the graph write succeeded",
    )
    p.add_argument(
        "--rescan",
        action="store_true",
        help="with --manifest: read every file even if unchanged (the manifest is still updated)",
    )
    p.add_argument(
        "--metrics",
        default=None,
        metavar="PATH",
        help="write a JSON metrics file (counts, durations, exit status), also when the run fails",
    )
    p.add_argument("--progress", choices=("auto", "on", "off"), default="auto")
    return p


def expand_paths(patterns: Sequence[str]) -> list[str]:
    """Globs, directories and files → a sorted list of unique files; a pattern matching nothing
    is an error (a nightly job with a typo must not look like an empty night)."""
    found: list[str] = []
    for pattern in patterns:
        local = Path(pattern)
        if local.is_dir():
            matches = sorted(
                str(f) for f in local.rglob("*") if f.is_file() and f.name.endswith(LOG_SUFFIXES)
            )
        else:
            try:
                result = FileSystems.match([pattern])[0]
            except Exception as e:  # Beam raises BeamIOError for bad schemes and patterns
                raise InputError(f"cannot list {pattern!r}: {e}", source=pattern) from e
            matches = sorted(m.path for m in result.metadata_list)
        if not matches:
            raise InputError("no input files match", source=pattern)
        found.extend(matches)
    return sorted(dict.fromkeys(found))


def embedder_for(
    flag: str | None, settings: settings_mod.Settings
) -> settings_mod.EmbedderSettings | None:
    """The embedder of ``--embedder`` (None for ``none``), else the configured one."""
    if flag == "none":
        return None
    return dataclasses.replace(settings.embedder, kind=flag) if flag else settings.embedder


def check_graph(
    neo: settings_mod.Neo4jSettings, embedder: settings_mod.EmbedderSettings | None
) -> None:
    """Fail before reading anything when Neo4j is unreachable or its embeddings were made by
    another model, with the reason, not a Beam trace."""
    from trajgraph.graph.connection import open_driver
    from trajgraph.graph.embedders import dimension, get_embedder
    from trajgraph.graph.writer import ensure_embedding_space, ensure_schema

    driver = open_driver(neo)
    try:
        ensure_schema(driver, neo.database)
        if embedder is not None:
            emb = get_embedder(embedder)
            try:
                ensure_embedding_space(driver, neo.database, emb.name, dimension(emb))
            finally:
                emb.close()
    finally:
        driver.close()


def _dead_letter_dir(arg: str | None, settings: settings_mod.Settings) -> Path:
    if arg:
        return Path(arg)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return settings.local.home.parent / "dead-letter" / f"{stamp}-{os.getpid()}"


def build_pipeline(
    p: beam.Pipeline,
    *,
    paths: list[str],
    fmt: str | None,
    extractor: str,
    llm: settings_mod.LLMSettings | None = None,
    use_cache: bool = True,
    tenant: str,
    id_prefix: str = "",
    budget_tokens: int,
    batch_size: int,
    max_record_bytes: int,
    neo: settings_mod.Neo4jSettings,
    dead_letter_prefix: str,
    embedder: settings_mod.EmbedderSettings | None = None,
    retry_prefix: str | None = None,
) -> None:
    read = p | "Read log records" >> ReadLogRecords(paths, fmt, max_record_bytes)
    norm = read["records"] | "Normalize trajectories" >> NormalizeTrajectories(tenant, id_prefix)
    built = norm["trajectories"] | "Build graph rows" >> BuildGraphRows(
        extractor, budget_tokens, llm, use_cache, embedder_name(embedder) if embedder else ""
    )
    _ = built["rows"] | "Write graph" >> WriteGraph(neo, batch_size, embedder)
    _ = (
        (read["bad"], norm["bad"], built["bad"], built["duplicates"])
        | "Collect dead letters" >> beam.Flatten()
        | "Serialize dead letters" >> beam.Map(dead_letter.to_json_line)
        | "Write dead letters"
        >> beam.io.WriteToText(
            dead_letter_prefix, file_name_suffix=".jsonl", shard_name_template="", num_shards=1
        )
    )
    if retry_prefix:  # for the manifest: trajectories whose windows a later run should redo
        _ = (
            built["rows"]
            | "Find windows to retry" >> beam.FlatMap(_retry_rows)
            | "Serialize windows to retry" >> beam.Map(dead_letter.to_json_line)
            | "Write windows to retry"
            >> beam.io.WriteToText(
                retry_prefix, file_name_suffix=".jsonl", shard_name_template="", num_shards=1
            )
        )


def _retry_rows(rows: Any) -> list[dict[str, Any]]:
    if not rows.retry_windows:
        return []
    traj = rows.rows["trajectories"]
    source = str(traj[0]["props"].get("source") or "") if traj else ""
    return [
        {"source": source, "trajectory_uid": rows.trajectory_uid, "windows": rows.retry_windows}
    ]


def run(
    argv: Sequence[str] | None = None,
    *,
    settings: settings_mod.Settings | None = None,
    summary: IngestSummary | None = None,
) -> IngestSummary:
    """Run an ingest and return its summary; raise what stopped it.

    ``summary``, when given, is filled as the run goes, so a caller still has the status,
    error and counts of a run that raised (``main`` prints them). ``--metrics`` is written
    either way.
    """
    args, beam_args = build_parser().parse_known_args(argv)
    s = summary if summary is not None else IngestSummary()
    s.started_at = now_iso()
    s.manifest_path = str(args.manifest or "")
    s.id_prefix = args.id_prefix
    started = time.monotonic()
    try:
        _run(args, beam_args, settings, s, started)
        s.finished_at = now_iso()
        s.duration_s = time.monotonic() - started
        if args.metrics:
            write_metrics(args.metrics, s)
    except BaseException as e:
        _failed(s, e, started)
        if args.metrics:
            try:
                write_metrics(args.metrics, s)
            except Exception as me:  # do not hide the error that stopped the run
                logging.getLogger(__name__).error(
                    "could not write metrics %s: %r", args.metrics, me
                )
        raise
    return s


def _run(
    args: argparse.Namespace,
    beam_args: list[str],
    settings: settings_mod.Settings | None,
    s: IngestSummary,
    started: float,
) -> None:
    settings = settings or settings_mod.load()
    llm = settings.llm
    if args.llm_model:
        llm = dataclasses.replace(llm, model=args.llm_model)
    extractor = resolve(args.extractor, llm)
    # A bad name or a missing model fail before anything runs.
    fingerprint = get_extractor(extractor, llm=llm).fingerprint
    s.extractor = extractor if extractor != "llm" else f"llm ({llm.model})"
    budget = args.budget or settings.token_budget
    if budget < 64:
        raise ConfigError(f"--budget must be at least 64 tokens, got {budget}")
    if args.rescan and not args.manifest:
        raise ConfigError("--rescan only means something with --manifest")
    tenant = args.tenant or settings.tenant
    s.tenant = tenant
    paths = expand_paths(args.paths)
    # The job's own files may sit next to the logs (a .json manifest in the log folder).
    own = {file_key(str(f)) for f in (args.manifest, args.metrics) if f}
    paths = [f for f in paths if file_key(f) not in own]
    s.files_input = len(paths)
    embedder = embedder_for(args.embedder, settings)
    check_graph(settings.neo4j, embedder)
    # --runner FlinkRunner: fetch the job server, pick its Java, default to a local cluster.
    beam_args = runners.prepare_beam_args(beam_args, settings)

    manifest = Manifest.load(args.manifest) if args.manifest else None
    with manifest.lock() if manifest else contextlib.nullcontext():
        # What decides the graph's content for a file besides the file: part of every entry.
        config = config_fingerprint(
            format=args.format,
            extractor=fingerprint,
            embedder=embedder_name(embedder) if embedder else "",
            budget=budget,
            max_record_bytes=args.max_record_bytes,
        )
        plan: Plan | None = None
        todo = paths
        if manifest is not None:
            plan = manifest.plan(
                paths, tenant=tenant, id_prefix=args.id_prefix, config=config, rescan=args.rescan
            )
            todo = plan.sources
            s.files_skipped = len(plan.skipped)
            s.files_missing = sorted(str(m.get("source") or m["key"]) for m in plan.missing)
        s.phases_s["plan"] = round(time.monotonic() - started, 3)

        dl_dir = _dead_letter_dir(args.dead_letter, settings)
        prefix = str(dl_dir / "dead-letter")
        retry_prefix = str(dl_dir / "retry") if manifest is not None else None
        if todo:
            dl_dir.mkdir(parents=True, exist_ok=True)
            t0 = time.monotonic()
            counters = _run_pipeline(
                args,
                beam_args,
                todo,
                extractor=extractor,
                llm=llm,
                tenant=tenant,
                budget=budget,
                settings=settings,
                embedder=embedder,
                prefix=prefix,
                retry_prefix=retry_prefix,
            )
            _apply_counters(s, counters)
            s.seconds = time.monotonic() - t0
            s.phases_s["pipeline"] = round(s.seconds, 3)
        s.files = s.files or len(todo)
        s.dead_letter_path = prefix + ".jsonl"
        failed, degraded = _file_outcomes(s, todo, s.dead_letter_path, retry_prefix)
        s.files_retry = (
            []
            if manifest is None
            else sorted(
                {src for src in todo if file_key(src) in failed or file_key(src) in degraded}
            )
        )
        _set_status(s)
        if manifest is not None and plan is not None and s.exit_code in (EXIT_OK, EXIT_PARTIAL):
            # Only now, with the graph written: a crash before this line marks nothing done.
            t0 = time.monotonic()
            manifest.record(
                plan,
                tenant=tenant,
                id_prefix=args.id_prefix,
                config=config,
                failed=failed,
                degraded=degraded,
                run={
                    "started_at": s.started_at,
                    "finished_at": now_iso(),
                    "status": s.status,
                    "files_read": len(todo),
                    "files_skipped": s.files_skipped,
                    "files_retry": len(s.files_retry),
                    "files_missing": len(s.files_missing),
                    "records": s.records,
                    "dead_lettered": s.dead_lettered,
                },
            )
            manifest.save()
            s.phases_s["manifest"] = round(time.monotonic() - t0, 3)
        if retry_prefix:
            Path(retry_prefix + ".jsonl").unlink(missing_ok=True)
        if args.dead_letter is None and not (s.dead_lettered or s.windows_failed):
            # Nothing was rejected: do not leave an empty folder behind for every clean run.
            Path(s.dead_letter_path).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                dl_dir.rmdir()
            s.dead_letter_path = ""


def _run_pipeline(
    args: argparse.Namespace,
    beam_args: list[str],
    paths: list[str],
    *,
    extractor: str,
    llm: settings_mod.LLMSettings,
    tenant: str,
    budget: int,
    settings: settings_mod.Settings,
    embedder: settings_mod.EmbedderSettings | None,
    prefix: str,
    retry_prefix: str | None,
) -> dict[str, int]:
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    options = PipelineOptions(beam_args)
    progress.reset()
    show = args.progress == "on" or (
        args.progress == "auto" and sys.stderr.isatty() and not args.json
    )
    bar = _ProgressBar(len(paths)) if show else None
    try:
        if bar:
            bar.start()
        p = beam.Pipeline(options=options)
        build_pipeline(
            p,
            paths=paths,
            fmt=args.format,
            extractor=extractor,
            llm=llm,
            use_cache=not args.no_cache,
            tenant=tenant,
            id_prefix=args.id_prefix,
            budget_tokens=budget,
            batch_size=args.batch_size or settings.write_batch_size,
            max_record_bytes=args.max_record_bytes,
            neo=settings.neo4j,
            embedder=embedder,
            dead_letter_prefix=prefix,
            retry_prefix=retry_prefix,
        )
        result = p.run()
        result.wait_until_finish()
    finally:
        if bar:
            bar.stop()
    return _counters(result)


def _counters(result: Any) -> dict[str, int]:
    counters: dict[str, int] = {}
    try:
        for c in result.metrics().query(MetricsFilter().with_namespace(NS))["counters"]:
            value = c.committed if c.committed is not None else c.attempted
            counters[c.key.metric.name] = counters.get(c.key.metric.name, 0) + int(value or 0)
    except (NotImplementedError, KeyError):
        counters = progress.snapshot()
    return counters


def _apply_counters(s: IngestSummary, counters: dict[str, int]) -> None:
    s.files = counters.get("files", 0)
    s.records = counters.get("records", 0)
    s.ingested = counters.get("trajectories_written", 0)
    s.unchanged = counters.get("trajectories_unchanged", 0)
    s.dead_lettered = counters.get("dead_lettered", 0)
    s.turns = counters.get("turns", 0)
    s.windows = counters.get("windows", 0)
    s.windows_failed = counters.get("windows_failed", 0)
    s.windows_degraded = counters.get("windows_degraded", 0)
    s.rows_written = counters.get("rows_written", 0)
    s.counters = counters


def _file_outcomes(
    s: IngestSummary, todo: list[str], dead_letter_path: str, retry_prefix: str | None
) -> tuple[dict[str, int], dict[str, int]]:
    """Per file key: dead letters (failed) and windows to extract again (degraded)."""
    failed: dict[str, int] = {}
    degraded: dict[str, int] = {}
    everything = {file_key(src) for src in todo}
    if s.dead_lettered or s.windows_failed:
        for row in _json_lines(dead_letter_path):
            source = str(row.get("source") or "")
            for key in {file_key(source)} if source else everything:  # unknown: all of them
                failed[key] = failed.get(key, 0) + 1
    if retry_prefix:
        for row in _json_lines(retry_prefix + ".jsonl"):
            source = str(row.get("source") or "")
            for key in {file_key(source)} if source else everything:
                degraded[key] = degraded.get(key, 0) + int(row.get("windows") or 1)
        if s.counters.get("embed_failed"):
            # Written without vectors: which file is not known here, so all of them again.
            for key in everything:
                degraded.setdefault(key, 0)
    return failed, degraded


def _json_lines(path: str) -> list[dict[str, Any]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _set_status(s: IngestSummary) -> None:
    if not s.balanced:
        s.status, s.exit_code = "failed", EXIT_FAILED
        s.error = (
            f"records do not balance: {s.records} read != {s.ingested} ingested + "
            f"{s.dead_lettered} dead-lettered"
        )
        s.error_type = "Mismatch"
    elif (
        s.dead_lettered
        or s.windows_failed
        or s.windows_degraded
        or s.counters.get("embed_failed")
        or s.files_retry
    ):
        s.status, s.exit_code = "partial", EXIT_PARTIAL
    else:
        s.status, s.exit_code = "ok", EXIT_OK


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (``main`` turns it into this, so the run ends like on Ctrl-C)."""


# The signal that stopped the run: Beam runs bundles on the main thread and re-raises what
# a DoFn raised as a RuntimeError, so the exception's type cannot tell.
_signalled: list[int] = []


def _failed(s: IngestSummary, e: BaseException, started: float) -> None:
    """Fill the summary of a run that raised: status, exit code, error and partial counts."""
    if not s.counters:  # counts of this process before it stopped (zero on remote runners)
        counters = progress.snapshot()
        if counters:
            _apply_counters(s, counters)
    s.finished_at = now_iso()
    s.duration_s = time.monotonic() - started
    if isinstance(e, Terminated) or signal.SIGTERM in _signalled:
        s.status, s.exit_code = "interrupted", EXIT_TERMINATED
        e = Terminated()
    elif isinstance(e, KeyboardInterrupt) or signal.SIGINT in _signalled:
        s.status, s.exit_code = "interrupted", EXIT_INTERRUPTED
        e = KeyboardInterrupt()
    elif isinstance(e, ConfigError | InputError):
        s.status, s.exit_code = "error", EXIT_CONFIG
    else:
        s.status, s.exit_code = "failed", EXIT_FAILED
    s.error = error_text(e)
    s.error_type = type(e).__name__


def error_text(e: BaseException) -> str:
    """One readable line: the message, and the vendor error under a trajgraph one."""
    if isinstance(e, Terminated):
        return "terminated by SIGTERM"
    if isinstance(e, KeyboardInterrupt):
        return "interrupted"
    text = str(e).strip() or type(e).__name__
    if not isinstance(e, TrajgraphError):
        text = f"{type(e).__name__}: {text}"
    cause = e.__cause__
    # Beam re-raises a DoFn's error as the same type with "[while running ...]" appended;
    # the original's own cause (e.g. the driver's ServiceUnavailable) is one more level down.
    while cause is not None and type(cause) is type(e) and cause.__cause__ is not None:
        cause = cause.__cause__
    if cause is not None and type(cause) is not type(e) and str(cause) not in text:
        text += f" (caused by {type(cause).__name__}: {cause})"
    return " ".join(text.split())[:2000]


def write_metrics(path: str | Path, s: IngestSummary) -> None:
    """The run's metrics for monitoring, written atomically: the summary's fields plus when,
    where and how it ended (docs/nightly.md lists them)."""
    metrics = {
        "schema": METRICS_SCHEMA,
        **s.to_json(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
    write_json_atomic(path, metrics)


class _ProgressBar:
    """Polls the in-process counters and redraws a tqdm bar (files read) on stderr."""

    def __init__(self, files: int) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=files, unit="file", file=sys.stderr, desc="ingest", leave=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._draw()
        self._bar.close()

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            self._draw()

    def _draw(self) -> None:
        c = progress.snapshot()
        self._bar.n = min(c.get("files", 0), self._bar.total or 0)
        self._bar.set_postfix_str(
            f"trajectories {c.get('trajectories_written', 0)}, turns {c.get('turns', 0)}, "
            f"rows {c.get('rows_written', 0)}, dead-lettered {c.get('dead_lettered', 0)}",
            refresh=True,
        )


def main(argv: Sequence[str] | None = None) -> int:
    """`trajgraph ingest`: run, print the summary (JSON with --json, also when the run fails,
    then with an ``error``), and return the exit code (EXIT_* above)."""
    args, _ = build_parser().parse_known_args(argv)
    summary = IngestSummary()
    previous = _on_signals()
    try:
        run(argv, summary=summary)
    except BaseException as e:
        if summary.error is None:  # raised before run() could describe it
            _failed(summary, e, time.monotonic())
        print(f"trajgraph: error: {summary.error}", file=sys.stderr)
    finally:
        _restore_signals(previous)
    print(json.dumps(summary.to_json(), indent=2) if args.json else summary.render())
    if summary.status == "interrupted":
        # Beam's worker threads may still be busy: leave now, with the summary printed.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(summary.exit_code)
    return summary.exit_code


def _stop(signum: int, frame: Any) -> None:
    _signalled.append(signum)
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _on_signals() -> dict[int, Any]:
    """SIGTERM and SIGINT end the run with a summary and metrics (exit 143 / 130)."""
    _signalled.clear()
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}


def _restore_signals(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)
