"""The retrieval modes, declared once, as data: what each mode starts from and which tools
it runs after that (graphiti declares its search recipes the same way).

The CLI's ``--mode`` choices, the HTTP and MCP schemas (trajgraph/limits.py) and the
retriever (retriever.py) all read ``PLANS``; this module imports nothing of the engine, so
the CLI reads it without loading the driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# The tools a route can call after the seeds (each served by one or more strategies, run
# in the order of strategies/__init__.py TOOLBOX).
Tool = Literal["graph", "keyword", "code"]

Mode = Literal["auto", "embedding", "graph", "keyword", "code"]


@dataclass(frozen=True)
class Plan:
    """What a mode runs.

    ``tools``: the tools after the seeds, or None: the router decides (the LLM when one is
    configured, else the rules of router.py); ``seeds``: start from the similarity top-k
    (full-text hits stand in when the graph holds no vectors); ``anchors``: the steps the
    question names are seeds too; ``whole``: a question about one trajectory reads all its
    turns (line-level evidence, named steps and aggregate tables need every turn).
    """

    tools: tuple[Tool, ...] | None
    seeds: bool = False
    anchors: bool = False
    whole: bool = False

    @property
    def routed(self) -> bool:
        return self.tools is None

    @property
    def runs_code(self) -> bool:
        """Whether code or Cypher the caller gives is run (a mode that runs none would drop
        it without a word)."""
        return self.tools is None or "code" in self.tools


ROUTED = None  # Plan.tools of a mode whose route the router decides

PLANS: dict[Mode, Plan] = {
    "auto": Plan(ROUTED, seeds=True, anchors=True, whole=True),
    "embedding": Plan((), seeds=True),
    "graph": Plan(("graph",), seeds=True, anchors=True),
    "keyword": Plan(("keyword",)),
    "code": Plan(("code",)),
}
MODES: tuple[Mode, ...] = tuple(PLANS)
# Modes that start from similarity seeds: they need the graph's vectors to be this model's.
VECTOR_MODES: tuple[Mode, ...] = tuple(m for m, p in PLANS.items() if p.seeds)
