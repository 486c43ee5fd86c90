"""One exception root for trajgraph; vendor errors are wrapped with ``raise ... from e``."""

from __future__ import annotations


class TrajgraphError(Exception):
    """Root of every error trajgraph raises on purpose."""

    def __repr__(self) -> str:
        # Beam's dead-letter output carries repr(exc): keep it a readable one-line message.
        return f"{type(self).__name__}: {self}"


class ConfigError(TrajgraphError):
    """Settings or command-line values that cannot work."""


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


class GraphError(TrajgraphError):
    """Neo4j is unreachable, misconfigured, or rejected a write."""


class ServerError(TrajgraphError):
    """The local Neo4j server could not be fetched, started or stopped."""


class RunnerError(ConfigError):
    """A Beam runner could not be set up (its job-server jar, or the Java to run it): the
    user has to supply what is missing, so it is a configuration error (exit 2)."""


class ExtractionError(TrajgraphError):
    """An extractor could not produce findings for a window (the caller falls back)."""


class LLMError(ExtractionError):
    """The LLM server failed a request for good (retries exhausted, or a non-retryable reply).

    ``status`` is the HTTP status when there was one; ``fatal`` marks replies that will fail
    the same way for every request (wrong key, unknown model), so a run should stop asking.
    """

    def __init__(self, message: str, *, status: int | None = None, fatal: bool = False) -> None:
        self.status = status
        self.fatal = fatal
        super().__init__(message)
