"""What to rename when a record is almost a canonical trajectory: the names other tools and
people give the contract's fields, so that a refusal can say "rename 'output' to
'observation'" instead of only "'output' was unexpected".

Kept free of heavy imports: format sniffing asks it too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

DOC = "docs/formats.md#bring-your-own-format"

TRAJECTORY_FIELDS = ("id", "task", "source", "format", "outcome", "tenant", "metadata", "turns")
TURN_FIELDS = ("idx", "action", "observation", "thought", "reward", "timestamp", "actor")

# Other names of each field (compared case-insensitively).
TRAJECTORY_SYNONYMS: dict[str, tuple[str, ...]] = {
    "turns": ("steps", "trajectory", "events", "history", "transitions", "interactions", "log"),
    "task": ("instruction", "prompt", "goal", "question", "query", "problem_statement", "input"),
    "id": (
        "trajectory_id",
        "traj_id",
        "episode_id",
        "run_id",
        "session_id",
        "instance_id",
        "name",
        "uuid",
    ),
    "outcome": ("result", "status", "success", "verdict", "exit_status", "final_answer"),
}
TURN_SYNONYMS: dict[str, tuple[str, ...]] = {
    "idx": ("index", "step", "turn", "turn_idx", "step_idx", "i", "n", "number", "position"),
    "action": ("command", "cmd", "act", "tool_call", "call", "input", "code", "actions"),
    "observation": (
        "output",
        "result",
        "response",
        "obs",
        "observations",
        "tool_output",
        "tool_result",
        "stdout",
        "feedback",
        "env_output",
    ),
    "thought": ("reasoning", "thinking", "thoughts", "rationale", "plan"),
    "timestamp": ("time", "ts", "created_at", "datetime", "date"),
    "actor": ("role", "agent", "speaker", "who"),
    "reward": ("score", "rewards"),
}


def _lookup(synonyms: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    return {alias: name for name, aliases in synonyms.items() for alias in aliases}


_TRAJECTORY_ALIASES = _lookup(TRAJECTORY_SYNONYMS)
_TURN_ALIASES = _lookup(TURN_SYNONYMS)


def renames(keys: Iterable[str], *, turn: bool, present: Iterable[str] = ()) -> dict[str, str]:
    """``{given: contract name}`` for the keys that are another name of a contract field
    the record does not have already."""
    aliases = _TURN_ALIASES if turn else _TRAJECTORY_ALIASES
    have = set(present)
    out: dict[str, str] = {}
    for key in keys:
        name = aliases.get(str(key).lower())
        if name is not None and name not in have and name not in out.values():
            out[str(key)] = name
    return out


def turns_under(obj: Any) -> str | None:
    """The key of a trajectory-like object that holds its turns under another name (a list
    of objects with action or observation fields under ``steps``, ``events``, ...)."""
    if not isinstance(obj, dict) or "turns" in obj:
        return None
    for key, value in obj.items():
        if renames([key], turn=False).get(str(key)) != "turns" or not isinstance(value, list):
            continue
        first = value[0] if value else None
        if isinstance(first, dict) and _turn_like(first):
            return str(key)
    return None


def _turn_like(step: Mapping[str, Any]) -> bool:
    names = {_TURN_ALIASES.get(str(k).lower(), str(k)) for k in step}
    return bool(names & {"action", "observation"})


def near_miss_hint(obj: Any) -> str | None:
    """For an object no format fits: what would make it a canonical trajectory, if little."""
    key = turns_under(obj)
    if key is None:
        return None
    return (
        f"it looks like a canonical trajectory with its turns under {key!r}: rename that key "
        f"to 'turns' (the canonical shape: {DOC})"
    )


def schema_hint(
    validator: str, path: list[Any], instance: Any, schema: Mapping[str, Any]
) -> str | None:
    """A fix for one JSON Schema error of a trajectory, or None when there is nothing to add.

    ``path`` is the error's absolute path (``["turns", 0]``), ``instance`` the value it is
    about and ``schema`` the (sub)schema that refused it.
    """
    at_turn = len(path) >= 2 and path[0] == "turns"
    if validator == "additionalProperties" and isinstance(instance, dict):
        allowed = set(schema.get("properties", {}))
        extra = [str(k) for k in instance if k not in allowed]
        fixes = renames(extra, turn=at_turn)
        parts = [f"rename {k!r} to {v!r}" for k, v in fixes.items()]
        rest = [k for k in extra if k not in fixes]
        if rest and not at_turn:
            parts.append(f"put {', '.join(map(repr, rest))} under 'metadata'")
        elif rest:
            parts.append(f"a turn has only {', '.join(TURN_FIELDS)}")
        return "; ".join(parts) + f" ({DOC})" if parts else None
    if validator == "required" and isinstance(instance, dict):
        missing = {str(r) for r in schema.get("required", ()) if r not in instance}
        fixes = {
            k: v
            for k, v in renames(instance, turn=at_turn, present=instance).items()
            if v in missing
        }
        if fixes:
            return "; ".join(f"rename {k!r} to {v!r}" for k, v in fixes.items()) + f" ({DOC})"
        if at_turn and missing:
            return f'a turn needs idx, action and observation ("" when empty) ({DOC})'
        return f"a trajectory needs {', '.join(sorted(missing))} ({DOC})" if missing else None
    if validator == "type" and path and path[-1] == "idx" and isinstance(instance, str):
        shown = instance.strip() if instance.strip().isdigit() else "3"
        return f"idx must be a JSON integer ({shown}, not the string {instance[:20]!r})"
    if validator == "type" and path and path[-1] in ("action", "observation", "task", "thought"):
        if isinstance(instance, (dict, list)):
            return f"{path[-1]} is text: write a structured value as JSON text (json.dumps)"
        if instance is None:
            return f'{path[-1]} is text: write "" when there is none'
    return None
