"""Spider-agent (spider-agent-tc) rollouts: ``[{instance_id, rollout_idx, conversation}]``.

One trajectory per rollout. The calls carry no ids, so a tool call pairs with the next
unanswered ``tool`` message by position. Actions render as ``name(arguments)`` with the
argument text kept verbatim (objects as JSON). ``final_messages`` repeats the conversation in
the model's raw text form and is ignored. See ``canonical.turns_from_chat`` for the rules.
"""

from __future__ import annotations

from typing import Any

from trajgraph.core.errors import InputError
from trajgraph.pipelines.adapters.base import LogFormat, holds_list
from trajgraph.pipelines.adapters.canonical import (
    file_stem,
    new_trajectory,
    text_of,
    turns_from_chat,
)

FORMAT = "spider-agent"


def _task(messages: list[Any]) -> str:
    for msg in messages:
        if isinstance(msg, dict) and msg.get("role") == "user":
            return text_of(msg.get("content")).strip()
    return ""


def rollout_to_trajectory(obj: Any, *, source: str) -> dict[str, Any]:
    if not isinstance(obj, dict) or not isinstance(obj.get("conversation"), list):
        raise InputError("Spider-agent rollout needs a 'conversation' list", source=source)
    messages = obj["conversation"]
    turns, orphans = turns_from_chat(messages, join_by_id=False, first_user_is_task=True)
    instance = obj.get("instance_id")
    rollout = obj.get("rollout_idx", 0)
    base = str(instance) if instance is not None else file_stem(source)
    terminated = obj.get("terminated")
    outcome = None
    if isinstance(terminated, bool):
        outcome = "terminated" if terminated else "not terminated"
    return new_trajectory(
        id=f"{base}-rollout{rollout}",
        task=_task(messages),
        source=source,
        format=FORMAT,
        turns=turns,
        outcome=outcome,
        metadata={
            "instance_id": instance,
            "rollout_idx": rollout,
            "terminated": terminated,
            "unmatched_tool_results": orphans or None,
        },
    )


def to_trajectories(obj: Any, *, source: str) -> list[dict[str, Any]]:
    """A single rollout object, or a list of them (when handed a whole file)."""
    items = obj if isinstance(obj, list) else [obj]
    return [rollout_to_trajectory(item, source=source) for item in items]


LOG_FORMAT = LogFormat(
    name=FORMAT,
    read=to_trajectories,
    fits=lambda obj: holds_list(obj, "conversation"),
    shape="object (or array of them) with a 'conversation' message list",
    episodes_per_array=True,
)
