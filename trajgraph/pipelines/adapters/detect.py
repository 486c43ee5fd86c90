"""The format registry: every log format's ``LogFormat`` (declared in its adapter module), in
the order sniffing tries them, and what is derived from it: detection, ``FORMATS`` (the
``--format`` choices), the shapes named in error messages and the table of docs/formats.md.

Sniffing looks only at the top-level shape of a parsed value, never at the whole log, so it
stays cheap on large files. Order matters where shapes overlap: canonical (``turns``) and
AMA-bench (``episode_id`` + ``trajectory``) are tried before SWE-agent, whose ``.traj`` also
has a ``trajectory`` list; chat ``messages``, the loosest shape, is tried last.
"""

from __future__ import annotations

import json
from typing import Any

from trajgraph.pipelines.adapters import (
    ama_bench,
    canonical,
    claude_code,
    codex,
    messages,
    mini_swe_agent,
    openhands,
    otel_genai,
    spider_agent,
    swe_agent,
    tau_bench,
)
from trajgraph.pipelines.adapters.base import LogFormat
from trajgraph.schemas.field_hints import DOC, near_miss_hint

# The one table of formats. A new format is one line here, at its place in sniffing order.
REGISTRY: tuple[LogFormat, ...] = (
    canonical.LOG_FORMAT,
    ama_bench.LOG_FORMAT,
    swe_agent.LOG_FORMAT,
    mini_swe_agent.LOG_FORMAT,
    openhands.LOG_FORMAT,
    tau_bench.LOG_FORMAT,
    spider_agent.LOG_FORMAT,
    claude_code.LOG_FORMAT,
    codex.LOG_FORMAT,
    otel_genai.LOG_FORMAT,
    messages.LOG_FORMAT,
    canonical.PARQUET,
)

BY_NAME: dict[str, LogFormat] = {f.name: f for f in REGISTRY}
FORMATS: tuple[str, ...] = tuple(BY_NAME)
_SNIFFED = tuple(f for f in REGISTRY if f.sniffed)
_LINE_SNIFFED = tuple(f for f in _SNIFFED if f.line is not None)
_SNIFF_LINES = 8


def sniff(obj: Any) -> str | None:
    """The format of one parsed record (a single trajectory), or None when nothing fits."""
    for fmt in _SNIFFED:
        if fmt.fits(obj):
            return fmt.name
    return None


def matches(fmt: str, obj: Any) -> bool:
    """Whether ``obj`` has the shape of ``fmt`` (for an explicit ``--format``)."""
    known = BY_NAME.get(fmt)
    return known is not None and known.fits(obj)


def sniff_line_file(data: bytes) -> str | None:
    """The format of a JSONL file whose lines together make trajectories (a Claude Code
    transcript, a Codex rollout, an OTLP file export, one chat message per line), judged by
    its first parseable line; None for files of one trajectory (or event) per line."""
    pos, seen = 0, 0
    while pos < len(data) and seen < _SNIFF_LINES:
        end = data.find(b"\n", pos)
        end = len(data) if end < 0 else end
        line = data[pos:end].strip()
        pos = end + 1
        if not line:
            continue
        seen += 1
        try:
            obj = json.loads(line)
        except (ValueError, UnicodeDecodeError, RecursionError):
            continue  # a torn, bad or too deeply nested line: the next one decides
        return next((f.name for f in _LINE_SNIFFED if f.line is not None and f.line(obj)), None)
    return None


def describe(obj: Any) -> str:
    """A short description of a JSON value for error messages (type, keys seen)."""
    if isinstance(obj, dict):
        keys = sorted(str(k) for k in obj)
        shown = ", ".join(keys[:12]) + (", ..." if len(keys) > 12 else "")
        return f"a JSON object with keys [{shown}]"
    if isinstance(obj, list):
        first = f"; first element is {describe(obj[0])}" if obj else ""
        return f"a JSON array of {len(obj)} elements{first}"
    kinds = {str: "string", bool: "boolean", int: "number", float: "number"}
    return f"a JSON {kinds.get(type(obj), 'null')}"


def unknown_format(obj: Any, *, what: str = "") -> str:
    """Why no format fits ``obj``: what would make it canonical when little would, else every
    shape tried and where converting another format is shown."""
    head = f"unknown trajectory format: {what}{describe(obj)}"
    hint = near_miss_hint(obj)
    if hint is not None:
        return f"{head}; {hint}"
    return f"{head}; tried {tried()}; another format can be converted to canonical JSONL ({DOC})"


def tried() -> str:
    return "; ".join(f"{f.name}: {f.shape}" for f in _SNIFFED)


def docs_table() -> str:
    """The table of formats in docs/formats.md, as the registry says it (a test compares)."""
    rows = [
        "| `--format` | what it reads | a JSONL file is one log | an array holds one per element |",
        "|---|---|---|---|",
    ]
    for f in REGISTRY:
        whole = "always" if f.spans_lines else "when its first line is one" if f.line else ""
        rows.append(
            f"| `{f.name}` | {f.shape} | {whole} | {'yes' if f.episodes_per_array else ''} |"
        )
    return "\n".join(rows)
