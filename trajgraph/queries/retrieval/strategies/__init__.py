"""The retrieval strategies, one class per module behind one interface (strategy.py), and the
toolbox the retriever calls them from.

* ``similarity``: the top-k similar states and turns (the seeds);
* ``named_steps``: the steps a question names, and what they produced (seeds too);
* ``hops``: graph hops over CAUSES, ASSOCIATED and SUPERSEDES history (the ``graph`` tool);
* ``keyword``: the full-text indexes and exact identifier matches (the ``keyword`` tool);
* ``code``: Python over one trajectory's turns in the sandbox (the ``code`` tool);
* ``caller_cypher``: the caller's read-only Cypher (the ``code`` tool when given Cypher).
"""

from __future__ import annotations

from trajgraph.queries.retrieval.modes import Tool
from trajgraph.queries.retrieval.strategies.caller_cypher import CallerCypher
from trajgraph.queries.retrieval.strategies.code import PythonCode
from trajgraph.queries.retrieval.strategies.hops import GraphHops
from trajgraph.queries.retrieval.strategies.keyword import Keyword
from trajgraph.queries.retrieval.strategies.named_steps import NamedSteps
from trajgraph.queries.retrieval.strategies.similarity import Similarity
from trajgraph.queries.retrieval.strategy import Strategy

# Where a question starts (modes.py Plan.seeds, Plan.anchors); the keyword strategy stands
# in for similarity when the graph holds no vectors.
SIMILARITY = Similarity()
NAMED_STEPS = NamedSteps()
KEYWORD = Keyword()

# Each tool a route can call (modes.py Tool), in the order a route runs them, and the
# strategies that serve it: the first that applies to the call runs.
TOOLBOX: dict[Tool, tuple[Strategy, ...]] = {
    "graph": (GraphHops(),),
    "keyword": (KEYWORD,),
    "code": (CallerCypher(), PythonCode()),
}

__all__ = ["NAMED_STEPS", "SIMILARITY", "TOOLBOX", "Strategy"]
