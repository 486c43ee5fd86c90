"""Hook calls beyond Claude Code's tool calls with a fixed decision: Codex's tool calls, the
project memory at ``SessionStart`` / ``UserPromptSubmit`` (both agents), and the ``auto``
decision (the channel the model sees, hooks/channels.py).

``handle`` answers one request of the hook server (server.py routes here); like the rest of
the hook, an error is logged and answered with silence.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any

from trajgraph.core.errors import NotFoundError
from trajgraph.hooks.channels import DenyOnce, pre_tool_channel
from trajgraph.hooks.protocol import hook_output

log = logging.getLogger("trajgraph.hook")

MEMORY_EVENTS = ("SessionStart", "UserPromptSubmit")
TOOL_EVENTS = ("PreToolUse", "PostToolUse")
SESSION_START_BUDGET = 300  # tokens of project memory at the start of a session
PROMPT_BUDGET = 150  # tokens at a prompt: only what the prompt is about, not said before
MAX_SESSIONS = 4096

_deny_once = DenyOnce()
_shown: OrderedDict[tuple[str, str], set[str]] = OrderedDict()  # (tenant, session) -> keys
_shown_lock = threading.Lock()


def routed(request: dict[str, Any]) -> bool:
    """Whether ``handle`` answers this request (else the Claude Code path of server.py)."""
    hook = request.get("input")
    event = str((hook if isinstance(hook, dict) else {}).get("hook_event_name") or "PreToolUse")
    return (
        request.get("agent") == "codex"
        or event in MEMORY_EVENTS
        or (event == "PreToolUse" and request.get("decision") == "auto")
    )


def handle(engine: Any, request: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    raw = request.get("input")
    hook: dict[str, Any] = raw if isinstance(raw, dict) else {}
    event = str(hook.get("hook_event_name") or "PreToolUse")
    agent = str(request.get("agent") or "claude-code")
    tenant = str(request.get("tenant") or "default")
    decision = str(request.get("decision") or "auto")
    try:
        if event in MEMORY_EVENTS:
            output, note, timings = _memory(engine, tenant, event, hook)
        elif event in TOOL_EVENTS:
            output, note, timings = _tool_call(engine, tenant, agent, event, decision, hook)
        else:
            return {"output": None, "timings_ms": {}, "error": f"event {event!r} not handled"}
    except Exception as e:  # a hook must never break the agent: log, answer with silence
        log.exception("%s hook call failed (%s, session %s)", agent, event, hook.get("session_id"))
        return {"output": None, "error": f"{type(e).__name__}: {e}"[:500], "timings_ms": {}}
    timings = {**timings, "server": round((time.perf_counter() - started) * 1000, 1)}
    log.info(
        "%s %s session %s: %s (%s)",
        agent,
        event,
        hook.get("session_id"),
        note,
        " ".join(f"{k}={v}" for k, v in timings.items()),
    )
    return {"output": output, "timings_ms": timings, "error": None}


# -- tool calls --------------------------------------------------------------------------------


def _tool_call(
    engine: Any, tenant: str, agent: str, event: str, decision: str, hook: dict[str, Any]
) -> tuple[dict[str, Any] | None, str, dict[str, float]]:
    path = str(hook.get("transcript_path") or "")
    if not path:
        return None, "no transcript_path", {}
    version = ""
    if agent == "codex" and event == "PostToolUse":
        outcome, _ = engine.codex_post_tool_use(
            tenant=tenant, transcript_path=path, tool_use_id=hook.get("tool_use_id")
        )
        return None, f"{outcome.new_turns} new turns", outcome.timings_ms
    if agent == "codex":
        outcome, version = engine.codex_tool_use(
            tenant=tenant,
            transcript_path=path,
            tool_name=str(hook.get("tool_name") or ""),
            tool_input=hook.get("tool_input"),
            tool_use_id=hook.get("tool_use_id"),
        )
        action = _codex_action(hook)
    elif event == "PostToolUse":
        outcome = engine.post_tool_use(
            tenant=tenant,
            transcript_path=path,
            tool_use_id=hook.get("tool_use_id"),
            agent_id=hook.get("agent_id"),
        )
        return None, f"{outcome.new_turns} new turns", outcome.timings_ms
    else:
        outcome = engine.pre_tool_use(
            tenant=tenant,
            transcript_path=path,
            tool_name=str(hook.get("tool_name") or ""),
            tool_input=hook.get("tool_input"),
            tool_use_id=hook.get("tool_use_id"),
            agent_id=hook.get("agent_id"),
        )
        action = f"{hook.get('tool_name')}:{hook.get('tool_input')}"
    reminder = outcome.reminder
    if reminder is None:
        return None, f"turn {outcome.pending_turn}: silence", outcome.timings_ms
    channel = pre_tool_channel(agent, version, decision)
    if channel == "deny-once":
        if not _deny_once.first_time(tenant, outcome.trajectory, action):
            return (
                None,
                f"turn {outcome.pending_turn}: {reminder.rule}, let through",
                outcome.timings_ms,
            )
        channel = "deny"
    output = hook_output("PreToolUse", reminder, channel)
    return output, f"turn {outcome.pending_turn}: {reminder.rule} ({channel})", outcome.timings_ms


def _codex_action(hook: dict[str, Any]) -> str:
    from trajgraph.hooks.codex_sync import codex_action

    return codex_action(str(hook.get("tool_name") or ""), hook.get("tool_input"))


# -- memory across sessions --------------------------------------------------------------------


def _memory(
    engine: Any, tenant: str, event: str, hook: dict[str, Any]
) -> tuple[dict[str, Any] | None, str, dict[str, float]]:
    cwd = hook.get("cwd")
    if not isinstance(cwd, str) or not cwd:
        return None, "no cwd", {}
    session = str(hook.get("session_id") or "")
    prompt = hook.get("prompt") if event == "UserPromptSubmit" else None
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
        return None, "nothing in the graph", {}
    timings = {"memory": round((time.perf_counter() - t0) * 1000, 1)}
    items = [i for i in brief.items if _not_shown(tenant, session, i.key, event)]
    if not items:
        return None, f"silence ({len(brief.sessions)} earlier sessions)", timings
    text = brief.text
    if len(items) < len(brief.items):  # some were said before in this session
        head = brief.text.splitlines()[0]
        text = "\n".join([head, *(f"- {i.text}" for i in items)])
    _remember(tenant, session, [i.key for i in items], reset=event == "SessionStart")
    output = {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}
    return output, f"{len(items)} items from {len(brief.sessions)} sessions", timings


def _not_shown(tenant: str, session: str, key: str, event: str) -> bool:
    if event == "SessionStart":  # a new start (or a resume, /clear, compaction) says it all again
        return True
    with _shown_lock:
        return key not in _shown.get((tenant, session), set())


def _remember(tenant: str, session: str, keys: list[str], *, reset: bool) -> None:
    with _shown_lock:
        if reset:
            _shown.pop((tenant, session), None)
        _shown.setdefault((tenant, session), set()).update(keys)
        _shown.move_to_end((tenant, session))
        while len(_shown) > MAX_SESSIONS:
            _shown.popitem(last=False)
