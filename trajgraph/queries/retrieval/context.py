"""The context string of a question about one trajectory, within a token budget.

In budget order:

1. **code results and aggregate tables** (counts, first/last occurrences, changes between
   steps): small, and the answer itself when the question is an aggregate;
2. **values**: for a question about a current value or a change, each subject's value that
   nothing supersedes and the values it replaced, one line per subject;
3. **passages**: verbatim lines of the turns that answer (queries/retrieval/passages.py),
   chosen by the steps the question names, BM25 over the turns' lines and what the engine
   found (seeds, graph hops, identifier hits, current values), until the budget is full.

Blocks are printed in that order, passages by turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trajgraph.core.tokens import count_tokens, fit_head_tail
from trajgraph.queries.retrieval.aggregates import Table
from trajgraph.queries.retrieval.anchors import Anchors
from trajgraph.queries.retrieval.base import PRIORITY, Evidence
from trajgraph.queries.retrieval.lexical import TurnIndex, query_terms, terms
from trajgraph.queries.retrieval.passages import Passage, Signals, select

BLOCK_SHARE = 0.4  # code results, tables and values together, at most
ONE_BLOCK_SHARE = 0.25
MAX_VALUE_LINES = 8
MAX_SUBJECT = 60
VALUE_TRAIL = 4  # earlier values listed per subject
SIMILARITY_WEIGHT = 1.4

# How much an item the engine found raises its turn (times its own score, for ranked ones).
_BOOST = {
    "anchor": 1.0,
    "code": 0.6,
    "current": 0.8,
    "identifier": 0.6,
    "anchor_hop": 0.6,
    "hop": 0.45,
    "seed": 0.45,
    "keyword": 0.35,
    "superseded": 0.3,
}


@dataclass
class Built:
    text: str
    tokens: int
    passages: list[Passage] = field(default_factory=list)


def build_context(
    question: str,
    items: Sequence[Any],  # engine.Evidence
    index: TurnIndex,
    anchors: Anchors,
    tables: Sequence[Table],
    budget: int,
    *,
    states: dict[str, tuple[str, str, str]],
    similar: dict[int, float] | None = None,
    values: bool,
) -> Built:
    """``states``: uid -> (subject, attribute, value) of the state items; ``similar``: turn ->
    similarity of its embedding to the question's (every turn, when known)."""
    blocks: list[str] = []
    used = 0
    block_cap = int(budget * BLOCK_SHARE)
    for text in [*(e.text for e in items if e.kind == "code"), *(t.render() for t in tables)]:
        room = min(int(budget * ONE_BLOCK_SHARE), block_cap - used)
        if room < 16:
            break
        fitted, _ = fit_head_tail(text, room)
        blocks.append(fitted)
        used += count_tokens(fitted) + 1
    if values and not anchors:  # "current" is as of the end; a named step has its own view
        lines = value_lines(items, states, question)
        while lines:
            text = "[values]\n" + "\n".join(lines)
            cost = count_tokens(text) + 1
            if used + cost <= block_cap:
                blocks.append(text)
                used += cost
                break
            lines = lines[:-1]
    boosts, hints = _signals(items, index, states)
    for t, w in _similarity_boosts(similar or {}).items():
        if w > boosts.get(t, (0.0, ""))[0]:
            boosts[t] = (w, "similar to the question")
    signals = Signals(anchors, boosts, hints)
    passages = select(index, question, signals, budget - used)
    text = "\n".join([*blocks, *(p.text for p in passages)])
    tokens = count_tokens(text)
    # Passages are costed line by line and rendering joins pieces of a line, so the text is
    # never longer than counted; a budget is a promise all the same: drop the weakest.
    while tokens > budget and passages:
        passages.remove(min(passages, key=lambda p: p.score))
        text = "\n".join([*blocks, *(p.text for p in passages)])
        tokens = count_tokens(text)
    return Built(text, tokens, passages)


def _signals(
    items: Sequence[Any], index: TurnIndex, states: dict[str, tuple[str, str, str]]
) -> tuple[dict[int, tuple[float, str]], dict[int, list[str]]]:
    boosts: dict[int, tuple[float, str]] = {}
    hints: dict[int, list[str]] = {}
    tops: dict[str, float] = {}
    for e in items:
        if e.source in ("seed", "keyword"):
            tops[e.source] = max(tops.get(e.source, 0.0), e.score)
    for e in items:
        if e.turn is None or e.kind not in ("turn", "state") or e.turn not in index.actions:
            continue
        weight = _BOOST.get(e.source, 0.0)
        if e.source in tops and tops[e.source] > 0:
            weight *= e.score / tops[e.source]
        elif e.source in ("hop", "anchor_hop"):
            weight *= min(1.0, 2 * e.score)  # score 1/(hop+1): hop 1 keeps it all
        if weight > boosts.get(e.turn, (0.0, ""))[0]:
            boosts[e.turn] = (weight, e.why)
        value = states.get(e.uid, ("", "", ""))[2]
        if e.kind == "state" and value:
            first = value.strip().split("\n", 1)[0].strip()
            if len(first) >= 3:
                hints.setdefault(e.turn, []).append(first[:120])
    return boosts, hints


def _similarity_boosts(similar: dict[int, float]) -> dict[int, float]:
    """Every turn's similarity as a boost in [0, SIMILARITY_WEIGHT]: the most similar turn
    gets all of it, a turn at the median nothing."""
    if len(similar) < 2:
        return {}
    ranked = sorted(similar.values())
    median, top = ranked[len(ranked) // 2], ranked[-1]
    if top <= median:
        return {}
    span = top - median
    return {t: SIMILARITY_WEIGHT * (s - median) / span for t, s in similar.items() if s > median}


def value_lines(
    items: Sequence[Any], states: dict[str, tuple[str, str, str]], question: str
) -> list[str]:
    """One line per (subject, attribute) the question names a word of: the current value,
    then the ones it replaced."""
    asked = set(query_terms(question))
    groups: dict[tuple[str, str], list[tuple[Any, str]]] = {}
    for e in items:
        if e.kind == "state" and e.source in ("current", "superseded") and e.uid in states:
            subject, attribute, value = states[e.uid]
            if asked.isdisjoint(terms(f"{subject} {attribute}")):
                continue
            groups.setdefault((subject, attribute), []).append((e, value))
    ranked = sorted(
        groups.items(),
        key=lambda kv: (-max(1.0 if x.source == "current" else 0.5 for x, _ in kv[1]), kv[0]),
    )
    out: list[str] = []
    for (subject, attribute), group in ranked[:MAX_VALUE_LINES]:
        group.sort(key=lambda xv: -(xv[0].turn or 0))
        current = [xv for xv in group if xv[0].current]
        earlier = [xv for xv in group if not xv[0].current]
        name = subject if len(subject) <= MAX_SUBJECT else subject[: MAX_SUBJECT - 1] + "…"
        head = f"`{name}` {attribute}"
        parts = []
        if current:
            c, v = current[0]
            parts.append(f"{head} = {_short(v)} (turn {c.turn}, current value)")
        else:
            parts.append(head)
        if earlier:
            trail = ", ".join(f"{_short(v)} (turn {x.turn})" for x, v in earlier[:VALUE_TRAIL])
            parts.append(f"earlier: {trail}")
        out.append("; ".join(parts))
    return out


def _short(value: str, limit: int = 80) -> str:
    one = " ".join(value.split())
    return one if len(one) <= limit else one[: limit - 1] + "…"


# -- context of a question over many trajectories (no line-level evidence) ---------------------

ITEM_SHARE = 1 / 3  # no single item takes more than this share of the budget


def render_context(items: Sequence[Evidence], budget_tokens: int) -> tuple[str, int]:
    """Items by priority into the budget (each capped at ITEM_SHARE of it), printed by turn."""
    cap = max(16, int(budget_tokens * ITEM_SHARE))
    ranked = sorted(items, key=lambda e: (PRIORITY.get(e.source, 99), -e.score))
    chosen: list[tuple[Evidence, str]] = []
    used = 0
    for e in ranked:
        block = _block(e, cap)
        cost = count_tokens(block) + 1
        if used + cost > budget_tokens:
            continue
        chosen.append((e, block))
        used += cost
    chosen.sort(key=lambda p: (p[0].turn if p[0].turn is not None else 1 << 30, p[0].kind))
    text = "\n".join(block for _, block in chosen)
    return text, count_tokens(text)


def _block(e: Evidence, cap: int) -> str:
    where = f"turn {e.turn}" if e.turn is not None else "trajectory"
    head = f"[{e.trajectory_id} {where} · {e.kind} · {e.why}]\n"
    body, _ = fit_head_tail(e.text, max(8, cap - count_tokens(head)))
    return head + body
