"""Retrieval: evidence for a question within a token budget (see docs/retrieval.md).

The names below load on first use: the CLI reads ``MODES`` (modes.py, no dependencies)
without loading the retriever and its driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trajgraph.queries.retrieval.base import MAX_BUDGET, MAX_DEPTH, MAX_K, Evidence, Retrieval
    from trajgraph.queries.retrieval.modes import MODES, Mode
    from trajgraph.queries.retrieval.retriever import Retriever

__all__ = [
    "MAX_BUDGET",
    "MAX_DEPTH",
    "MAX_K",
    "MODES",
    "Evidence",
    "Mode",
    "Retrieval",
    "Retriever",
]


def __getattr__(name: str) -> Any:
    if name == "Retriever":
        from trajgraph.queries.retrieval.retriever import Retriever

        return Retriever
    if name in ("MODES", "Mode"):
        from trajgraph.queries.retrieval import modes

        return getattr(modes, name)
    if name in __all__:
        from trajgraph.queries.retrieval import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
