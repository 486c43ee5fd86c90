"""Small hand-written logs for tests, in the two shapes most tests feed the adapters: the
canonical log ({"id", "task", "turns": [{"idx", "action", "observation"}]}) and AMA-Bench's
episode ({"episode_id", "task", "domain", "trajectory": [{"turn_idx", ...}], "qa_pairs"}).

One builder each, so that a test's log reads as its table of (action, observation) pairs and
the turn numbers are never typed by hand (a gap or a repeat in them was a test of something
else by accident). Logs whose turns carry more keys, or whose numbering is the point of the
test, stay written out in full.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# (action, observation): the observation is usually text, sometimes a structure (AMA-Bench
# observations may be JSON objects).
Step = tuple[str, Any]


def canonical_turns(steps: Iterable[Step]) -> list[dict[str, Any]]:
    """A canonical log's turns, numbered from 0."""
    return [{"idx": i, "action": a, "observation": o} for i, (a, o) in enumerate(steps)]


def canonical_log(
    trajectory_id: str, task: str, steps: Iterable[Step], **extra: Any
) -> dict[str, Any]:
    """A canonical log; ``extra`` adds top-level keys (``tenant``, ``qa_pairs``, ...)."""
    return {"id": trajectory_id, "task": task, "turns": canonical_turns(steps), **extra}


def ama_episode(
    episode_id: str | int,
    task: str,
    domain: str,
    steps: Iterable[Step],
    qa_pairs: list[dict[str, Any]],
) -> dict[str, Any]:
    """An AMA-Bench episode, as its JSONL rows carry one."""
    trajectory = [{"turn_idx": i, "action": a, "observation": o} for i, (a, o) in enumerate(steps)]
    return {
        "episode_id": episode_id,
        "task": task,
        "domain": domain,
        "trajectory": trajectory,
        "qa_pairs": qa_pairs,
    }
