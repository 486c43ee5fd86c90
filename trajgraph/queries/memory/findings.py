"""What a reminder rule found, and the reminder (or silence) made of it.

Shared by the offline rules (remind.py) and the LLM path (llm_remind.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from trajgraph.queries.memory.store import Memory


@dataclass
class Finding:
    """What one rule found: the reminder text and the turns it cites."""

    rule: str
    text: str
    cites: list[int]


@dataclass
class Reminder:
    trajectory: str
    before_turn: int | None
    reminder: str | None
    cites: list[int] = field(default_factory=list)
    rule: str | None = None
    source: str = "rules"  # rules | llm | rules (LLM reply invalid: ...)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def from_findings(memory: Memory, findings: list[Finding], source: str = "rules") -> Reminder:
    if not findings:
        return Reminder(memory.trajectory, memory.before_turn, None, [], None, source)
    f = findings[0]
    return Reminder(memory.trajectory, memory.before_turn, f.text, f.cites, f.rule, source)
