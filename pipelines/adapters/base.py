"""What every format adapter shares: the raw record handed between read and normalize."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RawRecord:
    """One input record before normalization.

    ``payload`` is either bytes (a JSONL line not yet parsed, so one bad line fails alone) or
    an already parsed JSON value (an element of a JSON array file, a Parquet row, a whole file).
    ``locator`` names the record inside its file: ``line 7``, ``item 2``, ``row 5`` or ``file``.
    """

    source: str
    locator: str
    format: str | None
    payload: Any


@dataclass(frozen=True)
class Located:
    """A normalized trajectory together with the record it came from (for dead-letter rows)."""

    source: str
    locator: str
    trajectory: dict[str, Any]
    # The stream's version of this trajectory (higher is newer; 0: a batch read, one version).
    version: int = 0


@dataclass(frozen=True)
class LineFile:
    """A whole JSONL file as one record: formats whose one trajectory spans many lines (a
    Claude Code transcript, an OTLP file export). The adapter parses the lines itself, so a
    torn last line of a file still being written is its call, not a parse failure."""

    data: bytes

    def __repr__(self) -> str:  # never print a whole session in a log line
        return f"LineFile({len(self.data)} bytes)"
