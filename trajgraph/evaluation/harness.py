"""Evaluation harness: trajgraph against retrieval baselines on episodes with known answers.

For every question of every episode, each method builds a context of at most ``--budget``
tokens; the harness scores it without an LLM (trajgraph/evaluation/metrics.py, the same code
for every method):

* **answer-term coverage**: the share of the gold answer's key terms (numbers, identifiers,
  content words not in the question) found in the context;
* **needle recall**: the share of the question's needle turns that the context cites
  (a ``turn N`` header for that turn), for episodes that name needles (the synthetic ones).
* **answer-turn recall**: the same for the steps a real episode's gold answer names and
  its question does not (trajgraph.evaluation.metrics).

Methods, all at the same budget: ``long_context`` (the first 70 % and last 30 % of the budget
over the whole trajectory), ``bm25`` over turns, ``embedding_topk`` over turns, trajgraph
(``auto`` and each single mode), and ``whole_trajectory`` (no budget: the ceiling).

    trajgraph eval ../shared/ama-dev --budget 2000 [--markdown]   # AMA-Bench files as they are
    trajgraph eval --synthetic --horizons 8000 32000 --seeds 1    # synthetic needle recall
    trajgraph eval DIR --keep-tenant eval-dev   # keep the ingested graph for the next run
    trajgraph eval --compare A.json B.json      # two --save files: the gap and its interval
    trajgraph eval DIR --reader URL --judge URL # judged accuracy, AMA-Bench's protocol

With ``--judge`` each (question, method) row also gets ``accuracy`` (1 or 0) and ``invalid``
(the role whose reply could not be used, scored as wrong): ``--judge`` alone grades with the
configured LLM (evaluation.judge.Judge), ``--reader URL --judge URL`` with two servers the
command line names (evaluation.judge.ReaderJudge: docs/eval.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from trajgraph.core import settings as settings_mod
from trajgraph.core.errors import InputError
from trajgraph.core.settings import LOCAL_LLM_MODEL
from trajgraph.core.tokens import count_tokens
from trajgraph.evaluation.baselines import (
    Method,
    bm25,
    embedding_topk,
    long_context,
    render_turn,
    render_turn_fit,
    whole_trajectory,
)
from trajgraph.evaluation.episodes import load_episodes
from trajgraph.evaluation.metrics import answer_turns, coverage, key_terms, needle_recall
from trajgraph.evaluation.report import (
    by_horizon,
    domain_table,
    group_order,
    markdown,
    markdown_real,
    plot,
    pyplot,
    table,
)
from trajgraph.graph import governance
from trajgraph.graph.connection import open_driver
from trajgraph.graph.embedders import get_embedder
from trajgraph.jobs import ingest
from trajgraph.queries.retrieval.retriever import Retriever

__all__ = [
    "BASELINES",
    "TRAJGRAPH_MODES",
    "bm25",
    "by_horizon",
    "coverage",
    "domain_table",
    "evaluate",
    "key_terms",
    "load_episodes",
    "long_context",
    "main",
    "markdown",
    "markdown_real",
    "needle_recall",
    "plot",
    "render_turn",
    "render_turn_fit",
    "table",
    "whole_trajectory",
]

TRAJGRAPH_MODES = ("auto", "embedding", "graph", "keyword")
BASELINES = ("long_context", "bm25", "embedding_topk", "whole_trajectory")


def evaluate(
    episodes: list[dict[str, Any]],
    settings: settings_mod.Settings,
    budget: int,
    *,
    judge: Any = None,
    methods: Sequence[str] | None = None,
    log: Callable[[str], None] = lambda _m: None,
    tenant: str | None = None,
    keep_contexts: bool = False,
) -> list[dict[str, Any]]:
    """One row per (episode, question, method): needle recall, coverage and, with a
    ``judge`` (evaluation.judge.Judge), LLM-judged correctness.

    The episodes are ingested into a temporary tenant of the configured Neo4j, deleted
    afterwards; with ``tenant`` they go into that tenant and stay (ingest is incremental: a
    later run with the same tenant re-extracts, rewrites only what changed and embeds only
    new text, so a retrieval-only change is measured in minutes)."""
    keep = tenant is not None
    tenant = tenant or f"eval-{uuid.uuid4().hex[:8]}"
    driver = open_driver(settings.neo4j)
    embedder = get_embedder(settings.embedder)
    rows: list[dict[str, Any]] = []
    try:
        _ingest(episodes, settings, tenant, log)
        engine = Retriever(driver, database=settings.neo4j.database, embedder=embedder)
        available: dict[str, Method] = {
            "long_context": long_context,
            "bm25": bm25,
            "embedding_topk": embedding_topk(embedder.embed),
        }
        for mode in TRAJGRAPH_MODES:
            available[f"trajgraph_{mode}"] = _trajgraph(engine, tenant, mode)
        available["whole_trajectory"] = whole_trajectory
        chosen = {m: available[m] for m in (methods or available)}
        for ep in episodes:
            tokens = sum(count_tokens(render_turn(t)) for t in ep["turns"])
            log(f"{ep['id']}: {len(ep['turns'])} turns, {tokens} tokens")
            for qa in ep["qa_pairs"]:
                for name, method in chosen.items():
                    context = method(ep, qa["question"], budget)
                    row = {
                        "episode": ep["id"],
                        "domain": ep.get("domain", "-"),
                        "horizon": int(ep.get("horizon") or tokens),
                        "tokens": tokens,
                        "type": qa.get("type") or "other",
                        "question": qa["question"],
                        "method": name,
                        "context_tokens": count_tokens(context),
                        "needle_recall": needle_recall(context, qa.get("needles") or []),
                        "answer_turn_recall": needle_recall(
                            context, answer_turns(str(qa["answer"]), qa["question"])
                        ),
                        "coverage": coverage(context, str(qa["answer"]), qa["question"]),
                    }
                    if keep_contexts:
                        row["answer"] = str(qa["answer"])
                        row["context"] = context
                    if judge is not None:
                        graded = judge.grade(qa["question"], context, str(qa["answer"]))
                        row["accuracy"] = 1.0 if graded.correct else 0.0
                        row["invalid"] = graded.invalid  # the role whose reply was unusable
                        if keep_contexts:
                            row["reader_answer"] = graded.answer
                            row["judge_reply"] = graded.verdict or graded.reason
                    rows.append(row)
    finally:
        if not keep:
            governance.delete_tenant(driver, settings.neo4j.database, tenant)
        driver.close()
    return rows


def _ingest(
    episodes: list[dict[str, Any]],
    settings: settings_mod.Settings,
    tenant: str,
    log: Callable[[str], None],
) -> None:
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
            raise InputError(
                f"{summary.dead_lettered} episode record(s) were dead-lettered; "
                "check that every episode has id, task and turns"
            )


def _trajgraph(engine: Retriever, tenant: str, mode: str) -> Method:
    def method(episode: dict[str, Any], question: str, budget: int) -> str:
        return engine.retrieve(
            question, tenant=tenant, trajectory=episode["id"], mode=mode, budget_tokens=budget
        ).context

    return method


READER_MAX_TOKENS = 512
JUDGE_MAX_TOKENS = 256
COMPARE_ONLY = ("compare_methods", "metric", "by", "tolerance")  # flags that need --compare


def main(argv: Sequence[str] | None = None) -> int:
    p = _parser()
    args = _parse(p, argv)
    if args.compare:
        return _compare(p, args)
    if args.plot:
        pyplot()  # fails now, not after the whole run
    logging.getLogger("neo4j.notifications").setLevel(logging.ERROR)
    settings = settings_mod.load()
    episodes = _episodes(p, args)
    _check_methods(p, args.methods)
    judge = _judge(p, args, settings)
    say = (lambda m: print(m, file=sys.stderr)) if not args.json else (lambda _m: None)
    rows = evaluate(
        episodes,
        settings,
        args.budget,
        judge=judge,
        methods=args.methods,
        log=say,
        tenant=args.keep_tenant,
        keep_contexts=args.save is not None,
    )
    _report(rows, args, judge)
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="trajgraph eval",
        description="Score trajgraph against retrieval baselines on episodes with known answers "
        "(answer-term coverage and needle recall at a token budget; LLM-judged accuracy with "
        "--judge).",
    )
    p.add_argument(
        "paths", nargs="*", help="episode files or folders (AMA-Bench JSON as is, or JSONL)"
    )
    p.add_argument("--synthetic", action="store_true", help="generate episodes (needle recall)")
    p.add_argument("--horizons", type=int, nargs="+", default=[8000, 32000, 128000])
    p.add_argument("--seeds", type=int, default=1, help="synthetic episodes per horizon")
    p.add_argument("--first-seed", type=int, default=1, help="seeds first-seed, first-seed+1, …")
    p.add_argument("--budget", type=int, default=2000, help="context tokens per method")
    p.add_argument("--methods", nargs="+", help="subset of methods (default: all)")
    p.add_argument(
        "--keep-tenant",
        metavar="NAME",
        help="ingest into tenant NAME and keep it; a later run with the same NAME re-uses "
        "what did not change (embeddings included)",
    )
    _add_judge_flags(p)
    p.add_argument(
        "--questions-per-episode",
        type=int,
        metavar="N",
        help="score N questions of each episode, taken in turn from each capability (a subset "
        "for a slow model)",
    )
    p.add_argument("--plot", type=Path, help="write a PNG of needle recall against horizon")
    p.add_argument("--markdown", action="store_true", help="print the README table(s) too")
    p.add_argument("--json", action="store_true", help="print every scored row as JSON")
    p.add_argument(
        "--save", type=Path, help="write every scored row, with its context, to this JSON file"
    )
    _add_compare_flags(p)
    return p


def _add_judge_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--judge",
        nargs="?",
        const="",
        metavar="URL",
        help="LLM-judged accuracy. Alone: the configured LLM (TRAJGRAPH_LLM_MODEL) answers and "
        "grades. With a URL (an OpenAI-compatible base URL, or 'local' for `trajgraph llm`): "
        "AMA-Bench's protocol, this server's model says yes/no at temperature 0",
    )
    p.add_argument(
        "--reader",
        metavar="URL",
        help="with --judge URL: the server whose model answers from each method's context "
        "(default: the judge's)",
    )
    for role, bound in (("reader", READER_MAX_TOKENS), ("judge", JUDGE_MAX_TOKENS)):
        p.add_argument(
            f"--{role}-model", help=f"the {role}'s model (default: the first GET /models lists)"
        )
        p.add_argument(
            f"--{role}-key-env",
            metavar="VAR",
            help=f"the environment variable holding the {role}'s API key (default: "
            "OPENAI_API_KEY); never a key on the command line",
        )
        p.add_argument(
            f"--{role}-max-tokens",
            type=int,
            default=bound,
            help=f"bound on each {role} reply (default {bound})",
        )


def _add_compare_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("A.json", "B.json"),
        help="compare two --save files question by question: A - B per capability with a "
        "95%% interval (trajgraph/evaluation/compare.py); runs nothing",
    )
    p.add_argument(
        "--compare-methods",
        nargs="+",
        metavar="METHOD",
        help="with --compare: A's method and B's (one name for both; default trajgraph_auto)",
    )
    p.add_argument(
        "--metric",
        default="coverage",
        choices=("coverage", "answer_turn_recall", "needle_recall", "accuracy"),
        help="with --compare (default: coverage)",
    )
    p.add_argument("--by", choices=("type", "domain"), default="type", help="with --compare")
    p.add_argument(
        "--tolerance",
        type=float,
        default=0.01,
        help="with --compare: a gap is 'within' it only if its whole interval is",
    )


def _parse(p: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments, with the flags that only mean something with another refused."""
    args = p.parse_args(argv)
    if args.judge and args.judge != LOCAL_LLM_MODEL and "://" not in args.judge:
        # `--judge FILE`: the flag alone (as before URLs), then an episode path
        args.paths.append(args.judge)
        args.judge = ""
    endpoint_only = [
        f"--{r}-{o.replace('_', '-')}"
        for r in ("reader", "judge")
        for o in ("model", "key_env", "max_tokens")
        if getattr(args, f"{r}_{o}") != p.get_default(f"{r}_{o}")
    ]
    if not args.judge and (args.reader or endpoint_only):
        p.error(f"{', '.join(endpoint_only) or '--reader'}: only with --judge URL")
    given = [
        f"--{d.replace('_', '-')}" for d in COMPARE_ONLY if getattr(args, d) != p.get_default(d)
    ]
    if not args.compare and given:
        p.error(f"{', '.join(given)}: only with --compare")
    return args


def _compare(p: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``--compare A B``: two saved evaluations, read and compared; nothing is run."""
    if args.paths or args.synthetic:
        p.error("--compare reads two saved files and runs nothing: give no episodes")
    if args.compare_methods and len(args.compare_methods) > 2:
        p.error("--compare-methods takes A's method and B's")
    if not 0 < args.tolerance < 1:
        p.error("--tolerance is a share between 0 and 1")
    from trajgraph.evaluation import compare

    print(
        compare.main(
            args.compare,
            args.compare_methods,
            metric=args.metric,
            key=args.by,
            tolerance=args.tolerance,
        )
    )
    return 0


def _episodes(p: argparse.ArgumentParser, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The episodes to score: generated (``--synthetic``) or loaded from the paths given."""
    if args.synthetic:
        from trajgraph.evaluation.synthetic import generate

        seeds = range(args.first_seed, args.first_seed + args.seeds)
        return [generate(s, h) for h in args.horizons for s in seeds]
    if not args.paths:
        p.error("give episode files or folders, or --synthetic")
    episodes = load_episodes(args.paths)
    if args.questions_per_episode is not None:
        if args.questions_per_episode < 1:
            p.error("--questions-per-episode must be >= 1")
        episodes = [subset(e, args.questions_per_episode) for e in episodes]
    return episodes


def _check_methods(p: argparse.ArgumentParser, methods: Sequence[str] | None) -> None:
    known = {*BASELINES, *(f"trajgraph_{m}" for m in TRAJGRAPH_MODES)}
    unknown = set(methods or ()) - known
    if unknown:
        p.error(f"unknown method(s): {', '.join(sorted(unknown))}")


def _judge(
    p: argparse.ArgumentParser, args: argparse.Namespace, settings: settings_mod.Settings
) -> Any:
    """None without ``--judge``; the configured LLM's Judge with ``--judge`` alone; the
    ReaderJudge of the servers named with ``--judge URL``."""
    if args.judge is None:
        return None
    if args.judge:
        return _reader_judge(args, settings)
    from trajgraph.evaluation.judge import Judge
    from trajgraph.extractors.llm_client import optional_chat_client

    client = optional_chat_client(settings.llm)
    if client is None:
        p.error("--judge needs an LLM: set TRAJGRAPH_LLM_MODEL (and OPENAI_BASE_URL)")
    return Judge(client)


def _report(rows: list[dict[str, Any]], args: argparse.Namespace, judge: Any) -> None:
    """The scored rows as asked: saved, printed as JSON or tables, plotted; then the replies
    the judge could not use."""
    if args.save:
        args.save.parent.mkdir(parents=True, exist_ok=True)
        args.save.write_text(json.dumps(rows, ensure_ascii=False))
        rows = [{k: v for k, v in r.items() if k not in ("context", "answer")} for r in rows]
    if args.json:
        print(json.dumps(rows))
    elif args.synthetic:
        _print_synthetic(rows, args.budget, judge is not None, args.markdown)
    else:
        _print_real(rows, args.budget, judge is not None, args.markdown)
    if args.plot:
        plot(
            rows,
            args.plot,
            metric="needle_recall",
            title=f"needle recall at a {args.budget}-token budget",
        )
        print(f"wrote {args.plot}", file=sys.stderr)
    if judge is not None and judge.invalid:
        print(f"{judge.invalid} unusable repl(ies), scored as wrong:", file=sys.stderr)
        for why, n in sorted(judge.invalid_by.items()):
            print(f"  {why}: {n}", file=sys.stderr)


def _reader_judge(args: argparse.Namespace, settings: settings_mod.Settings) -> Any:
    """AMA-Bench's protocol with the servers the command line names. Both are set up before
    either is called (a missing key fails first), then asked for their model (GET /models),
    so that a wrong URL or key fails before the ingest, not after it."""
    from trajgraph.evaluation.judge import ReaderJudge

    roles = (("reader", args.reader or args.judge), ("judge", args.judge))
    endpoints = {role: _endpoint(role, url, args, settings) for role, url in roles}
    clients, where = {}, {}
    for role, endpoint in endpoints.items():
        clients[role], where[role] = _client(role, endpoint)
        print(f"{role}: {where[role]}", file=sys.stderr)
    return ReaderJudge(clients["reader"], clients["judge"], where=where)


def _endpoint(
    role: str, url: str, args: argparse.Namespace, settings: settings_mod.Settings
) -> settings_mod.LLMSettings:
    key_env = getattr(args, f"{role}_key_env")
    # The key: the named variable, else OPENAI_API_KEY (or its _FILE) as settings read it.
    key = settings_mod.key_from(os.environ, key_env) if key_env else settings.llm.api_key
    return settings_mod.chat_endpoint(
        url,
        model=getattr(args, f"{role}_model"),
        api_key=key,
        local=settings.local_llm,
        max_output_tokens=getattr(args, f"{role}_max_tokens"),
    )


def _client(role: str, endpoint: settings_mod.LLMSettings) -> tuple[Any, str]:
    """A ChatClient for one role, its model asked of the server when not given, and how to
    name it ("model at URL")."""
    from trajgraph.core.errors import ConfigError, LLMError
    from trajgraph.extractors.base import Stats
    from trajgraph.extractors.llm_client import ChatClient

    where = endpoint.base_url or ""
    try:
        client = ChatClient(endpoint, Stats())
        if not endpoint.model:
            # Two attempts: a server that is not there now is not there in a minute either.
            probe = ChatClient(
                replace(endpoint, max_attempts=min(2, endpoint.max_attempts)), Stats()
            )
            served = probe.served_models()
            probe.close()
            if not served:
                raise ConfigError(f"the {role} at {where} lists no model: give --{role}-model")
            client.close()
            endpoint = replace(endpoint, model=served[0])
            client = ChatClient(endpoint, Stats())
    except LLMError as e:
        raise LLMError(
            f"the {role} at {where} is not usable: {e}", status=e.status, fatal=e.fatal
        ) from e
    return client, f"{endpoint.model} at {where}"


def subset(episode: dict[str, Any], n: int) -> dict[str, Any]:
    """``episode`` with ``n`` of its questions, taken in turn from each capability (the
    first of each, then the second, ...), in the episode's order: a subset that still has
    every capability, the same on every run."""
    by_type: dict[str, list[int]] = {}
    for i, qa in enumerate(episode["qa_pairs"]):
        by_type.setdefault(str(qa.get("type") or "other"), []).append(i)
    order = group_order(by_type)
    chosen: list[int] = []
    for rank in range(max((len(v) for v in by_type.values()), default=0)):
        chosen += [by_type[t][rank] for t in order if rank < len(by_type[t])]
    keep = sorted(chosen[:n])
    return {**episode, "qa_pairs": [episode["qa_pairs"][i] for i in keep]}


def _print_synthetic(rows: list[dict[str, Any]], budget: int, judged: bool, md: bool) -> None:
    metrics = ["needle_recall", "coverage"] + (["accuracy"] if judged else [])
    for horizon in sorted({r["horizon"] for r in rows}):
        sub = [r for r in rows if r["horizon"] == horizon]
        n = len({(r["episode"]) for r in sub})
        print(f"\nhorizon {horizon} tokens ({n} episode(s)), budget {budget}")
        for metric in metrics:
            print(table(sub, metric))
    if judged:
        _print_invalid(rows)
    if md:
        print("\n" + markdown(rows, "needle_recall", ("causal", "state_updating", "overall")))


def _print_real(rows: list[dict[str, Any]], budget: int, judged: bool, md: bool) -> None:
    episodes = len({r["episode"] for r in rows})
    questions = len({(r["episode"], r["question"]) for r in rows})
    print(f"\n{episodes} episode(s), {questions} question(s), budget {budget} tokens")
    metrics = ["coverage"] + (["accuracy"] if judged else [])
    for extra in ("answer_turn_recall", "needle_recall"):
        if any(r.get(extra) is not None for r in rows):
            metrics.append(extra)
    for metric in metrics:
        print(f"\n{metric} by capability")
        print(table(rows, metric))
        print(f"\n{metric} by domain")
        print(domain_table(rows, metric))
    if judged:
        _print_invalid(rows)
    if md:
        print("\n" + markdown_real(rows, "coverage"))
        if judged:
            print("\n" + markdown_real(rows, "accuracy"))


def _print_invalid(rows: list[dict[str, Any]]) -> None:
    """Per method, the replies that could not be used (scored as wrong), by role."""
    print("\nunusable replies (scored as wrong): reader · judge, of questions")
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == method]
        reader = sum(r.get("invalid") == "reader" for r in mine)
        judge = sum(r.get("invalid") == "judge" for r in mine)
        print(f"{method:<20}{reader:>6} ·{judge:>4} of {len(mine)}")


if __name__ == "__main__":
    raise SystemExit(main())
