"""Extractors turn a window into states, objects and edges (see schemas/extraction.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trajgraph.errors import ConfigError

if TYPE_CHECKING:
    from extractors.base import Extractor

EXTRACTORS = ("heuristic",)


def get_extractor(name: str) -> Extractor:
    """The extractor called ``name``; ConfigError for an unknown name."""
    if name == "heuristic":
        from extractors.heuristic import HeuristicExtractor

        return HeuristicExtractor()
    raise ConfigError(f"unknown extractor {name!r}; choose one of {', '.join(EXTRACTORS)}")
