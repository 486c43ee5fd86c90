"""tau-bench episodes: ``[{task_id, trial, reward, info, traj}]``, one trajectory each.

Two parties act. Turns follow ``canonical.turns_from_chat``: an assistant tool call is an
agent turn whose observation is the tool result joined by ``tool_call_id`` (logs reuse ids,
so the first unanswered call with that id wins); an assistant text message is an agent turn
whose observation is the simulated user's reply; the user's opening message (and any user
message that does not answer an agent message) is a turn of actor ``user``. The system
policy prompt is skipped. The task is ``info.task.instruction`` (the user simulator's brief).
"""

from __future__ import annotations

from typing import Any

from trajgraph.core.errors import InputError
from trajgraph.pipelines.adapters.base import LogFormat, holds_list
from trajgraph.pipelines.adapters.canonical import (
    field,
    file_stem,
    new_trajectory,
    small_json,
    turns_from_chat,
)

FORMAT = "tau-bench"


def episode_to_trajectory(obj: Any, *, source: str) -> dict[str, Any]:
    if not isinstance(obj, dict) or not isinstance(obj.get("traj"), list):
        raise InputError("tau-bench episode needs a 'traj' message list", source=source)
    turns, orphans = turns_from_chat(obj["traj"], join_by_id=True, first_user_is_task=False)
    info = field(obj, "info")
    task = field(info, "task")
    task_id, trial = obj.get("task_id"), obj.get("trial")
    if task_id is None:
        ident = file_stem(source)
    else:
        # task ids index the benchmark's task list of one environment, so they repeat across
        # files (airline, retail, other models); the file stem keeps them apart.
        ident = f"{file_stem(source)}/task{task_id}-trial{trial if trial is not None else 0}"
    reward = obj.get("reward")
    expected = task.get("actions")
    return new_trajectory(
        id=ident,
        task=str(task.get("instruction") or ""),
        source=source,
        format=FORMAT,
        turns=turns,
        outcome=str(reward) if reward is not None else None,
        metadata={
            "task_id": task_id,
            "trial": trial,
            "reward": reward if isinstance(reward, (int, float)) else None,
            "user_id": task.get("user_id"),
            "user_cost": info.get("user_cost"),
            "expected_actions": expected if small_json(expected) else None,
            "unmatched_tool_results": orphans or None,
        },
    )


def to_trajectories(obj: Any, *, source: str) -> list[dict[str, Any]]:
    """A single episode object, or a list of them (when handed a whole file)."""
    items = obj if isinstance(obj, list) else [obj]
    return [episode_to_trajectory(item, source=source) for item in items]


LOG_FORMAT = LogFormat(
    name=FORMAT,
    read=to_trajectories,
    fits=lambda obj: holds_list(obj, "traj"),
    shape="object (or array of them) with a 'traj' message list",
    episodes_per_array=True,
)
