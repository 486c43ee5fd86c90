"""What the agent-session adapters (Claude Code, Codex) share: a tool call waiting for its
result, and the line of calls an agent makes, with the context said before each call (which
becomes that call's thought)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar


@dataclass
class ToolCall:
    """One tool call and what came of it: a turn of the trajectory."""

    id: str
    name: str
    action: str
    timestamp: str | None
    thought: str = ""
    observation: str = ""
    answered: bool = False


C = TypeVar("C", bound=ToolCall)


@dataclass(kw_only=True)
class CallLine(Generic[C]):
    """An agent's calls in transcript order, and what it said since the last one."""

    task: str = ""
    calls: list[C] = field(default_factory=list)
    by_id: dict[str, C] = field(default_factory=dict)
    context: list[str] = field(default_factory=list)
    final_text: str = ""
    orphan_results: int = 0

    def said(self, text: str) -> None:
        """Assistant text (or a reasoning summary): context of the next call, and the last
        word of the agent when no call follows."""
        text = text.strip()
        if text:
            self.context.append(text)
            self.final_text = text

    def open(self, call: C) -> C:
        """A new call: the context said since the last call becomes its thought."""
        call.thought = "\n\n".join(self.context)
        self.context = []
        self.final_text = ""
        self.calls.append(call)
        self.by_id.setdefault(call.id, call)
        return call

    def answer(self, call_id: str) -> C | None:
        """The call a result answers, now answered; None (an orphan result, counted) when no
        call with that id waits for one."""
        call = self.by_id.get(call_id)
        if call is None or call.answered:
            self.orphan_results += 1
            return None
        call.answered = True
        return call
