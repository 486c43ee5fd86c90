"""The one interface of every retrieval strategy.

A strategy gets the call (``Run``: what was asked, its scope, what was read so far) and the
route (what the router decided: directions, identifiers, code) and returns the evidence it
found, with its counts. The retriever (retriever.py) calls strategies as tools and merges
what they return (``Run.take``), as neo4j-graphrag's router calls its retrievers; the
strategies live in strategies/, one per module, and never import the retriever.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

from trajgraph.queries.retrieval.base import Found

if TYPE_CHECKING:
    from trajgraph.queries.retrieval.router import Route
    from trajgraph.queries.retrieval.run import Run


class Strategy(ABC):
    """One way of finding evidence for a question."""

    # The name the retrieval reports among its tools ("embedding", "graph", ...).
    name: ClassVar[str]

    def applies(self, run: Run) -> bool:
        """Whether this strategy serves its tool for this call (a tool may have several:
        strategies/__init__.py TOOLBOX); the first that applies runs."""
        return True

    @abstractmethod
    def find(self, run: Run, route: Route) -> Found:
        """The evidence for ``run``'s question along ``route``."""
