"""The hook client's old name, kept while trajgraph/cli.py imports it: the client is
hooks/command.py (the same for Claude Code and Codex)."""

from __future__ import annotations

from trajgraph.hooks.command import build_parser, main

__all__ = ["build_parser", "main"]
