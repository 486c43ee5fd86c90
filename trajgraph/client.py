"""The read side as one object: ``TrajGraph`` answers questions about trajectories in the graph.

It owns what every front end used to wire by hand: the Neo4j driver (configured to fail fast
when Neo4j is lost), the database, the default tenant, the embedder for questions, the
optional LLM (router and reminders) and the query timeouts. The CLI, the HTTP API and the MCP
server all use it; so can a notebook::

    with TrajGraph.from_settings() as tg:
        print(tg.why("django__django-16255", turn=5))

One instance is safe to share between threads (the API's thread pool): it holds one driver,
and every call runs in its own session. The tenant is a per-call argument; it defaults to the
client's. Errors follow the contract in trajgraph/core/errors.py: NotFoundError, GraphError (Neo4j
unreachable or failing), LLMError, ConfigError (bad arguments).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

from trajgraph.core.env import DEFAULT_TENANT
from trajgraph.core.errors import ConfigError, InputError, NotFoundError
from trajgraph.graph.connection import READ_TIMEOUTS, DriverTimeouts, open_driver, ping
from trajgraph.queries.lessons import DEFAULT_BUDGET as LESSONS_BUDGET
from trajgraph.queries.memory.brief import DEFAULT_BUDGET as BRIEF_BUDGET
from trajgraph.queries.retrieval.base import DEFAULT_BUDGET as RETRIEVAL_BUDGET

if TYPE_CHECKING:
    import neo4j

    from trajgraph.core.settings import Settings
    from trajgraph.graph.embedders import Embedder
    from trajgraph.graph.governance import Deleted
    from trajgraph.queries.lessons import Lessons
    from trajgraph.queries.memory import Brief, Reminder
    from trajgraph.queries.memory.project import ProjectBrief
    from trajgraph.queries.retrieval import Retrieval, Retriever


@dataclass(frozen=True)
class Timeouts:
    """Seconds the read side waits before an operation fails."""

    query_s: float = 10.0  # one retrieval or memory query (a server-side transaction timeout)
    library_s: float = 30.0  # one analyst query (why-chains and listings are library queries)
    driver: DriverTimeouts = field(default_factory=lambda: READ_TIMEOUTS)


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _text_arguments(method: _Method) -> _Method:
    """Refuse, as the caller's input (InputError), a text argument that is not valid UTF-8:
    a lone surrogate, as Python decodes invalid UTF-8 on a command line (``--cypher $'\\xff'``).
    Left to the driver, it was a bare UnicodeEncodeError (CLI exit 1, "a rerun may help")."""
    signature = inspect.signature(method)

    @functools.wraps(method)
    def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
        for name, value in signature.bind(self, *args, **kwargs).arguments.items():
            if name != "self" and not _encodable(value):
                raise InputError(
                    f"{name} is not valid UTF-8 text (it holds a lone surrogate: invalid "
                    "UTF-8 on a command line, or a \\udXXX escape)"
                )
        return method(self, *args, **kwargs)

    return cast(_Method, checked)


def _encodable(value: Any) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, dict):
        return all(_encodable(k) and _encodable(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_encodable(v) for v in value)
    return True


class TrajGraph:
    """Retrieval, why-chains, briefs, reminders, lessons from other runs, analyst queries,
    listings, digests and deletes over one Neo4j database. Use as a context manager, or call
    ``close()``."""

    def __init__(
        self,
        driver: neo4j.Driver,
        *,
        database: str = "neo4j",
        tenant: str = DEFAULT_TENANT,
        embedder: Embedder | None = None,
        llm: Any = None,  # extractors.llm_client.ChatClient; None: the offline rules answer
        timeouts: Timeouts | None = None,
        owns_driver: bool = False,
    ) -> None:
        """Wrap an open ``driver``. ``owns_driver``: ``close()`` closes it too (it does when
        ``from_settings`` opened it). The embedder defaults to the default embedder of the
        settings (the static one), loaded on the first question that needs it."""
        from trajgraph.core.settings import EmbedderSettings
        from trajgraph.graph.embedders import get_embedder
        from trajgraph.queries.retrieval import Retriever

        self.driver = driver
        self.database = database
        self.tenant = tenant
        self.timeouts = timeouts or Timeouts()
        self._owns_driver = owns_driver
        self._closed = False
        self._retriever: Retriever = Retriever(
            driver,
            database=database,
            embedder=embedder if embedder is not None else get_embedder(EmbedderSettings()),
            llm=llm,
            query_timeout_s=self.timeouts.query_s,
        )

    @classmethod
    def from_settings(
        cls,
        settings: Settings | None = None,
        *,
        verify: bool = True,
        timeouts: Timeouts | None = None,
    ) -> TrajGraph:
        """The client the configuration describes (None: read it from the environment):
        its Neo4j, database, tenant, embedder and LLM. ``verify``: fail now (GraphError) when
        Neo4j does not answer; without it, the first call does."""
        from trajgraph.core import settings as settings_mod
        from trajgraph.extractors.llm_client import optional_chat_client
        from trajgraph.graph.embedders import get_embedder

        settings = settings if settings is not None else settings_mod.load()
        timeouts = timeouts or Timeouts()
        driver = open_driver(settings.neo4j, verify=verify, timeouts=timeouts.driver)
        try:
            embedder = get_embedder(settings.embedder)
            llm = optional_chat_client(settings.llm)
        except BaseException:
            driver.close()
            raise
        return cls(
            driver,
            database=settings.neo4j.database,
            tenant=settings.tenant,
            embedder=embedder,
            llm=llm,
            timeouts=timeouts,
            owns_driver=True,
        )

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> TrajGraph:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the embedder, the LLM client and (when owned) the driver; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._retriever.close()
        finally:
            if self._owns_driver:
                self.driver.close()

    def ping(self) -> None:
        """Return when Neo4j answers; GraphError otherwise."""
        ping(self.driver)

    @property
    def llm(self) -> Any:
        """The LLM client (router, reminders), or None."""
        return self._retriever.llm

    @property
    def embedder(self) -> Embedder:
        return self._retriever.embedder

    def _tenant(self, tenant: str | None) -> str:
        return self.tenant if tenant is None else tenant

    # -- questions ----------------------------------------------------------------------------

    @_text_arguments
    def retrieve(
        self,
        question: str,
        *,
        trajectory: str | None = None,
        mode: str = "auto",
        budget: int = RETRIEVAL_BUDGET,
        k: int = 8,
        depth: int = 3,
        code: str | None = None,
        cypher: str | None = None,
        tenant: str | None = None,
    ) -> Retrieval:
        """Evidence for ``question`` within ``budget`` tokens (docs/retrieval.md). ``code``:
        Python over the trajectory's turns (sandboxed); ``cypher``: read-only Cypher with
        $tenant and $trajectory (never offered to remote callers: it can read any tenant)."""
        return self._retriever.retrieve(
            question,
            tenant=self._tenant(tenant),
            trajectory=trajectory,
            budget_tokens=budget,
            mode=mode,
            k=k,
            depth=depth,
            code=code,
            cypher_query=cypher,
        )

    @_text_arguments
    def why(
        self,
        trajectory: str,
        *,
        turn: int | None = None,
        state: str | None = None,
        depth: int = 3,
        tenant: str | None = None,
    ) -> list[dict[str, Any]]:
        """The upstream causal chain of a turn (or a state key), oldest first."""
        from trajgraph.queries.why import why_chain

        return why_chain(
            self.driver,
            database=self.database,
            tenant=self._tenant(tenant),
            trajectory=trajectory,
            turn=turn,
            state=state,
            depth=depth,
            timeout_s=self.timeouts.library_s,
        )

    @_text_arguments
    def brief(
        self,
        trajectory: str,
        *,
        budget: int = BRIEF_BUDGET,
        before_turn: int | None = None,
        tenant: str | None = None,
    ) -> Brief:
        """A digest of the trajectory within ``budget`` tokens, as of ``before_turn``."""
        from trajgraph.queries.memory import build_brief

        return build_brief(
            self.driver,
            database=self.database,
            tenant=self._tenant(tenant),
            trajectory=trajectory,
            budget=budget,
            before_turn=before_turn,
            timeout_s=self.timeouts.query_s,
        )

    def project_brief(
        self,
        project: str,
        *,
        budget: int | None = None,
        exclude: Sequence[str] = (),
        prompt: str | None = None,
        tenant: str | None = None,
    ) -> ProjectBrief:
        """What other sessions of the project at ``project`` (its git root, else the folder)
        learned, within ``budget`` tokens; empty text when nothing is relevant."""
        from trajgraph.queries.memory.project import DEFAULT_BUDGET as PROJECT_BUDGET
        from trajgraph.queries.memory.project import project_brief

        return project_brief(
            self.driver,
            database=self.database,
            tenant=self._tenant(tenant),
            project=project,
            budget=budget or PROJECT_BUDGET,
            exclude=exclude,
            prompt=prompt,
            timeout_s=self.timeouts.query_s,
        )

    @_text_arguments
    def remind(
        self,
        trajectory: str,
        next_action: str,
        *,
        before_turn: int | None = None,
        tenant: str | None = None,
    ) -> Reminder:
        """A reminder grounded in the graph before ``next_action``, or silence
        (``reminder`` None)."""
        from trajgraph.queries.memory import remind

        return remind(
            self.driver,
            database=self.database,
            tenant=self._tenant(tenant),
            trajectory=trajectory,
            next_action=next_action,
            before_turn=before_turn,
            llm=self.llm,
            timeout_s=self.timeouts.query_s,
        )

    @_text_arguments
    def lessons(
        self,
        error: str | None = None,
        *,
        trajectory: str | None = None,
        turn: int | None = None,
        budget: int = LESSONS_BUDGET,
        tenant: str | None = None,
    ) -> Lessons:
        """Other runs of the tenant that hit the same failure (the signature of ``error``, or
        of the error at ``turn`` of ``trajectory``): what got past it, what did not help,
        within ``budget`` tokens. ``trajectory`` is always left out of the runs."""
        from trajgraph.queries.lessons import lessons

        return lessons(
            self.driver,
            database=self.database,
            tenant=self._tenant(tenant),
            error=error,
            trajectory=trajectory,
            turn=turn,
            budget=budget,
            timeout_s=self.timeouts.query_s,
        )

    @_text_arguments
    def run_query(
        self, name: str, params: dict[str, Any] | None = None, *, tenant: str | None = None
    ) -> list[dict[str, Any]]:
        """Rows of the analyst query ``name`` (queries/*.cypher; ``names()`` lists them).
        ``$tenant`` is ``tenant``, else the one in ``params``, else the client's."""
        from trajgraph.queries import library

        args = dict(params or {})
        if tenant is not None:
            args["tenant"] = tenant
        args.setdefault("tenant", self.tenant)
        return library.run(
            self.driver, name, args, database=self.database, timeout_s=self.timeouts.library_s
        )

    @staticmethod
    def query_names() -> list[str]:
        """The analyst queries ``run_query`` knows."""
        from trajgraph.queries import library

        return library.names()

    def trajectories(self, *, tenant: str | None = None) -> list[dict[str, Any]]:
        """The tenant's trajectories: id, task, turns, source, ..."""
        return self.run_query("trajectories", {"trajectory": None}, tenant=tenant)

    @_text_arguments
    def trajectory(self, trajectory: str, *, tenant: str | None = None) -> dict[str, Any]:
        """One trajectory's row of ``trajectories()``; NotFoundError when there is none."""
        rows = self.run_query("trajectories", {"trajectory": trajectory}, tenant=tenant)
        if not rows:
            raise NotFoundError("trajectory", trajectory, tenant=self._tenant(tenant))
        return rows[0]

    @_text_arguments
    def digest(
        self, trajectory: str | None = None, *, tenant: str | None = None, all_tenants: bool = False
    ) -> str:
        """A content hash of one trajectory, of the tenant, or (``all_tenants``) of the
        whole database: equal hashes, equal graphs."""
        from trajgraph.graph import digest

        if trajectory is not None:
            return digest.trajectory_digest(
                self.driver, self.database, self._tenant(tenant), trajectory
            )
        scope = None if all_tenants else self._tenant(tenant)
        return digest.graph_digest(self.driver, self.database, scope)

    # -- deletes ------------------------------------------------------------------------------

    @_text_arguments
    def delete(
        self,
        *,
        trajectory: str | None = None,
        source: str | None = None,
        everything: bool = False,
        tenant: str | None = None,
    ) -> Deleted:
        """Delete exactly one of: a trajectory, the trajectories read from ``source``, or
        (``everything``) all of the tenant's nodes. Nothing of another tenant is touched."""
        from trajgraph.graph import governance

        if sum((trajectory is not None, source is not None, everything)) != 1:
            raise ConfigError("delete needs exactly one of trajectory, source or everything")
        t = self._tenant(tenant)
        if trajectory is not None:
            return governance.delete_trajectory(self.driver, self.database, t, trajectory)
        if source is not None:
            return governance.delete_source(self.driver, self.database, t, source)
        return governance.delete_tenant(self.driver, self.database, t)
