"""trajgraph: agent trajectories as a causality graph in Neo4j."""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # `trajgraph.__version__` is the installed distribution's: pyproject.toml is its one
    # source. Read only when asked: importlib.metadata costs about 0.1 s, and a hook answers
    # in milliseconds.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("trajgraph")
        except PackageNotFoundError:  # a source tree on sys.path that was never installed
            return "0+unknown"
    raise AttributeError(f"module 'trajgraph' has no attribute {name!r}")
