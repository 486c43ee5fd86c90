"""`trajgraph --help` lists every command the CLI accepts (users find commands there)."""

from __future__ import annotations

import argparse
import re

from trajgraph import cli


def test_usage_lists_every_subcommand() -> None:
    subparsers = next(
        a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction)
    )
    listed = set(re.findall(r"^  ([a-z0-9-]+)\b", cli.USAGE, flags=re.MULTILINE))
    missing = sorted(set(subparsers.choices) - listed)
    assert not missing, f"trajgraph --help does not list {missing}"
    # `hook` is dispatched before argparse (trajgraph.cli._hook): it must be listed too.
    assert "hook" in listed
