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
import logging
import math
import re
import statistics
import sys
import tempfile
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trajgraph import settings as settings_mod
from trajgraph.errors import TrajgraphError
from trajgraph.graph import governance
from trajgraph.graph.connection import open_driver
from trajgraph.graph.embedders import get_embedder
from trajgraph.jobs import ingest
from trajgraph.pipelines.tokens import count_tokens, fit_head_tail
from trajgraph.queries.retrieval.engine import Retriever

TRAJGRAPH_MODES = ("auto", "embedding", "graph", "keyword")
BASELINES = ("long_context", "bm25", "embedding_topk")
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


def needle_recall(context: str, needles: Sequence[int]) -> float | None:
    """None for a question without needles (a count over the whole trajectory)."""
    if not needles:
        return None
    cited = {int(m) for m in _TURN_REF.findall(context)}
    return sum(1 for n in needles if n in cited) / len(needles)


def coverage(context: str, answer: str) -> float:
    terms = set(_terms(answer))
    have = set(_terms(context))
    return len(terms & have) / len(terms) if terms else 1.0


def evaluate(
    episodes: list[dict[str, Any]],
    settings: settings_mod.Settings,
    budget: int,
    *,
    judge: Any = None,
    methods: Sequence[str] | None = None,
    log: Callable[[str], None] = lambda _m: None,
) -> list[dict[str, Any]]:
    """One row per (episode, question, method): needle recall, coverage and, with a
    ``judge`` (bench.judge.Judge), LLM-judged correctness. The episodes are ingested into a
    temporary tenant of the configured Neo4j, which is deleted afterwards."""
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
            log(f"ingesting {len(episodes)} episode(s) into tenant {tenant}")
            summary = ingest.run(
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
            if summary.dead_lettered:
                raise TrajgraphError(
                    f"{summary.dead_lettered} episode record(s) were dead-lettered; "
                    "check that every episode has id, task and turns"
                )
        engine = Retriever(driver, database=settings.neo4j.database, embedder=embedder)
        available: dict[str, Method] = {
            "long_context": long_context,
            "bm25": bm25,
            "embedding_topk": embedding_topk(embedder.embed),
        }
        for mode in TRAJGRAPH_MODES:
            available[f"trajgraph_{mode}"] = _trajgraph(engine, tenant, mode)
        chosen = {m: available[m] for m in (methods or available)}
        for ep in episodes:
            tokens = sum(count_tokens(render_turn(t)) for t in ep["turns"])
            log(f"{ep['id']}: {len(ep['turns'])} turns, {tokens} tokens")
            for qa in ep["qa_pairs"]:
                for name, method in chosen.items():
                    context = method(ep, qa["question"], budget)
                    row = {
                        "episode": ep["id"],
                        "horizon": int(ep.get("horizon") or tokens),
                        "tokens": tokens,
                        "type": qa.get("type") or "other",
                        "method": name,
                        "needle_recall": needle_recall(context, qa.get("needles") or []),
                        "coverage": coverage(context, str(qa["answer"])),
                    }
                    if judge is not None:
                        ok = judge.score(qa["question"], context, str(qa["answer"]))
                        row["accuracy"] = 1.0 if ok else 0.0
                    rows.append(row)
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
    """Mean ``metric`` per method (rows) and capability (columns), plus overall; a question
    without a value for the metric (a count has no needles) is left out of that mean."""
    types = sorted({r["type"] for r in rows})
    by: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows:
        if r.get(metric) is None:
            continue
        by[(r["method"], r["type"])].append(r[metric])
        by[(r["method"], "overall")].append(r[metric])
    methods = list(dict.fromkeys(r["method"] for r in rows))
    cols = [t for t in types if any(by[(m, t)] for m in methods)] + ["overall"]
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


def by_horizon(rows: list[dict[str, Any]], metric: str) -> dict[str, dict[str, dict[int, float]]]:
    """{capability or "overall": {method: {horizon: mean metric}}}: the series of the plot."""
    acc: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for r in rows:
        if r.get(metric) is None:
            continue
        for cap in (r["type"], "overall"):
            acc[(cap, r["method"], r["horizon"])].append(r[metric])
    out: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for (cap, method, horizon), values in sorted(acc.items()):
        out[cap][method][horizon] = statistics.mean(values)
    return {c: dict(m) for c, m in out.items()}


def markdown(rows: list[dict[str, Any]], metric: str, capabilities: Sequence[str]) -> str:
    """A README table: one row per method, one column per horizon, each cell the scores of
    ``capabilities`` in order (``causal · state_updating · overall``)."""
    series = by_horizon(rows, metric)
    horizons = sorted({r["horizon"] for r in rows})
    caps = [c for c in capabilities if c in series]
    lines = [
        f"| method ({' · '.join(caps)}) | " + " | ".join(f"{h // 1000}k" for h in horizons) + " |",
        "|---|" + "---:|" * len(horizons),
    ]
    for method in dict.fromkeys(r["method"] for r in rows):
        cells = [
            " · ".join(f"{series[c].get(method, {}).get(h, float('nan')):.2f}" for c in caps)
            for h in horizons
        ]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path, *, metric: str, title: str) -> None:
    """Score against horizon, one panel per capability and overall, one line per method."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise TrajgraphError(
            "plotting needs matplotlib: pip install 'trajgraph[eval]' (or .[dev])"
        ) from e
    series = by_horizon(rows, metric)
    caps = [c for c in ("causal", "state_updating", "recall", "overall") if c in series]
    horizons = sorted({r["horizon"] for r in rows})
    cols = 2 if len(caps) > 1 else 1
    nrows = (len(caps) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.4 * nrows + 0.9), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax, cap in zip(flat, caps, strict=False):
        for method, points in series[cap].items():
            xs = sorted(points)
            style = "-" if method.startswith("trajgraph") else "--"
            main = method == "trajgraph_auto"  # what users get: drawn on top, and thicker
            ax.plot(
                xs,
                [points[x] for x in xs],
                style,
                marker="o",
                label=method,
                linewidth=3.2 if main else 1.4,
                zorder=3 if main else 2,
                alpha=1.0 if main else 0.8,
            )
        ax.set_xscale("log", base=2)
        ax.set_xticks(horizons, [f"{h // 1000}k" for h in horizons])
        ax.minorticks_off()
        ax.set_title(cap)
        ax.set_ylim(-0.03, 1.03)
        ax.set_ylabel(metric.replace("_", " "))
        ax.grid(alpha=0.3)
    for ax in flat[len(caps) :]:
        ax.set_visible(False)
    flat[-1].set_xlabel("horizon (tokens)")
    handles, labels = flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def load_episodes(paths: Sequence[str]) -> list[dict[str, Any]]:
    """AMA-Bench-style episodes (JSON list or JSONL): ``id``, ``turns`` and ``qa_pairs`` of
    ``{question, answer, type}`` (``needles``: optional turn ids). Errors name file and line."""
    out: list[dict[str, Any]] = []
    for p in paths:
        try:
            text = Path(p).read_text(encoding="utf-8")
        except OSError as e:
            raise TrajgraphError(f"{p}: cannot read: {e.strerror}") from e
        try:
            if text.lstrip().startswith("["):
                records = list(enumerate(json.loads(text), 1))
            else:
                records = [
                    (n, json.loads(line))
                    for n, line in enumerate(text.splitlines(), 1)
                    if line.strip()
                ]
        except json.JSONDecodeError as e:
            raise TrajgraphError(f"{p}: not JSON or JSONL: {e}") from e
        for n, ep in records:
            where = f"{p}: record {n}"
            if not isinstance(ep, dict) or not isinstance(ep.get("turns"), list):
                raise TrajgraphError(f"{where}: an episode needs a list of turns")
            qa = ep.get("qa_pairs")
            if not isinstance(qa, list) or not qa:
                raise TrajgraphError(f"{where}: no qa_pairs to score")
            for q in qa:
                if not isinstance(q, dict) or "question" not in q or "answer" not in q:
                    raise TrajgraphError(f"{where}: every qa_pair needs question and answer")
            ep.setdefault("id", f"{Path(p).stem}-{n}")
            ep.setdefault("task", "")
            for t_i, t in enumerate(ep["turns"]):
                t.setdefault("idx", t_i)
                t.setdefault("observation", "")
                t.setdefault("action", "")
            out.append(ep)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="trajgraph eval",
        description="Score trajgraph against retrieval baselines on episodes with known answers "
        "(needle recall and answer-term coverage at a token budget; LLM-judged accuracy with "
        "--judge).",
    )
    p.add_argument("paths", nargs="*", help="AMA-Bench-style episode files (JSON or JSONL)")
    p.add_argument("--synthetic", action="store_true", help="generate episodes (bench.synthetic)")
    p.add_argument("--horizons", type=int, nargs="+", default=[8000, 32000, 128000])
    p.add_argument("--seeds", type=int, default=1, help="synthetic episodes per horizon")
    p.add_argument("--first-seed", type=int, default=1, help="seeds first-seed, first-seed+1, …")
    p.add_argument("--budget", type=int, default=2000, help="context tokens per method")
    p.add_argument("--methods", nargs="+", help="subset of methods (default: all)")
    p.add_argument("--judge", action="store_true", help="LLM-judged accuracy (needs an LLM)")
    p.add_argument("--plot", type=Path, help="write a PNG of needle recall against horizon")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table too")
    p.add_argument("--json", action="store_true", help="print every scored row as JSON")
    args = p.parse_args(argv)
    logging.getLogger("neo4j.notifications").setLevel(logging.ERROR)
    settings = settings_mod.load()
    if args.synthetic:
        from trajgraph.evaluation.synthetic import generate

        seeds = range(args.first_seed, args.first_seed + args.seeds)
        episodes = [generate(s, h) for h in args.horizons for s in seeds]
    elif args.paths:
        episodes = load_episodes(args.paths)
    else:
        p.error("give episode files, or --synthetic")
    unknown = set(args.methods or ()) - {*BASELINES, *(f"trajgraph_{m}" for m in TRAJGRAPH_MODES)}
    if unknown:
        p.error(f"unknown method(s): {', '.join(sorted(unknown))}")
    judge = None
    if args.judge:
        from trajgraph.evaluation.judge import Judge
        from trajgraph.extractors.llm_client import optional_chat_client

        client = optional_chat_client(settings.llm)
        if client is None:
            p.error("--judge needs an LLM: set TRAJGRAPH_LLM_MODEL (and OPENAI_BASE_URL)")
        judge = Judge(client)
    say = (lambda m: print(m, file=sys.stderr)) if not args.json else (lambda _m: None)
    rows = evaluate(episodes, settings, args.budget, judge=judge, methods=args.methods, log=say)
    if args.json:
        print(json.dumps(rows))
    else:
        metrics = ["needle_recall", "coverage"] + (["accuracy"] if judge else [])
        for horizon in sorted({r["horizon"] for r in rows}):
            sub = [r for r in rows if r["horizon"] == horizon]
            n = len({(r["episode"]) for r in sub})
            print(f"\nhorizon {horizon} tokens ({n} episode(s)), budget {args.budget}")
            for metric in metrics:
                print(table(sub, metric))
        if args.markdown:
            caps = ("causal", "state_updating", "overall")
            print("\n" + markdown(rows, "needle_recall", caps))
    if args.plot:
        plot(
            rows,
            args.plot,
            metric="needle_recall",
            title=f"needle recall at a {args.budget}-token budget",
        )
        print(f"wrote {args.plot}", file=sys.stderr)
    if judge is not None and judge.invalid:
        print(f"judge: {judge.invalid} invalid repl(ies) scored as wrong", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
