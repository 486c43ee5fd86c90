"""Lessons inside one trajectory's memory: the brief's "seen in N other runs; got past it
by …" and the reminder rule ``failed_elsewhere`` (queries/memory/).

Both read through a ``Memory`` (its session, and ``before_turn``: only the trajectory's own
turns before it count, while the other runs are read as they are now).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trajgraph.extractors.actions import canonical, first_line, is_read_only
from trajgraph.extractors.heuristic import occurs
from trajgraph.extractors.resolutions import Key, TurnFacts, same_key, step_of
from trajgraph.extractors.signatures import quoted_values
from trajgraph.queries.lessons.lookup import (
    FETCH_ACTION_CHARS,
    Episode,
    SignatureLessons,
    episode_of,
    rank,
)

if TYPE_CHECKING:
    from trajgraph.queries.memory.store import Memory

# A reminder needs this many other runs in which the action was followed by the same failure.
MIN_RUNS_FOR_REMINDER = 1


def other_runs(memory: Memory, uids: list[str]) -> dict[str, list[Episode]]:
    """The other runs' episodes of each signature (the trajectory itself left out)."""
    out: dict[str, list[Episode]] = {}
    for r in memory.other_runs(uids, FETCH_ACTION_CHARS):
        out.setdefault(r["signature_uid"], []).append(episode_of(r))
    return out


def turn_lessons(memory: Memory, turns: list[int]) -> dict[int, list[SignatureLessons]]:
    """For each failing turn, the lessons of its signatures that other runs showed."""
    rows = memory.signatures_at(turns)
    episodes = other_runs(memory, [r["uid"] for r in rows])
    out: dict[int, list[SignatureLessons]] = {}
    for r in rows:
        found = episodes.get(r["uid"])
        if found:
            out.setdefault(r["turn"], []).append(rank(r["uid"], r["text"], r["error"], found))
    return out


@dataclass(frozen=True)
class FailedElsewhere:
    signature: str
    keys: tuple[str, ...]  # what the action adds to the failing command, as key actions
    own_turns: list[int]  # this trajectory's failing runs
    tried_in: list[tuple[str, int]]  # (other run, turn) after which the failure came back


def failed_elsewhere(memory: Memory, next_action: str) -> FailedElsewhere | None:
    """The next action is about this trajectory's open failure (it names a value the error
    quotes or an argument of the failing command); what it adds to the failing command
    (``pip install x``, ``VAR=1``) is what a step of another run did after the same failure,
    whole; the failure came back after that step; and no run got past the failure with any
    part of the action. Only commands are compared: edits differ in too much to be called
    the same with confidence."""
    keys = command_keys(next_action)
    if not keys:
        return None
    open_ = memory.open_episodes
    if not open_:
        return None
    episodes = other_runs(memory, [r["signature_uid"] for r in open_])
    for r in open_:
        command = r["command"] or ""
        if not _about(next_action, command, r["error"] or ""):
            continue
        own = command_keys(command)
        new = [k for k in keys if not any(same_key(k, o) for o in own)]
        found = episodes.get(r["signature_uid"], [])
        helped = [k for e in found if e.resolved for s in e.helped for k in s.keys]
        if not new or any(same_key(k, h) for k in keys for h in helped):
            continue  # nothing new, or some of it got another run past the failure
        tried = sorted(
            {
                (e.trajectory, s.turn)
                for e in found
                for s in e.steps
                if not s.helped and all(any(same_key(k, x) for x in s.keys) for k in new)
            }
        )
        if len({t for t, _ in tried}) >= MIN_RUNS_FOR_REMINDER:
            return FailedElsewhere(
                r["signature"], tuple(k.key for k in new), list(r["failed_turns"]), tried
            )
    return None


def _about(action: str, command: str, error: str) -> bool:
    """The action names what failed: a value the error quotes (``pip install psycopg2``
    after ``No module named 'psycopg2'``) or an argument of the failing command (its script,
    test file or target). Steps between two failures are not all attempts at them."""
    names = [*quoted_values(error), *canonical(command).positional[1:]]
    return any(len(n) >= 3 and occurs(n, action) for n in names)


def command_keys(action: str) -> list[Key]:
    """The key actions of a command line, edits and inline code left out."""
    if is_read_only(action):
        return []
    step = step_of(TurnFacts(0, action), "", {}, {})
    return [k for k in step.keys if not k.tokens and not k.key.startswith(("edit ", "run "))]


def reminder_text(f: FailedElsewhere) -> str:
    runs = sorted({t for t, _ in f.tried_in})
    where = ", ".join(f"{t} turn {turn}" for t, turn in f.tried_in[:3])
    more = f" and {len(f.tried_in) - 3} more" if len(f.tried_in) > 3 else ""
    plural = "s" if len(runs) != 1 else ""
    did = " and ".join(
        f"set `{k[4:]}`" if k.startswith("set ") else f"ran `{first_line(k, 100)}`" for k in f.keys
    )
    return (
        f"Other runs {did} after the same failure (`{f.signature[:120]}`, here at turn "
        f"{f.own_turns[-1]}) and it came back: {where}{more} ({len(runs)} run{plural}); no "
        "run got past it that way."
    )
