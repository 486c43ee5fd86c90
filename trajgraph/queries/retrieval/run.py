"""One ``retrieve`` call: what was asked (``Ask``) and the call's state (``Run``), the query
context every strategy receives.

A ``Run`` reads through the call's READ session (``read``), walks the trajectory's edges
(``hop``, from the engine's cache when it can), reads a trajectory's turns as scored lines
(``turn_index``) and keeps what the strategies found (``found``, merged by ``take``) and what
they read on the way that later ones reuse: the trajectory's version and edges, each turn's
similarity, whether a value's history was asked. It imports no strategy and not the retriever
(the engine is the ``Engine`` protocol): strategies depend on it, never the reverse.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

import neo4j

from trajgraph.core.errors import NotFoundError
from trajgraph.graph import node_ids
from trajgraph.graph.connection import graph_errors
from trajgraph.queries.retrieval import cypher
from trajgraph.queries.retrieval.anchors import Anchors, find_anchors
from trajgraph.queries.retrieval.base import Evidence, Found, add
from trajgraph.queries.retrieval.lexical import TurnIndex
from trajgraph.queries.retrieval.modes import Mode
from trajgraph.queries.retrieval.trajectory_graph import GraphCache, TrajectoryGraph

if TYPE_CHECKING:
    from typing_extensions import LiteralString

    from trajgraph.graph.embedders import Embedder
    from trajgraph.queries.retrieval.turn_cache import TurnCache


@dataclass(frozen=True)
class Ask:
    """What the caller asked, checked (retriever.py ``_check``)."""

    question: str
    tenant: str
    trajectory: str | None
    mode: Mode
    k: int
    depth: int
    budget_tokens: int
    code: str | None = None
    cypher_query: str | None = None

    @property
    def tuid(self) -> str | None:
        """The trajectory's node uid; None for a question about the whole tenant."""
        return node_ids.trajectory_uid(self.tenant, self.trajectory) if self.trajectory else None


class Engine(Protocol):
    """What a call uses of the engine (retriever.py ``Retriever``)."""

    database: str
    embedder: Embedder
    query_timeout_s: float
    graphs: GraphCache
    turns: TurnCache

    @property
    def unstamped(self) -> str | None: ...

    def fulltext_scoped(self, session: neo4j.Session) -> bool: ...


class Run:
    """The state of one ``retrieve`` call: its session, and what it found so far."""

    def __init__(self, engine: Engine, session: neo4j.Session, ask: Ask, *, vectors: bool) -> None:
        self.engine = engine
        self.session = session
        self.ask = ask
        self.tuid = ask.tuid
        # Whether the graph holds vectors of this model, as the space check of this call
        # found: another thread's check may change the engine's answer while this call runs.
        self.vectors = vectors
        self.embedder = engine.embedder
        self.named = find_anchors(ask.question) if self.tuid else Anchors()
        self.found: dict[str, Evidence] = {}
        self.counts: dict[str, Any] = {}
        self.anchors: list[str] = []  # the named steps and what they produced (the walk's starts)
        self.history_asked = False
        self.similar: dict[int, float] = {}  # turn -> similarity to the question
        # Read the whole trajectory (its turns as lines, cached per version), and will the
        # graph be walked (then the seeds' query brings the edges along): decided before
        # the seeds by the retriever.
        self.whole = False
        self.walks = False
        self.index: TurnIndex | None = None
        # The trajectory's content hash as the seeds read it (None: not read, or being
        # rewritten), whether they found it, and its edges once the graph tool needs them.
        self.version: str | None = None
        self.exists = False
        self.edges: TrajectoryGraph | None = None
        self._turn_text: dict[str, tuple[str, str]] = {}  # turn uid -> (action, observation)
        self._states: dict[str, tuple[str, str, str]] = {}  # uid -> (subject, attribute, value)

    @property
    def states(self) -> dict[str, tuple[str, str, str]]:
        """The states found, read so far: uid -> (subject, attribute, value)."""
        return self._states

    def take(self, got: Found) -> list[str]:
        """Merge a strategy's evidence and counts into the call's; the uids it found, in
        its order. A node found twice keeps its best reason and score (base.py ``add``)."""
        for e in got.evidence:
            if e.kind == "pending":
                add(self.found, e.uid, e.source, e.why, e.score)
            else:  # a result with its text (code, Cypher): kept as it is
                self.found[f"{e.uid}:{len(self.found)}"] = e
        self.counts.update(got.counts)
        return [e.uid for e in got.evidence]

    def read(self, statement: str, **params: Any) -> list[dict[str, Any]]:
        # Auto-commit reads in the call's READ session: half the round trips of a managed
        # transaction per query, and retrieval is read-only by construction.
        query = neo4j.Query(cast("LiteralString", statement), timeout=self.engine.query_timeout_s)
        with graph_errors("retrieval query"):
            return self.session.run(query, params).data()

    def not_found(self) -> NotFoundError:
        return NotFoundError("trajectory", self.ask.trajectory or "", tenant=self.ask.tenant)

    # -- the trajectory's turns -------------------------------------------------------------

    def turn_index(self, fetched: dict[str, Any] | None = None) -> TurnIndex:
        """Every turn of the trajectory as scored lines, from the engine's cache while the
        trajectory's content hash is unchanged. ``fetched``: a row that already holds the
        content hash and, unless the cached version is current, the turns' text."""
        tuid = self.tuid or ""
        if fetched is None:
            rows = self.read(cypher.TRAJECTORY_VERSION, tuid=tuid)
            if not rows:
                raise self.not_found()
            fetched = {"content_hash": rows[0]["content_hash"], "text": None}
        version = fetched["content_hash"]
        if version:
            cached = self.engine.turns.get(tuid, version)
            if cached is not None:
                return cached
        turns = fetched["text"]
        if turns is None:
            turns = self.read(cypher.TRAJECTORY_TURN_TEXT, tuid=tuid)
        index = TurnIndex.build(turns)
        if version:  # no hash: a write in progress or failed; do not keep it
            self.engine.turns.put(tuid, version, index)
        return index

    def found_turns(self, items: list[Evidence]) -> list[dict[str, Any]]:
        """Turns of what a single mode found: their text when a turn was found, else the
        lines of the states found on them."""
        turns: dict[int, dict[str, Any]] = {}
        for e in items:
            if e.turn is None:
                continue
            if e.kind == "turn" and e.uid in self._turn_text:
                action, observation = self._turn_text[e.uid]
                turns[e.turn] = {"idx": e.turn, "action": action, "observation": observation}
        for e in items:
            if e.kind == "state" and e.turn is not None and e.turn not in turns:
                turns[e.turn] = {"idx": e.turn, "action": "", "observation": "", "lines": []}
            if e.kind == "state" and e.turn is not None and "lines" in turns[e.turn]:
                turns[e.turn]["lines"].append(re.sub(r" \(turn \d+\)$", "", e.text))
        for t in turns.values():
            if "lines" in t:
                t["observation"] = "\n".join(dict.fromkeys(t.pop("lines")))
        return [turns[i] for i in sorted(turns)]

    # -- nodes ------------------------------------------------------------------------------

    def hydrate(self) -> list[Evidence]:
        """The found items with their text read from the graph, ordered by turn; a node that
        no longer exists is dropped."""
        found = self.found
        uids = [u for u, e in found.items() if e.kind == "pending"]
        if uids:
            for r in self.read(cypher.NODES_BY_UID, uids=uids):
                e = found[r["uid"]]
                e.kind = r["kind"]
                e.trajectory_id = r["trajectory_id"]
                e.turn = r["turn"]
                e.text = _node_text(r)
                e.current = r["current"]
                if r["kind"] == "turn":
                    self._turn_text[e.uid] = (r["action"] or "", r["observation"] or "")
                elif r["kind"] == "state":
                    self._states[e.uid] = (
                        r["subject"] or "",
                        r["attribute"] or "",
                        r["value"] or "",
                    )
        if self.history_asked:
            # A question about the current value: the value nothing supersedes comes first,
            # superseded ones stay (they say what changed) but are marked and come last.
            for e in found.values():
                if e.kind != "state" or e.current is None or e.source in ("code", "identifier"):
                    continue
                if e.current:
                    e.source, e.why = "current", "current value (nothing supersedes it)"
                else:
                    e.source, e.why = "superseded", "earlier value, superseded later"
        return by_turn(e for e in found.values() if e.kind != "pending")

    # -- the trajectory's edges -------------------------------------------------------------

    def hop(self, direction: str, uids: list[str]) -> list[dict[str, Any]]:
        """One hop from ``uids``: from the trajectory's cached edges when the question is
        about one trajectory whose version the seeds read, else one query."""
        graph = self.trajectory_edges()
        if graph is not None:
            return graph.hop(uids, direction)
        query = {
            "upstream": cypher.CAUSES_UPSTREAM_HOP,
            "downstream": cypher.CAUSES_DOWNSTREAM_HOP,
            "associated": cypher.ASSOCIATED_HOP,
        }[direction]
        return self.read(query, uids=uids)

    def trajectory_edges(self) -> TrajectoryGraph | None:
        if self.tuid is None or not self.version:
            return None  # tenant-wide, or a version being written: hop by hop
        if self.edges is None:
            cache = self.engine.graphs
            self.edges = cache.get(self.tuid, self.version)
            if self.edges is None:
                got = self.read(cypher.TRAJECTORY_EDGES, tuid=self.tuid)
                if not got:
                    return None  # deleted since the seeds were read
                self.edges = TrajectoryGraph(got[0]["edges"])
                if got[0]["content_hash"] == self.version:
                    cache.put(self.tuid, self.version, self.edges)
        return self.edges


def by_turn(items: Any) -> list[Evidence]:
    """Evidence in the order of the log (items of no turn last)."""
    return sorted(items, key=lambda e: (e.turn if e.turn is not None else 1 << 30, e.kind, e.uid))


def with_passages(
    items: list[Evidence], passages: Sequence[Any], trajectory: str, tenant: str
) -> list[Evidence]:
    """The found items, plus the turns the context shows that nothing else found."""
    have = {e.turn for e in items if e.kind == "turn"}
    extra = [
        Evidence(
            uid=node_ids.turn_uid(tenant, trajectory, p.turn),
            kind="turn",
            trajectory_id=trajectory,
            turn=p.turn,
            text=p.text,
            why=p.why or "matches the question",
            score=p.score,
            source="lexical",
        )
        for p in passages
        if p.turn not in have
    ]
    return by_turn([*items, *extra])


def _node_text(r: dict[str, Any]) -> str:
    if r["kind"] == "turn":
        return f"action: {r['action'] or ''}\nobservation: {r['observation'] or ''}"
    if r["kind"] == "state":
        return r["text"] or f"{r['subject']} {r['attribute']} = {r['value']}"
    return f"identifier {r['name']} (turns {r['turns']})"
