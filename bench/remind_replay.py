"""Replay evaluation of reminder-or-silence: how often does a reminder fire, and is it right?

Every real trajectory in ../shared/trajectories and a set of synthetic ones
(trajgraph/evaluation/synthetic.py) is ingested once (heuristic extractor, no embeddings)
into a temporary tenant. Then each trajectory is replayed step by step: for turn
t = 1 … n-1 the reminder is asked about the action of turn t with ``before_turn=t``, i.e.
against the graph of turns < t (the as-of view equals a graph built from those turns
alone; ``--check-prefix`` proves it here by ingesting real prefixes and comparing, and
tests/integration/queries/test_remind.py pins it).

Each fired reminder is checked against the **log** (raw actions and observations, not the
graph) by an oracle for the rule it names:

* ``repeated_failure``: an earlier run of the same or a near-identical action (the canonical
  forms of extractors/actions.py) failed, judged from its raw observation (non-zero return
  code, traceback, ``FAILED``, ``Error:``, ``Command execution failed`` ...), that run is the
  latest run of it, only read-only steps lie in between, and the reminder cites it;
* ``changed_state``: the action uses ``key=old`` while the log assigned ``key`` another value
  after ``old`` (in an action or an observation), or it names a path an earlier ``rm``
  removed and nothing wrote since; the reminder cites the change;
* ``undoes_fix``: the action reverts a file or re-sets a key that an earlier edit wrote, and
  a command that failed before that edit (its output naming the key or file) passed after
  it and still passes; the reminder cites the edit.

A fired reminder whose oracle holds (with the cited turn) is a true positive, any other
fired reminder a false positive. Oracle positives the reminder stayed silent on are misses.

    python -m bench.remind_replay [--seeds 3] [--horizons 30000 100000] [--check-prefix 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import re
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
from trajgraph.extractors.actions import (
    Canon,
    assignments,
    canonical,
    canonical_command,
    is_read_only,
    mentions_path,
    near_identical,
    revert_of,
    same_path,
    set_values,
    used_values,
    writes_path,
)
from trajgraph.extractors.identifiers import find_identifiers
from trajgraph.graph import governance
from trajgraph.graph.connection import open_driver
from trajgraph.jobs import ingest
from trajgraph.pipelines.adapters import normalize, split_records
from trajgraph.queries.memory.brief import brief_of
from trajgraph.queries.memory.remind import remind_with
from trajgraph.queries.memory.store import Memory

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "trajectories"

# Failure as the raw observation shows it, independent of the extractor's error states.
_RAW_FAIL = re.compile(
    r"<returncode>\s*[1-9]\d*\s*</returncode>|\bexit(?:ed with)? code:? ?[1-9]\d*\b"
    r"|Traceback \(most recent call last\)|^FAILED |^E {2,}\S|\b\d+ failed\b"
    r"|Command execution failed|command not found|No such file or directory"
    r"|^(?:Error|ERROR|error|fatal)(?:\[[^\]]*\])?: |SQL Error|SyntaxError"
    r"|Your proposed edit has introduced",
    re.M,
)
_RAW_OK = re.compile(r"<returncode>\s*0\s*</returncode>")


def raw_failed(observation: str, action: str) -> bool:
    """The log says the action failed: a failure marker, and no return code 0. A viewer
    (cat, grep) fails only when it could not run."""
    obs = observation or ""
    if _RAW_OK.search(obs):
        return False
    if is_read_only(action, checks=False):
        return bool(re.search(r"Command execution failed|No such file|command not found", obs))
    return bool(_RAW_FAIL.search(obs))


@dataclass
class Step:
    turn: int
    action: str
    observation: str
    canon: Canon


@dataclass
class Oracle:
    """What the log says about the action at one turn: per rule, the turns a correct reminder
    may cite as its evidence (empty: the rule does not hold)."""

    repeated_failure: set[int] = field(default_factory=set)  # the latest run, which failed
    retried_failure: set[int] = field(default_factory=set)  # same, but something changed since
    changed_state: set[int] = field(default_factory=set)  # the change (or the rm)
    undoes_fix: set[int] = field(default_factory=set)  # the edits that fixed

    def positive(self) -> dict[str, set[int]]:
        found = {
            "repeated_failure": self.repeated_failure,
            "changed_state": self.changed_state,
            "undoes_fix": self.undoes_fix,
        }
        return {k: v for k, v in found.items() if v}


def oracle(steps: list[Step], t: int) -> Oracle:
    cur = steps[t]
    before = steps[:t]
    out = Oracle()
    runs = [s for s in before if near_identical(s.canon, cur.canon)]
    if runs and raw_failed(runs[-1].observation, runs[-1].action):
        last = runs[-1]
        between = before[last.turn + 1 :]
        if all(is_read_only(s.action) for s in between):
            out.repeated_failure = {last.turn}
        else:
            out.retried_failure = {last.turn}
    out.changed_state = _stale_value(before, cur) | _removed(before, cur)
    out.undoes_fix = _undone_fix(before, cur)
    return out


def _stale_value(before: list[Step], cur: Step) -> set[int]:
    """The action relies on ``key=old`` while the log shows the agent set ``key`` to another
    value after ``old`` (a write that sets it, or a write whose output shows it)."""
    found: set[int] = set()
    for key, old in used_values(cur.action):
        history: list[tuple[int, str, bool]] = []  # (turn, value, set by the agent)
        for s in before:
            history += [(s.turn, v, True) for k, v in set_values(s.action) if k == key]
            wrote = not is_read_only(s.action) and re.search(
                rf"(?<![\w.-]){re.escape(key)}(?![\w-])", s.action
            )
            history += [
                (s.turn, v, bool(wrote) and v in s.action)
                for k, v in assignments(s.observation)
                if k == key
            ]
        olds = [i for i, (_, v, _) in enumerate(history) if v == old]
        if not olds or history[-1][1] == old or old in history[-1][1]:
            continue
        found |= {t for t, v, by_agent in history[olds[-1] + 1 :] if by_agent and v != old}
    return found


def _removed(before: list[Step], cur: Step) -> set[int]:
    found: set[int] = set()
    for name, kind in find_identifiers(cur.action, action=True):
        if kind != "path" or writes_path(cur.action, name):
            continue
        removed = None
        for s in before:
            rev = revert_of(s.action)
            if rev and rev.how.startswith("rm") and any(same_path(p, name) for p in rev.paths):
                removed = s.turn
            elif removed is not None and writes_path(s.action, name):
                removed = None
        if removed is not None:
            found.add(removed)
    return found


def _undone_fix(before: list[Step], cur: Step) -> set[int]:
    """Earlier edits this action reverts or overwrites that turned a failing command into a
    passing one (which still passes)."""
    found: set[int] = set()
    revert = revert_of(cur.action)
    sets = dict(assignments(canonical_command(cur.action)))
    if revert is None and not sets:
        return found
    for e in before:
        for path in _written_paths(e.action):
            fragment = dict(assignments(canonical_command(e.action)))
            if revert is not None and (
                revert.all_files or any(same_path(p, path) for p in revert.paths)
            ):
                keys: list[str] = []
            elif writes_path(cur.action, path) and any(
                k in sets and sets[k] != v for k, v in fragment.items()
            ):
                keys = [k for k, v in fragment.items() if k in sets and sets[k] != v]
            else:
                continue
            if _fixed_after(before, e, path, keys):
                found.add(e.turn)
    return found


def _written_paths(action: str) -> list[str]:
    return [
        n
        for n, kind in find_identifiers(action, action=True)
        if kind == "path" and writes_path(action, n)
    ]


def _fixed_after(before: list[Step], e: Step, path: str, keys: list[str]) -> bool:
    """``e`` fixed a command: the command's last run before ``e`` failed with output naming
    the file (and the keys), its first run after ``e`` passed, ``e`` was the last write of that
    file (and keys) in between, and the command's latest run still passes."""

    def writes(s: Step) -> bool:
        if not writes_path(s.action, path):
            return False
        return not keys or any(k in dict(assignments(canonical_command(s.action))) for k in keys)

    for command in {s.canon.text for s in before if s.turn < e.turn}:
        runs = [s for s in before if s.canon.text == command]
        prev = [s for s in runs if s.turn < e.turn]
        nxt = [s for s in runs if s.turn > e.turn]
        if not prev or not nxt or not raw_failed(prev[-1].observation, prev[-1].action):
            continue
        if raw_failed(nxt[0].observation, nxt[0].action):
            continue
        if raw_failed(runs[-1].observation, runs[-1].action):
            continue  # broken again since: nothing left to undo
        text = prev[-1].action + "\n" + prev[-1].observation
        if not mentions_path(text, path) or not all(
            re.search(rf"(?<![\w.-]){re.escape(k)}(?![\w-])", text) for k in keys
        ):
            continue
        if any(writes(w) for w in before if e.turn < w.turn < nxt[0].turn):
            continue  # a later write made the difference
        return True
    return False


# -- the replay ------------------------------------------------------------------------------


@dataclass
class Tally:
    trajectories: int = 0
    steps: int = 0
    fired: int = 0
    tp: int = 0
    fp: int = 0
    positives: Counter[str] = field(default_factory=Counter)
    caught: Counter[str] = field(default_factory=Counter)
    fired_by_rule: Counter[str] = field(default_factory=Counter)
    retried: int = 0  # repeats of a failed action after a change: silence expected
    seconds: float = 0.0
    examples: list[str] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        for f in dataclasses.fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if isinstance(a, Counter):
                a.update(b)
            elif isinstance(a, list):
                a.extend(b)
            else:
                setattr(self, f.name, a + b)


def replay(
    session: neo4j.Session, tenant: str, traj: dict[str, Any], verbose: bool = False
) -> Tally:
    steps = [
        Step(int(t["idx"]), t["action"] or "", t["observation"] or "", canonical(t["action"] or ""))
        for t in traj["turns"]
    ]
    tally = Tally()
    started = time.perf_counter()
    for t in range(1, len(steps)):
        memory = Memory(session, tenant=tenant, trajectory=traj["id"], before_turn=t)
        r = remind_with(memory, steps[t].action)
        truth = oracle(steps, t)
        tally.steps += 1
        tally.retried += bool(truth.retried_failure)
        positives = truth.positive()
        tally.positives.update(positives.keys())
        if r.reminder is None:
            continue
        tally.fired += 1
        assert r.rule is not None
        tally.fired_by_rule[r.rule] += 1
        ok = bool(positives.get(r.rule, set()) & set(r.cites))
        if ok:
            tally.tp += 1
            tally.caught[r.rule] += 1
        else:
            tally.fp += 1
        line = f"{'TP' if ok else 'FP'} {traj['id']} turn {t}: {r.rule}: {r.reminder}"
        tally.examples.append(line)
        if verbose:
            print("   ", line[:300], file=sys.stderr)
    tally.seconds = time.perf_counter() - started
    return tally


def load_real(shared: Path) -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for path in sorted(p for p in shared.rglob("*") if p.is_file() and p.suffix != ".md"):
        for record in split_records(str(path), path.read_bytes()):
            for traj in normalize(record):
                out.append((path, traj))
    return out


def _ingest(paths: list[Path], tenant: str, settings: settings_mod.Settings, tmp: Path) -> None:
    args = [str(p) for p in paths] + [
        "--tenant", tenant, "--extractor", "heuristic", "--embedder", "none",
        "--progress", "off", "--dead-letter", str(tmp / "dl"),
    ]  # fmt: skip
    summary = ingest.run(args, settings=settings)
    if summary.dead_lettered:
        raise SystemExit(f"{summary.dead_lettered} records were dead-lettered: see {tmp / 'dl'}")


def check_prefixes(
    driver: neo4j.Driver,
    settings: settings_mod.Settings,
    tenant: str,
    real: list[tuple[Path, dict[str, Any]]],
    per_trajectory: int,
    tmp: Path,
) -> tuple[int, int]:
    """Ingest turns < t of real trajectories and compare brief and reminder with the as-of
    view of the full graph; returns (equal, compared)."""
    database = settings.neo4j.database
    prefix_tenant = f"{tenant}-prefix"
    equal = compared = 0
    try:
        for i, (_, traj) in enumerate(real):
            n = len(traj["turns"])
            cuts = sorted(
                {max(1, n * (k + 1) // (per_trajectory + 1)) for k in range(per_trajectory)}
            )
            for t in cuts:
                governance.delete_tenant(driver, database, prefix_tenant)
                prefix = {k: traj[k] for k in ("id", "task", "turns") if k in traj}
                prefix["turns"] = [x for x in traj["turns"] if x["idx"] < t]
                path = tmp / f"prefix-{i}-{t}.jsonl"
                path.write_text(json.dumps(prefix) + "\n")
                _ingest([path], prefix_tenant, settings, tmp)
                with driver.session(database=database) as s:
                    full = Memory(s, tenant=tenant, trajectory=traj["id"], before_turn=t)
                    cut = Memory(s, tenant=prefix_tenant, trajectory=traj["id"])
                    action = traj["turns"][t]["action"] if t < n else "ls"
                    a, b = brief_of(full), brief_of(cut)
                    same = (
                        a.sections == b.sections
                        and remind_with(full, action).reminder == remind_with(cut, action).reminder
                        and full.fixes == cut.fixes
                        and full.current_states == cut.current_states
                    )
                equal += same
                compared += 1
                if not same:
                    print(f"  prefix differs: {traj['id']} before turn {t}", file=sys.stderr)
    finally:
        governance.delete_tenant(driver, database, prefix_tenant)
    return equal, compared


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.1f}%" if b else "-"


def table(rows: list[tuple[str, Tally]]) -> str:
    head = (
        "| data set | trajectories | steps | fired | fire rate | true pos. | false pos. "
        "| FP rate (of fired) | oracle positives | caught | silent on retries after a change |"
    )
    out = [head, "|" + "---|" * 11]
    for name, t in rows:
        out.append(
            f"| {name} | {t.trajectories} | {t.steps} | {t.fired} | {_pct(t.fired, t.steps)} | "
            f"{t.tp} | {t.fp} | {_pct(t.fp, t.fired)} | {sum(t.positives.values())} "
            f"({_counts(t.positives)}) | {sum(t.caught.values())} | {t.retried} |"
        )
    return "\n".join(out)


def _counts(c: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items())) or "none"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--shared", type=Path, default=SHARED, help="the real trajectories")
    p.add_argument("--seeds", type=int, default=3, help="synthetic episodes per horizon")
    p.add_argument("--horizons", type=int, nargs="*", default=[30_000, 100_000])
    p.add_argument(
        "--check-prefix",
        type=int,
        default=0,
        metavar="N",
        help="also ingest N prefixes of each real trajectory and compare",
    )
    p.add_argument("--json", action="store_true", help="print the numbers as JSON too")
    p.add_argument("-v", "--verbose", action="store_true", help="print every fired reminder")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("neo4j.notifications").setLevel(logging.ERROR)
    settings = settings_mod.load()
    settings = dataclasses.replace(settings, llm=settings_mod.LLMSettings())  # offline rules
    driver = open_driver(settings.neo4j)
    tenant = f"replay-{uuid.uuid4().hex[:8]}"
    from trajgraph.evaluation.synthetic import generate

    try:
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            real = load_real(args.shared) if args.shared.is_dir() else []
            horizons = [h for h in args.horizons for _ in range(args.seeds)]
            synthetic = [generate(s, h) for h in args.horizons for s in range(1, args.seeds + 1)]
            syn_path = tmp / "synthetic.jsonl"
            syn_path.write_text(
                "".join(
                    json.dumps({k: e[k] for k in ("id", "task", "turns")}) + "\n" for e in synthetic
                )
            )
            _ingest([*sorted({p for p, _ in real}), syn_path], tenant, settings, tmp)
            rows: list[tuple[str, Tally]] = []
            with driver.session(
                database=settings.neo4j.database, default_access_mode=neo4j.READ_ACCESS
            ) as session:
                sets = [("real (shared logs)", [t for _, t in real])]
                for h in args.horizons:
                    episodes = [e for e, hh in zip(synthetic, horizons, strict=True) if hh == h]
                    sets.append((f"synthetic {h // 1000}k tokens", episodes))
                for name, trajs in sets:
                    total = Tally()
                    for traj in trajs:
                        total.add(replay(session, tenant, traj, args.verbose))
                    total.trajectories = len(trajs)
                    rows.append((name, total))
            print(table(rows))
            for name, t in rows:
                print(
                    f"\n{name}: fired by rule {_counts(t.fired_by_rule)}; "
                    f"{t.seconds / max(t.steps, 1) * 1000:.1f} ms per step"
                )
                for line in t.examples[:6]:
                    print("  " + (line if len(line) <= 240 else line[:239] + "…"))
            if args.check_prefix and real:
                equal, compared = check_prefixes(
                    driver, settings, tenant, real, args.check_prefix, tmp
                )
                print(f"\nas-of view vs graph built from the prefix: {equal}/{compared} equal")
            if args.json:
                print(
                    json.dumps(
                        {
                            name: {
                                "steps": t.steps,
                                "fired": t.fired,
                                "tp": t.tp,
                                "fp": t.fp,
                                "positives": dict(t.positives),
                                "caught": dict(t.caught),
                            }
                            for name, t in rows
                        }
                    )
                )
    finally:
        governance.delete_tenant(driver, settings.neo4j.database, tenant)
        driver.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
