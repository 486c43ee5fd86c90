"""``trajgraph ingest``: the batch pipeline (pipelines/ingest_pipeline.py) run as a nightly job.

Around one pipeline run the job lists the inputs, checks the graph, sets up the runner,
lets ``--manifest PATH`` pick only new, changed or failed files (trajgraph/jobs/manifest.py)
and records their outcome once the graph write succeeded, fills the summary, writes
``--metrics PATH`` (also when the run fails), shows a progress bar on a terminal, and
:func:`main` prints the summary (JSON with ``--json``) and returns the exit code: 0 ok,
1 failed, 2 bad configuration or input, 3 done but some records were dead-lettered or some
windows must be extracted again, 130/143 interrupted by SIGINT/SIGTERM (docs/nightly.md).

:func:`run` is the programmatic entry (tests, benchmarks, ``trajgraph eval``): the same
flags as the command line, an :class:`IngestSummary` back, and what stopped the run raised.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from apache_beam.metrics.metric import MetricsFilter

from trajgraph.core import settings as settings_mod
from trajgraph.core.errors import ConfigError
from trajgraph.jobs import signals
from trajgraph.jobs.manifest import Manifest, Plan, config_fingerprint, file_key, now_iso
from trajgraph.jobs.progress_bar import ProgressBar
from trajgraph.jobs.summary import (
    EXIT_OK,
    EXIT_PARTIAL,
    IngestSummary,
    write_metrics,
)
from trajgraph.pipelines import dead_letter, files, launch, progress, runners
from trajgraph.pipelines import ingest_pipeline as pipeline
from trajgraph.pipelines.transforms import NS


def build_parser() -> argparse.ArgumentParser:
    """The pipeline's flags (ingest_pipeline.build_parser), then the job's."""
    p = pipeline.build_parser(
        prog="trajgraph ingest",
        description="Ingest agent logs into the Neo4j causality graph "
        "(Apache Beam batch pipeline).",
    )
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
        _run(args, beam_args, settings or settings_mod.load(), s, started)
        s.finished_at = now_iso()
        s.duration_s = time.monotonic() - started
        if args.metrics:
            write_metrics(args.metrics, s)
    except BaseException as e:
        s.set_failure(e, started)
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
    settings: settings_mod.Settings,
    s: IngestSummary,
    started: float,
) -> None:
    """Check, plan, run the pipeline on the files to do, then record what became of them."""
    config = pipeline.IngestConfig.from_args(args, settings)
    s.extractor = config.extractor if config.extractor != "llm" else f"llm ({config.llm.model})"
    if args.rescan and not args.manifest:
        raise ConfigError("--rescan only means something with --manifest")
    s.tenant = config.tenant
    s.tenant_from_records = config.tenant_from_records
    # The job's own files may sit next to the logs (a .json manifest in the log folder).
    own = {file_key(str(f)) for f in (args.manifest, args.metrics) if f}
    paths = [f for f in config.paths if file_key(f) not in own]
    s.files_input = len(paths)
    beam_args = launch.ready(config, beam_args, settings)

    manifest = Manifest.load(args.manifest) if args.manifest else None
    with manifest.lock() if manifest else contextlib.nullcontext():
        fingerprint = _fingerprint(config)
        plan = _plan(manifest, paths, config, fingerprint, args.rescan, s)
        todo = plan.sources if plan is not None else paths
        s.phases_s["plan"] = round(time.monotonic() - started, 3)

        dl_dir = dead_letter.dead_letter_dir(args.dead_letter, settings)
        prefix = files.join(dl_dir, "dead-letter")
        # Known before the run: a run that fails writing it (a full disk) still names it.
        s.dead_letter_path = prefix + ".jsonl"
        retry_prefix = files.join(dl_dir, "retry") if manifest is not None else None
        if todo:
            files.make_dirs(dl_dir)
            _run_pipeline(args, config, beam_args, todo, prefix, retry_prefix, s)
        s.files = s.files or len(todo)
        failed, degraded = file_outcomes(s, todo, s.dead_letter_path, retry_prefix)
        s.files_retry = (
            []
            if manifest is None
            else sorted(
                {src for src in todo if file_key(src) in failed or file_key(src) in degraded}
            )
        )
        s.set_status()
        if manifest is not None and plan is not None and s.exit_code in (EXIT_OK, EXIT_PARTIAL):
            _record(manifest, plan, config, fingerprint, failed, degraded, len(todo), s)
        _clean_up(args.dead_letter, dl_dir, retry_prefix, s)


def _fingerprint(config: pipeline.IngestConfig) -> str:
    """What decides the graph's content for a file besides the file: part of every entry of
    the manifest."""
    return config_fingerprint(
        format=config.fmt,
        extractor=config.extractor_fingerprint,
        embedder=config.embedder_name,
        budget=config.budget_tokens,
        max_record_bytes=config.max_record_bytes,
        # Only when set, so manifests written before the flag existed stay valid.
        **({"tenant_from_records": True} if config.tenant_from_records else {}),
    )


def _plan(
    manifest: Manifest | None,
    paths: list[str],
    config: pipeline.IngestConfig,
    fingerprint: str,
    rescan: bool,
    s: IngestSummary,
) -> Plan | None:
    """With a manifest: the new, changed and failed files among ``paths`` (the others are
    counted as skipped); without one, None: every file is read."""
    if manifest is None:
        return None
    plan = manifest.plan(
        paths, tenant=config.tenant, id_prefix=config.id_prefix, config=fingerprint, rescan=rescan
    )
    s.files_skipped = len(plan.skipped)
    s.files_missing = sorted(str(m.get("source") or m["key"]) for m in plan.missing)
    return plan


def _run_pipeline(
    args: argparse.Namespace,
    config: pipeline.IngestConfig,
    beam_args: list[str],
    todo: list[str],
    prefix: str,
    retry_prefix: str | None,
    s: IngestSummary,
) -> None:
    """The pipeline on the files to do, with a progress bar where there is one; its
    counters and duration into the summary, and whether `trajgraph reembed` moved the graph
    meanwhile."""
    t0 = time.monotonic()
    show = _show_progress(args, beam_args)
    with ProgressBar(len(todo)) if show else contextlib.nullcontext():
        result = pipeline.run_pipeline(
            config, beam_args, paths=todo, dead_letter_prefix=prefix, retry_prefix=retry_prefix
        )
    s.take_counters(_counters(result))
    s.seconds = time.monotonic() - t0
    s.phases_s["pipeline"] = round(s.seconds, 3)
    moved = launch.moved_during(config, s.counters)
    if moved is not None:
        s.space_moved_to, s.stale_vectors = moved


def _record(
    manifest: Manifest,
    plan: Plan,
    config: pipeline.IngestConfig,
    fingerprint: str,
    failed: dict[str, int],
    degraded: dict[str, int],
    files_read: int,
    s: IngestSummary,
) -> None:
    """Only now, with the graph written: a crash before this marks nothing done."""
    t0 = time.monotonic()
    manifest.record(
        plan,
        tenant=config.tenant,
        id_prefix=config.id_prefix,
        config=fingerprint,
        failed=failed,
        degraded=degraded,
        run={
            "started_at": s.started_at,
            "finished_at": now_iso(),
            "status": s.status,
            "files_read": files_read,
            "files_skipped": s.files_skipped,
            "files_retry": len(s.files_retry),
            "files_missing": len(s.files_missing),
            "records": s.records,
            "dead_lettered": s.dead_lettered,
        },
    )
    manifest.save()
    s.phases_s["manifest"] = round(time.monotonic() - t0, 3)


def _clean_up(flag: str | None, dl_dir: str, retry_prefix: str | None, s: IngestSummary) -> None:
    """The windows to retry are in the manifest now; a run that rejected nothing leaves no
    empty dead-letter folder behind (unless ``--dead-letter`` named it)."""
    if retry_prefix:
        files.delete(retry_prefix + ".jsonl")
    if flag is None and not (s.dead_lettered or s.windows_failed):
        files.delete(s.dead_letter_path)
        files.remove_empty_dir(dl_dir)
        s.dead_letter_path = ""


def _show_progress(args: argparse.Namespace, beam_args: list[str]) -> bool:
    """The bar reads counters this process keeps, so only runs whose workers are in this
    process have one; ``--progress on`` elsewhere says why there is none."""
    wanted = args.progress == "on" or (
        args.progress == "auto" and sys.stderr.isatty() and not args.json
    )
    if wanted and not runners.workers_in_this_process(beam_args):
        if args.progress == "on":
            print(
                "trajgraph: no progress bar: the runner's workers are not in this process "
                "(the summary has the counts)",
                file=sys.stderr,
            )
        return False
    return wanted


def _counters(result: Any) -> dict[str, int]:
    """The pipeline's counters from Beam's metrics, or the in-process tally where the runner
    cannot report them."""
    counters: dict[str, int] = {}
    try:
        for c in result.metrics().query(MetricsFilter().with_namespace(NS))["counters"]:
            value = c.committed if c.committed is not None else c.attempted
            counters[c.key.metric.name] = counters.get(c.key.metric.name, 0) + int(value or 0)
    except (NotImplementedError, KeyError):
        counters = progress.snapshot()
    return counters


def file_outcomes(
    s: IngestSummary, todo: list[str], dead_letter_path: str, retry_prefix: str | None
) -> tuple[dict[str, int], dict[str, int]]:
    """Per file key: dead letters (failed) and windows to extract again (degraded)."""
    failed: dict[str, int] = {}
    degraded: dict[str, int] = {}
    everything = {file_key(src) for src in todo}
    if s.dead_lettered or s.windows_failed:
        for row in dead_letter.read_json_lines(dead_letter_path):
            _keep_reason(s, str(row.get("reason") or ""))
            source = str(row.get("source") or "")
            for key in {file_key(source)} if source else everything:  # unknown: all of them
                failed[key] = failed.get(key, 0) + 1
    if retry_prefix:
        for row in dead_letter.read_json_lines(retry_prefix + ".jsonl"):
            source = str(row.get("source") or "")
            for key in {file_key(source)} if source else everything:
                degraded[key] = degraded.get(key, 0) + int(row.get("windows") or 1)
        if s.counters.get("embed_failed"):
            # Written without vectors: which file is not known here, so all of them again.
            for key in everything:
                degraded.setdefault(key, 0)
    return failed, degraded


SHOWN_REASONS = 3
REASON_CHARS = 400


def _keep_reason(s: IngestSummary, reason: str) -> None:
    """The first few distinct dead-letter reasons, each on one line and cut short."""
    reason = " ".join(reason.split())
    if len(reason) > REASON_CHARS:
        reason = reason[: REASON_CHARS - 1] + "…"
    if (
        reason
        and reason not in s.dead_letter_reasons
        and len(s.dead_letter_reasons) < SHOWN_REASONS
    ):
        s.dead_letter_reasons.append(reason)


def main(argv: Sequence[str] | None = None) -> int:
    """``trajgraph ingest``: run, print the summary (JSON with --json, also when the run
    fails, then with an ``error``), and return the exit code (EXIT_* of jobs/summary.py)."""
    args, _ = build_parser().parse_known_args(argv)
    summary = IngestSummary()
    with signals.ending_the_run():
        try:
            run(argv, summary=summary)
        except BaseException as e:
            if summary.error is None:  # raised before run() could describe it
                summary.set_failure(e, time.monotonic())
            print(f"trajgraph: error: {summary.error}", file=sys.stderr)
    print(json.dumps(summary.to_json(), indent=2) if args.json else summary.render())
    if summary.status == "interrupted":
        # Beam's worker threads may still be busy: leave now, with the summary printed.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(summary.exit_code)
    return summary.exit_code
