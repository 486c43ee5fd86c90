"""AMA-bench episodes: ``{episode_id, task, trajectory: [{turn_idx, action, observation}],
qa_pairs?}``; the steps map one to one onto turns (renumbered from 0 in file order)."""

from __future__ import annotations

from typing import Any

from trajgraph.core.errors import InputError
from trajgraph.pipelines.adapters.base import LogFormat, holds_list
from trajgraph.pipelines.adapters.canonical import (
    as_text,
    file_stem,
    new_trajectory,
    new_turn,
    small_json,
)

FORMAT = "ama-bench"

QA_INLINE_CHARS = 4_000
_OUTCOME_KEYS = ("outcome", "result", "success", "reward", "score")


def _reward(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def to_trajectories(obj: Any, *, source: str) -> list[dict[str, Any]]:
    if not isinstance(obj, dict) or not isinstance(obj.get("trajectory"), list):
        raise InputError("AMA-bench episode needs a 'trajectory' list", source=source)
    turns: list[dict[str, Any]] = []
    for step in obj["trajectory"]:
        if not isinstance(step, dict):
            raise InputError("AMA-bench trajectory step is not an object", source=source)
        turns.append(
            new_turn(
                len(turns),
                as_text(step.get("action")),
                as_text(step.get("observation")),
                thought=as_text(step.get("thought")).strip() or None,
                reward=_reward(step.get("reward")),
                timestamp=as_text(step.get("timestamp")) or None,
                actor=as_text(step.get("actor")) or None,
            )
        )
    metadata: dict[str, Any] = {
        k: v
        for k, v in obj.items()
        if k not in ("episode_id", "task", "trajectory", "qa_pairs")
        and isinstance(v, (str, int, float, bool))
    }
    qa = obj.get("qa_pairs")
    if isinstance(qa, list):
        metadata["qa_count"] = len(qa)
        if small_json(qa, QA_INLINE_CHARS):
            metadata["qa_pairs"] = qa
    outcome = next((obj[k] for k in _OUTCOME_KEYS if obj.get(k) is not None), None)
    episode = obj.get("episode_id")
    return [
        new_trajectory(
            id=str(episode) if episode not in (None, "") else file_stem(source),
            task=as_text(obj.get("task")),
            source=source,
            format=FORMAT,
            turns=turns,
            outcome=as_text(outcome) if outcome is not None else None,
            metadata=metadata,
        )
    ]


def fits(obj: Any) -> bool:
    if not holds_list(obj, "trajectory"):
        return False
    steps = obj["trajectory"]
    return "episode_id" in obj or "qa_pairs" in obj or (bool(steps) and "turn_idx" in steps[0])


# Tried before SWE-agent, whose .traj also has a 'trajectory' list (detect.REGISTRY).
LOG_FORMAT = LogFormat(
    name=FORMAT,
    read=to_trajectories,
    fits=fits,
    shape="object with 'episode_id' and a 'trajectory' list",
    episodes_per_array=True,
)
