"""The outcome of one ``trajgraph ingest``: counts, status, exit code, and the metrics file.

The summary is filled as the run goes, so a run that raises still has its status, error and
the counts seen before it stopped: ``--json`` prints it and ``--metrics`` writes it either
way (docs/nightly.md lists the fields).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trajgraph.core import errors
from trajgraph.core.errors import TrajgraphError
from trajgraph.jobs import signals
from trajgraph.jobs.manifest import now_iso, write_json_atomic
from trajgraph.pipelines import files, progress

METRICS_SCHEMA = "trajgraph-ingest-metrics/1"

# Exit codes of `trajgraph ingest` (README "Nightly ingest", docs/nightly.md).
# The first four are every command's (trajgraph.core.errors); errors.exit_code(e) says which one an
# error gets.
EXIT_OK = errors.EXIT_OK  # every record is in the graph
EXIT_FAILED = errors.EXIT_FAILED  # the run did not finish (Neo4j lost, crash, ...): nothing done
EXIT_CONFIG = errors.EXIT_CONFIG  # bad flags, settings or inputs (no file matches, ...)
EXIT_PARTIAL = errors.EXIT_PARTIAL  # finished, but records were dead-lettered or windows degraded
EXIT_INTERRUPTED = 130  # SIGINT
EXIT_TERMINATED = 143  # SIGTERM (e.g. a CronJob's deadline)

# Pipeline counters that make a run that finished "partial" (exit 3) instead of "ok", for
# `trajgraph ingest` and `trajgraph stream` alike.
PARTIAL_COUNTERS = ("dead_lettered", "windows_failed", "windows_degraded", "embed_failed")


def partial_counts(counters: Mapping[str, Any]) -> dict[str, int]:
    """The counters of ``counters`` that make a finished run partial, with their values."""
    return {k: int(counters[k]) for k in PARTIAL_COUNTERS if counters.get(k)}


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
    # The first distinct reasons of the dead letters, so that the summary says what to fix
    # without opening the file.
    dead_letter_reasons: list[str] = field(default_factory=list)
    extractor: str = ""
    counters: dict[str, int] = field(default_factory=dict)
    tenant: str = ""  # --tenant (or TRAJGRAPH_TENANT): where every record went, unless
    tenant_from_records: bool = False  # records may name their own tenant (--tenant-from-records)
    tenant_overridden: int = 0  # records that named another tenant and were written to `tenant`
    tenant_own: int = 0  # records written to the other tenant they named (with the flag)
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
    # The model `trajgraph reembed` moved the graph to while this run wrote its vectors, and
    # how many vectors of the graph were still not that model's at the end (retrieval skips
    # them until `trajgraph reembed` runs again).
    space_moved_to: str | None = None
    stale_vectors: int = 0

    @property
    def balanced(self) -> bool:
        return self.records == self.ingested + self.dead_lettered

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["balanced"] = self.balanced
        d["llm"] = self.llm
        return d

    def take_counters(self, counters: dict[str, int]) -> None:
        """The pipeline's counters (Beam's metrics, or the in-process tally)."""
        self.files = counters.get("files", 0)
        self.records = counters.get("records", 0)
        self.ingested = counters.get("trajectories_written", 0)
        self.unchanged = counters.get("trajectories_unchanged", 0)
        self.dead_lettered = counters.get("dead_lettered", 0)
        self.turns = counters.get("turns", 0)
        self.windows = counters.get("windows", 0)
        self.windows_failed = counters.get("windows_failed", 0)
        self.windows_degraded = counters.get("windows_degraded", 0)
        self.rows_written = counters.get("rows_written", 0)
        self.tenant_overridden = counters.get("tenant_overridden", 0)
        self.tenant_own = counters.get("tenant_own", 0)
        self.counters = counters

    def set_status(self) -> None:
        """Status and exit code of a run that finished: ok, partial, or failed when the
        counts do not balance."""
        if not self.balanced:
            self.status, self.exit_code = "failed", EXIT_FAILED
            self.error = (
                f"records do not balance: {self.records} read != {self.ingested} ingested + "
                f"{self.dead_lettered} dead-lettered"
            )
            self.error_type = "Mismatch"
        elif (
            partial_counts(
                {
                    **self.counters,
                    "dead_lettered": self.dead_lettered,
                    "windows_failed": self.windows_failed,
                    "windows_degraded": self.windows_degraded,
                }
            )
            or self.files_retry
            or self.stale_vectors
        ):
            self.status, self.exit_code = "partial", EXIT_PARTIAL
        else:
            self.status, self.exit_code = "ok", EXIT_OK

    def set_failure(self, e: BaseException, started: float) -> None:
        """Status, exit code, error and end time of a run that raised ``e``, with the counts
        this process saw before it stopped (zero on remote runners)."""
        if not self.counters:
            tally = progress.snapshot()
            if tally:
                self.take_counters(tally)
        self.finished_at = now_iso()
        self.duration_s = time.monotonic() - started
        if isinstance(e, signals.Terminated) or signal.SIGTERM in signals.received:
            self.status, self.exit_code = "interrupted", EXIT_TERMINATED
            e = signals.Terminated()
        elif isinstance(e, KeyboardInterrupt) or signal.SIGINT in signals.received:
            self.status, self.exit_code = "interrupted", EXIT_INTERRUPTED
            e = KeyboardInterrupt()
        elif errors.exit_code(e) == EXIT_CONFIG:
            self.status, self.exit_code = "error", EXIT_CONFIG
        else:
            self.status, self.exit_code = "failed", EXIT_FAILED
        self.error = error_text(e)
        self.error_type = type(e).__name__

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
            f"  tenant             {self._tenant_text()}",
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
            lines.extend(f"    {reason}" for reason in self.dead_letter_reasons)
            if 0 < len(self.dead_letter_reasons) < self.dead_lettered:
                more = self.dead_lettered - len(self.dead_letter_reasons)
                lines.append(f"    … and {more} more in the dead-letter file")
        if self.space_moved_to:
            lines.append(
                f"  vectors stale      {self.stale_vectors}: the graph moved to "
                f"{self.space_moved_to} during this run"
                + (" (run `trajgraph reembed` again)" if self.stale_vectors else "")
            )
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

    def _tenant_text(self) -> str:
        """Where the records went, truthfully."""
        if self.tenant_from_records:
            return (
                f"{self.tenant!r} for records that name none; {self.tenant_own} chose their own "
                "(--tenant-from-records)"
            )
        text = f"{self.tenant!r} for every record"
        if self.tenant_overridden:
            text += (
                f" ({self.tenant_overridden} named another tenant and were written here; "
                "--tenant-from-records lets records choose)"
            )
        return text

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
            + ([f"    format           {_formats(c)}"] if _formats(c) else [])
            + (
                [
                    f"    truncated        {c['truncated']} replies cut off at the token limit: "
                    f"{c.get('truncated_repaired', 0)} kept their complete items, "
                    f"{c.get('truncated_unusable', 0)} by the heuristic instead"
                ]
                if c.get("truncated")
                else []
            )
            + ([f"    errors           {c['errors']} requests failed"] if c.get("errors") else [])
        )


def _formats(c: dict[str, int]) -> str:
    """Which structured-output dialects answered (extractors/structured.py), and refusals."""
    used = {k[len("format_") :]: v for k, v in c.items() if k.startswith("format_") and v}
    used.pop("fallbacks", None)
    text = ", ".join(f"{k} ({v}x)" for k, v in sorted(used.items()))
    if c.get("format_fallbacks"):
        text += f"; {c['format_fallbacks']} refused by the server, the next format tried"
    return text


def error_text(e: BaseException) -> str:
    """One readable line: the message, and the vendor error under a trajgraph one."""
    if isinstance(e, signals.Terminated):
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
    return errors.redact(" ".join(text.split()))[:2000]


def write_metrics(path: str | Path, s: IngestSummary) -> None:
    """The run's metrics for monitoring, written atomically: the summary's fields plus when,
    where and how it ended (docs/nightly.md lists them). A local path or any Beam filesystem
    (``gs://...``: an object appears whole when it is closed)."""
    write_metrics_json(path, METRICS_SCHEMA, s.to_json())


def write_metrics_json(path: str | Path, schema: str, fields: Mapping[str, Any]) -> None:
    """``fields`` under ``schema`` with this host and process, as :func:`write_metrics`."""
    metrics = {"schema": schema, **fields, "host": socket.gethostname(), "pid": os.getpid()}
    if files.is_local(str(path)):
        write_json_atomic(path, metrics)
    else:
        text = json.dumps(metrics, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        files.write_bytes(str(path), text.encode("utf-8"))
