"""The hook engine for both agents: Claude Code transcripts (``HookEngine``) and Codex rollouts.

Codex runs Claude-style hooks (``PreToolUse`` / ``PostToolUse`` with ``transcript_path``, the
rollout file). A call does what it does for Claude Code (docs/hooks.md): read the rollout from
the last offset (complete lines only), adapt it as ``trajgraph ingest`` does
(pipelines/adapters/codex.py), write the turns whose calls have an output, then ask
``remind`` about the pending call. The rollout also names the CLI version
(``session_meta.cli_version``), which decides how a reminder reaches the model
(hooks/channels.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from trajgraph.client import TrajGraph
from trajgraph.hooks.session_sync import HookEngine, Outcome, SessionFile, _ms
from trajgraph.pipelines.adapters.codex import (
    Rollout,
    read_rollout,
    render_patch,
    trajectory_of,
)


class AgentHookEngine(HookEngine):
    """``HookEngine`` that also reads Codex rollouts."""

    @property
    def client(self) -> TrajGraph:
        """The read side (project memory, reminders): offline rules, no LLM."""
        return self._client

    def _trajectories(self, session: Any, state: SessionFile) -> list[dict[str, Any]]:
        if isinstance(session, Rollout):
            return [trajectory_of(session, state.lines, source=state.path)]
        return super()._trajectories(session, state)

    def codex_tool_use(
        self,
        *,
        tenant: str,
        transcript_path: str,
        tool_name: str,
        tool_input: Any,
        tool_use_id: str | None = None,
        remind: bool = True,
    ) -> tuple[Outcome, str]:
        """Sync the rollout's answered calls, then (``remind``) a reminder about the pending
        call. Returns the outcome and the CLI version the rollout names ("" when none)."""
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        state = self._file(tenant, transcript_path)
        with self._locked(state):  # bounded, as for Claude Code: a stuck call means silence
            self._read_new_lines(state)
            timings["read"] = _ms(t0)
            rollout = read_rollout(state.lines.records)
            tid = str(rollout.meta.get("session_id") or "") or _stem(transcript_path)
            calls = rollout.calls
            done = next((i for i, c in enumerate(calls) if not c.answered), len(calls))
            pending = next(
                (i for i, c in enumerate(calls) if tool_use_id and c.id == tool_use_id), done
            )
            answered = pending < len(calls) and calls[pending].answered
            t1 = time.perf_counter()
            upto = min(done, pending) if remind else done
            new = self._sync(tenant, state, rollout, tid, upto)
            timings["sync"] = _ms(t1)
        version = str(rollout.meta.get("cli_version") or "")
        if not remind:
            timings["total"] = _ms(t0)
            return Outcome(tid, pending, None, new, timings, answered), version
        t2 = time.perf_counter()
        # The rollout's own record of the pending call, when it is written already, says more
        # than the hook input (a command run outside the sandbox is another action).
        known = pending < len(calls) and tool_use_id and calls[pending].id == tool_use_id
        action = calls[pending].action if known else codex_action(tool_name, tool_input)
        reminder = self._remind(tenant, tid, action, pending)
        timings["remind"] = _ms(t2)
        timings["total"] = _ms(t0)
        return Outcome(tid, pending, reminder, new, timings, answered), version

    def codex_post_tool_use(
        self, *, tenant: str, transcript_path: str, tool_use_id: str | None, wait_s: float = 10.0
    ) -> tuple[Outcome, str]:
        """After a call: wait (polling) until the rollout holds its output, then sync."""
        end = time.monotonic() + wait_s
        while True:
            outcome, version = self.codex_tool_use(
                tenant=tenant,
                transcript_path=transcript_path,
                tool_name="",
                tool_input=None,
                tool_use_id=tool_use_id,
                remind=False,
            )
            if outcome.answered or not tool_use_id or time.monotonic() >= end:
                return outcome, version
            time.sleep(0.05)


def codex_action(tool_name: str, tool_input: Any) -> str:
    """The pending call as the adapter renders it: a shell command as itself, a patch as
    ``apply_patch PATH …``, any other tool as ``name({json})``."""
    args = tool_input if isinstance(tool_input, dict) else {}
    command = args.get("command")
    if tool_name in ("Bash", "shell", "exec_command", "local_shell") and isinstance(command, str):
        return command
    if tool_name == "apply_patch":
        patch = command if isinstance(command, str) else args.get("input")
        if isinstance(patch, str):
            return render_patch(patch)
    if not tool_name:
        return ""
    args_json = json.dumps(tool_input if tool_input is not None else {}, ensure_ascii=False)
    return f"{tool_name}({args_json})"


def _stem(path: str) -> str:
    name = Path(path).name
    return name[: -len(".jsonl")] if name.endswith(".jsonl") else name
