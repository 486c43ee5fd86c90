"""What the hook answers at each event, one reply object per event (``REPLIES``), and the JSON
both agents read (Codex runs "Claude-style" hooks: the same ``hookSpecificOutput``).

* ``PreToolUse``: bring the session's finished turns into the graph, then a reminder about
  the pending call or silence, through the channel the agent's adapter picks for its CLI
  version (hooks/agents.py ``channel``). Claude Code's contract (docs/hooks.md):
  ``additionalContext`` is added to the model's context before the tool runs (the call
  proceeds); ``permissionDecision`` ``"ask"`` / ``"deny"`` with ``permissionDecisionReason``
  asks the user / blocks the call and shows the reason to the model. **Deny once**: the first
  time a call draws a reminder it is denied with the reminder as the reason; the same call
  right after (the model read it and goes ahead) is let through in silence, so a wrong
  reminder costs one round trip, never a loop.
* ``PostToolUse``: nothing is said there (Claude Code drops its context, #18427); the hook
  only brings the finished turn into the graph.
* ``SessionStart`` / ``UserPromptSubmit``: what earlier sessions of the same project learned
  (``additionalContext``, which both agents add to the model's context), or silence.

This module is imported by the hook client too (hooks/command.py checks a hook input against
``needs``), so it imports only the standard library at import time: the engine and the
agent's adapter are handed to ``answer`` by the hook server (hooks/server.py ``handle``).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from trajgraph.hooks.agents import Agent
    from trajgraph.hooks.engine import HookEngine

PREFIX = "trajgraph memory of this session"
SESSION_START_BUDGET = 300  # tokens of project memory at the start of a session
PROMPT_BUDGET = 150  # tokens at a prompt: only what the prompt is about, not said before
MAX_REMEMBERED = 4096  # (session, call) pairs denied once, remembered
MAX_SESSIONS = 4096  # sessions whose memory items said are remembered
# The hook input fields a reply cannot do without: field -> must not be empty (else any string).
TOOL_INPUT: Mapping[str, bool] = MappingProxyType({"transcript_path": True, "tool_name": False})
MEMORY_INPUT: Mapping[str, bool] = MappingProxyType({"cwd": True})


@dataclass(frozen=True)
class Request:
    """One hook call as the hook server received it."""

    agent: Agent
    tenant: str
    decision: str  # --decision: auto, context, ask or deny
    event: str
    hook: dict[str, Any]  # the hook's own stdin JSON


@dataclass
class Answer:
    output: dict[str, Any] | None  # the JSON the agent reads; None: silence
    note: str  # what happened, for the hook log
    timings_ms: dict[str, float]


class Reply(Protocol):
    # The hook input fields this reply cannot do without (TOOL_INPUT): the client passes an
    # input lacking one through in silence.
    needs: Mapping[str, bool]

    def answer(self, engine: HookEngine, request: Request) -> Answer: ...


class DenyOnce:
    """Remembers the (session, action) pairs denied once, so that the same call made again
    right after passes. Bounded: the oldest pairs are forgotten first."""

    def __init__(self, limit: int = MAX_REMEMBERED) -> None:
        self._seen: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._lock = threading.Lock()
        self._limit = limit

    def first_time(self, tenant: str, session: str, action: str) -> bool:
        key = (tenant, session, action)
        with self._lock:
            if key in self._seen:
                del self._seen[key]  # let it through once; a later repeat is denied again
                return False
            self._seen[key] = None
            while len(self._seen) > self._limit:
                self._seen.popitem(last=False)
            return True


def reminder_text(reminder: Any) -> str:
    cites = list(getattr(reminder, "cites", []) or [])
    plural = "s" if len(cites) > 1 else ""
    turns = ", ".join(map(str, cites))
    where = f" [turn{plural} {turns}; turns count this session's tool calls from 0]"
    return f"{PREFIX}: {reminder.reminder}{where if cites else ''}"


def hook_output(event: str, reminder: Any, decision: str = "context") -> dict[str, Any] | None:
    """The JSON of a ``PreToolUse`` reminder on a channel, or None for silence."""
    if reminder is None or event != "PreToolUse":
        return None
    text = reminder_text(reminder)
    if decision in ("ask", "deny"):
        return _specific(event, permissionDecision=decision, permissionDecisionReason=text)
    return _specific(event, additionalContext=text)


def _specific(event: str, **fields: str) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": event, **fields}}


class Remind:
    """``PreToolUse``: sync, then a reminder about the pending call or silence."""

    needs = TOOL_INPUT

    def __init__(self) -> None:
        self._deny_once = DenyOnce()

    def answer(self, engine: HookEngine, request: Request) -> Answer:
        call = request.agent.call_of(request.hook)
        if not call.path:
            return Answer(None, "no transcript_path", {})
        outcome = engine.tool_call(request.agent, tenant=request.tenant, call=call)
        at, reminder = f"{outcome.trajectory} turn {outcome.pending_turn}", outcome.reminder
        if reminder is None:
            return Answer(None, f"{at}: silence", outcome.timings_ms)
        channel = request.agent.channel(outcome.version, request.decision)
        if channel == "deny-once":
            if not self._deny_once.first_time(request.tenant, outcome.trajectory, call.key):
                return Answer(None, f"{at}: {reminder.rule}, let through", outcome.timings_ms)
            channel = "deny"
        output = hook_output(request.event, reminder, channel)
        return Answer(output, f"{at}: {reminder.rule} ({channel})", outcome.timings_ms)


class Sync:
    """``PostToolUse``: bring the finished turn into the graph; say nothing."""

    needs = TOOL_INPUT

    def answer(self, engine: HookEngine, request: Request) -> Answer:
        call = request.agent.call_of(request.hook)
        if not call.path:
            return Answer(None, "no transcript_path", {})
        outcome = engine.after_tool_call(request.agent, tenant=request.tenant, call=call)
        note = f"{outcome.trajectory} turn {outcome.pending_turn}: {outcome.new_turns} new turns"
        return Answer(None, note, outcome.timings_ms)


class ProjectMemory:
    """``SessionStart`` / ``UserPromptSubmit``: what earlier sessions of the project learned
    (queries/memory/project.py), each item said once per session until the next start."""

    needs = MEMORY_INPUT
    # Shared by both events: (tenant, session) -> the keys of the items said.
    _shown: ClassVar[OrderedDict[tuple[str, str], set[str]]] = OrderedDict()
    _shown_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, *, prompt: bool) -> None:
        self._prompt = prompt  # at a prompt: only what the prompt is about, not said before

    def answer(self, engine: HookEngine, request: Request) -> Answer:
        from trajgraph.core.errors import NotFoundError  # here: the client imports this module

        hook, tenant = request.hook, request.tenant
        cwd = hook.get("cwd")
        if not isinstance(cwd, str) or not cwd:
            return Answer(None, "no cwd", {})
        session = str(hook.get("session_id") or "")
        prompt = hook.get("prompt") if self._prompt else None
        at = f"session {hook.get('session_id')}"
        t0 = time.perf_counter()
        try:
            brief = engine.client.project_brief(
                cwd,
                budget=SESSION_START_BUDGET if prompt is None else PROMPT_BUDGET,
                exclude=[session] if session else [],
                prompt=prompt if isinstance(prompt, str) else None,
                tenant=tenant,
            )
        except NotFoundError:
            return Answer(None, f"{at}: nothing in the graph", {})
        timings = {"memory": round((time.perf_counter() - t0) * 1000, 1)}
        items = [i for i in brief.items if self._not_shown(tenant, session, i.key)]
        if not items:
            return Answer(None, f"{at}: silence ({len(brief.sessions)} earlier sessions)", timings)
        text = brief.text
        if len(items) < len(brief.items):  # some were said before in this session
            head = brief.text.splitlines()[0]
            text = "\n".join([head, *(f"- {i.text}" for i in items)])
        self._remember(tenant, session, [i.key for i in items])
        note = f"{at}: {len(items)} items from {len(brief.sessions)} sessions"
        return Answer(_specific(request.event, additionalContext=text), note, timings)

    def _not_shown(self, tenant: str, session: str, key: str) -> bool:
        if not self._prompt:  # a new start (or a resume, /clear, compaction) says it all again
            return True
        with self._shown_lock:
            return key not in self._shown.get((tenant, session), set())

    def _remember(self, tenant: str, session: str, keys: list[str]) -> None:
        shown = self._shown
        with self._shown_lock:
            if not self._prompt:
                shown.pop((tenant, session), None)
            shown.setdefault((tenant, session), set()).update(keys)
            shown.move_to_end((tenant, session))
            while len(shown) > MAX_SESSIONS:
                shown.popitem(last=False)


REPLIES: dict[str, Reply] = {
    "PreToolUse": Remind(),
    "PostToolUse": Sync(),
    "SessionStart": ProjectMemory(prompt=False),
    "UserPromptSubmit": ProjectMemory(prompt=True),
}
