"""The error contract: one exception root, a few specific subclasses, and one table that says
what each means to a caller (HTTP status, CLI exit code, machine-readable code).

Vendor errors become ours at one point per boundary, with ``raise ... from e``: Neo4j's in
``trajgraph.graph.connection.graph_errors``, the OpenAI client's in
``trajgraph.extractors.llm_client.ChatClient.call``. Front ends never look at message text to
tell errors apart: the CLI, the HTTP API and the MCP server all read ``CONTRACT``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from trajgraph.core.redaction import redact

__all__ = [
    "CONTRACT",
    "ApiError",
    "BusyError",
    "ConfigError",
    "EmbedderMismatchError",
    "ExtractionError",
    "GraphAuthError",
    "GraphError",
    "InputError",
    "LLMError",
    "LLMReplyError",
    "Meaning",
    "NotFoundError",
    "RunnerError",
    "SchemaValidationError",
    "ServerError",
    "TrajgraphError",
    "exit_code",
    "meaning",
    "one_line",
    "public_message",
    "redact",  # re-exported: callers that redact text they print import it from here
]


class TrajgraphError(Exception):
    """Root of every error trajgraph raises on purpose."""

    def __str__(self) -> str:
        # UTF-8 always: Beam's dead-letter output carries the message (in repr and in the
        # traceback's text), and its coder failed on a lone surrogate (a file name that is
        # not UTF-8, a record's text quoted), which ended the whole run.
        return without_lone_surrogates(super().__str__())

    def __repr__(self) -> str:
        # Beam's dead-letter output carries repr(exc): keep it a readable one-line message.
        return f"{type(self).__name__}: {self}"


def without_lone_surrogates(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (the text is UTF-8 encodable)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


class ConfigError(TrajgraphError):
    """Settings, flags or request values that cannot work."""


class InputError(TrajgraphError):
    """A log file or record that cannot be read, parsed or normalized.

    Carries the file and record locator so dead-letter rows and messages name them.
    """

    def __init__(self, reason: str, *, source: str = "", locator: str = "") -> None:
        self.reason = reason
        self.source = source
        self.locator = locator
        where = f"{source}" + (f" [{locator}]" if locator else "")
        super().__init__(f"{where}: {reason}" if where else reason)


class SchemaValidationError(InputError):
    """A record that parsed but does not satisfy its JSON Schema contract."""


class NotFoundError(TrajgraphError):
    """What the caller named is not there (in its tenant): a trajectory, a source file's
    trajectories, an analyst query. ``kind`` and ``name`` say which; ``tenant`` where."""

    def __init__(self, kind: str, name: str, *, tenant: str | None = None, hint: str = "") -> None:
        self.kind = kind
        self.name = name
        self.tenant = tenant
        self.hint = hint
        message = f"no {kind} {name!r}" + (f" in tenant {tenant!r}" if tenant is not None else "")
        super().__init__(message + (f"; {hint}" if hint else ""))

    def __reduce__(self) -> tuple[Any, ...]:  # pickles (threads and workers hand errors on)
        return (_not_found, (self.kind, self.name, self.tenant, self.hint))


def _not_found(kind: str, name: str, tenant: str | None, hint: str) -> NotFoundError:
    return NotFoundError(kind, name, tenant=tenant, hint=hint)


class GraphError(TrajgraphError):
    """Neo4j is unreachable, was lost, or failed or rejected a statement."""


class GraphAuthError(GraphError):
    """Neo4j rejected the credentials. Its operator must fix NEO4J_USER or NEO4J_PASSWORD:
    running the same command again cannot help (exit 2), and a caller of the HTTP API or MCP
    server is told the graph is unavailable, as for any other graph failure."""


class ServerError(TrajgraphError):
    """The local Neo4j server could not be fetched, started or stopped."""


class BusyError(TrajgraphError):
    """A bounded resource (the code sandbox's processes) stayed at capacity for as long as a
    request may wait: nothing is wrong with the request; retry shortly."""


class RunnerError(ConfigError):
    """A Beam runner could not be set up (its job-server jar, or the Java to run it): the
    user has to supply what is missing, so it is a configuration error (exit 2)."""


class EmbedderMismatchError(ConfigError):
    """The graph's vectors were made by another embedder than the one configured here. The
    operator must act (configure the graph's embedder, or `trajgraph reembed`): a caller of
    the HTTP API or MCP server can change nothing, so they are told the service is
    unavailable, not that their request was bad."""


class ExtractionError(TrajgraphError):
    """An extractor could not produce findings for a window (the caller falls back)."""


class LLMError(TrajgraphError):
    """An LLM or embeddings server failed a request for good (retries exhausted, or a
    non-retryable reply). Extraction, embeddings, the router and reminders all raise it.

    ``status`` is the HTTP status when there was one; ``fatal`` marks replies that will fail
    the same way for every request (wrong key, unknown model), so a run should stop asking.
    """

    def __init__(self, message: str, *, status: int | None = None, fatal: bool = False) -> None:
        self.status = status
        self.fatal = fatal
        super().__init__(message)


class LLMReplyError(LLMError):
    """The server answered, but the reply cannot be used: not JSON, not valid against its
    schema, a refusal, or claims the evidence does not support. The message says which."""


class ApiError(TrajgraphError):
    """An answer of the HTTP API that is not one of the errors above (a missing key, a body
    that names neither field, a request over its time): it carries its own status and code,
    and its message is the caller's to read."""

    def __init__(self, status: int, code: str, message: str) -> None:
        self.status, self.code, self.message = status, code, message
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:  # pickles (args holds only the message)
        return (type(self), (self.status, self.code, self.message))


# -- what each error means to a caller ------------------------------------------------------------

EXIT_OK = 0
EXIT_FAILED = 1  # transient or internal (Neo4j or the LLM unavailable, a crash): rerun
EXIT_CONFIG = 2  # the caller must change something: configuration, input, a name not found
EXIT_PARTIAL = 3  # (ingest, stream) finished, but records were dead-lettered or windows degraded


@dataclass(frozen=True)
class Meaning:
    """How front ends report one kind of error."""

    kind: type[BaseException]
    code: str  # machine-readable: HTTP error bodies, MCP tool errors
    http_status: int
    exit_code: int
    # What a remote caller is told instead of the message (None: the message itself), for
    # errors whose text describes our infrastructure rather than the caller's request.
    public_message: str | None = None
    # What servers log: nothing for a caller's mistake, one line for an outage, the
    # traceback for what should not happen.
    log: Literal["no", "line", "traceback"] = "no"


INTERNAL = "internal error (logged on the server)"
# Most specific first; the first row whose type matches decides.
CONTRACT: tuple[Meaning, ...] = (
    Meaning(NotFoundError, "not_found", 404, EXIT_CONFIG),
    Meaning(
        GraphAuthError,
        "graph_unavailable",
        503,
        EXIT_CONFIG,
        "the graph database failed or is unreachable",
        log="line",
    ),
    Meaning(
        GraphError,
        "graph_unavailable",
        503,
        EXIT_FAILED,
        "the graph database failed or is unreachable",
        log="line",
    ),
    Meaning(LLMError, "llm_unavailable", 502, EXIT_FAILED, "the LLM server failed", log="line"),
    Meaning(BusyError, "busy", 503, EXIT_FAILED, log="line"),
    Meaning(
        EmbedderMismatchError,
        "embedder_mismatch",
        503,
        EXIT_CONFIG,
        "this server's embedder does not match the graph's vectors (its operator must "
        "configure the graph's embedder or run `trajgraph reembed`)",
        log="line",
    ),
    Meaning(ConfigError, "bad_request", 400, EXIT_CONFIG),
    Meaning(InputError, "bad_request", 400, EXIT_CONFIG),
    Meaning(ServerError, "server_error", 500, EXIT_FAILED, INTERNAL, log="traceback"),
    Meaning(TrajgraphError, "internal", 500, EXIT_FAILED, INTERNAL, log="traceback"),
)
UNEXPECTED = Meaning(Exception, "internal", 500, EXIT_FAILED, INTERNAL, log="traceback")


def meaning(e: BaseException) -> Meaning:
    """The row of CONTRACT for ``e`` (UNEXPECTED for anything not ours); an ApiError's own."""
    if isinstance(e, ApiError):
        return Meaning(ApiError, e.code, e.status, EXIT_FAILED if e.status >= 500 else EXIT_CONFIG)
    for row in CONTRACT:
        if isinstance(e, row.kind):
            return row
    return UNEXPECTED


def exit_code(e: BaseException) -> int:
    return meaning(e).exit_code


def one_line(e: BaseException) -> str:
    """The error's message on one line, credentials redacted and control characters
    escaped (for people: terminals, logs)."""
    from trajgraph.core.text import escape_unprintable

    text = str(e).strip() or type(e).__name__
    if not isinstance(e, TrajgraphError):
        text = f"{type(e).__name__}: {text}"
    return escape_unprintable(redact(" ".join(text.split())))


def public_message(e: BaseException) -> str:
    """What a remote caller (HTTP, MCP) is told about ``e``: never infrastructure details."""
    m = meaning(e)
    return m.public_message if m.public_message is not None else one_line(e)
