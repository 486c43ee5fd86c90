"""The read side: everything that answers questions about trajectories already in the graph.

One subpackage per feature, each with a small public surface in its ``__init__``:

* ``retrieval``: the retrieval engine (embedding seeds, rule or LLM router, graph traversal,
  keyword and identifier search, code over turns) and its budgeted context;
* ``sandbox``: untrusted Python over one trajectory's turns, in a hardened child process;
* ``why``: the upstream causal chain of a turn or state, and its pictures;
* ``memory``: one trajectory as of a turn, its brief, and reminder-or-silence;
* ``library``: the analyst queries, ``queries/*.cypher``.

Front ends (CLI, HTTP, MCP, notebooks) use them through ``trajgraph.client.TrajGraph``.
"""

from __future__ import annotations

from trajgraph.core.stages import refuse_bare_name

refuse_bare_name(__name__)  # loads only as trajgraph.queries (trajgraph/core/stages.py)
