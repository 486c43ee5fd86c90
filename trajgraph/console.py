"""The ``trajgraph`` command (the console script and ``python -m trajgraph``).

A hook call of the user's agent, ``trajgraph hook claude-code`` or ``codex``, runs once per
tool call and must answer in milliseconds: it goes straight to the hook client, which imports
only what it needs to talk to the warm hook server (trajgraph/hooks/command.py). Every
other command loads the CLI (trajgraph/cli.py: its parser, settings, logging and errors).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

HOOK_AGENTS = ("claude-code", "codex")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    hook_call = len(args) >= 2 and args[0] == "hook" and args[1] in HOOK_AGENTS
    if hook_call and not {"-h", "--help"} & set(args[2:]):  # --help: the CLI prints it
        from trajgraph.core.printable import printable_stdout
        from trajgraph.hooks.command import main as hook

        with printable_stdout():  # as the CLI prints: the answer quotes the agent's logs
            return hook(args[2:], agent=args[1])
    from trajgraph.cli import main as cli

    return cli(args)
