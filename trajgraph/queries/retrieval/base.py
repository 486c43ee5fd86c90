"""What every retrieval strategy shares: the bounds of a request, the result types and how a
found item earns its place in the budget.

The strategies (strategies/) each return their ``Evidence``; the retriever (retriever.py)
merges it into one ``found`` dict through ``add``, composes them and returns one
``Retrieval``. The modes are modes.py's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

MAX_DEPTH = 6
MAX_K = 50
MAX_BUDGET = 32_000
DEFAULT_BUDGET = 1000  # tokens of evidence when a caller names none (CLI, HTTP, MCP, client)
DEFAULT_K = 8  # similarity seeds when a caller names none
DEFAULT_DEPTH = 3  # graph hops when a caller names none

# Order in which items earn budget when not everything fits.
PRIORITY = {
    "code": 0,
    "anchor": 1,  # the turn a question names, and what it produced
    "anchor_hop": 2,  # causes and effects of that turn
    "current": 3,  # asked for a current value: the answer itself, and small
    "identifier": 4,
    "seed": 5,
    "hop": 6,
    "keyword": 7,
    "superseded": 8,
    "assoc": 9,
    "lexical": 10,  # a turn the question's words match (line-level evidence)
}


@dataclass
class Evidence:
    uid: str
    kind: str  # turn | state | object | code
    trajectory_id: str
    turn: int | None
    text: str  # verbatim from the graph (or the code's result)
    why: str  # seed, hop 2 upstream, keyword hit, identifier `x`, code result, current value...
    score: float = 0.0
    # What found it (seed, hop, keyword, identifier, code, current, superseded, assoc); decides
    # which items earn the budget first.
    source: str = "seed"
    current: bool | None = None  # states: True when no later state supersedes it


@dataclass
class Retrieval:
    question: str
    mode: str
    route: str
    tools: list[str]
    items: list[Evidence]
    context: str
    context_tokens: int
    counts: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Found:
    """What one strategy found: evidence in the order found, and counts for the caller."""

    evidence: list[Evidence] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)

    def hit(self, uid: str, source: str, why: str, score: float) -> None:
        """A node found, its text read later (``Run.hydrate``) with everyone else's."""
        self.evidence.append(Evidence(uid, "pending", "", None, "", why, score, source))


def add(found: dict[str, Evidence], uid: str, source: str, why: str, score: float) -> None:
    """Record that ``source`` found ``uid``: a node found twice keeps its best reason and
    score; a new one is pending until the retriever reads its text."""
    old = found.get(uid)
    if old is not None:
        if PRIORITY[source] < PRIORITY[old.source]:
            old.source, old.why = source, why
        old.score = max(old.score, score)
        return
    found[uid] = Evidence(uid, "pending", "", None, "", why, score, source)
