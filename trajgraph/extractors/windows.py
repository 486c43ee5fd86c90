"""Token-budgeted extraction windows: (observation t-1, action t, observation t) per turn.

Budget split (after the section headers are paid for):

* the action gets what it needs, up to 1/4 of the budget, because actions are usually short
  and the command itself is what identifiers and state subjects are taken from;
* of the rest, observation t gets 2/3 and observation t-1 1/3: states are read from the
  current observation, the previous one is context (and the "before" side of diffs);
* whatever one part does not need flows to the others, so a short action or a short previous
  observation leaves more room for the current observation, and vice versa.

Parts over their share are cut with ``fit_head_tail`` (head and tail kept verbatim, an explicit
marker states how many tokens were dropped). ``Window.tokens`` is the exact token count of
``Window.text()`` and never exceeds the budget. Pure functions: the Beam stage calls them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trajgraph.core.env import DEFAULT_TENANT
from trajgraph.core.errors import ConfigError
from trajgraph.core.tokens import count_tokens, encode, fit_tokens

MIN_BUDGET_TOKENS = 64
ACTION_SHARE = 1 / 4
OBSERVATION_SHARE = 2 / 3  # of what is left after the action


@dataclass(frozen=True)
class Window:
    tenant: str
    trajectory_id: str
    turn: int
    prev_turn: int | None
    prev_observation: str
    action: str
    observation: str
    truncated: bool
    tokens: int

    def text(self) -> str:
        """The exact text an extractor sees (and that the verbatim checks run against)."""
        return render_window(
            self.turn, self.prev_turn, self.prev_observation, self.action, self.observation
        )


def _section(header: str, body: str) -> str:
    return f"### {header}\n{body}" + ("" if body.endswith("\n") else "\n")


def render_window(
    turn: int, prev_turn: int | None, prev_observation: str, action: str, observation: str
) -> str:
    parts = []
    if prev_turn is not None:
        parts.append(_section(f"observation before (turn {prev_turn})", prev_observation))
    parts.append(_section(f"action (turn {turn})", action))
    parts.append(_section(f"observation (turn {turn})", observation))
    return "".join(parts)


def split_budget(
    available: int, need_action: int, need_obs: int, need_prev: int
) -> tuple[int, int, int]:
    """Token shares (action, observation, previous observation) summing to <= ``available``."""
    action = min(need_action, int(available * ACTION_SHARE))
    rest = available - action
    obs_share = int(rest * OBSERVATION_SHARE)
    prev_share = rest - obs_share
    if need_prev <= prev_share:
        prev = need_prev
        obs = min(need_obs, rest - prev)
    elif need_obs <= obs_share:
        obs = need_obs
        prev = min(need_prev, rest - obs)
    else:
        obs, prev = obs_share, prev_share
    # The action takes back whatever both observations leave unused.
    action = min(need_action, available - obs - prev)
    return action, obs, prev


def build_windows(traj: dict[str, Any], *, budget_tokens: int) -> list[Window]:
    """One window per turn of a canonical trajectory, each within ``budget_tokens`` tokens."""
    if budget_tokens < MIN_BUDGET_TOKENS:
        raise ConfigError(
            f"token budget {budget_tokens} is too small for a window (min {MIN_BUDGET_TOKENS})"
        )
    tenant = str(traj.get("tenant") or DEFAULT_TENANT)
    trajectory_id = str(traj.get("id", ""))
    windows: list[Window] = []
    prev_turn: int | None = None
    prev_obs = ""
    prev_tokens: list[int] = []
    for turn in traj.get("turns") or []:
        idx = int(turn["idx"])
        action = turn.get("action") or ""
        obs = turn.get("observation") or ""
        obs_tokens = encode(obs)
        windows.append(
            _build_one(
                tenant,
                trajectory_id,
                budget_tokens,
                idx,
                prev_turn,
                (prev_obs, prev_tokens),
                (action, encode(action)),
                (obs, obs_tokens),
            )
        )
        prev_turn, prev_obs, prev_tokens = idx, obs, obs_tokens
    return windows


_Part = tuple[str, Sequence[int]]


def _build_one(
    tenant: str,
    trajectory_id: str,
    budget: int,
    turn: int,
    prev_turn: int | None,
    prev: _Part,
    action: _Part,
    obs: _Part,
) -> Window:
    available = budget - count_tokens(render_window(turn, prev_turn, "", "", ""))
    need = [len(action[1]), len(obs[1]), len(prev[1]) if prev_turn is not None else 0]
    shares = list(split_budget(available, *need))
    parts = (action, obs, prev)
    for _ in range(8):
        fitted = [fit_tokens(p[0], p[1], share) for p, share in zip(parts, shares, strict=True)]
        (a_text, a_cut), (o_text, o_cut), (p_text, p_cut) = fitted
        if prev_turn is None:
            p_text, p_cut = "", False
        text = render_window(turn, prev_turn, p_text, a_text, o_text)
        used = count_tokens(text)
        if used <= budget:
            return Window(
                tenant=tenant,
                trajectory_id=trajectory_id,
                turn=turn,
                prev_turn=prev_turn,
                prev_observation=p_text,
                action=a_text,
                observation=o_text,
                truncated=a_cut or o_cut or p_cut,
                tokens=used,
            )
        # Tokens merged differently across section joins: shrink the largest part and retry.
        largest = max(range(3), key=lambda i: shares[i])
        shares[largest] = max(0, shares[largest] - (used - budget) - 1)
    raise AssertionError(f"window for turn {turn} does not fit {budget} tokens")  # unreachable
