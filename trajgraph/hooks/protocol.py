"""What the hook client and server share: file names, limits, and the JSON for Claude Code.

Claude Code's hook contract (PreToolUse, docs/hooks.md): exit 0 with no output lets the
call proceed untouched; exit 0 with JSON on stdout is read as
``{"hookSpecificOutput": {"hookEventName": "PreToolUse", ...}}`` where ``additionalContext``
is added to the model's context before the tool runs (the call proceeds), and
``permissionDecision`` ``"ask"`` / ``"deny"`` with ``permissionDecisionReason`` asks the user /
blocks the call and shows the reason to the model.
"""

from __future__ import annotations

from typing import Any

SOCKET_NAME = "hook.sock"
PID_NAME = "hook.pid"
LOG_NAME = "hook.log"
STARTING_NAME = "hook.starting"
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
DECISIONS = ("auto", "context", "ask", "deny")  # auto: hooks/channels.py
PREFIX = "trajgraph memory of this session"


def reminder_text(reminder: Any) -> str:
    cites = list(getattr(reminder, "cites", []) or [])
    plural = "s" if len(cites) > 1 else ""
    turns = ", ".join(map(str, cites))
    where = f" [turn{plural} {turns}; turns count this session's tool calls from 0]"
    return f"{PREFIX}: {reminder.reminder}{where if cites else ''}"


def hook_output(event: str, reminder: Any, decision: str = "context") -> dict[str, Any] | None:
    """The JSON Claude Code reads, or None for silence (no output at all)."""
    if reminder is None or event != "PreToolUse":
        return None
    text = reminder_text(reminder)
    specific: dict[str, Any] = {"hookEventName": "PreToolUse"}
    if decision in ("ask", "deny"):
        specific["permissionDecision"] = decision
        specific["permissionDecisionReason"] = text
    else:
        specific["additionalContext"] = text
    return {"hookSpecificOutput": specific}
