"""Leave-one-session-out replay of the project memory on the real sessions, next to BM25.

The 7 Claude Code sessions (../shared/corpora/agent-sessions/claude-code) and the 9 Codex
rollouts (../shared/corpora/codex-sessions) are ingested once into a temporary tenant
(heuristic extractor, no embeddings). Then for every session S with a working directory:

* **memory**: what the start of S would have been told: ``project_brief`` for S's folder
  (its cwd: the sessions were recorded elsewhere, so there is no git root to find) with S
  itself left out, at the token budget;
* each item is judged by S's own graph: **hit** when S later shows the same failure
  signature (a recurring failure), runs the same command and it fails (a command that never
  worked), or edits the same file and that edit is followed by a failure (a file whose edits
  broke things); any other item **never mattered**. An item is **wrong** when S contradicts
  it: the command that "never worked" worked in S, or S edited the file and nothing broke;
* **missed**: S's failures whose signature or failing command an earlier session of the
  project also showed but the memory did not say (below its thresholds, or cut by the budget);
* **BM25**: the other project sessions' turns (action and observation) ranked for S's first
  prompt, packed into the same budget; a returned turn is a hit when its failure signature or
  its failing command recurs as a failure in S.

Then a warm hook server answers ``trajgraph hook`` subprocesses as the agents would run them:
SessionStart and UserPromptSubmit (S's first prompt) for every session, and PreToolUse /
PostToolUse for every tool call of the Codex rollouts that have outputs (codemie-code: the
rollout grows call by call, 0.5 s of model time after each output). Wall time per event,
p50 / p95, and the server's own share (from its log).

    python -m bench.memory_replay [--budget 300] [--scope project|tenant] [--skip-hook] [--json]

``--scope tenant`` asks about every other session of the tenant instead of the project's:
what the project scope leaves out.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.paths import AGENT_SESSIONS, CODEX_SESSIONS
from trajgraph.core import settings as settings_mod
from trajgraph.core.tokens import count_tokens
from trajgraph.graph import governance
from trajgraph.graph.connection import open_driver
from trajgraph.hooks.server import alive
from trajgraph.jobs import ingest
from trajgraph.pipelines.adapters.codex import read_rollout
from trajgraph.queries.memory.project import (
    ProjectFacts,
    Reader,
    SessionTurns,
    inside,
    project_brief,
)

_SCRIPT = Path(sys.executable).with_name("trajgraph")
TRAJGRAPH = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "trajgraph.cli"]
THINK_S = 0.5  # model time between a call's output and the next call (as bench.hook_replay)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]+")
SESSIONS_QUERY = """
MATCH (t:Trajectory {tenant: $tenant})
RETURN t.id AS id, t.uid AS uid, t.metadata AS metadata, t.format AS format, t.task AS task,
       t.turn_count AS turns
ORDER BY id
"""


@dataclass
class Session:
    id: str
    uid: str
    cwd: str
    format: str
    task: str
    turns: int


@dataclass
class Row:
    session: str
    agent: str
    project: str
    earlier: int
    said: int = 0
    hit: int = 0
    never: int = 0
    wrong: int = 0
    missed: int = 0
    bm25: int = 0
    bm25_hit: int = 0
    tokens: int = 0
    ms: float = 0.0
    items: list[str] = field(default_factory=list)


# -- one session's own outcome ---------------------------------------------------------------


@dataclass
class Outcome:
    signatures: set[str]
    failing_commands: set[str]
    ok_commands: set[str]
    broken_paths: set[str]
    edited_paths: set[str]


def outcome_of(facts: ProjectFacts) -> Outcome:
    o = Outcome(set(), set(), set(), set(), set())
    for st in facts.sessions:
        for t in st.turns:
            failed = st.failed(t)
            if failed:
                o.signatures.update(uid for uid, _ in st.signatures.get(t.turn, []))
            if t.canon.kind == "shell" and not t.viewer:
                (o.failing_commands if failed else o.ok_commands).add(t.canon.text)
    o.broken_paths = {r["path"] for r in facts.broken_edits}
    return o


def edited_paths(reader: Reader, uid: str) -> set[str]:
    rows = reader.read(
        "MATCH (s:State {trajectory_uid: $uid, kind: 'file_changed'}) "
        "RETURN DISTINCT s.subject AS p",
        uid=uid,
    )
    return {r["p"] for r in rows}


def judge(kind: str, key: str, o: Outcome) -> tuple[bool, bool]:
    """(hit, wrong) of one item against the session's outcome."""
    if kind == "recurring_failure":
        return key in o.signatures, False
    if kind == "never_worked":
        return key in o.failing_commands, key in o.ok_commands and key not in o.failing_commands
    hit = key in o.broken_paths
    return hit, key in o.edited_paths and not hit


# -- BM25 over the other sessions' turns -----------------------------------------------------


def _terms(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def bm25(
    query: str, docs: list[tuple[SessionTurns, int, str]], budget: int
) -> list[tuple[SessionTurns, int]]:
    tfs = [(st, turn, Counter(_terms(text)), text) for st, turn, text in docs]
    n = len(tfs)
    if not n:
        return []
    avg = sum(sum(tf.values()) for _, _, tf, _ in tfs) / n
    df: Counter[str] = Counter()
    for _, _, tf, _ in tfs:
        df.update(tf.keys())
    q = set(_terms(query))
    scored = []
    for st, turn, tf, text in tfs:
        length = sum(tf.values())
        s = 0.0
        for w in q:
            f = tf.get(w)
            if f:
                idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
                s += idf * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * length / max(avg, 1)))
        if s > 0:
            scored.append((s, st.session, turn, st, text))
    scored.sort(key=lambda x: (-x[0], x[1], x[2]))
    out: list[tuple[SessionTurns, int]] = []
    used = 0
    for _, sid, turn, st, text in scored:
        cost = min(count_tokens(f"[{sid[:8]} turn {turn}] {text[:4000]}"), budget // 3)
        if used + cost > budget:
            if used >= budget - 20:
                break
            continue
        out.append((st, turn))
        used += cost
    return out


def bm25_hit(st: SessionTurns, turn: int, o: Outcome) -> bool:
    record = next(t for t in st.turns if t.turn == turn)
    if not st.failed(record):
        return False
    sigs = {uid for uid, _ in st.signatures.get(turn, [])}
    return bool(sigs & o.signatures) or record.canon.text in o.failing_commands


# -- the replay --------------------------------------------------------------------------------


def sessions_of(reader: Reader) -> list[Session]:
    out = []
    for r in reader.read(SESSIONS_QUERY):
        meta = json.loads(r["metadata"] or "{}")
        if isinstance(meta.get("cwd"), str):
            out.append(
                Session(r["id"], r["uid"], meta["cwd"], r["format"], r["task"] or "", r["turns"])
            )
    return out


def replay(
    driver: Any, database: str, tenant: str, budget: int, scope: str, min_failures: int = 2
) -> list[Row]:
    import neo4j

    rows: list[Row] = []
    with driver.session(database=database, default_access_mode=neo4j.READ_ACCESS) as s:
        reader = Reader(s, tenant, 30.0)
        sessions = sessions_of(reader)
        facts = {x.id: reader.facts([x.uid]) for x in sessions}
        edits = {x.id: edited_paths(reader, x.uid) for x in sessions}
        observations = {
            (r["tid"], r["idx"]): r["obs"] or ""
            for r in reader.read(
                "MATCH (t:Turn {tenant: $tenant}) "
                "RETURN t.trajectory_id AS tid, t.idx AS idx, left(t.observation, 4000) AS obs"
            )
        }
    for x in sessions:
        own = outcome_of(facts[x.id])
        own.edited_paths = edits[x.id]
        # the project's folder; "tenant": every session of the tenant, to show what the
        # project scope leaves out
        folder = "/" if scope == "tenant" else x.cwd
        others = [y for y in sessions if y.id != x.id and inside(y.cwd, folder)]
        t0 = time.perf_counter()
        brief = project_brief(
            driver,
            database=database,
            tenant=tenant,
            project=folder,
            budget=budget,
            exclude=[x.id],
            resolve_root=False,
            min_failures=min_failures,
        )
        row = Row(
            x.id,
            x.format,
            x.cwd,
            len(others),
            tokens=brief.tokens,
            ms=(time.perf_counter() - t0) * 1000,
        )
        for item in brief.items:
            hit, wrong = judge(item.kind, item.key, own)
            row.said += 1
            row.hit += hit
            row.never += not hit
            row.wrong += wrong
            mark = "HIT" if hit else ("WRONG" if wrong else "never mattered")
            row.items.append(f"[{mark}] {item.text}")
        said = {i.key for i in brief.items}
        before = outcome_of(
            ProjectFacts([st for y in others for st in facts[y.id].sessions], [], [])
        )
        row.missed = len((own.signatures & before.signatures) - said) + len(
            (own.failing_commands & before.failing_commands) - said
        )
        docs = [
            (st, t.turn, f"{t.action}\n{observations[(st.session, t.turn)]}")
            for y in others
            for st in facts[y.id].sessions
            for t in st.turns
        ]
        found = bm25(x.task, docs, budget)
        row.bm25 = len(found)
        row.bm25_hit = sum(bm25_hit(st, turn, own) for st, turn in found)
        rows.append(row)
    return rows


# -- hook latency ----------------------------------------------------------------------------


def _hook(
    agent: str, payload: dict[str, Any], env: dict[str, str], tenant: str
) -> tuple[float, bytes]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [*TRAJGRAPH, "hook", agent, "--tenant", tenant, "--budget-ms", "5000", "--no-start"],
        input=json.dumps(payload).encode(),
        capture_output=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"hook exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
    return (time.perf_counter() - t0) * 1000, proc.stdout


def hook_latency(sessions: list[Session], tenant: str, work: Path) -> dict[str, Any]:
    hook_dir = work / "hook"
    env = {**os.environ, "TRAJGRAPH_HOOK_DIR": str(hook_dir)}
    server = subprocess.Popen(
        [sys.executable, "-m", "trajgraph.cli", "hook", "serve", "--idle-minutes", "10"],
        env=env,
        stdin=subprocess.DEVNULL,
    )
    times: dict[str, list[float]] = {
        k: [] for k in ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse")
    }
    said: Counter[str] = Counter()
    try:
        deadline = time.monotonic() + 90
        while not alive(hook_dir / "hook.sock"):
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("the hook server did not start")
            time.sleep(0.2)
        for x in sessions:
            agent = "codex" if x.format == "codex" else "claude-code"
            base = {
                "session_id": x.id,
                "cwd": x.cwd,
                "transcript_path": None,
                "model": "m",
                "permission_mode": "default",
            }
            ms, out = _hook(
                agent, {**base, "hook_event_name": "SessionStart", "source": "startup"}, env, tenant
            )
            times["SessionStart"].append(ms)
            said["SessionStart"] += bool(out.strip())
            prompt = {
                **base,
                "hook_event_name": "UserPromptSubmit",
                "prompt": x.task,
                "turn_id": "t",
            }
            ms, out = _hook(agent, prompt, env, tenant)
            times["UserPromptSubmit"].append(ms)
            said["UserPromptSubmit"] += bool(out.strip())
        for path in sorted((CODEX_SESSIONS / "codemie-code").glob("*.jsonl")):
            said["PreToolUse"] += replay_codex(path, work, env, tenant, times)
    finally:
        server.terminate()
        server.wait(timeout=30)
    # the server's own share, from its log lines ("... SessionStart session x: ... server=12.3")
    inside_ms: dict[str, list[float]] = {k: [] for k in times}
    log_path = hook_dir / "hook.log"
    for line in log_path.read_text(errors="replace").splitlines() if log_path.exists() else []:
        m = re.search(r" (\w+) session .* server=([\d.]+)", line)
        if m and m.group(1) in inside_ms:
            inside_ms[m.group(1)].append(float(m.group(2)))
    return {
        event: {
            "calls": len(ms),
            "answered": said[event],
            "p50_ms": pct(ms, 50),
            "p95_ms": pct(ms, 95),
            "server_p50_ms": pct(inside_ms[event], 50),
            "server_p95_ms": pct(inside_ms[event], 95),
        }
        for event, ms in times.items()
    }


def replay_codex(
    path: Path, work: Path, env: dict[str, str], tenant: str, times: dict[str, list[float]]
) -> int:
    """The rollout growing line by line: PreToolUse at each call (the file ends at the call),
    PostToolUse once its output is written. Returns the reminders given."""
    raw = path.read_bytes().splitlines(keepends=True)
    live = work / "sessions" / path.name
    live.parent.mkdir(parents=True, exist_ok=True)
    outputs: dict[str, int] = {}
    calls: list[tuple[int, str, str, Any]] = []
    for n, line in enumerate(raw):
        rec = json.loads(line)
        p = rec.get("payload") or {}
        if rec.get("type") != "response_item":
            continue
        if p.get("type") in ("function_call", "custom_tool_call"):
            name = p.get("name") or ""
            args = p.get("arguments") if p.get("type") == "function_call" else p.get("input")
            calls.append((n, str(p.get("call_id")), name, args))
        elif p.get("type") in ("function_call_output", "custom_tool_call_output"):
            outputs.setdefault(str(p.get("call_id")), n)
    meta = read_rollout([json.loads(raw[0])]).meta
    fired = 0
    for n, call_id, name, args in calls:
        live.write_bytes(b"".join(raw[: n + 1]))
        tool, tool_input = _codex_tool(name, args)
        hook = {
            "session_id": meta.get("session_id"),
            "transcript_path": str(live),
            "cwd": meta.get("cwd"),
            "hook_event_name": "PreToolUse",
            "model": "m",
            "permission_mode": "default",
            "tool_name": tool,
            "tool_input": tool_input,
            "tool_use_id": call_id,
        }
        ms, out = _hook("codex", hook, env, tenant)
        times["PreToolUse"].append(ms)
        if out.strip():
            fired += 1
            said = json.loads(out)["hookSpecificOutput"]
            text = said.get("additionalContext") or said.get("permissionDecisionReason", "")
            print(
                f"  PreToolUse {path.name[:40]} call {len(times['PreToolUse']) - 1}: {text[:300]}"
            )
        if call_id in outputs:
            live.write_bytes(b"".join(raw[: outputs[call_id] + 1]))
            post = {**hook, "hook_event_name": "PostToolUse", "tool_response": "", "turn_id": "t"}
            ms, _ = _hook("codex", post, env, tenant)
            times["PostToolUse"].append(ms)
            time.sleep(THINK_S)  # the model's turn: the server writes the call meanwhile
    return fired


def _codex_tool(name: str, args: Any) -> tuple[str, Any]:
    if name == "exec_command":
        try:
            cmd = json.loads(args).get("cmd")
        except (ValueError, AttributeError):
            cmd = None
        if isinstance(cmd, str):
            return "Bash", {"command": cmd}
    if name == "apply_patch" and isinstance(args, str):
        return "apply_patch", {"command": args}
    return name, {"arguments": args}


def pct(values: list[float], q: int) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return round(ordered[k], 1)


# -- the report --------------------------------------------------------------------------------


def table(rows: list[Row], budget: int) -> str:
    head = (
        "| session | agent | earlier sessions of its project | "
        f"memory items said ({budget} tokens) | hit later | never mattered | wrong | missed | "
        "BM25 turns | BM25 hit |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r.session[:8]}… | {r.agent} | {r.earlier} | {r.said} | {r.hit} | {r.never} | "
            f"{r.wrong} | {r.missed} | {r.bm25} | {r.bm25_hit} |"
        )
    tot = {
        k: sum(getattr(r, k) for r in rows)
        for k in ("earlier", "said", "hit", "never", "wrong", "missed", "bm25", "bm25_hit")
    }
    lines.append(
        f"| **all {len(rows)}** | | | {tot['said']} | {tot['hit']} | {tot['never']} | "
        f"{tot['wrong']} | {tot['missed']} | {tot['bm25']} | {tot['bm25_hit']} |"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--budget", type=int, default=300, help="tokens of the memory (and of BM25)")
    p.add_argument("--skip-hook", action="store_true", help="no hook latency run")
    p.add_argument(
        "--scope",
        choices=("project", "tenant"),
        default="project",
        help="project (default): the session's folder; tenant: every other session",
    )
    p.add_argument(
        "--min-failures", type=int, default=2, help="a recurring failure failed this often"
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    for folder in (AGENT_SESSIONS, CODEX_SESSIONS):
        if not folder.is_dir():
            print(f"corpus not found at {folder}", file=sys.stderr)
            return 2
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("neo4j.notifications").setLevel(logging.ERROR)
    settings = settings_mod.load()
    database = settings.neo4j.database
    driver = open_driver(settings.neo4j)
    tenant = f"memory-{uuid.uuid4().hex[:8]}"
    try:
        with tempfile.TemporaryDirectory(prefix="trajgraph-memory-replay-") as tmp:
            paths = [
                str(AGENT_SESSIONS / "claude-code"),
                *map(str, sorted(CODEX_SESSIONS.rglob("*.jsonl"))),
            ]
            started = time.perf_counter()
            summary = ingest.run(
                [
                    *paths,
                    "--tenant",
                    tenant,
                    "--extractor",
                    "heuristic",
                    "--embedder",
                    "none",
                    "--progress",
                    "off",
                    "--dead-letter",
                    str(Path(tmp) / "dl"),
                ],
                settings=settings,
            )
            ingest_s = time.perf_counter() - started
            print(f"load average (1 min) at the start: {os.getloadavg()[0]:.1f}")
            if summary.dead_lettered:
                raise SystemExit(f"{summary.dead_lettered} records dead-lettered")
            rows = replay(driver, database, tenant, args.budget, args.scope, args.min_failures)
            print(
                f"{summary.ingested} trajectories, {summary.turns} turns ingested in "
                f"{ingest_s:.1f} s; "
                f"{len(rows)} sessions with a working directory\n"
            )
            print(table(rows, args.budget))
            ms = [r.ms for r in rows]
            print(
                f"\nproject_brief: p50 {pct(ms, 50)} ms, p95 {pct(ms, 95)} ms, "
                f"mean {statistics.mean(ms):.1f} ms"
            )
            for r in rows:
                for item in r.items:
                    print(f"  {r.session[:8]} {item[:260]}")
            latency: dict[str, Any] = {}
            if not args.skip_hook:
                import neo4j

                with driver.session(database=database, default_access_mode=neo4j.READ_ACCESS) as s:
                    sessions = sessions_of(Reader(s, tenant, 30.0))
                latency = hook_latency(sessions, tenant, Path(tmp))
                print(
                    "\n| event | hook calls | answered (not silence) | hook p50 / p95 | "
                    "server's share p50 / p95 |\n|---|---:|---:|---:|---:|"
                )
                for event, v in latency.items():
                    print(
                        f"| {event} | {v['calls']} | {v['answered']} | "
                        f"{v['p50_ms']} / {v['p95_ms']} ms | "
                        f"{v['server_p50_ms']} / {v['server_p95_ms']} ms |"
                    )
                print(f"\nload average (1 min) at the end: {os.getloadavg()[0]:.1f}")
            if args.json:
                print(
                    json.dumps({"rows": [r.__dict__ for r in rows], "hook": latency}, default=str)
                )
    finally:
        governance.delete_tenant(driver, database, tenant)
        driver.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
