"""Leave-one-out replay of cross-run lessons on real runs, next to a BM25 baseline.

The corpus (default ../shared/corpora/swebench-django-mini-swe-agent: 80 mini-swe-agent runs
on Django issues) is ingested once into a temporary tenant (heuristic extractor, no
embeddings; the wall time is reported). Then, for every failure of every run T whose
signature also occurs in another run, ``lessons`` is asked about T's failing turn (T itself
is always left out) at a token budget, and the answer is judged against T's own log:

* T's **oracle** is computed from T's raw turns, not from the graph: the log is read again,
  its windows extracted and its episodes derived (extractors/resolutions.py) in this process;
* **hit@k**: when T got past the failure, one of the first k resolutions the answer shows
  shares its key action with a step of T's resolution; when T never got past it, the
  answer shows any resolution at all;
* **any lesson**: the answer shows at least one resolution;
* **false hints**: resolutions among the first three whose key action T tried and the
  failure came back after (an attempt that did not help T), and that T's resolution does
  not share.

The reminder rule ``failed_elsewhere`` is asked before every step a run took while one of
its failures was open (by its log), as of that step; a reminder is confirmed when the other
runs' logs show the action as an attempt the same failure followed, and no run's
resolution shares it.

The baseline is BM25 over the other runs' turns (action and observation) for T's error
line, packed into the same token budget; a returned turn is judged by its own key action
(read in its run after that run's latest earlier failure) exactly like a resolution step.
``lessons`` latency is measured per call (p50/p95), BM25's too.

With ``--ceiling`` each failure T got past is asked once more at the largest budget, every
resolution shown: the share of them where some other run's resolution shares T's key action
is what no ranking of the same answers can beat (hit@3's ceiling under these definitions).

    python -m bench.lessons_replay [--corpus DIR] [--budget 500] [--limit N] [--json]
        [--ceiling]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import neo4j

from trajgraph.core import settings as settings_mod
from trajgraph.core.tokens import count_tokens
from trajgraph.extractors.heuristic import HeuristicExtractor
from trajgraph.extractors.merge import merge
from trajgraph.extractors.resolutions import (
    Episode,
    Key,
    Step,
    episodes,
    share_key_action,
    turn_steps,
)
from trajgraph.extractors.windows import build_windows
from trajgraph.graph import governance
from trajgraph.graph.connection import open_driver
from trajgraph.graph.lesson_rows import full_error_line, turn_facts
from trajgraph.jobs import ingest
from trajgraph.pipelines.adapters import normalize, split_records
from trajgraph.queries.lessons import lessons
from trajgraph.queries.lessons.lookup import MAX_BUDGET, RERUN

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "corpora" / "swebench-django-mini-swe-agent"
_WORD = re.compile(r"[A-Za-z0-9_]+")


@dataclass
class Run:
    """One trajectory, read from its log: turns, episodes and the key action of each turn."""

    id: str
    turns: list[dict[str, Any]]
    episodes: list[Episode]
    steps: dict[int, Step]
    errors: dict[int, dict[str, str]]  # turn → error value → signature


@dataclass
class Tally:
    failures: int = 0
    resolved: int = 0
    any_lesson: int = 0
    hit1: int = 0
    hit3: int = 0
    hits_unresolved: int = 0
    false_hints: int = 0
    hinted: int = 0  # failures with at least one false hint
    # --ceiling: failures T got past for which any resolution of the whole answer (at the
    # largest budget) shares T's key action: what no ranking of the same answers can beat
    reachable: int = 0
    seconds: list[float] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)
    by_signature: dict[str, list[int]] = field(default_factory=dict)  # failures, @1, @3


def read_runs(corpus: Path) -> list[Run]:
    extractor = HeuristicExtractor()
    runs = []
    for path in sorted(p for p in corpus.iterdir() if p.suffix == ".json"):
        for record in split_records(str(path), path.read_bytes()):
            for traj in normalize(record):
                windows = build_windows(traj, budget_tokens=2048)
                batch = extractor.extract_windows(windows, task=str(traj.get("task") or ""))
                merged = merge(traj["turns"], batch.extractions)
                facts, by_turn = turn_facts(traj["turns"], list(merged.states))
                runs.append(
                    Run(traj["id"], traj["turns"], episodes(facts), turn_steps(facts), by_turn)
                )
    return runs


def _ingest(corpus: Path, tenant: str, settings: settings_mod.Settings, tmp: Path) -> float:
    args = [str(corpus), "--tenant", tenant, "--extractor", "heuristic", "--embedder", "none",
            "--progress", "off", "--dead-letter", str(tmp / "dl")]  # fmt: skip
    started = time.perf_counter()
    summary = ingest.run(args, settings=settings)
    if summary.dead_lettered:
        raise SystemExit(f"{summary.dead_lettered} records were dead-lettered: see {tmp / 'dl'}")
    return time.perf_counter() - started


# -- the lessons' answer, judged --------------------------------------------------------------


def _keys(step_dicts: list[dict[str, Any]]) -> tuple[Key, ...]:
    keys = tuple(
        Key(k["key"], tuple(k["tokens"])) for s in step_dicts for k in s.get("key_actions", [])
    )
    return keys or (RERUN,)


def t_keys(e: Episode) -> tuple[Key, ...]:
    """What T did to get past the failure (a re-run with nothing in between: RERUN)."""
    keys = tuple(k for s in e.steps for k in s.keys)
    return keys or (RERUN,)


def t_attempt_keys(e: Episode) -> tuple[Key, ...]:
    return tuple(k for group in e.attempts for s in group for k in s.keys)


def judge(e: Episode, candidates: list[tuple[Key, ...]]) -> tuple[bool, bool, int]:
    """(hit@1, hit@3, false hints) of ranked candidates (each a tuple of key actions)."""
    if not e.resolved:
        hit = bool(candidates)
        return hit, hit, 0
    mine, tried = t_keys(e), t_attempt_keys(e)
    hits = [share_key_action(c, mine) for c in candidates]
    false = sum(
        1 for c in candidates[:3] if share_key_action(c, tried) and not share_key_action(c, mine)
    )
    return any(hits[:1]), any(hits[:3]), false


def replay_lessons(
    driver: neo4j.Driver,
    database: str,
    tenant: str,
    runs: list[Run],
    budget: int,
    limit: int,
    ceiling: bool = False,
) -> tuple[Tally, list[tuple[Run, Episode]]]:
    seen_in: dict[str, set[str]] = {}
    for run in runs:
        for e in run.episodes:
            seen_in.setdefault(e.signature, set()).add(run.id)
    cases = [
        (run, e) for run in runs for e in run.episodes if len(seen_in[e.signature] - {run.id}) >= 1
    ][: limit or None]
    tally = Tally()

    def ask(run: Run, e: Episode, at: int) -> tuple[Any, list[tuple[Key, ...]]]:
        """The answer about T's failing turn at ``at`` tokens, and its resolutions' keys."""
        answer = lessons(
            driver,
            database=database,
            tenant=tenant,
            trajectory=run.id,
            turn=e.failed_turns[0],
            budget=at,
        )
        shown = next((s for s in answer.signatures if s["signature"] == e.signature), None)
        return answer, [_keys(r["steps"]) for r in (shown or {}).get("resolutions", [])]

    for run, e in cases:
        started = time.perf_counter()
        answer, candidates = ask(run, e, budget)
        tally.seconds.append(time.perf_counter() - started)
        _count(tally, e, candidates)
        if ceiling and e.resolved:
            _, every = ask(run, e, MAX_BUDGET)
            tally.reachable += any(share_key_action(c, t_keys(e)) for c in every)
        if len(tally.examples) < 4 and candidates and e.resolved:
            tally.examples.append(f"{run.id} turn {e.failed_turns[0]}: {answer.text[:400]}")
    return tally, cases


def _count(tally: Tally, e: Episode, candidates: list[tuple[Key, ...]]) -> None:
    tally.failures += 1
    tally.resolved += e.resolved
    tally.any_lesson += bool(candidates)
    h1, h3, false = judge(e, candidates)
    per = tally.by_signature.setdefault(e.signature, [0, 0, 0])
    per[0] += 1
    per[1] += h1
    per[2] += h3
    tally.hit1 += h1
    tally.hit3 += h3
    if not e.resolved:
        tally.hits_unresolved += h1
    tally.false_hints += false
    tally.hinted += false > 0


# -- the baseline: BM25 over the other runs' turns at the same budget -------------------------


class BM25:
    def __init__(self, runs: list[Run]) -> None:
        self.docs: list[tuple[str, int, Counter[str], int]] = []  # run, turn, tf, length
        df: Counter[str] = Counter()
        for run in runs:
            for t in run.turns:
                terms = _terms(f"{t['action']}\n{t['observation']}")
                self.docs.append((run.id, int(t["idx"]), Counter(terms), len(terms)))
                df.update(set(terms))
        self.n = len(self.docs)
        self.avg = sum(d[3] for d in self.docs) / max(1, self.n)
        self.idf = {w: math.log(1 + (self.n - c + 0.5) / (c + 0.5)) for w, c in df.items()}
        self.turns = {(run.id, int(t["idx"])): t for run in runs for t in run.turns}

    def search(self, query: str, exclude: str, budget: int) -> list[tuple[str, int]]:
        q = set(_terms(query))
        scored = []
        for run, turn, tf, length in self.docs:
            if run == exclude:
                continue
            s = 0.0
            for w in q:
                f = tf.get(w)
                if f:
                    s += self.idf[w] * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * length / self.avg))
            if s > 0:
                scored.append((s, run, turn))
        scored.sort(key=lambda x: (-x[0], x[1], x[2]))
        out, used = [], 0
        for _, run, turn in scored:
            t = self.turns[(run, turn)]
            block = f"[{run} turn {turn}]\naction: {t['action']}\nobservation: {t['observation']}"
            cost = min(count_tokens(block[:6000]), budget // 3)  # long turns are cut to a third
            if used + cost > budget:
                if used >= budget - 20:
                    break
                continue
            out.append((run, turn))
            used += cost
        return out


def _terms(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def replay_bm25(runs: list[Run], cases: list[tuple[Run, Episode]], budget: int) -> Tally:
    index = BM25(runs)
    by_id = {r.id: r for r in runs}
    tally = Tally()
    for run, e in cases:
        turn = e.failed_turns[0]
        error = _error_line(run, turn, e.signature)
        started = time.perf_counter()
        found = index.search(error, run.id, budget)
        tally.seconds.append(time.perf_counter() - started)
        candidates = [
            by_id[r].steps[t].keys for r, t in found if t in by_id[r].steps
        ]  # turns that change nothing (reads, the failing runs) are no resolution
        _count(tally, e, candidates)
    return tally


def _error_line(run: Run, turn: int, sig: str) -> str:
    obs = next(t["observation"] for t in run.turns if int(t["idx"]) == turn)
    value = next((v for v, s in run.errors.get(turn, {}).items() if s == sig), "")
    return full_error_line(obs, value) or value


# -- the reminder rule failed_elsewhere, step by step ---------------------------------------------


@dataclass
class RemindTally:
    steps: int = 0  # steps taken while the run had an open failure (by its log)
    fired: int = 0
    confirmed: int = 0
    seconds: list[float] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)


def replay_remind(driver: neo4j.Driver, database: str, tenant: str, runs: list[Run]) -> RemindTally:
    """Ask the rule before every step a run took with a failure open (as its log shows), as
    of that step; a reminder is confirmed when, in the logs of the runs it names, every
    cited turn is an attempt the same failure followed, and no run's resolution of that
    failure shares the action's key."""
    from trajgraph.queries.lessons import hints
    from trajgraph.queries.memory import open_memory

    by_id = {r.id: r for r in runs}
    tally = RemindTally()
    for run in runs:
        for t in run.turns[1:]:
            turn = int(t["idx"])
            if not any(
                e.failed_turns[0] < turn and (e.resolved_turn is None or e.resolved_turn >= turn)
                for e in run.episodes
            ):
                continue
            tally.steps += 1
            started = time.perf_counter()
            with open_memory(
                driver, database=database, tenant=tenant, trajectory=run.id, before_turn=turn
            ) as memory:
                found = hints.failed_elsewhere(memory, t["action"])
            tally.seconds.append(time.perf_counter() - started)
            if found is None:
                continue
            tally.fired += 1
            ok = _confirm(found, by_id, run.id, t["action"])
            tally.confirmed += ok
            if len(tally.examples) < 4:
                text = hints.reminder_text(found)
                tally.examples.append(f"{'ok' if ok else 'WRONG'} {run.id} turn {turn}: {text}")
    return tally


def _confirm(found: Any, by_id: dict[str, Run], asking: str, action: str) -> bool:
    """Every cited turn of another run is, by that run's log, an attempt the same failure
    followed that did what the action adds; no run's resolution shares any of the action."""
    from trajgraph.queries.lessons.hints import command_keys

    new = [Key(k) for k in found.keys]
    for other, turn in found.tried_in:
        run = by_id.get(other)
        if run is None or other == asking:
            return False
        attempts = [
            s
            for e in run.episodes
            if e.signature == found.signature
            for group in e.attempts
            for s in group
            if s.turn == turn
        ]
        if not any(all(k in s.keys for k in new) for s in attempts):
            return False
    helped = [
        k
        for r in by_id.values()
        if r.id != asking
        for e in r.episodes
        if e.signature == found.signature
        for s in e.steps
        for k in s.keys
    ]
    return not share_key_action(command_keys(action), helped)


# -- report -------------------------------------------------------------------------------------


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.1f} %" if b else "-"


def _ms(xs: list[float], q: float) -> str:
    if not xs:
        return "-"
    xs = sorted(xs)
    return f"{xs[min(len(xs) - 1, int(q * len(xs)))] * 1000:.0f} ms"


def table(rows: list[tuple[str, Tally]]) -> str:
    out = [
        "| method | failures | got past in T | any lesson | hit@1 | hit@3 "
        "| hit@1 · @3 where T got past | answers where T never got past "
        "| false hints (top 3) | failures with a false hint | p50 | p95 |",
        "|" + "---|" * 12,
    ]
    for name, t in rows:
        never = t.failures - t.resolved
        past1 = t.hit1 - t.hits_unresolved
        past3 = t.hit3 - t.hits_unresolved
        out.append(
            f"| {name} | {t.failures} | {t.resolved} | {_pct(t.any_lesson, t.failures)} | "
            f"{_pct(t.hit1, t.failures)} | {_pct(t.hit3, t.failures)} | "
            f"{_pct(past1, t.resolved)} · {_pct(past3, t.resolved)} | "
            f"{t.hits_unresolved} of {never} | {t.false_hints} | "
            f"{_pct(t.hinted, t.failures)} | {_ms(t.seconds, 0.5)} | {_ms(t.seconds, 0.95)} |"
        )
    return "\n".join(out)


def by_signature(ours: Tally, base: Tally, least: int = 4) -> str:
    out = [
        "| signature (failures) | lessons hit@1 · @3 | BM25 hit@1 · @3 |",
        "|---|---|---|",
    ]
    rows = sorted(ours.by_signature.items(), key=lambda kv: (-kv[1][0], kv[0]))
    for sig, (n, h1, h3) in rows:
        if n < least:
            continue
        b = base.by_signature.get(sig, [n, 0, 0])
        name = sig if len(sig) <= 60 else sig[:59] + "…"
        out.append(f"| `{name}` ({n}) | {h1} · {h3} | {b[1]} · {b[2]} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--corpus", type=Path, default=CORPUS, help="a folder of trajectory files")
    p.add_argument("--budget", type=int, default=500, help="tokens of one answer")
    p.add_argument("--limit", type=int, default=0, help="at most N failures (0: all)")
    p.add_argument("--json", action="store_true", help="print the numbers as JSON too")
    p.add_argument(
        "--ceiling",
        action="store_true",
        help="also ask at the largest budget: how many fixes any ranking could put first",
    )
    args = p.parse_args(argv)
    if not args.corpus.is_dir():
        print(f"corpus not found at {args.corpus}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("neo4j.notifications").setLevel(logging.ERROR)
    settings = dataclasses.replace(settings_mod.load(), llm=settings_mod.LLMSettings())
    database = settings.neo4j.database
    driver = open_driver(settings.neo4j)
    tenant = f"lessons-{uuid.uuid4().hex[:8]}"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ingest_s = _ingest(args.corpus, tenant, settings, Path(tmp))
        started = time.perf_counter()
        runs = read_runs(args.corpus)
        oracle_s = time.perf_counter() - started
        ours, cases = replay_lessons(
            driver, database, tenant, runs, args.budget, args.limit, args.ceiling
        )
        base = replay_bm25(runs, cases, args.budget)
        reminders = replay_remind(driver, database, tenant, runs)
        rows = [(f"lessons ({args.budget} tokens)", ours), (f"BM25 ({args.budget} tokens)", base)]
        signatures = {e.signature for _, e in cases}
        print(
            f"corpus {args.corpus.name}: {len(runs)} runs, "
            f"{sum(len(r.turns) for r in runs)} turns; ingest {ingest_s:.1f} s "
            f"(heuristic extractor, no embeddings); oracle read the logs in {oracle_s:.1f} s\n"
            f"{len(cases)} failures of {len(signatures)} signatures that recur across runs\n"
        )
        print(table(rows))
        print("\n" + by_signature(ours, base))
        print(f"\nlessons latency: mean {statistics.mean(ours.seconds) * 1000:.0f} ms")
        if args.ceiling:
            best = ours.reachable + ours.hits_unresolved
            print(
                f"\nceiling ({MAX_BUDGET} tokens, every resolution shown): for "
                f"{ours.reachable} of the {ours.resolved} failures T got past, some other "
                f"run's resolution shares T's key action; no ranking of these answers can "
                f"reach hit@3 above {_pct(best, ours.failures)} ({best} of {ours.failures})"
            )
        print(
            f"\nremind rule failed_elsewhere: asked before {reminders.steps} steps taken with "
            f"a failure open; fired {reminders.fired} times, {reminders.confirmed} confirmed "
            f"by the other runs' logs; p50 {_ms(reminders.seconds, 0.5)}, "
            f"p95 {_ms(reminders.seconds, 0.95)} per step"
        )
        for line in reminders.examples:
            print("  " + line[:300])
        for line in ours.examples[:2]:
            print("\nexample: " + line)
        if args.json:
            print(
                json.dumps(
                    {
                        "ingest_s": round(ingest_s, 2),
                        "remind": {
                            "steps": reminders.steps,
                            "fired": reminders.fired,
                            "confirmed": reminders.confirmed,
                        },
                        **{
                            name: {
                                k: v
                                for k, v in dataclasses.asdict(t).items()
                                if k not in ("seconds", "examples", "by_signature")
                            }
                            | {"p50_ms": _ms(t.seconds, 0.5), "p95_ms": _ms(t.seconds, 0.95)}
                            for name, t in rows
                        },
                    }
                )
            )
    finally:
        governance.delete_tenant(driver, database, tenant)
        driver.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
