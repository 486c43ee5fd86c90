"""trajgraph: agent trajectories as a causality graph in Neo4j.

The public surface, for code that uses trajgraph as a library::

    import trajgraph

    with trajgraph.TrajGraph.from_settings(trajgraph.load_settings()) as tg:
        print(tg.why("demo-fix-failing-test", turn=5))

``TrajGraph`` (trajgraph/client.py) is the one entry point every front end uses; the
settings are read from the environment by ``load_settings``; every error trajgraph raises on
purpose is a ``TrajgraphError`` (trajgraph/core/errors.py says what each means to a caller).
Everything else is internal and may change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the names are, for type checkers; loaded on first use below
    from trajgraph.client import Timeouts, TrajGraph
    from trajgraph.core.errors import (
        ApiError,
        BusyError,
        ConfigError,
        EmbedderMismatchError,
        ExtractionError,
        GraphAuthError,
        GraphError,
        InputError,
        LLMError,
        LLMReplyError,
        NotFoundError,
        RunnerError,
        SchemaValidationError,
        ServerError,
        TrajgraphError,
    )
    from trajgraph.core.settings import Settings
    from trajgraph.core.settings import load as load_settings

__all__ = [
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
    "NotFoundError",
    "RunnerError",
    "SchemaValidationError",
    "ServerError",
    "Settings",
    "Timeouts",
    "TrajGraph",
    "TrajgraphError",
    "__version__",
    "load_settings",
]

# Where each public name lives: ``import trajgraph`` loads none of them, since the hook client
# (one process per tool call of the user's agent) imports the package and answers in
# milliseconds; the client alone pulls in the Neo4j driver and numpy.
_ERRORS = [n for n in __all__ if n.endswith("Error")]
_HOMES: dict[str, tuple[str, str]] = {
    **{name: ("trajgraph.core.errors", name) for name in _ERRORS},
    "TrajGraph": ("trajgraph.client", "TrajGraph"),
    "Timeouts": ("trajgraph.client", "Timeouts"),
    "Settings": ("trajgraph.core.settings", "Settings"),
    "load_settings": ("trajgraph.core.settings", "load"),
}


def __getattr__(name: str) -> Any:
    # `trajgraph.__version__` is the installed distribution's: pyproject.toml is its one
    # source. Read only when asked: importlib.metadata costs about 0.1 s.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("trajgraph")
        except PackageNotFoundError:  # a source tree on sys.path that was never installed
            return "0+unknown"
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'trajgraph' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(home[0]), home[1])
    globals()[name] = value  # the next lookup does not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
