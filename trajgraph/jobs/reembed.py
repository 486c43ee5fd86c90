"""``trajgraph reembed``: make every stored vector again with the configured embedder.

A graph records which model made its vectors and refuses writers and readers of another
(graph/writer.ensure_embedding_space): vectors of two models compare as garbage. So changing
the embedder (another model or size, or a new static table after an upgrade) needs the stored
vectors made again. Their texts are in the graph (a turn's action and observation, a state's
text), so no log is read again.

The order keeps the graph honest at every step: the recorded space moves to the new model
first (from then on no ingest of the old one starts, and a concurrent reembed to another model
stops), with a ``migrating_from`` mark;
the vector indexes are dropped if the size changes and created for the new one; every node
that holds a vector is re-embedded, in pages by uid; then the mark is removed. Stopped half
way, the command is run again: the mark says the move is unfinished, and it starts over
(each page is idempotent). Every vector names the model that made it (``embedded_with``,
set by ingest and by this command), so a vector another model wrote behind the move's back
(an ingest of the old model already running when the move began) is found, of any size: the
move keeps its mark, and the next run replaces it. Vectors written before stamps existed
count as another model's once, and are made again.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import neo4j

from trajgraph.core.errors import ConfigError, GraphError
from trajgraph.core.settings import Settings
from trajgraph.graph import cypher
from trajgraph.graph.connection import graph_errors, open_driver
from trajgraph.graph.embedders import Embedder, dimension, state_text, turn_text
from trajgraph.graph.writer import embedding_space, ensure_embedding_space, stale_vectors

PAGE = 500
MAX_PAGE = 100_000  # nodes per transaction: beyond this a page is a memory problem


@dataclass
class Reembedded:
    previous: str | None  # the model the vectors came from (None: the graph had none)
    model: str
    dim: int
    turns: int = 0
    states: int = 0
    seconds: float = 0.0
    moved: bool = False  # False: the vectors were already the configured embedder's


def migrating_from(driver: neo4j.Driver, database: str) -> str | None:
    """The model an unfinished ``reembed`` was moving away from, or None."""
    with graph_errors("reading the embedding space"):
        rec = driver.execute_query(
            cypher.MIGRATING_FROM, database_=database, routing_=neo4j.RoutingControl.READ
        ).records[0]
    value = rec["migrating_from"]
    return None if value is None else str(value)


def reembed(
    driver: neo4j.Driver,
    database: str,
    embedder: Embedder,
    *,
    page: int = PAGE,
    say: Callable[[str], None] = lambda _m: None,
) -> Reembedded:
    started = time.monotonic()
    space = embedding_space(driver, database)
    unfinished = migrating_from(driver, database)
    if space is None:  # no vectors: an empty graph stays unclaimed, its first ingest chooses
        return Reembedded(None, embedder.name, embedder.dim)
    # A remote model of unconfigured size that is the graph's own: no need to ask its server.
    asks = bool(embedder.dim) or space[0] != embedder.name
    dim = dimension(embedder) if asks else space[1]
    if (
        space == (embedder.name, dim)
        and unfinished is None
        and not stale_vectors(driver, database, embedder.name, dim)
    ):
        return Reembedded(space[0], embedder.name, dim)
    # Moving back to where an unfinished move started: the vectors to replace are space[0]'s.
    previous = unfinished if unfinished and unfinished != embedder.name else space[0]
    say(f"re-embedding the graph's vectors: {previous} -> {embedder.name} (dimension {dim})")
    with graph_errors("moving the embedding space"):
        if space[1] != dim:
            for statement in cypher.DROP_VECTOR_INDEX.values():
                driver.execute_query(statement, database_=database)
        driver.execute_query(
            cypher.MOVE_EMBEDDING_SPACE, model=embedder.name, dim=dim, database_=database
        )
        # At once, not at the end: retrieval with the new model searches the vectors made so
        # far instead of failing on a missing index for the whole move.
        for statement in cypher.CREATE_VECTOR_INDEX.values():
            driver.execute_query(statement, dim=dim, database_=database)
    done = Reembedded(previous, embedder.name, dim, moved=True)
    done.turns = _pages(
        driver,
        database,
        embedder,
        cypher.EMBEDDED_TURNS_PAGE,
        cypher.SET_TURN_EMBEDDINGS,
        turn_text,
        page,
        lambda n: say(f"  {n} turns"),
    )
    done.states = _pages(
        driver,
        database,
        embedder,
        cypher.EMBEDDED_STATES_PAGE,
        cypher.SET_STATE_EMBEDDINGS,
        state_text,
        page,
        lambda n: say(f"  {n} states"),
    )
    ensure_embedding_space(driver, database, embedder.name, dim)
    left = stale_vectors(driver, database, embedder.name, dim)
    if left:  # the mark stays: the next run finds these and finishes the move
        raise GraphError(
            f"{left} vectors of another model were written while the graph moved to "
            f"{embedder.name} (an ingest of the old embedder still running?): run "
            "`trajgraph reembed` again when it has ended"
        )
    with graph_errors("moving the embedding space"):
        driver.execute_query(cypher.FINISH_EMBEDDING_SPACE, model=embedder.name, database_=database)
    done.seconds = time.monotonic() - started
    return done


def _pages(
    driver: neo4j.Driver,
    database: str,
    embedder: Embedder,
    read: str,
    write: str,
    text: Callable[[dict[str, Any]], str],
    page: int,
    progress: Callable[[int], None],
) -> int:
    after, total = "", 0
    while True:
        with graph_errors("reading nodes to re-embed"):
            records = driver.execute_query(
                read, after=after, limit=page, database_=database
            ).records
        if not records:
            return total
        props = [dict(r) for r in records]
        vectors = embedder.embed([text(p) for p in props])
        rows = [{"uid": p["uid"], "embedding": v} for p, v in zip(props, vectors, strict=True)]
        with graph_errors("writing re-embedded vectors"):
            written = driver.execute_query(
                write, rows=rows, model=embedder.name, database_=database
            ).records
        moved_away = not written or not written[0]["written"]
        if moved_away and (embedding_space(driver, database) or ("",))[0] != embedder.name:
            raise ConfigError(
                f"the graph's embedding space was moved away from {embedder.name} while this "
                "reembed ran (another reembed?): stopped. Run `trajgraph reembed` again with "
                "the embedder you want"
            )
        total += len(rows)
        after = str(props[-1]["uid"])
        if total % (page * 20) == 0:
            progress(total)


def main(settings: Settings, *, page: int = PAGE) -> int:
    from trajgraph.graph.embed_cache import cached_embedder
    from trajgraph.graph.embedders import get_embedder

    driver = open_driver(settings.neo4j)
    embedder = cached_embedder(get_embedder(settings.embedder), settings.embedder)
    try:
        done = reembed(
            driver,
            settings.neo4j.database,
            embedder,
            page=page,
            say=lambda m: print(m, file=sys.stderr),
        )
    finally:
        embedder.close()
        driver.close()
    if done.previous is None:
        print(f"the graph holds no vectors yet; they will be {done.model}'s: nothing to do")
    elif not done.moved:
        print(f"the graph's vectors are from {done.model} (dimension {done.dim}): nothing to do")
    else:
        print(
            f"re-embedded {done.turns} turns and {done.states} states: {done.previous} -> "
            f"{done.model} (dimension {done.dim}) in {done.seconds:.1f}s"
        )
    return 0
