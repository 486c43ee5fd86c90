"""Which hook output the model actually sees, per agent, event and version (docs/hooks.md,
"Which channel reaches the model", says how each row was checked).

* ``SessionStart`` and ``UserPromptSubmit``: ``hookSpecificOutput.additionalContext`` is added
  to the model's context by both agents (Claude Code's hook reference; Codex's generated
  output schemas and hooks documentation).
* ``PreToolUse`` on Claude Code: ``additionalContext`` is accepted but has been reported not to
  reach the model (anthropics/claude-code #19432, and again on 2.1.123 in #55889, both closed
  unfixed); ``permissionDecision: "deny"`` with a reason does reach it, and blocks the call.
  So the default is **deny once**: the first time a call draws a reminder it is denied with
  the reminder as the reason; the same call right after (the model read it and goes ahead) is
  let through in silence, so a wrong reminder costs one round trip, never a loop.
* ``PreToolUse`` on Codex: ``additionalContext`` was rejected as unsupported until
  openai/codex #20692 (merged 2026-05-01, first released in 0.129.0; #19385 reported the
  rejection on 0.124.0), so: ``additionalContext`` from 0.129.0 on, deny once before, and
  deny once when the version is unknown.
* ``PostToolUse``: nothing is said there (Claude Code drops its context, #18427); the hook
  only brings the finished turn into the graph.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Literal

Channel = Literal["context", "deny", "ask", "deny-once"]
CODEX_PRETOOL_CONTEXT = (0, 129, 0)  # openai/codex #20692 released in rust-v0.129.0
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")
MAX_REMEMBERED = 4096


def version_tuple(version: str) -> tuple[int, int, int] | None:
    m = _VERSION.search(version or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def pre_tool_channel(agent: str, version: str, decision: str) -> Channel:
    """The channel of a PreToolUse reminder: the flag's choice, or for ``auto`` the one the
    agent's version shows the model."""
    if decision in ("context", "deny", "ask"):
        return decision  # type: ignore[return-value]
    if agent == "codex":
        v = version_tuple(version)
        return "context" if v is not None and v >= CODEX_PRETOOL_CONTEXT else "deny-once"
    return "deny-once"


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
