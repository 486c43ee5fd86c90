"""What every extractor implements, and the verbatim check every extraction must pass."""

from __future__ import annotations

import re
from typing import Protocol, runtime_checkable

from pipelines.windows import Window
from schemas.extraction import WindowExtraction

_WS = re.compile(r"\s+")


@runtime_checkable
class Extractor(Protocol):
    """Turns one window into states, objects and edges. Must be deterministic for a given
    window when it is the heuristic one; picklable either way (Beam ships it to workers)."""

    name: str

    def extract(self, window: Window) -> WindowExtraction: ...


def normalize_ws(text: str) -> str:
    """Runs of whitespace collapsed to one space, ends stripped."""
    return _WS.sub(" ", text).strip()


def verbatim_violations(extraction: WindowExtraction, window: Window) -> list[str]:
    """Object names and state values that do not occur verbatim in ``window.text()``.

    "Verbatim" is exact after whitespace normalization on both sides (an LLM may re-wrap a
    line, it must not paraphrase it). An empty value or name is a violation too: it would
    match anything.
    """
    haystack = " " + normalize_ws(window.text()) + " "
    problems: list[str] = []
    for obj in extraction.objects:
        needle = normalize_ws(obj.name)
        if not needle or needle not in haystack:
            problems.append(
                f"object {obj.name!r} ({obj.kind}) is not verbatim in turn {window.turn}"
            )
    for state in extraction.states:
        needle = normalize_ws(state.value)
        if not needle or needle not in haystack:
            problems.append(
                f"state {state.key} value {state.value!r} is not verbatim in turn {window.turn}"
            )
    return problems
