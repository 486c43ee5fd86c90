"""The retriever: a question → time-ordered, token-budgeted evidence that cites turns.

The mode's plan (modes.py) says where a question starts and which tools follow. ``auto``
takes the embedding top-k (and the steps the question names) as seeds, then asks whether they
suffice (the LLM when one is configured, else the rule router in router.py) and calls only
the tools needed: as neo4j-graphrag's router uses its retrievers as tools, each tool is a
strategy (strategies/, one class per module behind strategy.py's interface) that returns its
evidence; the call's state and its reads are ``Run``'s (run.py). Every item says why it is
there (seed, hop n, keyword hit, identifier, code result, history). The context (context.py)
fits ``budget_tokens`` and is ordered by turn.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

import neo4j

from trajgraph.core.errors import ConfigError, GraphError
from trajgraph.graph import writer
from trajgraph.graph.connection import graph_errors
from trajgraph.graph.embedders import Embedder, dimension
from trajgraph.graph.writer import embedding_space_and_unstamped, space_mismatch
from trajgraph.queries.retrieval import aggregates, cypher, evidence_outline, router
from trajgraph.queries.retrieval import scoped_keyword as scoped
from trajgraph.queries.retrieval.base import MAX_BUDGET, MAX_DEPTH, MAX_K, Retrieval
from trajgraph.queries.retrieval.context import build_context, render_context
from trajgraph.queries.retrieval.lexical import TurnIndex
from trajgraph.queries.retrieval.modes import MODES, PLANS, VECTOR_MODES, Mode, Plan
from trajgraph.queries.retrieval.run import Ask, Run, with_passages
from trajgraph.queries.retrieval.strategies import KEYWORD, NAMED_STEPS, SIMILARITY, TOOLBOX
from trajgraph.queries.retrieval.trajectory_graph import GraphCache
from trajgraph.queries.retrieval.turn_cache import TurnCache

if TYPE_CHECKING:
    from typing_extensions import LiteralString

__all__ = ["Retriever", "Run"]  # Run: the call's reads, which the benchmarks count

MAX_CHANGE_ROWS = 400  # states read for "what changed between step A and step B"

# A long-running server notices that `trajgraph reembed` moved the graph to another model
# (its vectors then compare with none of the graph's) this soon.
SPACE_RECHECK_S = writer.SPACE_RECHECK_S

SEEDING = router.Route((), (), (), "seeds")  # the route the seed strategies get (they read none)


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
        # Trajectories' turns cut into scored lines, by uid and content hash (turn_cache.py).
        self.turns = TurnCache()
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
        ask = Ask(
            question,
            tenant,
            trajectory,
            cast(Mode, mode),
            k,
            depth,
            budget_tokens,
            code,
            cypher_query,
        )
        if (code is not None or cypher_query is not None) and not PLANS[ask.mode].runs_code:
            # Given code is run; a mode that runs no code would drop it without a word.
            raise ConfigError(f"code and Cypher run in mode 'code' or 'auto', not {mode!r}")
        # Keyword and code read no vectors: they still answer from a server whose embedder
        # no longer matches the graph (until its operator restarts it with the graph's one).
        vectors = self._space_ok  # read once: another thread's check may change it meanwhile
        stale = not vectors or time.monotonic() - self._space_checked > SPACE_RECHECK_S
        if ask.mode in VECTOR_MODES and stale:
            vectors = self._check_space()
        try:
            with (
                graph_errors("retrieval query"),
                self.driver.session(
                    database=self.database, default_access_mode=neo4j.READ_ACCESS
                ) as session,
            ):
                return self._answer(Run(self, session, ask, vectors=vectors))
        except GraphError as e:
            # A `trajgraph reembed` to another size since the last check fails the vector
            # query: say that (the mismatch), not that the graph failed.
            if self._space_ok:
                try:
                    self._check_space()
                except GraphError:
                    raise e from None  # Neo4j is down: the first error says so
            raise

    def _answer(self, run: Run) -> Retrieval:
        """The mode's plan, run: the seeds, then the tools the route asks for, each a
        strategy whose evidence the run merges; then the evidence, fitted to the budget."""
        plan = PLANS[run.ask.mode]
        tools: list[str] = []
        route = f"mode {run.ask.mode}"
        # auto reads the whole trajectory (cached per version): line-level evidence, named
        # steps and aggregates need every turn, not only what the seeds found. With vectors
        # the text comes with the seeds (one round trip), else on its own.
        run.whole = run.tuid is not None and plan.whole
        if run.whole and not run.vectors:
            run.index = run.turn_index()
        if plan.anchors and NAMED_STEPS.applies(run):
            run.anchors = run.take(NAMED_STEPS.find(run, SEEDING))
        if plan.seeds and run.vectors:
            run.walks = self._walks(run, plan)  # then the seeds' query brings the edges along
            run.take(SIMILARITY.find(run, SEEDING))
            tools.append(SIMILARITY.name)
        elif plan.seeds:
            # Ingested with --embedder none: full-text hits stand in for similarity seeds.
            route = "no embeddings in this graph"
            named = tuple(router.question_identifiers(run.ask.question))
            run.take(KEYWORD.find(run, replace(SEEDING, identifiers=named)))
            tools.append(KEYWORD.name)
        _check_exists(run)
        decided, routed = self._decide(run, plan)
        for tool, strategies in TOOLBOX.items():
            if tool in decided.tools:
                strategy = next(s for s in strategies if s.applies(run))
                run.take(strategy.find(run, decided))
                tools.append(tool)
        tables = _tables(run, decided, run.index) if run.index is not None else []
        if tables:
            run.counts["aggregates"] = [t.title for t in tables]
            if "code" not in tools:
                tools.append("code")
        return _evidence(run, routed or route, tools, tables)

    def _walks(self, run: Run, plan: Plan) -> bool:
        """Whether the graph will be walked, as far as is known before the seeds."""
        if plan.tools is not None:
            return "graph" in plan.tools
        return (
            self.llm is None
            and "graph" in router.rule_route(run.ask.question, has_trajectory=True).tools
        )

    def _decide(self, run: Run, plan: Plan) -> tuple[router.Route, str | None]:
        """The route after the seeds, and how the retrieval names it (None: by its mode)."""
        ask = run.ask
        has_trajectory = ask.trajectory is not None
        if plan.tools is not None:
            rules = router.rule_route(ask.question, has_trajectory=has_trajectory)
            directions = rules.directions or ("upstream",)
            return router.Route(plan.tools, directions, rules.identifiers, rules.reason), None
        if self.llm is None:
            decided = router.rule_route(ask.question, has_trajectory=has_trajectory)
        else:
            from trajgraph.queries.retrieval.llm_route import ask_router

            decided = ask_router(self.llm, ask.question, run.hydrate(), has_trajectory)
        given = ask.code is not None or ask.cypher_query is not None
        if given and "code" not in decided.tools:
            decided = replace(decided, tools=(*decided.tools, "code"))
        suffix = "" if run.vectors else " (no embeddings in this graph)"
        return decided, f"auto: {decided.reason}{suffix}"

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
        fresh = time.monotonic() - self._fulltext_checked <= SPACE_RECHECK_S
        if self._fulltext_scoped is not None and fresh:
            return self._fulltext_scoped
        query = neo4j.Query(cast("LiteralString", cypher.FULLTEXT_SCOPED))
        names = list(scoped.TEXT_FIELDS)
        with graph_errors("checking the full-text indexes"):
            rows = session.run(query, names=names, field=scoped.SCOPE_FIELD).data()
        ok = len(rows) == len(names) and all(r["scoped"] for r in rows)
        self._fulltext_scoped, self._fulltext_checked = ok, time.monotonic()
        return ok


def _check_exists(run: Run) -> None:
    """An unknown trajectory is an error, not an empty answer; checked only when the seeds
    found nothing, to save a round trip on every good question."""
    if (
        run.tuid
        and run.index is None
        and not run.found
        and not run.exists
        and not run.read(cypher.TRAJECTORY_EXISTS, tuid=run.tuid)
    ):
        raise run.not_found()


def _tables(run: Run, decided: router.Route, index: TurnIndex) -> list[aggregates.Table]:
    """The offline aggregate tables the route asks for (the rules decide them when an LLM
    routed): counts, occurrences, and changes read from SUPERSEDES chains."""
    question, named = run.ask.question, run.named
    phrases = [*aggregates.quoted_phrases(question), *decided.identifiers]

    def graph_changes(a: int, b: int) -> aggregates.Table:
        rows = run.read(
            cypher.STATE_CHANGES_BETWEEN, tuid=run.tuid, lo=a, hi=b, limit=MAX_CHANGE_ROWS
        )
        return aggregates.state_changes(rows, a, b, question)

    wanted = decided.aggregates or aggregates.intents(question, named, phrases)
    tables = aggregates.tables_for(
        index, question, named, phrases, wanted, graph_changes=graph_changes
    )
    return tables + evidence_outline.outlines(index, question, named)


def _evidence(run: Run, route: str, tools: list[str], tables: list[aggregates.Table]) -> Retrieval:
    """What was found, with its text, fitted to the budget: for a trajectory, the lines of
    its turns that answer (passages.py), else the items by priority."""
    ask = run.ask
    items = run.hydrate()
    if not run.tuid:
        context, used = render_context(items, ask.budget_tokens)
        return Retrieval(ask.question, ask.mode, route, tools, items, context, used, run.counts)
    # A single mode: the turns it found, and its states' lines.
    index = run.index if run.index is not None else TurnIndex.build(run.found_turns(items))
    built = build_context(
        ask.question,
        items,
        index,
        run.named,
        tables,
        ask.budget_tokens,
        states=run.states,
        similar=run.similar,
        values=run.history_asked,
    )
    items = with_passages(items, built.passages, ask.trajectory or "", ask.tenant)
    return Retrieval(
        ask.question, ask.mode, route, tools, items, built.text, built.tokens, run.counts
    )


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
