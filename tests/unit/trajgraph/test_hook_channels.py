"""Which channel a hook answer takes per agent, event and version, deny-once, and the
project-memory events of the thin client (no Neo4j needed)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trajgraph.hooks import command, server
from trajgraph.hooks.agents import AGENTS, CLAUDE_CODE, CODEX, agent_of, codex_action, version_tuple
from trajgraph.hooks.engine import Outcome
from trajgraph.hooks.replies import REPLIES, DenyOnce, hook_output
from trajgraph.queries.memory.findings import Reminder


def test_auto_channel_per_agent_and_version() -> None:
    # Claude Code: additionalContext of PreToolUse does not reach the model (#19432, #55889)
    assert CLAUDE_CODE.channel("2.1.76", "auto") == "deny-once"
    # Codex: PreToolUse additionalContext from 0.129.0 (openai/codex #20692), rejected before
    assert CODEX.channel("0.128.0-alpha.1", "auto") == "deny-once"
    assert CODEX.channel("0.129.0", "auto") == "context"
    assert CODEX.channel("0.135.0", "auto") == "context"
    assert CODEX.channel("", "auto") == "deny-once"  # unknown: what surely works
    for decision in ("context", "ask", "deny"):  # a flag given is obeyed, by every agent
        assert CODEX.channel("0.104.0", decision) == decision
        assert CLAUDE_CODE.channel("2.1.76", decision) == decision
    assert version_tuple("0.104.0-alpha.1") == (0, 104, 0) and version_tuple("x") is None


def test_deny_once_lets_the_same_call_through_right_after() -> None:
    d = DenyOnce(limit=2)
    assert d.first_time("t", "s", "uv run x") is True
    assert d.first_time("t", "s", "uv run x") is False  # the model read it and goes ahead
    assert d.first_time("t", "s", "uv run x") is True  # failed again since: told again
    assert d.first_time("t", "other", "uv run x") is True  # per session
    d.first_time("t", "a", "1")
    d.first_time("t", "b", "2")  # bounded: the oldest pairs are forgotten
    assert d.first_time("t", "s", "uv run x") is True


def test_routing_and_outputs() -> None:
    # one dispatcher: a request's agent names its adapter (Claude Code when none is named),
    # its event names the reply
    assert agent_of("codex") is CODEX and agent_of("claude-code") is CLAUDE_CODE
    assert agent_of(None) is CLAUDE_CODE and sorted(AGENTS) == ["claude-code", "codex"]
    assert sorted(REPLIES) == ["PostToolUse", "PreToolUse", "SessionStart", "UserPromptSubmit"]
    assert REPLIES["SessionStart"].needs == {"cwd": True}
    assert REPLIES["PreToolUse"].needs == {"transcript_path": True, "tool_name": False}
    r = Reminder("s", 3, "it failed", [1], "repeated_failure")
    deny = (hook_output("PreToolUse", r, "deny") or {})["hookSpecificOutput"]
    assert deny["permissionDecision"] == "deny" and "it failed" in deny["permissionDecisionReason"]
    ctx = (hook_output("PreToolUse", r, "context") or {})["hookSpecificOutput"]
    assert "permissionDecision" not in ctx and "it failed" in ctx["additionalContext"]
    # an unknown event is silence with its reason, never an exception
    reply = server.handle(object(), {"input": {"hook_event_name": "Stop"}})
    assert reply["output"] is None and "not handled" in reply["error"]


def test_codex_pending_call_renders_as_the_adapter_does() -> None:
    assert codex_action("Bash", {"command": "pytest -q"}) == "pytest -q"
    patch = "*** Begin Patch\n*** Update File: a.py\n@@\n-x\n+y\n*** End Patch"
    assert codex_action("apply_patch", {"command": patch}).startswith("apply_patch a.py\n")
    assert codex_action("mcp__x__y", {"q": 1}) == 'mcp__x__y({"q": 1})'
    assert codex_action("", None) == ""


@pytest.mark.parametrize(
    ("hook", "why"),
    [
        ({"hook_event_name": "SessionStart", "session_id": "s"}, "no cwd"),
        ({"hook_event_name": "UserPromptSubmit", "cwd": "/r", "prompt": "x"}, "no hook server"),
        ({"hook_event_name": "SessionStart", "cwd": "/r", "source": "startup"}, "no hook server"),
    ],
)
def test_memory_events_reach_the_server_or_pass_through(
    hook: dict[str, str], why: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAJGRAPH_HOOK_DIR", str(tmp_path))
    out = io.StringIO()
    stdin = io.BytesIO(json.dumps(hook).encode())
    assert command.main(["--no-start"], stdin=stdin, stdout=out, agent="codex") == 0
    assert out.getvalue() == ""
    assert why in (tmp_path / "hook.log").read_text()


class _Engine:
    """What the dispatcher asks of the engine, with a reminder at every PreToolUse."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.calls: list[tuple[str, str, str]] = []

    def tool_call(self, agent: Any, *, tenant: str, call: Any) -> Outcome:
        self.calls.append((agent.name, "pre", call.path))
        r = Reminder("s", 3, "it failed", [1], "repeated_failure")
        return Outcome("s", 3, r, 0, {"total": 1.0}, version=self.version)

    def after_tool_call(self, agent: Any, *, tenant: str, call: Any) -> Outcome:
        self.calls.append((agent.name, "post", call.path))
        return Outcome("s", 3, None, 1, {"total": 1.0}, answered=True)


@pytest.mark.parametrize(
    ("agent", "version", "first"),
    [("claude-code", "", "deny"), ("codex", "0.128.0", "deny"), ("codex", "0.129.0", "context")],
)
def test_one_dispatcher_answers_each_agent_through_its_channel(
    agent: str, version: str, first: str
) -> None:
    engine = _Engine(version)
    hook = {
        "hook_event_name": "PreToolUse",
        "transcript_path": "/t.jsonl",
        "tool_name": "Bash",
        "tool_input": {"command": "pytest"},
    }
    request = {"agent": agent, "tenant": "t", "decision": "auto", "input": hook}
    reply = server.handle(engine, request)
    out = reply["output"]["hookSpecificOutput"]
    assert reply["error"] is None and out["hookEventName"] == "PreToolUse"
    if first == "deny":  # deny once: the same call right after is let through in silence
        assert (
            out["permissionDecision"] == "deny" and "it failed" in out["permissionDecisionReason"]
        )
        assert server.handle(engine, request)["output"] is None
    else:
        assert "it failed" in out["additionalContext"] and "permissionDecision" not in out
    post = server.handle(engine, {**request, "input": {**hook, "hook_event_name": "PostToolUse"}})
    assert post["output"] is None and post["error"] is None
    assert engine.calls[0] == (agent, "pre", "/t.jsonl") and engine.calls[-1][1] == "post"


def test_the_client_imports_neither_the_engine_nor_an_agent_adapter() -> None:
    # hooks/command.py runs on every tool call: the standard library and three small modules
    code = "import sys, trajgraph.hooks.command; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = done.stdout.split()
    assert [m for m in loaded if m.startswith("trajgraph.hooks")] == [
        "trajgraph.hooks",
        "trajgraph.hooks.command",
        "trajgraph.hooks.protocol",
        "trajgraph.hooks.replies",
    ]
    assert "neo4j" not in loaded and "trajgraph.pipelines" not in loaded
