"""The Neo4j Browser guide of the Cypher library (`trajgraph neo4j start --browser`): a slide
per query of the library, its purpose, its parameters, an example ``:param`` and the query,
both runnable with a click. The CLI writes it into the Browser's folder
(graph/local_server/browser.py ``write_guide``)."""

from __future__ import annotations

import html

from trajgraph.core.env import DEFAULT_TENANT
from trajgraph.queries import library

DEMO_PARAMS = (
    f"{{tenant: '{DEFAULT_TENANT}', trajectory: 'demo-fix-failing-test', turn: 5, state: null, "
    "depth: 4}"
)
# why_chain draws as a table (one row per node); this draws the same chain as a graph.
WHY_CHAIN_GRAPH = """MATCH (tr:Trajectory {tenant: $tenant, id: $trajectory})
MATCH (t:Turn {trajectory_uid: tr.uid, idx: $turn})
OPTIONAL MATCH (t)<-[:AT_TURN]-(s:State)
WITH t, collect(s) AS states
UNWIND [t] + states AS target
MATCH p = (n)-[:CAUSES*0..10]->(target)
WHERE length(p) <= $depth
RETURN p"""


def _slide(title: str, body: str) -> str:
    return (
        '<slide class="row-fluid"><div class="col-sm-12">'
        f"<h3>{html.escape(title)}</h3>{body}</div></slide>\n"
    )


def _runnable(code: str) -> str:
    return f'<pre class="pre-scrollable code runnable">{html.escape(code)}</pre>'


def guide_html() -> str:
    """A Browser guide (``:play``): a slide per query of the library, its purpose, its
    parameters, an example ``:param`` and the query, both runnable with a click."""
    slides = [
        _slide(
            "trajgraph: the Cypher library",
            "<p>Every analyst query of trajgraph (<code>trajgraph cypher NAME</code> runs the "
            "same text). Click a block to put it in the editor, then run it. First set the "
            "parameters, e.g. for the demo trajectory "
            "(<code>trajgraph demo</code>):</p>"
            + _runnable(f":param {DEMO_PARAMS}")
            + "<p>Queries: "
            + ", ".join(f"<code>{html.escape(n)}</code>" for n in library.names())
            + ".</p>",
        ),
        _slide(
            "why_chain as a graph",
            "<p>The causal chain of <code>$turn</code> up to <code>$depth</code> hops, drawn "
            "(the library's <code>why_chain</code> returns it as rows):</p>"
            + _runnable(WHY_CHAIN_GRAPH),
        ),
    ]
    for name in library.names():
        q = library.load(name)
        params = "".join(
            f"<li><code>{html.escape(p.name)}</code>: {html.escape(p.description)}</li>"
            for p in q.params.values()
        )
        example = q.header.get("example", "")
        slides.append(
            _slide(
                name,
                f"<p>{html.escape(q.purpose)}</p><p>Parameters:</p><ul>{params}</ul>"
                + (_runnable(example) if example.startswith(":param") else "")
                + _runnable(q.text.strip()),
            )
        )
    return (
        '<article class="guide"><carousel class="deck container-fluid">\n'
        + "".join(slides)
        + "</carousel></article>\n"
    )
