"""SWE-agent ``.traj`` files: one turn per ``trajectory[]`` step.

The step already separates thought, action and observation, so no parsing of the model
response is needed. ``history`` is only read for the task: the first user message that is
not a demonstration (``is_demo: true``).
"""

from __future__ import annotations

from typing import Any

from trajgraph.core.errors import InputError
from trajgraph.pipelines.adapters.base import LogFormat, holds_list
from trajgraph.pipelines.adapters.canonical import (
    add_submission,
    as_text,
    field,
    file_stem,
    new_trajectory,
    new_turn,
    small_json,
    text_of,
)

FORMAT = "swe-agent"

# SWE-agent instance templates wrap the issue in one of these marker pairs; the issue text is
# what the agent was asked to solve, the rest is boilerplate repeated in every log.
_ISSUE_MARKERS = (
    ("ISSUE:\n", "\n\nINSTRUCTIONS:"),
    ("<pr_description>\n", "\n</pr_description>"),
    ("<issue>\n", "\n</issue>"),
)


def issue_text(message: str) -> str:
    """The issue inside a SWE-agent instance prompt (verbatim), or the whole prompt."""
    for start, end in _ISSUE_MARKERS:
        i = message.find(start)
        if i < 0:
            continue
        j = message.find(end, i + len(start))
        if j >= 0:
            return message[i + len(start) : j].strip()
    return message.strip()


def _task(history: Any) -> str:
    if not isinstance(history, list):
        return ""
    for msg in history:
        if isinstance(msg, dict) and msg.get("role") == "user" and not msg.get("is_demo"):
            return issue_text(text_of(msg.get("content")))
    return ""


def to_trajectories(obj: Any, *, source: str) -> list[dict[str, Any]]:
    if not isinstance(obj, dict) or not isinstance(obj.get("trajectory"), list):
        raise InputError("SWE-agent log needs a 'trajectory' list", source=source)
    turns: list[dict[str, Any]] = []
    for step in obj["trajectory"]:
        if not isinstance(step, dict):
            raise InputError("SWE-agent trajectory step is not an object", source=source)
        thought = as_text(step.get("thought")).strip() or None
        turns.append(
            new_turn(
                len(turns),
                as_text(step.get("action")),
                as_text(step.get("observation")),
                thought=thought,
                actor="agent",
            )
        )
    info = field(obj, "info")
    exit_status = info.get("exit_status")
    submission = info.get("submission")
    metadata: dict[str, Any] = {
        "environment": obj.get("environment"),
        "exit_status": exit_status,
        "instance_id": info.get("instance_id"),
        "model_stats": info.get("model_stats") if small_json(info.get("model_stats")) else None,
    }
    add_submission(metadata, submission)
    return [
        new_trajectory(
            id=str(info.get("instance_id") or file_stem(source)),
            task=_task(obj.get("history")),
            source=source,
            format=FORMAT,
            turns=turns,
            outcome=str(exit_status) if exit_status is not None else None,
            metadata=metadata,
        )
    ]


def fits(obj: Any) -> bool:
    if not holds_list(obj, "trajectory"):
        return False
    steps = obj["trajectory"]
    has_steps = not steps or ("action" in steps[0] and "observation" in steps[0])
    return has_steps and ("history" in obj or "info" in obj or "environment" in obj)


LOG_FORMAT = LogFormat(
    name=FORMAT,
    read=to_trajectories,
    fits=fits,
    shape="object with a 'trajectory' list of steps and 'history'/'info'",
)
