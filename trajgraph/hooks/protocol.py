"""What the hook client and server share: file names, limits, and the JSON for Claude Code.

Claude Code's hook contract (PreToolUse, docs/hooks.md): exit 0 with no output lets the
call proceed untouched; exit 0 with JSON on stdout is read as
``{"hookSpecificOutput": {"hookEventName": "PreToolUse", ...}}`` where ``additionalContext``
is added to the model's context before the tool runs (the call proceeds), and
``permissionDecision`` ``"ask"`` / ``"deny"`` with ``permissionDecisionReason`` asks the user /
blocks the call and shows the reason to the model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

SOCKET_NAME = "hook.sock"
PID_NAME = "hook.pid"
LOG_NAME = "hook.log"
STARTING_NAME = "hook.starting"
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
DECISIONS = ("auto", "context", "ask", "deny")  # auto: hooks/channels.py
PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700
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


def private_dir(hook_dir: Path) -> Path:
    """The hook folder, made or tightened to its user only: the log names transcript paths,
    session ids and error text. An existing folder made 0755 by an older version (or by
    hand) is tightened too, when it is this user's."""
    hook_dir.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    st = hook_dir.stat()
    if st.st_uid == os.getuid() and st.st_mode & 0o777 != PRIVATE_DIR:
        os.chmod(hook_dir, PRIVATE_DIR)
    return hook_dir


def open_private(path: Path, mode: str = "a") -> IO[Any]:
    """``open(path, mode)`` for appending, created (or tightened) readable by its user only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, PRIVATE_FILE)
    try:
        if os.fstat(fd).st_mode & 0o777 != PRIVATE_FILE:
            os.fchmod(fd, PRIVATE_FILE)
        if "b" in mode:
            return os.fdopen(fd, mode)
        return os.fdopen(fd, mode, encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise
