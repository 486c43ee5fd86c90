"""What every extractor implements, and the verbatim check every extraction must pass."""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from trajgraph.extractors.windows import Window
from trajgraph.schemas.extraction import WindowExtraction

_WS = re.compile(r"\s+")
# trajgraph's own truncation marker is not log text: nothing may be "verbatim" because of it.
_MARKER = re.compile(r"\[\.\.\. trajgraph: \d+ tokens omitted \.\.\.\]")


@dataclass
class ExtractionBatch:
    """The extractions of a trajectory's windows, and the windows that failed outright (they
    go to the dead letters; their turns still reach the graph)."""

    extractions: list[WindowExtraction] = field(default_factory=list)
    failures: list[tuple[int, Exception]] = field(default_factory=list)
    # Turns whose findings are a stand-in because a server could not answer (the LLM was
    # down): in the graph, but a later run should extract them again.
    retry: list[int] = field(default_factory=list)


@runtime_checkable
class Extractor(Protocol):
    """Turns windows into states, objects and edges. Picklable before ``extract_windows`` is
    first called (Beam ships it to workers); ``close`` releases clients and pools."""

    name: str

    @property
    def fingerprint(self) -> str:
        """Names everything that changes the output (model, prompt version): part of the
        content hash that decides whether a re-ingest rewrites a trajectory."""
        ...

    @property
    def label(self) -> str:
        """What the graph records as the extractor of the states it produced."""
        ...

    def drain_stats(self) -> dict[str, int]:
        """Counters since the last call (for the run summary), then reset."""
        ...

    def extract(self, window: Window) -> WindowExtraction: ...

    def extract_windows(self, windows: Sequence[Window], *, task: str = "") -> ExtractionBatch: ...

    def close(self) -> None: ...


class WindowByWindow:
    """Base for extractors that handle one window at a time and hold no resources."""

    name = "base"

    @property
    def fingerprint(self) -> str:
        return self.name

    @property
    def label(self) -> str:
        return self.name

    def drain_stats(self) -> dict[str, int]:
        return {}

    def extract(self, window: Window) -> WindowExtraction:
        raise NotImplementedError

    def extract_windows(self, windows: Sequence[Window], *, task: str = "") -> ExtractionBatch:
        batch = ExtractionBatch()
        for window in windows:
            try:
                batch.extractions.append(self.extract(window))
            except Exception as e:  # one window must not sink its trajectory
                batch.failures.append((window.turn, e))
        return batch

    def close(self) -> None:
        return None


class Stats:
    """Thread-safe counters an extractor fills and the pipeline drains into Beam metrics."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def inc(self, name: str, n: int = 1) -> None:
        if n:
            with self._lock:
                self._counts[name] += n

    def drain(self) -> dict[str, int]:
        with self._lock:
            out = dict(self._counts)
            self._counts.clear()
        return out


def normalize_ws(text: str) -> str:
    """Runs of whitespace collapsed to one space, ends stripped."""
    return _WS.sub(" ", text).strip()


def haystack(*texts: str) -> str:
    """What verbatim checks search: the texts whitespace-normalized, trajgraph's truncation
    markers blanked out, parts separated so a match cannot span two of them."""
    parts = (normalize_ws(_MARKER.sub("\x00", t)) for t in texts)
    return "\x00" + "\x00".join(parts) + "\x00"


def is_verbatim(needle: str, hay: str) -> bool:
    """``needle`` occurs in ``hay`` (a ``haystack``) exactly, after whitespace normalization;
    the empty string is never verbatim (it would match anything)."""
    n = normalize_ws(needle)
    return bool(n) and "\x00" not in n and n in hay


def find_verbatim(needle: str, *texts: str) -> str | None:
    """The exact span of ``texts`` that ``needle`` matches up to whitespace, or None.

    An extractor may re-wrap a line; what the graph stores is the log's own bytes. trajgraph's
    truncation markers split the texts: no span runs across one.
    """
    words = needle.split()
    if not words:
        return None
    pattern = re.compile(r"\s+".join(re.escape(w) for w in words))
    for text in texts:
        for segment in _MARKER.split(text):
            m = pattern.search(segment)
            if m:
                return m.group(0)
    return None


def verbatim_violations(extraction: WindowExtraction, window: Window) -> list[str]:
    """Object names and state values that do not occur verbatim in ``window.text()``.

    "Verbatim" is exact after whitespace normalization on both sides (an LLM may re-wrap a
    line, it must not paraphrase it).
    """
    hay = haystack(window.text())
    problems: list[str] = []
    for obj in extraction.objects:
        if not is_verbatim(obj.name, hay):
            problems.append(
                f"object {obj.name!r} ({obj.kind}) is not verbatim in turn {window.turn}"
            )
    for state in extraction.states:
        if not is_verbatim(state.value, hay):
            problems.append(
                f"state {state.key} value {state.value!r} is not verbatim in turn {window.turn}"
            )
    return problems
