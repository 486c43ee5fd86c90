"""Memory that acts: one trajectory as of a turn (``store``), its brief, and reminder-or-silence.

``store`` reads the graph (actions are compared with ``trajgraph.extractors.actions``: same
command, read-only, reverts); ``brief`` digests a trajectory within a token budget;
``remind`` applies the offline rules and ``llm_remind`` asks an LLM; ``findings`` holds what
both return. Lessons from other runs (``trajgraph.queries.lessons``) feed the brief and the
``failed_elsewhere`` rule.
"""

from trajgraph.queries.memory.brief import (
    DEFAULT_BUDGET,
    MAX_BUDGET,
    MIN_BUDGET,
    Brief,
    build_brief,
)
from trajgraph.queries.memory.findings import Reminder
from trajgraph.queries.memory.remind import MAX_ACTION_CHARS, remind
from trajgraph.queries.memory.store import MAX_TURN, Memory, open_memory

__all__ = [
    "DEFAULT_BUDGET",
    "MAX_ACTION_CHARS",
    "MAX_BUDGET",
    "MAX_TURN",
    "MIN_BUDGET",
    "Brief",
    "Memory",
    "Reminder",
    "build_brief",
    "open_memory",
    "remind",
]
