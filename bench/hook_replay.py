"""Replay the Claude Code hook on real sessions, tool call by tool call, as each transcript grew.

For every shared session (../shared/corpora/agent-sessions/claude-code) the transcript is
rewritten into a temporary folder line by line; at every ``tool_use`` (main line and
sub-agents) the file holds exactly what it held when Claude Code asked its ``PreToolUse``
hook, and ``trajgraph hook claude-code`` runs as Claude Code runs it: a new process with the
hook's JSON on stdin. Its answer (silence, or a reminder) and its wall time are recorded.
One hook server (``trajgraph hook serve``) runs for the whole replay, as it would for a user.
With ``PostToolUse`` (the default; ``--pre-only`` leaves it out) the events come in Claude
Code's order: ``PreToolUse`` once the call is in the transcript, ``PostToolUse`` after the tool
ran and before its result line is written, then ``--think-ms`` of model time.

Each reminder is checked against the **log**: it is *confirmed* when the call it warned
about then failed, and failed the same way as a turn the reminder cites (an error line in
common). Any other reminder is a false positive. *Cases* are the calls the log says a
reminder exists for: a call that repeats an earlier failed call of the same agent (the same
or a near-identical action, extractors/actions.py) and fails the same way.

    python -m bench.hook_replay [--sessions DIR] [--budget-ms 1000] [--json OUT] [--markdown]
    python -m bench.hook_replay --code /tmp/old-checkout   # another version's hook and server

With ``--code`` the hook and its server run from that checkout (in it, and first on
PYTHONPATH) as ``python -m trajgraph``; run it once per version, the same way, to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trajgraph.core import settings as settings_mod
from trajgraph.extractors.actions import canonical, is_read_only, similarity
from trajgraph.graph import governance
from trajgraph.graph.connection import open_driver
from trajgraph.hooks.server import alive
from trajgraph.pipelines.adapters.claude_code import observation_text, render_action

REPO = Path(__file__).resolve().parent.parent
SESSIONS = REPO.parent / "shared" / "corpora" / "agent-sessions" / "claude-code"
_FAILURE_LINE = re.compile(
    r"error|Error|ERROR|No such file|not found|denied|cannot|Traceback|failed|Failed|fatal"
)
NEAR = 0.75
# The console script Claude Code runs (the venv's `trajgraph`), else the module.
_SCRIPT = Path(sys.executable).with_name("trajgraph")
TRAJGRAPH = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "trajgraph.cli"]
CWD: str | None = None  # --code: the hook runs there (`python -m` puts its folder first)


@dataclass
class Call:
    line: str  # "" main line, else the agent id
    index: int  # turn index within its line
    tool_use_id: str
    tool_name: str
    tool_input: Any
    upto: int  # transcript lines written when the hook runs
    result_at: int = 0  # the line that holds its result (0: none)
    result: str = ""
    is_error: bool = False


@dataclass
class SessionResult:
    session: str
    calls: int = 0
    fired: int = 0
    confirmed: int = 0
    false_positives: int = 0
    cases: int = 0
    cases_caught: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    server_ms: list[float] = field(default_factory=list)  # the server's part (hook log)
    post_ms: list[float] = field(default_factory=list)  # PostToolUse (the client's wait)
    loads: list[float] = field(default_factory=list)  # 1-minute load average at each call
    reminders: list[dict[str, Any]] = field(default_factory=list)

    @property
    def p50(self) -> float:
        return _pct(self.latencies_ms, 50)

    @property
    def p95(self) -> float:
        return _pct(self.latencies_ms, 95)


def _pct(values: list[float], q: int) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return round(ordered[k], 1)


def calls_of(lines: list[bytes]) -> list[Call]:
    """Every tool call of a transcript with the line count at which it appeared, and the
    result the log gives it."""
    calls: list[Call] = []
    by_id: dict[str, Call] = {}
    counts: dict[str, int] = {}
    for n, raw in enumerate(lines, start=1):
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        line, message = "", rec.get("message")
        if rec.get("type") == "progress":
            data = rec.get("data")
            if not isinstance(data, dict) or data.get("type") != "agent_progress":
                continue
            inner = data.get("message")
            if not isinstance(inner, dict):
                continue
            line, message = str(data.get("agentId") or ""), inner.get("message")
        elif rec.get("type") not in ("user", "assistant") or rec.get("isSidechain"):
            continue
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "tool_use":
                call = Call(
                    line,
                    counts.get(line, 0),
                    str(part.get("id")),
                    str(part.get("name")),
                    part.get("input"),
                    n,
                )
                counts[line] = call.index + 1
                calls.append(call)
                by_id[call.tool_use_id] = call
            elif part.get("type") == "tool_result" and part.get("tool_use_id") in by_id:
                target = by_id[str(part["tool_use_id"])]
                target.is_error = part.get("is_error") is True
                target.result_at = n
                target.result = observation_text(part.get("content"), target.is_error)
    return calls


def failure_lines(text: str) -> set[str]:
    return {
        " ".join(line.split())
        for line in text.splitlines()
        if _FAILURE_LINE.search(line) and not line.startswith("Exit code")
    }


def same_failure(a: Call, b: Call) -> bool:
    return a.is_error and b.is_error and bool(failure_lines(a.result) & failure_lines(b.result))


def cases(calls: list[Call]) -> set[str]:
    """Calls that repeat a failed call of the same agent, with only read-only calls between,
    and fail the same way: where a reminder is due."""
    due: set[str] = set()
    by_line: dict[str, list[Call]] = {}
    for c in calls:
        by_line.setdefault(c.line, []).append(c)
    for seq in by_line.values():
        for i, c in enumerate(seq):
            action = canonical(render_action(c.tool_name, c.tool_input))
            for j in range(i - 1, -1, -1):
                e = seq[j]
                earlier = render_action(e.tool_name, e.tool_input)
                if similarity(canonical(earlier), action) >= NEAR:
                    if same_failure(c, e):
                        due.add(c.tool_use_id)
                    break
                if not is_read_only(earlier):
                    break
    return due


def _hook(
    hook: dict[str, Any], *, env: dict[str, str], tenant: str, budget_ms: float
) -> tuple[float, bytes]:
    """Run ``trajgraph hook claude-code`` as Claude Code does; (wall ms, stdout)."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [
            *TRAJGRAPH,
            "hook",
            "claude-code",
            "--tenant",
            tenant,
            "--budget-ms",
            str(budget_ms),
            "--no-start",
        ],
        input=json.dumps(hook).encode(),
        capture_output=True,
        env=env,
        cwd=CWD,
        check=False,
    )
    ms = (time.perf_counter() - t0) * 1000
    if proc.returncode != 0:
        raise SystemExit(f"hook exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
    return ms, proc.stdout


def replay_session(
    path: Path,
    work: Path,
    *,
    env: dict[str, str],
    budget_ms: float,
    tenant: str,
    post: bool,
    think_s: float,
) -> SessionResult:
    lines = path.read_bytes().splitlines(keepends=True)
    calls = calls_of(lines)
    due = cases(calls)
    by_line_index = {(c.line, c.index): c for c in calls}
    out = SessionResult(path.stem, cases=len(due))
    target = work / path.name
    target.write_bytes(b"")
    written = 0

    def write_upto(n: int) -> None:
        nonlocal written
        if n > written:
            with target.open("ab") as f:
                f.write(b"".join(lines[written:n]))
            written = n

    # Claude Code's order: PreToolUse when the call is in the transcript; PostToolUse after
    # the tool ran, before its result is written; then the model thinks.
    events = [(c.upto, 0, c) for c in calls]
    if post:
        events += [(c.result_at, 1, c) for c in calls if c.result_at]
    for at, kind, call in sorted(events, key=lambda e: (e[0], e[1])):
        hook = {
            "session_id": path.stem,
            "transcript_path": str(target),
            "cwd": str(work),
            "hook_event_name": "PostToolUse" if kind else "PreToolUse",
            "tool_name": call.tool_name,
            "tool_input": call.tool_input,
            "tool_use_id": call.tool_use_id,
        }
        if call.line:
            hook["agent_id"] = call.line
        if kind:
            write_upto(at - 1)
            post_ms, _ = _hook(hook, env=env, tenant=tenant, budget_ms=budget_ms)
            out.post_ms.append(post_ms)
            write_upto(at)
            time.sleep(think_s)
            continue
        write_upto(at)
        ms, stdout = _hook(hook, env=env, tenant=tenant, budget_ms=budget_ms)
        out.latencies_ms.append(ms)
        out.loads.append(os.getloadavg()[0])
        out.calls += 1
        if not stdout.strip():
            continue
        reply = json.loads(stdout)
        said = reply["hookSpecificOutput"]
        text = said.get("additionalContext") or said.get("permissionDecisionReason", "")
        cites = [int(x) for x in re.findall(r"\d+", text.rsplit("[turn", 1)[-1].split(";")[0])]
        cited = [by_line_index[(call.line, t)] for t in cites if (call.line, t) in by_line_index]
        ok = any(same_failure(call, c) for c in cited)
        out.fired += 1
        out.confirmed += ok
        out.false_positives += not ok
        out.cases_caught += ok and call.tool_use_id in due
        out.reminders.append(
            {
                "line": call.line or "main",
                "turn": call.index,
                "confirmed": ok,
                "reminder": text,
                "then": call.result[:200],
            }
        )
    return out


def run(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench.hook_replay", description=__doc__)
    p.add_argument("--sessions", type=Path, default=SESSIONS)
    p.add_argument("--budget-ms", type=float, default=1000)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--keep-log", type=Path, default=None, help="copy the hook log here")
    p.add_argument(
        "--pre-only",
        action="store_true",
        help="only the PreToolUse hook (it then brings every new turn in itself)",
    )
    p.add_argument("--think-ms", type=float, default=500, help="model time between calls")
    p.add_argument("--code", type=Path, default=None, help="run another checkout's hook")
    args = p.parse_args(argv)
    global TRAJGRAPH, CWD
    code_env: dict[str, str] = {}
    if args.code is not None:
        TRAJGRAPH = [sys.executable, "-m", "trajgraph"]
        CWD = str(args.code)
        path = os.pathsep.join(x for x in (str(args.code), os.environ.get("PYTHONPATH")) if x)
        code_env["PYTHONPATH"] = path
    files = sorted(args.sessions.glob("*.jsonl"))
    if not files:
        raise SystemExit(f"no sessions in {args.sessions}")
    settings = settings_mod.load()
    tenant = f"hook-replay-{uuid.uuid4().hex[:8]}"
    results: list[SessionResult] = []
    with tempfile.TemporaryDirectory(prefix="trajgraph-hook-replay-") as tmp:
        work, hook_dir = Path(tmp) / "sessions", Path(tmp) / "hook"
        work.mkdir()
        env = {**os.environ, **code_env, "TRAJGRAPH_HOOK_DIR": str(hook_dir)}
        server = subprocess.Popen(
            [sys.executable, "-m", "trajgraph.cli", "hook", "serve", "--idle-minutes", "10"],
            env=env,
            cwd=CWD,
            stdin=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while not alive(hook_dir / "hook.sock"):
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the hook server did not start")
                time.sleep(0.2)
            for path in files:
                results.append(
                    replay_session(
                        path,
                        work,
                        env=env,
                        budget_ms=args.budget_ms,
                        tenant=tenant,
                        post=not args.pre_only,
                        think_s=args.think_ms / 1000,
                    )
                )
                print(_row(results[-1]), file=sys.stderr)
            server_times(hook_dir / "hook.log", results)
            if args.keep_log:
                args.keep_log.write_bytes((hook_dir / "hook.log").read_bytes())
        finally:
            server.terminate()
            server.wait(timeout=30)
            with open_driver(settings.neo4j) as driver:
                governance.delete_tenant(driver, settings.neo4j.database, tenant)
    all_ms = [ms for r in results for ms in r.latencies_ms]
    summary: dict[str, Any] = {
        "sessions": [
            {
                **asdict(r),
                "p50_ms": r.p50,
                "p95_ms": r.p95,
                "server_p50_ms": _pct(r.server_ms, 50),
                "server_p95_ms": _pct(r.server_ms, 95),
                "post_p95_ms": _pct(r.post_ms, 95),
                "latencies_ms": None,
                "server_ms": None,
                "post_ms": None,
                "loads": None,
            }
            for r in results
        ],
        "total": {
            "calls": sum(r.calls for r in results),
            "fired": sum(r.fired for r in results),
            "confirmed": sum(r.confirmed for r in results),
            "false_positives": sum(r.false_positives for r in results),
            "cases": sum(r.cases for r in results),
            "cases_caught": sum(r.cases_caught for r in results),
            "p50_ms": _pct(all_ms, 50),
            "p95_ms": _pct(all_ms, 95),
            "mean_ms": round(statistics.fmean(all_ms), 1) if all_ms else 0.0,
            "server_p50_ms": _pct([ms for r in results for ms in r.server_ms], 50),
            "server_p95_ms": _pct([ms for r in results for ms in r.server_ms], 95),
            "post_p95_ms": _pct([ms for r in results for ms in r.post_ms], 95),
            "hooks": "PreToolUse" if args.pre_only else "PreToolUse + PostToolUse",
            "load_average_mean": round(statistics.fmean([x for r in results for x in r.loads]), 1),
        },
    }
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2, ensure_ascii=False))
    if args.markdown:
        print(markdown(results, summary["total"]))
    else:
        print(json.dumps(summary["total"], indent=2))
    return summary


_SERVER_MS = re.compile(r"PreToolUse (\S+) turn .* server=([\d.]+)")


def server_times(log: Path, results: list[SessionResult]) -> None:
    """The server's share of each call, from the hook log."""
    by_session = {r.session: r for r in results}
    for line in log.read_text(encoding="utf-8").splitlines():
        m = _SERVER_MS.search(line)
        if m and m.group(1).split("/", 1)[0] in by_session:
            by_session[m.group(1).split("/", 1)[0]].server_ms.append(float(m.group(2)))


def _row(r: SessionResult) -> str:
    return (
        f"{r.session[:8]}…: {r.calls} calls, {r.fired} fired, {r.confirmed} confirmed, "
        f"{r.false_positives} false pos., cases {r.cases_caught}/{r.cases}, "
        f"p50 {r.p50} ms, p95 {r.p95} ms"
    )


def markdown(results: list[SessionResult], total: dict[str, Any]) -> str:
    head = (
        "| session | tool calls | reminders fired | confirmed by the log | false positives "
        "| log cases caught | hook p50 / p95 |\n|---|---:|---:|---:|---:|---:|---|"
    )
    rows = [
        f"| {r.session[:8]}… | {r.calls} | {r.fired} | {r.confirmed} | {r.false_positives} "
        f"| {r.cases_caught} of {r.cases} | {r.p50:.0f} / {r.p95:.0f} ms |"
        for r in results
    ]
    rows.append(
        f"| **all** | {total['calls']} | {total['fired']} | {total['confirmed']} "
        f"| {total['false_positives']} | {total['cases_caught']} of {total['cases']} "
        f"| {total['p50_ms']:.0f} / {total['p95_ms']:.0f} ms |"
    )
    return "\n".join([head, *rows])


if __name__ == "__main__":
    run()
