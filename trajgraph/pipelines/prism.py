"""Beam's Prism runner: the binary trajgraph runs it with, and where that binary comes from.

Prism is Beam's portable runner, written in Go: it executes the same portable pipeline (the
Fn API job: pipeline proto, pickled DoFns, SDK workers) that Flink's and Spark's job servers
and Dataflow Runner v2 execute, so ``--runner PrismRunner`` proves the pipeline off the
DirectRunner without a cluster. Left to itself, Beam's PrismRunner downloads a release binary
from GitHub; trajgraph always hands it one instead (``pipelines/runners.py`` adds
``--prism_location``), found in this order:

1. ``--prism_location`` on the command line (Beam's own flag; a path or URL);
2. ``TRAJGRAPH_PRISM_LOCATION``;
3. the build cache, ``~/.cache/trajgraph/prism/<beam version>/prism``, which
   ``deploy/dev.sh test`` (or ``deploy/dev.sh prism``) fills once with
   ``go install github.com/apache/beam/sdks/v2/go/cmd/prism@v<beam version>`` from the Go
   module proxy. When that build cannot run (no Go, no proxy), dev.sh writes the reason to
   ``UNAVAILABLE`` beside it, so the tests that need Prism skip naming what is missing.

Without any of them ``--runner PrismRunner`` stops with a RunnerError (exit 2) that names the
build command. ``python -m trajgraph.pipelines.prism where|status|build-command`` answers
dev.sh and people.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from apache_beam.version import __version__ as BEAM_VERSION

from trajgraph.core import settings as settings_mod
from trajgraph.core.errors import RunnerError

PACKAGE = "github.com/apache/beam/sdks/v2/go/cmd/prism"
UNAVAILABLE = "UNAVAILABLE"  # beside the binary: why dev.sh could not build it


def cache_dir(settings: settings_mod.Settings) -> Path:
    """``<cache>/prism/<beam version>``: beside the Neo4j and Beam jar caches."""
    return Path(settings.local.home).expanduser().absolute().parent / "prism" / BEAM_VERSION


def cache_path(settings: settings_mod.Settings) -> Path:
    return cache_dir(settings) / "prism"


def build_command(settings: settings_mod.Settings) -> str:
    """The shell command that builds the binary into the cache (what dev.sh runs)."""
    return f"GOFLAGS=-mod=mod GOBIN={cache_dir(settings)} go install {PACKAGE}@v{BEAM_VERSION}"


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def unavailable(settings: settings_mod.Settings) -> str:
    """Why the cache holds no binary: the reason dev.sh recorded, else what is missing."""
    recorded = cache_dir(settings) / UNAVAILABLE
    if recorded.is_file():
        text = " ".join(recorded.read_text("utf-8", "replace").split())
        if text:
            return text
    if shutil.which("go") is None:
        return "Go is not installed (no `go` on PATH), so it was never built"
    return f"it was not built yet (nothing at {cache_path(settings)})"


def find(settings: settings_mod.Settings) -> Path:
    """The Prism binary of TRAJGRAPH_PRISM_LOCATION or the build cache; RunnerError when
    there is none, naming the build command."""
    if settings.prism_location is not None:
        given = settings.prism_location
        if not _executable(given):
            raise RunnerError(f"TRAJGRAPH_PRISM_LOCATION {given} is not an executable file")
        return given
    built = cache_path(settings)
    if _executable(built):
        return built
    raise RunnerError(
        f"no Prism binary for Beam {BEAM_VERSION}: {unavailable(settings)}.\n"
        "Build it once (a few minutes; Go and the Go module proxy are needed):\n"
        f"  bash deploy/dev.sh prism\n  or: {build_command(settings)}\n"
        "or set TRAJGRAPH_PRISM_LOCATION=PATH, or pass --prism_location=PATH "
        "(see docs/scale-out.md)."
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    settings = settings_mod.load()
    if args == ["where"]:
        print(cache_path(settings))
        return 0
    if args == ["build-command"]:
        print(build_command(settings))
        return 0
    if args == ["status"]:
        try:
            print(find(settings))
        except RunnerError as e:
            print(e, file=sys.stderr)
            return 1
        return 0
    print("usage: python -m trajgraph.pipelines.prism where|status|build-command", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
