"""Canonical trajectories (JSON/JSONL/Parquet rows) and the builders every adapter shares.

The pass-through adapter trusts the record's own id, tenant, source and format; it only fills
what is missing. Full contract checking is left to ``schemas.trajectory.validate`` so that a
malformed canonical record surfaces as a schema error with its exact JSON path.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import PurePath
from typing import Any

from trajgraph.core.errors import InputError
from trajgraph.pipelines.adapters.base import LogFormat

FORMAT = "canonical"

# Longest suffix first so that ``x.traj.json`` loses both parts.
_SUFFIXES = (".traj.json", ".ndjson", ".jsonl", ".json", ".traj", ".parquet")

# metadata values larger than this (as JSON text) are replaced by their size: metadata is
# copied onto every graph node, so it must stay small.
SMALL_JSON_CHARS = 8_000


def add_submission(metadata: dict[str, Any], submission: Any) -> None:
    """SWE-style agents end with a patch: record its size, and the patch itself when small."""
    if isinstance(submission, str):
        metadata["submission_chars"] = len(submission)
        if small_json(submission):
            metadata["submission"] = submission


def file_stem(source: str) -> str:
    """The trajectory id of a log that has none: its file name without the format suffixes."""
    name = PurePath(source).name if source else ""
    lower = name.lower()
    for suffix in _SUFFIXES:
        if lower.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name or "trajectory"


def field(obj: Any, key: str) -> dict[str, Any]:
    """``obj[key]`` when it is a JSON object, else {}: logs omit or null out nested objects."""
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else {}


def text_of(content: Any, *, image: str | None = None) -> str:
    """Message content as text: plain strings as they are, OpenAI/Anthropic part lists joined
    (an image part as ``image`` when given, else left out)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif image is not None and isinstance(part, dict) and part.get("type") == "image":
                parts.append(image)
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False)


def as_text(value: Any) -> str:
    """Any JSON value as action/observation text; structured values become compact JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False)


def epoch_to_iso(value: Any) -> str | None:
    """Epoch seconds (int/float) to ISO 8601 UTC; anything unparseable gives None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        stamp = datetime.fromtimestamp(float(value), tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
    return stamp.isoformat().replace("+00:00", "Z")


def small_json(value: Any, limit: int = SMALL_JSON_CHARS) -> bool:
    try:
        return len(json.dumps(value, ensure_ascii=False)) <= limit
    except (TypeError, ValueError):
        return False


def new_turn(
    idx: int,
    action: str,
    observation: str,
    *,
    thought: str | None = None,
    reward: float | None = None,
    timestamp: str | None = None,
    actor: str | None = None,
) -> dict[str, Any]:
    """One canonical turn; absent optional fields are left out (as Parquet round trips do)."""
    turn: dict[str, Any] = {"idx": idx, "action": action, "observation": observation}
    if thought:
        turn["thought"] = thought
    if reward is not None:
        turn["reward"] = reward
    if timestamp:
        turn["timestamp"] = timestamp
    if actor:
        turn["actor"] = actor
    return turn


def new_trajectory(
    *,
    id: str,
    task: str,
    source: str,
    format: str,
    turns: list[dict[str, Any]],
    outcome: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    traj: dict[str, Any] = {
        "id": id[:512] or "trajectory",
        "task": task,
        "source": source,
        "format": format,
        "metadata": {k: v for k, v in (metadata or {}).items() if v is not None},
        "turns": turns,
    }
    if outcome is not None:
        traj["outcome"] = outcome
    return traj


def render_call(call: dict[str, Any]) -> str:
    """A tool call as ``name(arguments)``; argument text is kept verbatim, objects as JSON."""
    fn = field(call, "function") or call
    name = str(fn.get("name") or "tool")
    args = fn.get("arguments", fn.get("args"))
    return f"{name}({as_text(args)})"


def turns_from_chat(
    messages: list[Any], *, join_by_id: bool, first_user_is_task: bool
) -> tuple[list[dict[str, Any]], int]:
    """Turns of an OpenAI-style chat with tool calls (Spider-agent, tau-bench).

    * each assistant tool call is a turn; its tool result is the observation, found by
      ``tool_call_id`` when ``join_by_id`` (first unanswered call with that id, since some logs
      reuse ids) and otherwise by position (first unanswered call); the assistant text that
      came with the calls is the thought of the first call;
    * an assistant message without tool calls is a turn whose action is its text and whose
      observation is the user reply right after it (empty when none follows);
    * any other user message is a turn of actor ``user`` with an empty observation;
    * system messages are skipped; with ``first_user_is_task`` the first user message is the
      task prompt, not a turn.

    Returns the turns and the number of tool results that matched no call (kept as metadata).
    """
    turns: list[dict[str, Any]] = []
    pending: list[tuple[dict[str, Any], Any]] = []  # (turn, call id) awaiting a tool result
    awaiting_reply: dict[str, Any] | None = None
    task_seen = not first_user_is_task
    orphans = 0
    for msg in messages:
        if not isinstance(msg, dict):
            continue
        role = msg.get("role")
        text = text_of(msg.get("content"))
        if role == "system":
            continue
        if role == "user":
            if not task_seen:
                task_seen = True
            elif awaiting_reply is not None:
                awaiting_reply["observation"] = text
            else:
                turns.append(new_turn(len(turns), text, "", actor="user"))
            awaiting_reply = None
        elif role == "assistant":
            awaiting_reply = None
            calls = [c for c in (msg.get("tool_calls") or []) if isinstance(c, dict)]
            if not calls:
                turn = new_turn(len(turns), text, "", actor="agent")
                turns.append(turn)
                awaiting_reply = turn
                continue
            for k, call in enumerate(calls):
                thought = text.strip() if k == 0 else None
                turn = new_turn(len(turns), render_call(call), "", thought=thought, actor="agent")
                turns.append(turn)
                pending.append((turn, call.get("id")))
        elif role in ("tool", "function"):
            awaiting_reply = None
            pos = _match(pending, msg.get("tool_call_id") if join_by_id else None)
            if pos is None:
                orphans += 1
                continue
            turn, _ = pending.pop(pos)
            turn["observation"] = text
    return turns, orphans


def _match(pending: list[tuple[dict[str, Any], Any]], call_id: Any) -> int | None:
    if not pending:
        return None
    if call_id is not None:
        for pos, (_, pid) in enumerate(pending):
            if pid == call_id:
                return pos
    return 0


def to_trajectories(obj: Any, *, source: str) -> list[dict[str, Any]]:
    """A trajectory already in the canonical shape: fill source/format/id if missing."""
    if not isinstance(obj, dict) or not isinstance(obj.get("turns"), list):
        raise InputError("canonical trajectory needs a 'turns' list", source=source)
    traj = dict(obj)
    if not traj.get("source"):
        traj["source"] = source
    traj.setdefault("format", FORMAT)
    if not traj.get("id"):
        traj["id"] = file_stem(source)
    traj.setdefault("task", "")
    if traj.get("metadata") is None:
        traj["metadata"] = {}
    turns: list[dict[str, Any]] = []
    for pos, turn in enumerate(traj["turns"]):
        if not isinstance(turn, dict):
            raise InputError(f"turn {pos} is not a JSON object", source=source)
        turn = dict(turn)
        turn.setdefault("idx", pos)
        turns.append(turn)
    traj["turns"] = turns
    return [traj]


def from_parquet_row(row: Any, *, source: str) -> list[dict[str, Any]]:
    """One Parquet row written with ``schemas.parquet.to_arrow``."""
    from trajgraph.schemas.parquet import from_arrow_row  # pyarrow: only Parquet inputs pay

    if not isinstance(row, dict):
        raise InputError("Parquet row is not a record", source=source)
    try:
        obj = from_arrow_row(row)
    except ValueError as e:  # metadata column holding text that is not JSON
        raise InputError(f"Parquet row has unreadable metadata: {e}", source=source) from e
    if not obj.get("format"):
        obj["format"] = "parquet"
    return to_trajectories(obj, source=source)


def is_canonical(obj: Any) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("turns"), list)


LOG_FORMAT = LogFormat(
    name=FORMAT,
    read=to_trajectories,
    fits=is_canonical,
    shape="object with a 'turns' list",
    episodes_per_array=True,
)
# Canonical rows of a Parquet file: told by the file type, never sniffed from a JSON value.
PARQUET = LogFormat(
    name="parquet",
    read=from_parquet_row,
    fits=is_canonical,
    shape="a Parquet file",
    sniffed=False,
)
