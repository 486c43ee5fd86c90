"""The retrieval budget and the tenant a caller gets when it names none are declared once
(trajgraph.queries.retrieval.base.DEFAULT_BUDGET, trajgraph.core.env.DEFAULT_TENANT): the
CLI, the MCP server and the client all read them, so changing one changes every door."""

from __future__ import annotations

import argparse
import inspect

from trajgraph import cli
from trajgraph.client import TrajGraph
from trajgraph.core.env import DEFAULT_TENANT
from trajgraph.core.settings import Settings
from trajgraph.mcp_server import build_server
from trajgraph.queries.retrieval.base import DEFAULT_BUDGET


def _search_parser() -> argparse.ArgumentParser:
    subparsers = next(
        a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction)
    )
    parser: argparse.ArgumentParser = subparsers.choices["search"]
    return parser


def test_every_door_takes_the_one_retrieval_budget_default() -> None:
    assert _search_parser().get_default("budget") == DEFAULT_BUDGET
    server = build_server(Settings(), None, stdio_tenant="t")  # type: ignore[arg-type]
    tool = server._tool_manager.get_tool("retrieve")
    assert tool is not None
    assert tool.parameters["properties"]["budget"]["default"] == DEFAULT_BUDGET
    assert inspect.signature(TrajGraph.retrieve).parameters["budget"].default == DEFAULT_BUDGET


def test_the_client_defaults_to_the_one_default_tenant() -> None:
    assert inspect.signature(TrajGraph.__init__).parameters["tenant"].default == DEFAULT_TENANT
