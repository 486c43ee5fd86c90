"""Evaluation harness: trajgraph against retrieval baselines on episodes with known answers.

For every question of every episode, each method builds a context of at most ``--budget``
tokens; the harness scores it without an LLM:

* **needle recall**: the share of the question's needle turns that the context cites
  (a ``turn N`` header for that turn);
* **coverage**: the share of the gold answer's terms that appear in the context.

Methods, all at the same budget: ``long_context`` (the first 70 % and last 30 % of the budget
over the whole trajectory), ``bm25`` over turns, ``embedding`` top-k over turns, and trajgraph
(``auto`` and each single mode).

    python -m bench.eval --synthetic --horizons 8000 32000 --seeds 1 [--budget 2000]
    python -m bench.eval episodes.jsonl            # AMA-Bench-style files with qa_pairs
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import tempfile
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from graph import governance
from graph.connection import open_driver
from graph.embedders import get_embedder
from pipelines import ingest
from pipelines.tokens import count_tokens, fit_head_tail
from queries.retrieve import Retriever
from trajgraph import settings as settings_mod

TRAJGRAPH_MODES = ("auto", "embedding", "graph", "keyword")
_WORD = re.compile(r"[A-Za-z0-9_]+")
_TURN_REF = re.compile(r"turn (\d+)")

Method = Callable[[dict[str, Any], str, int], str]


def render_turn(t: dict[str, Any]) -> str:
    return f"[turn {t['idx']}]\naction: {t['action']}\nobservation: {t['observation']}\n"


def long_context(episode: dict[str, Any], _question: str, budget: int) -> str:
    """Head 70 % and tail 30 % of the budget over the whole trajectory, in order."""
    text = "".join(render_turn(t) for t in episode["turns"])
    fitted, _ = fit_head_tail(text, budget)
    return fitted


def bm25(episode: dict[str, Any], question: str, budget: int) -> str:
    docs = [_terms(render_turn(t)) for t in episode["turns"]]
    n = len(docs)
    avg = sum(len(d) for d in docs) / max(1, n)
    df: Counter[str] = Counter(w for d in docs for w in set(d))
    q = _terms(question)
    scores = []
    for i, d in enumerate(docs):
        tf = Counter(d)
        s = 0.0
        for w in q:
            if tf[w]:
                idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
                s += idf * tf[w] * 2.2 / (tf[w] + 1.2 * (0.25 + 0.75 * len(d) / avg))
        scores.append((s, i))
    return _pack(episode, [i for s, i in sorted(scores, reverse=True) if s > 0], budget)


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
        return _pack(episode, [i for _, i in sorted(sims, reverse=True)], budget)

    return method


def _pack(episode: dict[str, Any], ranked: Sequence[int], budget: int) -> str:
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


def _terms(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text) if len(w) > 1]


def needle_recall(context: str, needles: Sequence[int]) -> float:
    cited = {int(m) for m in _TURN_REF.findall(context)}
    return sum(1 for n in needles if n in cited) / len(needles) if needles else 1.0


def coverage(context: str, answer: str) -> float:
    terms = set(_terms(answer))
    have = set(_terms(context))
    return len(terms & have) / len(terms) if terms else 1.0


def evaluate(
    episodes: list[dict[str, Any]], settings: settings_mod.Settings, budget: int
) -> list[dict[str, Any]]:
    """One row per (episode, question, method) with both scores."""
    tenant = f"eval-{uuid.uuid4().hex[:8]}"
    driver = open_driver(settings.neo4j)
    embedder = get_embedder(settings.embedder)
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "episodes.jsonl"
            path.write_text(
                "".join(
                    json.dumps({k: e[k] for k in ("id", "task", "turns") if k in e}) + "\n"
                    for e in episodes
                )
            )
            ingest.run(
                [
                    str(path),
                    "--tenant",
                    tenant,
                    "--format",
                    "canonical",
                    "--progress",
                    "off",
                    "--dead-letter",
                    str(Path(tmp) / "dl"),
                ],
                settings=settings,
            )
        engine = Retriever(driver, database=settings.neo4j.database, embedder=embedder)
        methods: dict[str, Method] = {
            "long_context": long_context,
            "bm25": bm25,
            "embedding_topk": embedding_topk(embedder.embed),
        }
        for mode in TRAJGRAPH_MODES:
            methods[f"trajgraph_{mode}"] = _trajgraph(engine, tenant, mode)
        for ep in episodes:
            horizon = sum(count_tokens(render_turn(t)) for t in ep["turns"])
            for qa in ep["qa_pairs"]:
                for name, method in methods.items():
                    context = method(ep, qa["question"], budget)
                    rows.append(
                        {
                            "episode": ep["id"],
                            "horizon": horizon,
                            "type": qa.get("type", "other"),
                            "method": name,
                            "needle_recall": needle_recall(context, qa.get("needles") or []),
                            "coverage": coverage(context, str(qa["answer"])),
                        }
                    )
    finally:
        governance.delete_tenant(driver, settings.neo4j.database, tenant)
        driver.close()
    return rows


def _trajgraph(engine: Retriever, tenant: str, mode: str) -> Method:
    def method(episode: dict[str, Any], question: str, budget: int) -> str:
        return engine.retrieve(
            question, tenant=tenant, trajectory=episode["id"], mode=mode, budget_tokens=budget
        ).context

    return method


def table(rows: list[dict[str, Any]], metric: str = "needle_recall") -> str:
    """Mean ``metric`` per method (rows) and capability (columns), plus overall."""
    types = sorted({r["type"] for r in rows})
    by: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows:
        by[(r["method"], r["type"])].append(r[metric])
        by[(r["method"], "overall")].append(r[metric])
    methods = list(dict.fromkeys(r["method"] for r in rows))
    cols = [*types, "overall"]
    out = [f"{metric:<20}" + "".join(f"{c:>19}" for c in cols)]
    for m in methods:
        out.append(
            f"{m:<20}"
            + "".join(
                f"{statistics.mean(by[(m, c)]):>19.2f}" if by[(m, c)] else f"{'-':>19}"
                for c in cols
            )
        )
    return "\n".join(out)


def load_episodes(paths: Sequence[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in paths:
        text = Path(p).read_text(encoding="utf-8")
        if text.lstrip().startswith("["):
            out.extend(json.loads(text))
        else:
            out.extend(json.loads(line) for line in text.splitlines() if line.strip())
    for e in out:
        for t_i, t in enumerate(e["turns"]):
            t.setdefault("idx", t_i)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="needle recall and coverage against baselines")
    p.add_argument("paths", nargs="*", help="episode files with qa_pairs (JSON or JSONL)")
    p.add_argument("--synthetic", action="store_true", help="generate episodes instead")
    p.add_argument("--horizons", type=int, nargs="+", default=[8000, 32000])
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--budget", type=int, default=2000)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.synthetic:
        from bench.synthetic import generate

        episodes = [generate(s, h) for h in args.horizons for s in range(1, args.seeds + 1)]
    else:
        episodes = load_episodes(args.paths)
    rows = evaluate(episodes, settings_mod.load(), args.budget)
    if args.json:
        print(json.dumps(rows))
        return 0
    for horizon in sorted({r["horizon"] for r in rows}):
        sub = [r for r in rows if r["horizon"] == horizon]
        print(f"\nhorizon {horizon} tokens, budget {args.budget}")
        print(table(sub, "needle_recall"))
        print(table(sub, "coverage"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
