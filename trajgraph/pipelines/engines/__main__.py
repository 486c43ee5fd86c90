"""``python -m trajgraph.pipelines.engines fetch [flink|spark]``: the clusters' jars and
Beam's boot program, fetched and built now (deploy/dev.sh clusters)."""

from __future__ import annotations

import sys

from trajgraph.core import settings as settings_mod
from trajgraph.core.errors import TrajgraphError
from trajgraph.pipelines.engines.cli import fetch
from trajgraph.pipelines.engines.layout import ENGINES


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "fetch" or any(a not in ENGINES for a in argv[1:]):
        print(
            f"usage: python -m trajgraph.pipelines.engines fetch [{'|'.join(ENGINES)}]...",
            file=sys.stderr,
        )
        return 2
    try:
        fetch(settings_mod.load(), tuple(argv[1:]) or ENGINES)
    except TrajgraphError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
