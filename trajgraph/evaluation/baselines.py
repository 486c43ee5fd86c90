"""Retrieval baselines of the evaluation harness, all over the raw turns of one episode.

* ``long_context``: the whole trajectory cut to the budget (its first 70 % and last 30 %);
* ``bm25``: turns ranked by BM25 against the question, packed until the budget is full;
* ``embedding_topk``: turns ranked by cosine similarity with the configured embedder;
* ``whole_trajectory``: every turn, no budget: the ceiling of what any context can cover.

A turn longer than a third of the budget keeps its head and tail, as trajgraph's items do.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from trajgraph.core.tokens import count_tokens, fit_head_tail

Method = Callable[[dict[str, Any], str, int], str]
_WORD = re.compile(r"[A-Za-z0-9_]+")


def render_turn(t: dict[str, Any]) -> str:
    return f"[turn {t['idx']}]\naction: {t['action']}\nobservation: {t['observation']}\n"


def whole_trajectory(episode: dict[str, Any], _question: str, _budget: int) -> str:
    """Every turn, unbudgeted: the coverage ceiling (many gold terms are paraphrases)."""
    return "".join(render_turn(t) for t in episode["turns"])


def long_context(episode: dict[str, Any], _question: str, budget: int) -> str:
    """Head 70 % and tail 30 % of the budget over the whole trajectory, in order."""
    fitted, _ = fit_head_tail(whole_trajectory(episode, "", budget), budget)
    return fitted


def bm25(episode: dict[str, Any], question: str, budget: int) -> str:
    docs = [terms(render_turn(t)) for t in episode["turns"]]
    n = len(docs)
    avg = sum(len(d) for d in docs) / max(1, n)
    df: Counter[str] = Counter(w for d in docs for w in set(d))
    q = terms(question)
    scores = []
    for i, d in enumerate(docs):
        tf = Counter(d)
        s = 0.0
        for w in q:
            if tf[w]:
                idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
                s += idf * tf[w] * 2.2 / (tf[w] + 1.2 * (0.25 + 0.75 * len(d) / avg))
        scores.append((s, i))
    return pack(episode, [i for s, i in sorted(scores, reverse=True) if s > 0], budget)


def embedding_topk(embed: Callable[[list[str]], list[list[float]]]) -> Method:
    cache: dict[str, list[list[float]]] = {}

    def method(episode: dict[str, Any], question: str, budget: int) -> str:
        key = episode["id"]
        if key not in cache:
            cache[key] = embed([render_turn(t)[:2000] for t in episode["turns"]])
        qv = embed([question])[0]
        sims = [
            (sum(a * b for a, b in zip(qv, v, strict=True)), i) for i, v in enumerate(cache[key])
        ]
        return pack(episode, [i for _, i in sorted(sims, reverse=True)], budget)

    return method


def pack(episode: dict[str, Any], ranked: Sequence[int], budget: int) -> str:
    """Turns in rank order while they fit (each at most a third of the budget), by turn."""
    chosen, used = [], 0
    for i in ranked:
        block = render_turn(episode["turns"][i])
        cost = count_tokens(block)
        if cost > budget // 3:
            block, _ = fit_head_tail(block, budget // 3)
            cost = count_tokens(block)
        if used + cost > budget:
            continue
        chosen.append(i)
        used += cost
    return "".join(render_turn_fit(episode["turns"][i], budget) for i in sorted(chosen))


def render_turn_fit(t: dict[str, Any], budget: int) -> str:
    block = render_turn(t)
    return fit_head_tail(block, budget // 3)[0] if count_tokens(block) > budget // 3 else block


def terms(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text) if len(w) > 1]
