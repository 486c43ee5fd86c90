"""Retrieval: evidence for a question within a token budget (see docs/retrieval.md)."""

from trajgraph.queries.retrieval.engine import (
    MAX_BUDGET,
    MAX_DEPTH,
    MAX_K,
    MODES,
    Evidence,
    Retrieval,
    Retriever,
)

__all__ = [
    "MAX_BUDGET",
    "MAX_DEPTH",
    "MAX_K",
    "MODES",
    "Evidence",
    "Retrieval",
    "Retriever",
]
