"""The retriever: a question → time-ordered, token-budgeted evidence that cites turns.

``auto`` takes the embedding top-k as seeds, then asks whether they suffice (the LLM when one
is configured, else the rule router in router.py) and calls only the strategies needed, as
neo4j-graphrag's retrievers are one class per strategy:

* ``seeds.py``: similarity seeds (vector indexes, or an exact scan of one trajectory) and
  the steps a question names;
* ``hops.py``: graph hops over CAUSES (upstream for "why", downstream for "effects"),
  ASSOCIATED, and SUPERSEDES history (the current value is the state nothing supersedes);
* ``keyword.py``: the full-text indexes plus exact identifier matches, with counts;
* ``code.py``: Python over the trajectory's turns in the sandbox (queries/sandbox/);
* ``caller_cypher.py``: the caller's read-only Cypher, its plan checked beside the sandbox.

They share ``base.py`` (modes, bounds, ``Evidence``, ``Retrieval``) and read through one
``Run`` (this call's READ session). Every item says why it is there (seed, hop n, keyword
hit, identifier, code result, history). The context (context.py) fits ``budget_tokens`` and
is ordered by turn.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

import neo4j

from trajgraph.core.errors import ConfigError, GraphError, NotFoundError
from trajgraph.graph import node_ids, writer
from trajgraph.graph.connection import graph_errors
from trajgraph.graph.embedders import Embedder, dimension
from trajgraph.graph.writer import embedding_space_and_unstamped, space_mismatch
from trajgraph.queries.retrieval import (
    aggregates,
    caller_cypher,
    cypher,
    evidence_outline,
    hops,
    keyword,
    router,
    scoped_keyword,
    seeds,
)
from trajgraph.queries.retrieval import code as code_tool
from trajgraph.queries.retrieval.anchors import Anchors, find_anchors
from trajgraph.queries.retrieval.base import (
    MAX_BUDGET,
    MAX_DEPTH,
    MAX_K,
    MODES,
    VECTOR_MODES,
    Evidence,
    Retrieval,
)
from trajgraph.queries.retrieval.context import build_context, render_context
from trajgraph.queries.retrieval.lexical import TurnIndex
from trajgraph.queries.retrieval.trajectory_graph import GraphCache, TrajectoryGraph

if TYPE_CHECKING:
    from typing_extensions import LiteralString


MAX_CHANGE_ROWS = 400  # states read for "what changed between step A and step B"
TURN_CACHE_CHARS = 16_000_000  # text of trajectories kept cut into lines for evidence


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
        # (queries/retrieval/cypher.py VECTOR_TOP_K). It never changes while such vectors remain.
        self._unstamped: str | None = None
        # Trajectories' turns cut into scored lines, by trajectory uid, with the content hash
        # they were built from: a question about the same trajectory version reuses them.
        self._turns: OrderedDict[str, tuple[str, TurnIndex]] = OrderedDict()
        self._turns_lock = threading.Lock()
        # Whether the full-text indexes can be asked about one trajectory (they hold its uid:
        # scoped_keyword.py), as last checked; None: not checked yet.
        self._fulltext_scoped: bool | None = None
        self._fulltext_checked = 0.0
        # Trajectories' CAUSES/ASSOCIATED edges by content hash: the graph tool walks them
        # without a round trip per hop (trajectory_graph.py).
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
                return Run(self, session, vectors=vectors).go(
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
            query = neo4j.Query(cast("LiteralString", cypher.FULLTEXT_SCOPED))
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


class Run:
    """The state of one ``retrieve`` call: its session, and what it found so far."""

    def __init__(self, engine: Retriever, session: neo4j.Session, *, vectors: bool) -> None:
        self.engine = engine
        self.session = session
        # Whether the graph holds vectors of this model, as the space check of this call
        # found: another thread's check may change the engine's answer while this call runs.
        self._vectors = vectors
        self.embedder = engine.embedder
        self._llm = engine.llm
        self.history_asked = False
        self._turn_text: dict[str, tuple[str, str]] = {}  # turn uid -> (action, observation)
        self._states: dict[str, tuple[str, str, str]] = {}  # uid -> (subject, attribute, value)
        self.similar: dict[int, float] = {}  # turn -> similarity to the question
        self.tuid: str | None = None
        # The trajectory's content hash as the seeds read it (None: not read, or being
        # rewritten), whether they found it, and its edges once the graph tool needs them.
        self.version: str | None = None
        self.exists = False
        self.edges: TrajectoryGraph | None = None

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
        tuid = node_ids.trajectory_uid(tenant, trajectory) if trajectory else None
        self.tuid = tuid
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
            index = self.turn_index(scope)

        anchors = (
            seeds.named_turns(self, named, tenant, trajectory or "", found)
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
                index = (
                    seeds.similar(self, question, scope, k, found, whole=whole, edges=walks)
                    or index
                )
                tools.append("embedding")
            else:
                # Ingested with --embedder none: full-text hits stand in for similarity seeds.
                route = "no embeddings in this graph"
                ids_in_q = router.question_identifiers(question)
                counts.update(keyword.keyword(self, question, ids_in_q, scope, k, found))
                tools.append("keyword")
        # An unknown trajectory is an error, not an empty answer; checked only when the
        # seeds found nothing, to save a round trip on every good question.
        if (
            tuid
            and index is None
            and not found
            and not self.exists
            and not self.read(cypher.TRAJECTORY_EXISTS, tuid=tuid)
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
            starts = anchors or list(found)
            hops.graph(
                self, starts, decided.directions, depth, found, "anchor_hop" if anchors else "hop"
            )
            tools.append("graph")
        if "keyword" in decided.tools:
            counts.update(keyword.keyword(self, question, decided.identifiers, scope, k, found))
            tools.append("keyword")
        if "code" in decided.tools:
            if cypher_query:
                counts.update(caller_cypher.run_cypher(self, cypher_query, scope, found))
            else:
                counts.update(code_tool.run_code(self, question, decided, scope, found, code))
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
            similar=self.similar,
            values=self.history_asked,
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
            rows = self.read(
                cypher.STATE_CHANGES_BETWEEN, tuid=scope["tuid"], lo=a, hi=b, limit=MAX_CHANGE_ROWS
            )
            return aggregates.state_changes(rows, a, b, question)

        wanted = decided.aggregates or aggregates.intents(question, named, phrases)
        tables = aggregates.tables_for(
            index, question, named, phrases, wanted, graph_changes=graph_changes
        )
        return tables + evidence_outline.outlines(index, question, named)

    def turn_index(self, scope: dict[str, Any], fetched: dict[str, Any] | None = None) -> TurnIndex:
        """Every turn of the trajectory as scored lines, from the engine's cache while the
        trajectory's content hash is unchanged. ``fetched``: a row that already holds the
        content hash and, unless the cached version is current, the turns' text."""
        tuid = scope["tuid"]
        if fetched is None:
            rows = self.read(cypher.TRAJECTORY_VERSION, tuid=tuid)
            if not rows:
                raise NotFoundError("trajectory", scope["trajectory"], tenant=scope["tenant"])
            fetched = {"content_hash": rows[0]["content_hash"], "text": None}
        version = fetched["content_hash"]
        if version:
            cached = self.engine.cached_turns(tuid, version)
            if cached is not None:
                return cached
        turns = fetched["text"]
        if turns is None:
            turns = self.read(cypher.TRAJECTORY_TURN_TEXT, tuid=tuid)
        index = TurnIndex.build(turns)
        if version:  # no hash: a write in progress or failed; do not keep it
            self.engine.cache_turns(tuid, version, index)
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
        return sorted(
            [*items, *extra],
            key=lambda e: (e.turn if e.turn is not None else 1 << 30, e.kind, e.uid),
        )

    # -- routing ----------------------------------------------------------------------------

    def _route(
        self, question: str, found: dict[str, Evidence], has_trajectory: bool
    ) -> router.Route:
        if self._llm is None:
            return router.rule_route(question, has_trajectory=has_trajectory)
        from trajgraph.queries.retrieval.llm_route import ask_router

        return ask_router(self._llm, question, self._hydrate(found), has_trajectory)

    # -- nodes ------------------------------------------------------------------------------

    def _hydrate(self, found: dict[str, Evidence]) -> list[Evidence]:
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
        return sorted(
            (e for e in found.values() if e.kind != "pending"),
            key=lambda e: (e.turn if e.turn is not None else 1 << 30, e.kind, e.uid),
        )

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

    def read(self, statement: str, **params: Any) -> list[dict[str, Any]]:
        # Auto-commit reads in the call's READ session: half the round trips of a managed
        # transaction per query, and retrieval is read-only by construction.
        query = neo4j.Query(cast("LiteralString", statement), timeout=self.engine.query_timeout_s)
        with graph_errors("retrieval query"):
            return self.session.run(query, params).data()


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
