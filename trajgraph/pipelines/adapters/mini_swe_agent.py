"""mini-swe-agent trajectories (``*.traj.json``): a flat chat where every assistant message
is one step and the next user message is what the shell answered.

The action is extracted with mini-swe-agent's own rule (the first ```bash block); an
assistant message without such a block is still a turn, with the whole message as action,
because mini-swe-agent answered it too (with a format-error message, the observation).
"""

from __future__ import annotations

import re
from typing import Any

from trajgraph.core.errors import InputError
from trajgraph.pipelines.adapters.base import LogFormat, holds_list
from trajgraph.pipelines.adapters.canonical import (
    add_submission,
    epoch_to_iso,
    field,
    file_stem,
    new_trajectory,
    new_turn,
    text_of,
)

FORMAT = "mini-swe-agent"

# Same pattern mini-swe-agent uses to parse actions (DefaultAgent.parse_action).
_BASH_BLOCK = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
_THOUGHT_LABEL = re.compile(r"^\s*THOUGHT:\s*", re.IGNORECASE)
_PR_DESCRIPTION = re.compile(
    r"<pr_description>\s*(?:Consider the following PR description:\n)?(.*?)\n</pr_description>",
    re.DOTALL,
)


def task_text(message: str) -> str:
    """The task inside the instance prompt (the PR description), or the whole prompt."""
    m = _PR_DESCRIPTION.search(message)
    return (m.group(1) if m else message).strip()


def split_action(content: str) -> tuple[str, str | None]:
    """(action, thought) of one assistant message."""
    m = _BASH_BLOCK.search(content)
    if m is None:
        return content, None
    thought = _THOUGHT_LABEL.sub("", content[: m.start()]).strip()
    return m.group(1), thought or None


def _timestamp(msg: dict[str, Any]) -> str | None:
    extra = msg.get("extra")
    if not isinstance(extra, dict):
        return None
    response = extra.get("response")
    if isinstance(response, dict) and "created" in response:
        return epoch_to_iso(response["created"])
    return epoch_to_iso(extra.get("timestamp"))


def _model(info: dict[str, Any], messages: list[Any]) -> str | None:
    config = info.get("config")
    model = config.get("model") if isinstance(config, dict) else None
    if isinstance(model, dict) and model.get("model_name"):
        return str(model["model_name"])
    for msg in messages:
        extra = msg.get("extra") if isinstance(msg, dict) else None
        response = extra.get("response") if isinstance(extra, dict) else None
        if isinstance(response, dict) and response.get("model"):
            return str(response["model"])
    return None


def fits(obj: Any) -> bool:
    if not holds_list(obj, "messages"):
        return False
    if str(obj.get("trajectory_format", "")).startswith("mini-swe-agent"):
        return True
    info = obj.get("info")
    return isinstance(info, dict) and "mini_version" in info


def to_trajectories(obj: Any, *, source: str) -> list[dict[str, Any]]:
    if not isinstance(obj, dict) or not isinstance(obj.get("messages"), list):
        raise InputError("mini-swe-agent log needs a 'messages' list", source=source)
    messages = [m for m in obj["messages"] if isinstance(m, dict)]
    task: str | None = None
    turns: list[dict[str, Any]] = []
    last_agent: dict[str, Any] | None = None
    for msg in messages:
        role = msg.get("role")
        content = text_of(msg.get("content"))
        if role == "system":
            continue
        if role == "assistant":
            action, thought = split_action(content)
            last_agent = new_turn(
                len(turns), action, "", thought=thought, timestamp=_timestamp(msg), actor="agent"
            )
            turns.append(last_agent)
        elif task is None and not turns:
            task = task_text(content)
        elif last_agent is not None:
            # Several environment messages in a row (rare) all answer the same step.
            obs = last_agent["observation"]
            last_agent["observation"] = f"{obs}\n{content}" if obs else content
        else:
            turns.append(new_turn(len(turns), content, "", actor=str(role or "user")))
    info = field(obj, "info")
    stats = field(info, "model_stats")
    exit_status = info.get("exit_status")
    submission = info.get("submission")
    metadata: dict[str, Any] = {
        "instance_id": obj.get("instance_id"),
        "model": _model(info, messages),
        "exit_status": exit_status,
        "mini_version": info.get("mini_version"),
        "trajectory_format": obj.get("trajectory_format"),
        "instance_cost": stats.get("instance_cost"),
        "api_calls": stats.get("api_calls"),
    }
    add_submission(metadata, submission)
    return [
        new_trajectory(
            id=str(obj.get("instance_id") or file_stem(source)),
            task=task or "",
            source=source,
            format=FORMAT,
            turns=turns,
            outcome=str(exit_status) if exit_status is not None else None,
            metadata=metadata,
        )
    ]


LOG_FORMAT = LogFormat(
    name=FORMAT,
    read=to_trajectories,
    fits=fits,
    shape="object with 'messages' and trajectory_format 'mini-swe-agent*'",
)
