"""Batch ingest: log files → canonical trajectories → windows → extraction → Neo4j.

``run(argv)`` takes trajgraph's own flags and passes everything else to Beam untouched
(``--runner``, ``--direct_num_workers``, ...).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
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

from extractors import EXTRACTORS, get_extractor, resolve
from graph.embedders import embedder_name
from pipelines import dead_letter, progress
from pipelines.adapters import FORMATS
from pipelines.transforms import (
    NS,
    BuildGraphRows,
    NormalizeTrajectories,
    ReadLogRecords,
    WriteGraph,
)
from trajgraph import settings as settings_mod
from trajgraph.errors import ConfigError, InputError

DEFAULT_MAX_RECORD_BYTES = 64 * 1024 * 1024
# Walking a directory picks up the files an adapter can read; other files are not records.
LOG_SUFFIXES = (".json", ".jsonl", ".ndjson", ".traj", ".parquet")


@dataclass
class IngestSummary:
    files: int = 0
    records: int = 0
    ingested: int = 0
    unchanged: int = 0
    dead_lettered: int = 0
    turns: int = 0
    windows: int = 0
    windows_failed: int = 0
    rows_written: int = 0
    seconds: float = 0.0
    dead_letter_path: str = ""
    extractor: str = ""
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def balanced(self) -> bool:
        return self.records == self.ingested + self.dead_lettered

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["balanced"] = self.balanced
        d["llm"] = self.llm
        return d

    def render(self) -> str:
        lines = [
            f"ingest finished in {self.seconds:.1f}s with extractor {self.extractor!r}",
            f"  files              {self.files}",
            f"  records            {self.records} = {self.ingested} ingested + "
            f"{self.dead_lettered} dead-lettered" + ("" if self.balanced else "  (MISMATCH)"),
            f"  unchanged          {self.unchanged} (already in the graph, skipped)",
            f"  turns              {self.turns}",
            f"  windows extracted  {self.windows}"
            + (f" ({self.windows_failed} failed, see dead letters)" if self.windows_failed else ""),
            f"  graph rows written {self.rows_written}",
        ]
        if self.dead_lettered or self.windows_failed:
            lines.append(f"  dead letters       {self.dead_letter_path}")
        lines.extend(self._render_llm())
        return "\n".join(lines)

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
        help="node embeddings: local (default, MiniLM offline), openai, hash (fast, lexical) "
        "or none; overrides TRAJGRAPH_EMBEDDER",
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
    from graph.connection import open_driver
    from graph.embedders import dimension, get_embedder
    from graph.writer import ensure_embedding_space, ensure_schema

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


def run(
    argv: Sequence[str] | None = None, *, settings: settings_mod.Settings | None = None
) -> IngestSummary:
    args, beam_args = build_parser().parse_known_args(argv)
    settings = settings or settings_mod.load()
    llm = settings.llm
    if args.llm_model:
        llm = dataclasses.replace(llm, model=args.llm_model)
    extractor = resolve(args.extractor, llm)
    get_extractor(extractor, llm=llm)  # a bad name or a missing model fail before anything runs
    budget = args.budget or settings.token_budget
    if budget < 64:
        raise ConfigError(f"--budget must be at least 64 tokens, got {budget}")
    paths = expand_paths(args.paths)
    embedder = embedder_for(args.embedder, settings)
    check_graph(settings.neo4j, embedder)
    dl_dir = _dead_letter_dir(args.dead_letter, settings)
    dl_dir.mkdir(parents=True, exist_ok=True)
    prefix = str(dl_dir / "dead-letter")

    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    options = PipelineOptions(beam_args)
    progress.reset()
    show = args.progress == "on" or (
        args.progress == "auto" and sys.stderr.isatty() and not args.json
    )
    bar = _ProgressBar(len(paths)) if show else None
    started = time.monotonic()
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
            tenant=args.tenant or settings.tenant,
            id_prefix=args.id_prefix,
            budget_tokens=budget,
            batch_size=args.batch_size or settings.write_batch_size,
            max_record_bytes=args.max_record_bytes,
            neo=settings.neo4j,
            embedder=embedder,
            dead_letter_prefix=prefix,
        )
        result = p.run()
        result.wait_until_finish()
    finally:
        if bar:
            bar.stop()
    summary = _summarize(result, time.monotonic() - started)
    summary.files = summary.files or len(paths)
    summary.extractor = extractor if extractor != "llm" else f"llm ({llm.model})"
    summary.dead_letter_path = prefix + ".jsonl"
    if args.dead_letter is None and not (summary.dead_lettered or summary.windows_failed):
        # Nothing was rejected: do not leave an empty folder behind for every clean run.
        Path(summary.dead_letter_path).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            dl_dir.rmdir()
        summary.dead_letter_path = ""
    return summary


def _summarize(result: Any, seconds: float) -> IngestSummary:
    counters: dict[str, int] = {}
    try:
        for c in result.metrics().query(MetricsFilter().with_namespace(NS))["counters"]:
            value = c.committed if c.committed is not None else c.attempted
            counters[c.key.metric.name] = counters.get(c.key.metric.name, 0) + int(value or 0)
    except (NotImplementedError, KeyError):
        counters = progress.snapshot()
    return IngestSummary(
        files=counters.get("files", 0),
        records=counters.get("records", 0),
        ingested=counters.get("trajectories_written", 0),
        unchanged=counters.get("trajectories_unchanged", 0),
        dead_lettered=counters.get("dead_lettered", 0),
        turns=counters.get("turns", 0),
        windows=counters.get("windows", 0),
        windows_failed=counters.get("windows_failed", 0),
        rows_written=counters.get("rows_written", 0),
        seconds=seconds,
        counters=counters,
    )


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
    args, _ = build_parser().parse_known_args(argv)
    summary = run(argv)
    print(json.dumps(summary.to_json(), indent=2) if args.json else summary.render())
    return 0 if summary.balanced else 1
