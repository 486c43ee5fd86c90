"""The retrieval engine: a question → time-ordered, token-budgeted evidence that cites turns.

``auto`` takes the embedding top-k as seeds, then asks whether they suffice (the LLM when one
is configured, else the rule router in queries/router.py) and calls only the tools needed:

* ``graph``: breadth-first over CAUSES, upstream for "why" and downstream for "effects",
  up to ``depth`` hops, plus ASSOCIATED one hop and each state's SUPERSEDES history (the
  current value is the state nothing supersedes);
* ``keyword``: the full-text indexes plus exact identifier matches, with counts;
* ``code``: Python over the trajectory's turns in the sandbox (queries/sandbox.py), or
  read-only Cypher in a READ transaction with a timeout.

Every item says why it is there (seed, hop n, keyword hit, identifier, code result, history).
The context string fits ``budget_tokens`` and is ordered by turn.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from itertools import islice
from typing import TYPE_CHECKING, Any, cast

import neo4j
from neo4j.exceptions import Neo4jError

from trajgraph.errors import ConfigError, GraphError, NotFoundError
from trajgraph.graph import cypher, ids, writer
from trajgraph.graph.connection import graph_errors
from trajgraph.graph.embedders import Embedder, dimension
from trajgraph.graph.writer import embedding_space_and_unstamped, space_mismatch
from trajgraph.pipelines.tokens import count_tokens, fit_head_tail
from trajgraph.queries.retrieval import aggregates, router, scoped_keyword
from trajgraph.queries.retrieval.anchors import Anchors, find_anchors
from trajgraph.queries.retrieval.context import build_context
from trajgraph.queries.retrieval.lexical import TurnIndex
from trajgraph.queries.retrieval.tenant_similarity import BOTH_VECTOR_INDEXES
from trajgraph.queries.retrieval.trajectory_graph import (
    SEEDS_TURNS_AND_EDGES,
    TRAJECTORY_EDGES,
    VERSIONED_SIMILARITY,
    VERSIONED_SIMILARITY_AND_EDGES,
    GraphCache,
    TrajectoryGraph,
)

if TYPE_CHECKING:
    from typing_extensions import LiteralString

MODES = ("auto", "embedding", "graph", "keyword", "code")
VECTOR_MODES = ("auto", "embedding", "graph")  # the modes that start from similarity seeds
MAX_DEPTH = 6
MAX_K = 50
MAX_BUDGET = 32_000
FRONTIER_CAP = 200  # nodes expanded per hop: a hub must not turn a question into a graph dump
FETCH_FACTOR = 20  # vector over-fetch before the tenant filter
FULLTEXT_FETCH = 1000  # full-text hits fetched before the tenant filter; grown when crowded
FULLTEXT_FETCH_MAX = 100_000
VECTOR_FETCH_MAX = 10_000
CYPHER_TIMEOUT_S = 5.0
MAX_CYPHER_ROWS = 1000
# The procedures the caller's Cypher may call: reads of this database's graph and schema.
# Every other one is refused, db.* included (db.stats.* collects and returns other sessions'
# queries and the JVM's details, db.clearQueryCaches and db.prepareForReplanning act on the
# server, db.awaitIndex* wait).
GRAPH_PROCEDURES = frozenset(
    {
        "db.labels",
        "db.relationshipTypes",
        "db.propertyKeys",
        "db.schema.visualization",
        "db.schema.nodeTypeProperties",
        "db.schema.relTypeProperties",
        "db.index.fulltext.queryNodes",
        "db.index.fulltext.queryRelationships",
        "db.index.vector.queryNodes",
        "db.index.vector.queryRelationships",
    }
)
MAX_NAMED = 6  # steps named in a question ("at step 412", "turns 8-9") taken as seeds
ITEM_SHARE = 1 / 3  # no single item takes more than this share of the budget
MAX_CHANGE_ROWS = 400  # states read for "what changed between step A and step B"
TURN_CACHE_CHARS = 16_000_000  # text of trajectories kept cut into lines for evidence

# Order in which items earn budget when not everything fits.
_PRIORITY = {
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


# A long-running server notices that `trajgraph reembed` moved the graph to another model
# (its vectors then compare with none of the graph's) this soon.
SPACE_RECHECK_S = writer.SPACE_RECHECK_S


class Retriever:
    """One engine per process, safe to share between threads: holds the driver, the embedder
    and (optionally) an LLM client. Each ``retrieve`` runs in its own session."""

    def __init__(
        self,
        driver: neo4j.Driver,
        *,
        database: str,
        embedder: Embedder,
        llm: Any = None,  # extractors.llm_client.ChatClient, when an LLM is configured
        query_timeout_s: float = 10.0,
    ) -> None:
        self.driver = driver
        self.database = database
        self.embedder = embedder
        self.llm = llm
        self.query_timeout_s = query_timeout_s
        self._space_ok = False
        self._space_checked = 0.0  # time.monotonic() of the last check
        # The model of the graph's vectors from before stamps: during a move, not the space's
        # (graph/cypher.py VECTOR_TOP_K). It never changes while such vectors remain.
        self._unstamped: str | None = None
        # Trajectories' turns cut into scored lines, by trajectory uid, with the content hash
        # they were built from: a question about the same trajectory version reuses them.
        self._turns: OrderedDict[str, tuple[str, TurnIndex]] = OrderedDict()
        self._turns_lock = threading.Lock()
        # Whether the full-text indexes can be asked about one trajectory (they hold its uid:
        # queries/retrieval/scoped_keyword.py), as last checked; None: not checked yet.
        self._fulltext_scoped: bool | None = None
        self._fulltext_checked = 0.0
        # Trajectories' CAUSES/ASSOCIATED edges by content hash: the graph tool walks them
        # without a round trip per hop (queries/retrieval/trajectory_graph.py).
        self.graphs = GraphCache()

    def retrieve(
        self,
        question: str,
        *,
        tenant: str,
        trajectory: str | None = None,
        budget_tokens: int = 1000,
        mode: str = "auto",
        k: int = 8,
        depth: int = 3,
        code: str | None = None,
        cypher_query: str | None = None,
    ) -> Retrieval:
        _check(question, mode, k, depth, budget_tokens)
        if (code is not None or cypher_query is not None) and mode not in ("auto", "code"):
            # Given code is run; a mode that runs no code would drop it without a word.
            raise ConfigError(f"code and Cypher run in mode 'code' or 'auto', not {mode!r}")
        # Keyword and code read no vectors: they still answer from a server whose embedder
        # no longer matches the graph (until its operator restarts it with the graph's one).
        vectors = self._space_ok  # read once: another thread's check may change it meanwhile
        stale = not vectors or time.monotonic() - self._space_checked > SPACE_RECHECK_S
        if mode in VECTOR_MODES and stale:
            vectors = self._check_space()
        try:
            with (
                graph_errors("retrieval query"),
                self.driver.session(
                    database=self.database, default_access_mode=neo4j.READ_ACCESS
                ) as session,
            ):
                return _Run(self, session, vectors=vectors).go(
                    question, tenant, trajectory, budget_tokens, mode, k, depth, code, cypher_query
                )
        except GraphError as e:
            # A `trajgraph reembed` to another size since the last check fails the vector
            # query: say that (the mismatch), not that the graph failed.
            if self._space_ok:
                try:
                    self._check_space()
                except GraphError:
                    raise e from None  # Neo4j is down: the first error says so
            raise

    def _check_space(self) -> bool:
        """Whether the graph holds vectors of this embedder; raises when they are another's."""
        space, unstamped = embedding_space_and_unstamped(self.driver, self.database)
        mine = (self.embedder.name, dimension(self.embedder))
        self._unstamped = unstamped
        self._space_checked = time.monotonic()
        ok = space is not None and space == mine
        self._space_ok = ok
        if space is not None and space != mine:
            raise space_mismatch(space, mine)
        return ok

    def close(self) -> None:
        """Release the embedder and the LLM client (the driver belongs to the caller)."""
        self.embedder.close()
        if self.llm is not None:
            self.llm.close()

    @property
    def unstamped(self) -> str | None:
        """The model that made the graph's vectors without a stamp (see ``_check_space``)."""
        return self._unstamped

    @property
    def has_vectors(self) -> bool:
        """Whether anything was embedded (and so the vector indexes exist)."""
        return self._space_ok

    def fulltext_scoped(self, session: neo4j.Session) -> bool:
        """Whether keyword search can be scoped to a trajectory inside the index (rechecked
        like the embedding space: a migration by ``ensure_schema`` makes it so)."""
        scoped = self._fulltext_scoped
        if scoped is None or time.monotonic() - self._fulltext_checked > SPACE_RECHECK_S:
            query = neo4j.Query(cast("LiteralString", scoped_keyword.FULLTEXT_SCOPED))
            names = list(scoped_keyword.TEXT_FIELDS)
            with graph_errors("checking the full-text indexes"):
                rows = session.run(query, names=names, field=scoped_keyword.SCOPE_FIELD).data()
            scoped = len(rows) == len(names) and all(r["scoped"] for r in rows)
            self._fulltext_scoped, self._fulltext_checked = scoped, time.monotonic()
        return scoped

    def cached_version(self, tuid: str) -> str | None:
        with self._turns_lock:
            hit = self._turns.get(tuid)
            return hit[0] if hit is not None else None

    def cached_turns(self, tuid: str, content_hash: str) -> TurnIndex | None:
        with self._turns_lock:
            hit = self._turns.get(tuid)
            if hit is None or hit[0] != content_hash:
                return None
            self._turns.move_to_end(tuid)
            return hit[1]

    def cache_turns(self, tuid: str, content_hash: str, index: TurnIndex) -> None:
        with self._turns_lock:
            self._turns[tuid] = (content_hash, index)
            self._turns.move_to_end(tuid)
            while len(self._turns) > 1 and (
                sum(i.chars for _, i in self._turns.values()) > TURN_CACHE_CHARS
            ):
                self._turns.popitem(last=False)


class _Run:
    """The state of one ``retrieve`` call: its session, and what it found so far."""

    def __init__(self, engine: Retriever, session: neo4j.Session, *, vectors: bool) -> None:
        self._engine = engine
        self._session = session
        # Whether the graph holds vectors of this model, as the space check of this call
        # found: another thread's check may change the engine's answer while this call runs.
        self._vectors = vectors
        self._embedder = engine.embedder
        self._llm = engine.llm
        self._history_asked = False
        self._turn_text: dict[str, tuple[str, str]] = {}  # turn uid -> (action, observation)
        self._states: dict[str, tuple[str, str, str]] = {}  # uid -> (subject, attribute, value)
        self._similar: dict[int, float] = {}  # turn -> similarity to the question
        self._tuid: str | None = None
        # The trajectory's content hash as the seeds read it (None: not read, or being
        # rewritten), and its edges once the graph tool needs them.
        self._version: str | None = None
        self._exists = False  # the seeds' query found the trajectory
        self._edges: TrajectoryGraph | None = None

    def go(
        self,
        question: str,
        tenant: str,
        trajectory: str | None,
        budget_tokens: int,
        mode: str,
        k: int,
        depth: int,
        code: str | None,
        cypher_query: str | None,
    ) -> Retrieval:
        tuid = ids.trajectory_uid(tenant, trajectory) if trajectory else None
        self._tuid = tuid
        found: dict[str, Evidence] = {}
        counts: dict[str, Any] = {}
        tools: list[str] = []
        route = f"mode {mode}"
        scope = {"tenant": tenant, "trajectory": trajectory, "tuid": tuid}
        named = find_anchors(question) if tuid else Anchors()
        # auto reads the whole trajectory (cached per version): line-level evidence, named
        # steps and aggregates need every turn, not only what the seeds found. With vectors
        # the text comes with the seeds (one round trip), else on its own.
        whole = bool(tuid) and mode == "auto"
        index: TurnIndex | None = None
        if whole and not self._vectors:
            index = self._turn_index(scope)

        anchors = (
            self._named_turns(named, tenant, trajectory or "", found)
            if tuid and mode in ("auto", "graph")
            else []
        )
        if mode in ("auto", "embedding", "graph"):
            if self._vectors:
                # Will the graph be walked? Then the seeds' query brings the edges along.
                walks = mode == "graph" or (
                    mode == "auto"
                    and self._llm is None
                    and "graph" in router.rule_route(question, has_trajectory=True).tools
                )
                index = self._seeds(question, scope, k, found, whole=whole, edges=walks) or index
                tools.append("embedding")
            else:
                # Ingested with --embedder none: full-text hits stand in for similarity seeds.
                route = "no embeddings in this graph"
                ids_in_q = router.question_identifiers(question)
                counts.update(self._keyword(question, ids_in_q, scope, k, found))
                tools.append("keyword")
        # An unknown trajectory is an error, not an empty answer; checked only when the
        # seeds found nothing, to save a round trip on every good question.
        if (
            tuid
            and index is None
            and not found
            and not self._exists
            and not self._read(cypher.TRAJECTORY_EXISTS, tuid=tuid)
        ):
            raise NotFoundError("trajectory", trajectory or "", tenant=tenant)
        if mode == "auto":
            decided = self._route(question, found, trajectory is not None)
            if (code is not None or cypher_query is not None) and "code" not in decided.tools:
                decided = replace(decided, tools=(*decided.tools, "code"))
            route = f"auto: {decided.reason}" + (
                "" if self._vectors else " (no embeddings in this graph)"
            )
        else:
            decided = router.rule_route(question, has_trajectory=trajectory is not None)
            forced: dict[str, tuple[router.Tool, ...]] = {
                "graph": ("graph",),
                "keyword": ("keyword",),
                "code": ("code",),
            }
            decided = router.Route(
                forced.get(mode, ()),
                decided.directions or ("upstream",),
                decided.identifiers,
                decided.reason,
            )
        if "graph" in decided.tools:
            # A named turn says which event the question is about: traverse from it alone,
            # not from look-alike events that similarity also found.
            seeds = anchors or list(found)
            self._graph(seeds, decided.directions, depth, found, "anchor_hop" if anchors else "hop")
            tools.append("graph")
        if "keyword" in decided.tools:
            counts.update(self._keyword(question, decided.identifiers, scope, k, found))
            tools.append("keyword")
        if "code" in decided.tools:
            counts.update(self._code(question, decided, scope, found, code, cypher_query))
            tools.append("code")
        tables = self._tables(question, decided, named, index, scope) if index else []
        if tables:
            counts["aggregates"] = [t.title for t in tables]
            if "code" not in tools:
                tools.append("code")
        items = self._hydrate(found)
        if not tuid:
            context, used = render_context(items, budget_tokens)
            return Retrieval(question, mode, route, tools, items, context, used, counts)
        if index is None:  # a single mode: the turns it found, and its states' lines
            index = TurnIndex.build(self._found_turns(items))
        built = build_context(
            question,
            items,
            index,
            named,
            tables,
            budget_tokens,
            states=self._states,
            similar=self._similar,
            values=self._history_asked,
        )
        items = self._with_passages(items, built.passages, trajectory or "", tenant)
        return Retrieval(question, mode, route, tools, items, built.text, built.tokens, counts)

    def _tables(
        self,
        question: str,
        decided: router.Route,
        named: Anchors,
        index: TurnIndex,
        scope: dict[str, Any],
    ) -> list[aggregates.Table]:
        """The offline aggregate tables the route asks for (the rules decide them when an
        LLM routed): counts, occurrences, and changes read from SUPERSEDES chains."""
        phrases = [*aggregates.quoted_phrases(question), *decided.identifiers]

        def graph_changes(a: int, b: int) -> aggregates.Table:
            rows = self._read(
                cypher.STATE_CHANGES_BETWEEN, tuid=scope["tuid"], lo=a, hi=b, limit=MAX_CHANGE_ROWS
            )
            return aggregates.state_changes(rows, a, b, question)

        wanted = decided.aggregates or aggregates.intents(question, named, phrases)
        return aggregates.tables_for(
            index, question, named, phrases, wanted, graph_changes=graph_changes
        )

    def _turn_index(
        self, scope: dict[str, Any], fetched: dict[str, Any] | None = None
    ) -> TurnIndex:
        """Every turn of the trajectory as scored lines, from the engine's cache while the
        trajectory's content hash is unchanged. ``fetched``: a row that already holds the
        content hash and, unless the cached version is current, the turns' text."""
        tuid = scope["tuid"]
        if fetched is None:
            rows = self._read(cypher.TRAJECTORY_VERSION, tuid=tuid)
            if not rows:
                raise NotFoundError("trajectory", scope["trajectory"], tenant=scope["tenant"])
            fetched = {"content_hash": rows[0]["content_hash"], "text": None}
        version = fetched["content_hash"]
        if version:
            cached = self._engine.cached_turns(tuid, version)
            if cached is not None:
                return cached
        turns = fetched["text"]
        if turns is None:
            turns = self._read(cypher.TRAJECTORY_TURN_TEXT, tuid=tuid)
        index = TurnIndex.build(turns)
        if version:  # no hash: a write in progress or failed; do not keep it
            self._engine.cache_turns(tuid, version, index)
        return index

    def _found_turns(self, items: list[Evidence]) -> list[dict[str, Any]]:
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

    def _with_passages(
        self, items: list[Evidence], passages: Sequence[Any], trajectory: str, tenant: str
    ) -> list[Evidence]:
        """The found items, plus the turns the context shows that nothing else found."""
        have = {e.turn for e in items if e.kind == "turn"}
        extra = [
            Evidence(
                uid=ids.turn_uid(tenant, trajectory, p.turn),
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
        return sorted(
            [*items, *extra],
            key=lambda e: (e.turn if e.turn is not None else 1 << 30, e.kind, e.uid),
        )

    # -- seeds ------------------------------------------------------------------------------

    def _seeds(
        self,
        question: str,
        scope: dict[str, Any],
        k: int,
        found: dict[str, Evidence],
        whole: bool = False,
        edges: bool = False,
    ) -> TurnIndex | None:
        """The top-k similar states and turns; with ``whole`` (a trajectory read as a whole)
        also every turn's similarity, kept for ranking lines, and the trajectory's turns."""
        vector = self._embedder.embed([question])[0]
        # $model: only vectors the space's model made are compared (graph/cypher.py).
        near = {
            "vector": vector,
            "model": self._embedder.name,
            "unstamped": self._engine.unstamped,
            "k": k,
        }
        index = None
        if scope["tuid"] and edges:
            near["known_edges"] = self._engine.graphs.version(scope["tuid"])
        if scope["tuid"] and whole:
            got = self._read(
                SEEDS_TURNS_AND_EDGES if edges else cypher.TRAJECTORY_SEEDS_AND_TURNS,
                tuid=scope["tuid"],
                known=self._engine.cached_version(scope["tuid"]),
                **near,
            )
            if not got:
                raise NotFoundError("trajectory", scope["trajectory"], tenant=scope["tenant"])
            rows = got[0]["top"]
            self._similar = {int(idx): float(score) for idx, score in got[0]["turns"]}
            self._version, self._exists = got[0]["content_hash"], True
            index = self._turn_index(scope, got[0])
        elif scope["tuid"]:
            query = VERSIONED_SIMILARITY_AND_EDGES if edges else VERSIONED_SIMILARITY
            got = self._read(query, tuid=scope["tuid"], **near)
            if not got:
                raise NotFoundError("trajectory", scope["trajectory"], tenant=scope["tenant"])
            rows = got[0]["top"]
            self._version, self._exists = got[0]["content_hash"], True
        else:
            # Both indexes in one round trip; one that other tenants' nodes crowd out of the
            # over-fetch is asked again below with a larger fetch (up to the cap).
            first = min(k * FETCH_FACTOR, VECTOR_FETCH_MAX)
            both = self._read(BOTH_VECTOR_INDEXES, fetch=first, tenant=scope["tenant"], **near)
            rows = []
            for vector_index in cypher.VECTOR_INDEXES:
                got = [r for r in both if r["index"] == vector_index]
                if len(got) >= k or first >= VECTOR_FETCH_MAX:
                    rows += got
                    continue
                fetch = min(first * 10, VECTOR_FETCH_MAX)
                while True:
                    got = self._read(
                        cypher.VECTOR_TOP_K,
                        index=vector_index,
                        fetch=fetch,
                        tenant=scope["tenant"],
                        **near,
                    )
                    if len(got) >= k or fetch >= VECTOR_FETCH_MAX:
                        break
                    fetch = min(fetch * 10, VECTOR_FETCH_MAX)
                rows += got
            rows = sorted(rows, key=lambda r: -r["score"])[:k]
        if scope["tuid"] and got[0].get("edges") is not None:
            self._edges = TrajectoryGraph(got[0]["edges"])
            if self._version:
                self._engine.graphs.put(scope["tuid"], self._version, self._edges)
        for r in rows:
            _add(found, r["uid"], "seed", f"seed (similarity {r['score']:.2f})", r["score"])
        return index

    def _named_turns(
        self,
        anchors: Anchors,
        tenant: str,
        trajectory: str,
        found: dict[str, Evidence],
    ) -> list[str]:
        """ "Why did X fail at step 412?": the steps the question names, and what they
        produced, are better seeds than anything similarity finds (a long run has many
        look-alikes)."""
        idxs = list(anchors.points)
        for lo, hi in anchors.ranges:
            idxs += [lo, hi]
        idxs = list(dict.fromkeys(idxs))[:MAX_NAMED]
        if not idxs:
            return []
        uids = [ids.turn_uid(tenant, trajectory, i) for i in idxs]
        states = [r["uid"] for r in self._read(cypher.STATES_AT_TURNS, uids=uids)]
        for uid in uids:  # one that does not exist stays pending and is dropped
            _add(found, uid, "anchor", "the turn the question names", 1.0)
        for uid in states:
            _add(found, uid, "anchor", "a result of the turn the question names", 1.0)
        return states + uids

    # -- routing ----------------------------------------------------------------------------

    def _route(
        self, question: str, found: dict[str, Evidence], has_trajectory: bool
    ) -> router.Route:
        if self._llm is None:
            return router.rule_route(question, has_trajectory=has_trajectory)
        from trajgraph.queries.retrieval.llm_route import ask_router

        return ask_router(self._llm, question, self._hydrate(found), has_trajectory)

    # -- graph ------------------------------------------------------------------------------

    def _graph(
        self,
        seeds: Sequence[str],
        directions: Sequence[str],
        depth: int,
        found: dict[str, Evidence],
        source: str = "hop",
    ) -> None:
        for direction in directions:
            if direction == "history":
                self._history(seeds, found)
                continue
            seen = set(seeds)
            frontier = list(seeds)
            for hop in range(1, depth + 1):
                if not frontier:
                    break
                rows = self._hop(direction, frontier[:FRONTIER_CAP])
                nxt = []
                for r in rows:
                    if r["uid"] in seen:
                        continue
                    seen.add(r["uid"])
                    nxt.append(r["uid"])
                    why = f"hop {hop} {direction}" + (f": {r['reason']}" if r["reason"] else "")
                    _add(found, r["uid"], source, why, 1.0 / (hop + 1))
                frontier = nxt
        for r in self._hop("associated", list(seeds)[:FRONTIER_CAP]):
            _add(found, r["uid"], "assoc", "associated with a seed", 0.3)

    def _hop(self, direction: str, uids: list[str]) -> list[dict[str, Any]]:
        """One hop from ``uids``: from the trajectory's cached edges when the question is
        about one trajectory whose version the seeds read, else one query."""
        graph = self._trajectory_edges()
        if graph is not None:
            return graph.hop(uids, direction)
        query = {
            "upstream": cypher.CAUSES_UPSTREAM_HOP,
            "downstream": cypher.CAUSES_DOWNSTREAM_HOP,
            "associated": cypher.ASSOCIATED_HOP,
        }[direction]
        return self._read(query, uids=uids)

    def _trajectory_edges(self) -> TrajectoryGraph | None:
        if self._tuid is None or not self._version:
            return None  # tenant-wide, or a version being written: hop by hop
        if self._edges is None:
            cache = self._engine.graphs
            self._edges = cache.get(self._tuid, self._version)
            if self._edges is None:
                got = self._read(TRAJECTORY_EDGES, tuid=self._tuid)
                if not got:
                    return None  # deleted since the seeds were read
                self._edges = TrajectoryGraph(got[0]["edges"])
                if got[0]["content_hash"] == self._version:
                    cache.put(self._tuid, self._version, self._edges)
        return self._edges

    def _history(self, seeds: Sequence[str], found: dict[str, Evidence]) -> None:
        for r in self._read(cypher.STATE_HISTORY, uids=list(seeds)[:FRONTIER_CAP]):
            _add(found, r["uid"], "hop", "history of a seed's subject", 0.5)
        self._history_asked = True

    # -- keyword ----------------------------------------------------------------------------

    def _keyword(
        self,
        question: str,
        identifiers: Sequence[str],
        scope: dict[str, Any],
        k: int,
        found: dict[str, Evidence],
    ) -> dict[str, Any]:
        counts: dict[str, Any] = {}
        query = lucene_query(question, identifiers)
        if query:
            hits: list[dict[str, Any]] = []
            if scope["tuid"] and self._engine.fulltext_scoped(self._session):
                hits = self._read(
                    scoped_keyword.TRAJECTORY_FULLTEXT_HITS,
                    turn_query=scoped_keyword.scoped_query("turn_text", query, scope["tuid"]),
                    state_query=scoped_keyword.scoped_query("state_text", query, scope["tuid"]),
                    fetch=FULLTEXT_FETCH,
                )
            else:
                for index in ("turn_text", "state_text"):
                    hits += self._fulltext(index, query, scope, k)
            per_trajectory: dict[str, int] = {}
            for h in hits:
                per_trajectory[h["trajectory_id"]] = per_trajectory.get(h["trajectory_id"], 0) + 1
            counts["keyword_hits"] = len(hits)
            counts["keyword_hits_by_trajectory"] = per_trajectory
            for h in sorted(hits, key=lambda h: -h["score"])[:k]:
                _add(found, h["uid"], "keyword", f"keyword hit ({h['score']:.2f})", h["score"])
        for name in identifiers:
            if scope["tuid"]:
                rows = self._read(
                    scoped_keyword.TRAJECTORY_IDENTIFIER_TURNS,
                    tuid=scope["tuid"],
                    name=name,
                    limit=1000,
                )
            else:
                rows = self._read(
                    cypher.IDENTIFIER_TURNS,
                    tenant=scope["tenant"],
                    name=name,
                    trajectory=None,
                    limit=1000,
                )
            if not rows and scope["tuid"]:
                rows = self._read(
                    cypher.TURNS_CONTAINING, tuid=scope["tuid"], text=name, limit=1000
                )
            counts.setdefault("identifier_turns", {})[name] = len(rows)
            for r in rows[: max(k, 1)]:
                _add(found, r["uid"], "identifier", f"identifier `{name}` appears here", 1.0)
        return counts

    def _fulltext(
        self, index: str, query: str, scope: dict[str, Any], k: int
    ) -> list[dict[str, Any]]:
        """Hits in this tenant (and trajectory). The index is shared by all tenants, so when
        other tenants' hits fill a fetch and fewer than ``k`` of ours are in it, fetch more.
        (A trajectory's hits are asked of the index directly where it can: ``_keyword``.)"""
        fetch = FULLTEXT_FETCH
        while True:
            (row,) = self._read(
                cypher.FULLTEXT_HITS,
                index=index,
                query=scoped_keyword.text_query(index, query),
                fetch=fetch,
                tenant=scope["tenant"],
                trajectory=scope["trajectory"],
            )
            hits: list[dict[str, Any]] = row["hits"]
            if row["raw"] < fetch or len(hits) >= k or fetch >= FULLTEXT_FETCH_MAX:
                return hits
            fetch *= 10

    # -- code -------------------------------------------------------------------------------

    def _code(
        self,
        question: str,
        route: router.Route,
        scope: dict[str, Any],
        found: dict[str, Evidence],
        code: str | None,
        cypher_query: str | None,
    ) -> dict[str, Any]:
        if cypher_query:
            return self._cypher(cypher_query, scope, found)
        if not scope["tuid"]:
            raise ConfigError("code over turns needs a trajectory (--trajectory)")
        program: str | None = code or route.code
        if not program and (not route.aggregates or router.is_count(question)):
            program = router.offline_code(question, route.identifiers)
        if not program:
            if route.aggregates:  # the offline tables answer it (see go)
                return {}
            return {"code_error": "no program: pass code, or configure an LLM to write it"}
        from trajgraph.queries.sandbox import run_python

        turns = self._read(cypher.TRAJECTORY_TURNS, tuid=scope["tuid"])
        by_idx = {t["idx"]: t["uid"] for t in turns}
        result = run_python(program, [{k: v for k, v in t.items() if k != "uid"} for t in turns])
        counts: dict[str, Any] = {"code": program, "code_seconds": round(result.seconds, 3)}
        if result.error:
            counts["code_error"] = result.error
            return counts
        counts["code_result"] = result.value
        found[f"code:{len(found)}"] = Evidence(
            uid="code",
            kind="code",
            trajectory_id=scope["trajectory"] or "",
            turn=None,
            text=f"code result: {json.dumps(result.value, default=str)[:2000]}",
            why=f"code over {len(turns)} turns (touched {len(result.touched_turns)})",
            score=1.0,
            source="code",
        )
        # Evidence turns: those the result names ({"turns": [...]}) when it names any, else
        # those the code read, unless it read them all (a scan cites nothing in particular).
        named = result.value.get("turns") if isinstance(result.value, dict) else None
        if isinstance(named, list) and all(isinstance(i, int) for i in named):
            cited, why = named, "named in the code's result"
        elif len(result.touched_turns) < len(turns):
            cited, why = result.touched_turns, "read by the code"
        else:
            cited, why = [], ""
        for idx in cited[:MAX_K]:
            if idx in by_idx:
                _add(found, by_idx[idx], "code", why, 0.9)
        return counts

    def _cypher(
        self, query: str, scope: dict[str, Any], found: dict[str, Evidence]
    ) -> dict[str, Any]:
        params = {"tenant": scope["tenant"], "trajectory": scope["trajectory"]}

        database = self._engine.database

        def work(tx: neo4j.Transaction) -> list[dict[str, Any]] | str:
            # The caller's query, by design: it runs in a READ transaction (the server refuses
            # writes there) with a timeout, and sees only $tenant and $trajectory; its plan
            # is checked first for what a READ transaction allows but is not the graph.
            plan = tx.run(cast("LiteralString", "EXPLAIN " + query), params).consume().plan
            outside = _outside_the_graph(plan, database)
            if outside is not None:
                return outside
            result = tx.run(cast("LiteralString", query), params)
            return [r.data() for r in islice(result, MAX_CYPHER_ROWS)]

        try:
            # One explicit transaction, never retried: a query that exhausted the server's
            # heap (a transient error, which execute_read would retry) must not run again.
            with self._session.begin_transaction(timeout=CYPHER_TIMEOUT_S) as tx:
                rows = work(tx)
        except Neo4jError as e:
            # The caller's Cypher failed (syntax, a write refused, its timeout): that is the
            # answer to report. A lost server is a DriverError and leaves as GraphError.
            return {"code_error": f"cypher failed: {e.message}"}
        if isinstance(rows, str):
            return {"code_error": f"cypher refused: {rows} is outside the graph"}
        found["cypher"] = Evidence(
            uid="cypher",
            kind="code",
            trajectory_id=scope["trajectory"] or "",
            turn=None,
            text=f"cypher result: {json.dumps(rows, default=str)[:2000]}",
            why="read-only Cypher",
            score=1.0,
            source="code",
        )
        return {"cypher_rows": len(rows)}

    # -- nodes ------------------------------------------------------------------------------

    def _hydrate(self, found: dict[str, Evidence]) -> list[Evidence]:
        uids = [u for u, e in found.items() if e.kind == "pending"]
        if uids:
            for r in self._read(cypher.NODES_BY_UID, uids=uids):
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
        if self._history_asked:
            # A question about the current value: the value nothing supersedes comes first,
            # superseded ones stay (they say what changed) but are marked and come last.
            for e in found.values():
                if e.kind != "state" or e.current is None or e.source in ("code", "identifier"):
                    continue
                if e.current:
                    e.source, e.why = "current", "current value (nothing supersedes it)"
                else:
                    e.source, e.why = "superseded", "earlier value, superseded later"
        return sorted(
            (e for e in found.values() if e.kind != "pending"),
            key=lambda e: (e.turn if e.turn is not None else 1 << 30, e.kind, e.uid),
        )

    def _read(self, statement: str, **params: Any) -> list[dict[str, Any]]:
        # Auto-commit reads in the call's READ session: half the round trips of a managed
        # transaction per query, and retrieval is read-only by construction.
        query = neo4j.Query(cast("LiteralString", statement), timeout=self._engine.query_timeout_s)
        with graph_errors("retrieval query"):
            return self._session.run(query, params).data()


def _add(found: dict[str, Evidence], uid: str, source: str, why: str, score: float) -> None:
    old = found.get(uid)
    if old is not None:
        if _PRIORITY[source] < _PRIORITY[old.source]:
            old.source, old.why = source, why
        old.score = max(old.score, score)
        return
    found[uid] = Evidence(uid, "pending", "", None, "", why, score, source)


def _node_text(r: dict[str, Any]) -> str:
    if r["kind"] == "turn":
        return f"action: {r['action'] or ''}\nobservation: {r['observation'] or ''}"
    if r["kind"] == "state":
        return r["text"] or f"{r['subject']} {r['attribute']} = {r['value']}"
    return f"identifier {r['name']} (turns {r['turns']})"


def _check(question: str, mode: str, k: int, depth: int, budget: int) -> None:
    if not question.strip():
        raise ConfigError("the question is empty")
    if mode not in MODES:
        raise ConfigError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if not 1 <= k <= MAX_K:
        raise ConfigError(f"k must be between 1 and {MAX_K}, got {k}")
    if not 1 <= depth <= MAX_DEPTH:
        raise ConfigError(f"depth must be between 1 and {MAX_DEPTH}, got {depth}")
    if not 50 <= budget <= MAX_BUDGET:
        raise ConfigError(f"budget must be between 50 and {MAX_BUDGET} tokens, got {budget}")


def _outside_the_graph(plan: dict[str, Any] | None, database: str) -> str | None:
    """What in a query plan reaches beyond ``database``'s graph, though a READ transaction
    allows it: LOAD CSV (reads the server's files, fetches URLs), SHOW and administration
    commands, TERMINATE TRANSACTIONS (other sessions' work), procedures outside
    GRAPH_PROCEDURES (``dbms.listConfig`` is the server's configuration), another database,
    in the plan's operators or in the nested plans of its expressions. None when there is
    nothing of the kind."""
    stack = [plan] if plan else []
    while stack:
        op = stack.pop()
        kind, _, where = str(op.get("operatorType", "")).partition("@")
        details = str((op.get("args") or {}).get("Details", ""))
        # A subquery inside an expression (`[x IN l | COLLECT { ... }]`, CASE, reduce) is a
        # nested plan: no operator of the tree, only text in its operator's Details.
        if kind == "LoadCSV" or _NESTED_LOAD_CSV.search(details):
            return "LOAD CSV"
        if kind.startswith("Show"):
            return "SHOW " + kind.removeprefix("Show")
        if kind.startswith("Terminate"):
            return "TERMINATE " + kind.removeprefix("Terminate").upper()
        if kind.startswith("Administration") or (where and where.lower() != database.lower()):
            return f"an administration command or another database ({where or kind})"
        called = _NESTED_CALL.findall(details)
        if kind.startswith("ProcedureCall"):
            called.append(details.split("(")[0].strip())
        for name in called:
            if name not in GRAPH_PROCEDURES:
                return f"the procedure {name or '?'}"
        stack.extend(op.get("children") or [])
    return None


# How a plan's Details show a nested plan's LOAD CSV and procedure call (string literals are
# parameters there, so the text of a value cannot match).
_NESTED_LOAD_CSV = re.compile(r"\bLOAD\s+CSV\b", re.IGNORECASE)
_NESTED_CALL = re.compile(r"ResolvedCall\(\s*([^\s(]*)\s*\(")


# -- full-text query ----------------------------------------------------------------------------

_LUCENE_SPECIAL = re.compile(r'([+\-&|!(){}\[\]^"~*?:\\/])')
_TERM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-/]*")
_STOP_WORDS = """
a an the of to in on at for and or is are was were be been did do does what which who when why
how many much times time agent agents it its this that these those with from by as into after
before then than there their they them we you i me my our
"""
_STOP = frozenset(_STOP_WORDS.split())


# Lucene refuses a query of more than 1,024 clauses (the server then reports a failed
# procedure, which would read as an outage). Every term is a clause in each field of the
# index (state_text has three), a phrase's terms each count: a long question keeps the
# identifiers and words that fit, in order, within this many terms (3 x 300 < 1,024).
MAX_QUERY_TERMS = 300
# An upper bound on the terms a part is analysed into: each run of ASCII word characters is
# at most one, and so is each other word character (an ideograph is a term of its own).
_ASCII_RUN = re.compile(r"[A-Za-z0-9_]+")
_OTHER_WORD_CHAR = re.compile(r"[^\W\x00-\x7f]")


def lucene_query(question: str, identifiers: Sequence[str]) -> str:
    """A Lucene query: every identifier as an exact phrase, every other word as a term, all
    special characters escaped (a question is data, never query syntax); at most
    MAX_QUERY_TERMS terms."""
    parts = ['"' + _escape(i) + '"' for i in identifiers if i.strip()]
    for word in _TERM.findall(question):
        w = word.lower().strip(".-/")
        if w and w not in _STOP and len(w) > 1:
            parts.append(_escape(w))
    kept: list[str] = []
    terms = 0
    for part in dict.fromkeys(parts):
        n = max(1, len(_ASCII_RUN.findall(part)) + len(_OTHER_WORD_CHAR.findall(part)))
        if terms + n <= MAX_QUERY_TERMS:
            kept.append(part)
            terms += n
    return " OR ".join(kept)


def _escape(text: str) -> str:
    return _LUCENE_SPECIAL.sub(lambda m: "\\" + m.group(1), text)


# -- context ------------------------------------------------------------------------------------


def render_context(items: Sequence[Evidence], budget_tokens: int) -> tuple[str, int]:
    """Items by priority into the budget (each capped at ITEM_SHARE of it), printed by turn."""
    cap = max(16, int(budget_tokens * ITEM_SHARE))
    ranked = sorted(items, key=lambda e: (_PRIORITY.get(e.source, 99), -e.score))
    chosen: list[tuple[Evidence, str]] = []
    used = 0
    for e in ranked:
        block = _block(e, cap)
        cost = count_tokens(block) + 1
        if used + cost > budget_tokens:
            continue
        chosen.append((e, block))
        used += cost
    chosen.sort(key=lambda p: (p[0].turn if p[0].turn is not None else 1 << 30, p[0].kind))
    text = "\n".join(block for _, block in chosen)
    return text, count_tokens(text)


def _block(e: Evidence, cap: int) -> str:
    where = f"turn {e.turn}" if e.turn is not None else "trajectory"
    head = f"[{e.trajectory_id} {where} · {e.kind} · {e.why}]\n"
    body, _ = fit_head_tail(e.text, max(8, cap - count_tokens(head)))
    return head + body
