"""The agents a hook serves, one adapter each behind one interface (``Agent``).

An adapter holds what differs between Claude Code and Codex; the engine (hooks/engine.py)
and the replies (hooks/replies.py) do everything else once, for both:

* ``call_of``: what the agent's hook input names for a tool call;
* ``read_lines`` / ``read`` / ``trajectories`` / ``answered``: how its session file (Claude
  Code's transcript, Codex's rollout) is read into calls and adapted into trajectories, as
  ``trajgraph ingest`` adapts it (pipelines/adapters/claude_code.py, codex.py);
* ``action``: the pending call rendered as that adapter renders a turn's action, so that
  ``remind`` compares like with like;
* ``channel``: which output a ``PreToolUse`` reminder takes so that this agent, at this CLI
  version, shows it to the model (docs/hooks.md, "Which channel reaches the model", says how
  each row was checked; tests/unit/trajgraph/test_hook_channels.py pins them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from trajgraph.pipelines.adapters import claude_code as cc
from trajgraph.pipelines.adapters import codex
from trajgraph.pipelines.adapters.base import Lines, iter_lines, read_lines

if TYPE_CHECKING:
    from trajgraph.hooks.engine import SessionFile

Channel = Literal["context", "deny", "ask", "deny-once"]
FIXED_CHANNELS = ("context", "deny", "ask")  # a --decision that is obeyed as given
CODEX_PRETOOL_CONTEXT = (0, 129, 0)  # openai/codex #20692 released in rust-v0.129.0
CODEX_SHELL_TOOLS = ("Bash", "shell", "exec_command", "local_shell")
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class ToolCall:
    """A tool call as the hook input names it."""

    path: str  # the session file: Claude Code's transcript, Codex's rollout
    tool_name: str
    tool_input: Any
    tool_use_id: str | None
    agent_id: str | None  # the sub-agent making the call (Claude Code)
    key: str  # the call as deny-once remembers it (hooks/replies.py)


@dataclass
class Reading:
    """What the session file read so far says about the line a call belongs to."""

    trajectory: str  # the trajectory id the line is written as
    calls: Sequence[Any] | None  # the line's calls (``id``, ``answered``, ``action``); None: none
    session: Any  # what ``Agent.trajectories`` adapts
    version: str = ""  # the CLI version the file names ("" when none)
    redirect: str | None = None  # the line is kept in this other file: read that one instead


class Agent(Protocol):
    name: str

    def call_of(self, hook: dict[str, Any]) -> ToolCall: ...

    def read_lines(self, data: bytes) -> tuple[Lines, list[str]]:
        """The complete lines of ``data`` as kept in memory, and the call ids they answer."""
        ...

    def read(self, state: SessionFile, call: ToolCall) -> Reading: ...

    def trajectories(self, session: Any, state: SessionFile) -> list[dict[str, Any]]: ...

    def answered(self, state: SessionFile, tool_use_id: str) -> bool:
        """Whether the file read so far holds the result of this call."""
        ...

    def action(self, reading: Reading, pending: int, call: ToolCall) -> str: ...

    def channel(self, version: str, decision: str) -> Channel: ...


def version_tuple(version: str) -> tuple[int, int, int] | None:
    m = _VERSION.search(version or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def _base_call(hook: dict[str, Any], key: str, agent_id: Any = None) -> ToolCall:
    return ToolCall(
        path=str(hook.get("transcript_path") or ""),
        tool_name=str(hook.get("tool_name") or ""),
        tool_input=hook.get("tool_input"),
        tool_use_id=hook.get("tool_use_id"),
        agent_id=agent_id,
        key=key,
    )


class ClaudeCode:
    """Claude Code: a transcript with the main line and its sub-agents' lines."""

    name = "claude-code"

    def call_of(self, hook: dict[str, Any]) -> ToolCall:
        key = f"{hook.get('tool_name')}:{hook.get('tool_input')}"
        return _base_call(hook, key, hook.get("agent_id"))

    def read_lines(self, data: bytes) -> tuple[Lines, list[str]]:
        results: list[str] = []

        def keep(record: dict[str, Any]) -> dict[str, Any]:
            results.extend(_result_ids(record))
            return cc.compact(record)  # Claude Code's bookkeeping is shrunk

        return read_lines(iter_lines(data), keep), results

    def read(self, state: SessionFile, call: ToolCall) -> Reading:
        session = cc.read_session(state.lines.records)
        sid = session.session_id or Path(call.path).stem
        line: cc.Line | None = session.main
        tid = sid
        if call.agent_id:
            line = session.agents.get(call.agent_id)
            tid = cc.subagent_id(sid, call.agent_id)
        if line is not None:
            return Reading(tid, line.calls, session)
        own = cc.sidechain_file(call.path, sid, call.agent_id or "")
        if call.agent_id and own.is_file() and str(own) != call.path:
            # this version keeps the sub-agent's transcript in its own file
            return Reading(tid, None, session, redirect=str(own))
        return Reading(tid, None, session)

    def trajectories(self, session: Any, state: SessionFile) -> list[dict[str, Any]]:
        return cc.trajectories_of(session, state.lines, source=state.path)

    def answered(self, state: SessionFile, tool_use_id: str) -> bool:
        return tool_use_id in state.results

    def action(self, reading: Reading, pending: int, call: ToolCall) -> str:
        return cc.render_action(call.tool_name, call.tool_input)

    def channel(self, version: str, decision: str) -> Channel:
        """``additionalContext`` of ``PreToolUse`` is accepted but has been reported not to
        reach the model (anthropics/claude-code #19432, again on 2.1.123 in #55889, both
        closed unfixed); ``deny`` with a reason does. So ``auto`` is deny once."""
        return decision if decision in FIXED_CHANNELS else "deny-once"  # type: ignore[return-value]


class Codex:
    """Codex: a rollout, which also names the CLI version (``session_meta.cli_version``)."""

    name = "codex"

    def call_of(self, hook: dict[str, Any]) -> ToolCall:
        key = codex_action(str(hook.get("tool_name") or ""), hook.get("tool_input"))
        return _base_call(hook, key)

    def read_lines(self, data: bytes) -> tuple[Lines, list[str]]:
        return read_lines(iter_lines(data)), []  # a rollout line is all conversation

    def read(self, state: SessionFile, call: ToolCall) -> Reading:
        rollout = codex.read_rollout(state.lines.records)
        tid = str(rollout.meta.get("session_id") or "") or _stem(call.path)
        version = str(rollout.meta.get("cli_version") or "")
        return Reading(tid, rollout.calls, rollout, version)

    def trajectories(self, session: Any, state: SessionFile) -> list[dict[str, Any]]:
        return [codex.trajectory_of(session, state.lines, source=state.path)]

    def answered(self, state: SessionFile, tool_use_id: str) -> bool:
        call = codex.read_rollout(state.lines.records).by_id.get(tool_use_id)
        return call is not None and call.answered

    def action(self, reading: Reading, pending: int, call: ToolCall) -> str:
        # The rollout's own record of the pending call, when it is written already, says more
        # than the hook input (a command run outside the sandbox is another action).
        calls = reading.calls or []
        if pending < len(calls) and call.tool_use_id and calls[pending].id == call.tool_use_id:
            return str(calls[pending].action)
        return codex_action(call.tool_name, call.tool_input)

    def channel(self, version: str, decision: str) -> Channel:
        """``additionalContext`` of ``PreToolUse`` was rejected as unsupported until
        openai/codex #20692 (first released in 0.129.0; #19385 reported the rejection on
        0.124.0): ``additionalContext`` from 0.129.0 on, deny once before and when the
        version is unknown."""
        if decision in FIXED_CHANNELS:
            return decision  # type: ignore[return-value]
        v = version_tuple(version)
        return "context" if v is not None and v >= CODEX_PRETOOL_CONTEXT else "deny-once"


CLAUDE_CODE = ClaudeCode()
CODEX = Codex()
AGENTS: dict[str, Agent] = {a.name: a for a in (CLAUDE_CODE, CODEX)}


def agent_of(name: Any) -> Agent:
    """The adapter of a request's ``agent`` (Claude Code when unnamed or unknown)."""
    return AGENTS.get(str(name or ""), CLAUDE_CODE)


def codex_action(tool_name: str, tool_input: Any) -> str:
    """The pending call as the Codex adapter renders it: a shell command as itself, a patch
    as ``apply_patch PATH …``, any other tool as ``name({json})``."""
    args = tool_input if isinstance(tool_input, dict) else {}
    command = args.get("command")
    if tool_name in CODEX_SHELL_TOOLS and isinstance(command, str):
        return command
    if tool_name == "apply_patch":
        patch = command if isinstance(command, str) else args.get("input")
        if isinstance(patch, str):
            return codex.render_patch(patch)
    if not tool_name:
        return ""
    args_json = json.dumps(tool_input if tool_input is not None else {}, ensure_ascii=False)
    return f"{tool_name}({args_json})"


def _result_ids(record: dict[str, Any]) -> list[str]:
    """tool_use ids a transcript record answers (the main line's and sub-agents')."""
    message = record.get("message")
    data = record.get("data")
    if isinstance(data, dict) and isinstance(data.get("message"), dict):
        message = data["message"].get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return [
        str(part.get("tool_use_id"))
        for part in (content if isinstance(content, list) else [])
        if isinstance(part, dict) and part.get("type") == "tool_result"
    ]


def _stem(path: str) -> str:
    name = Path(path).name
    return name[: -len(".jsonl")] if name.endswith(".jsonl") else name
