"""Neo4j Browser for the local server (`trajgraph neo4j start --browser`).

The Browser is the ``org.neo4j.client:neo4j-browser`` jar from Maven Central: static files
under ``browser/`` that the server serves at ``/browser/`` when they are on its classpath. The
jar is fetched once (trajgraph.jvm) and unpacked into a folder, because the server serves the
first ``browser/`` resource of its classpath: unpacked, that folder also holds the trajgraph
guide (``/browser/trajgraph-guide.html``), which the Browser plays after connecting: every
query of the trajgraph Cypher library (queries/*.cypher) with its parameters, runnable.
"""

from __future__ import annotations

import html
import shutil
import zipfile
from pathlib import Path

from trajgraph import jvm
from trajgraph.errors import ServerError
from trajgraph.jvm import Log, MavenFailure
from trajgraph.settings import LocalServerSettings

BROWSER_VERSION = "5.24.0"
BROWSER_COORDS = f"org.neo4j.client:neo4j-browser:{BROWSER_VERSION}"
GUIDE = "trajgraph-guide.html"
DEMO_PARAMS = (
    "{tenant: 'default', trajectory: 'demo-fix-failing-test', turn: 5, state: null, depth: 4}"
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


def browser_dir(local: LocalServerSettings) -> Path:
    """The unpacked Browser, put on the server's classpath."""
    return Path(local.home).expanduser().absolute() / f"neo4j-browser-{BROWSER_VERSION}"


def ensure_browser(local: LocalServerSettings, *, log: Log = print) -> Path:
    """The unpacked Browser with the trajgraph guide, fetched on first use only."""
    target = browser_dir(local)
    if not (target / "browser" / "index.html").is_file():
        jar = jvm.fetch_jar(
            BROWSER_COORDS, Path(local.home).expanduser() / "jars", fail=_error, log=log
        )
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        try:
            with zipfile.ZipFile(jar) as z:
                for member in z.namelist():
                    if member.startswith("browser/") and ".." not in member:
                        z.extract(member, partial)
        except (OSError, zipfile.BadZipFile) as e:
            raise ServerError(f"cannot unpack {jar}: {e}") from e
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    (target / "browser" / GUIDE).write_text(guide_html(), encoding="utf-8")
    return target


def _error(f: MavenFailure) -> ServerError:
    return ServerError(f"cannot fetch Neo4j Browser ({f.coords}): {f.reason}")


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
    from trajgraph.queries import library

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
