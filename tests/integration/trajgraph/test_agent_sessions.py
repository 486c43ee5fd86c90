"""Claude Code sessions and OpenTelemetry GenAI traces against the real Neo4j: ingest counts,
why-chains and briefs, the hook end to end (a subprocess with the hook's stdin JSON), the
hook's incremental writes equal to a batch ingest, and streaming a growing session file.

The real files are in ../shared/corpora/agent-sessions (tests skip when it is absent).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.growing import follow, growing
from tests.integration.ingesting import NO_MODELS, Ingest, scalar
from tests.integration.races import while_held
from tests.integration.servers import child_env, hook_server
from tests.paths import AGENT_SESSIONS as CORPUS
from tests.paths import REPO
from trajgraph.core.settings import Settings
from trajgraph.graph import cypher, governance
from trajgraph.graph import node_ids as ids
from trajgraph.graph.digest import trajectory_digest
from trajgraph.hooks.agents import CLAUDE_CODE
from trajgraph.hooks.engine import HookEngine, Outcome
from trajgraph.hooks.server import alive
from trajgraph.queries.memory.brief import build_brief
from trajgraph.queries.why.chain import why_chain

A758 = "a758b6ba-8d47-447c-bead-7f25794b7319"
# trajectory id -> turns: every tool call of the main line and of each sub-agent (jq counts,
# see tests/unit/pipelines/test_agent_session_adapters.py)
TURNS = {
    "0b6fff8a-4d86-4dbd-b022-9e7a745a9eae": 109,
    "0b6fff8a-4d86-4dbd-b022-9e7a745a9eae/agent-a959a4ebb78a20e7e": 13,
    "0b6fff8a-4d86-4dbd-b022-9e7a745a9eae/agent-ab486a506a5776f8e": 25,
    "282fceea-d848-47e9-98f3-78bf9b6db456": 49,
    "282fceea-d848-47e9-98f3-78bf9b6db456/agent-aa918c69e3202d44f": 2,
    "282fceea-d848-47e9-98f3-78bf9b6db456/agent-abfa9931579c53806": 47,
    "727104af-66bb-4918-b81e-0c90a4511e07": 48,
    "9265f0e5-0af7-4fa9-834a-5f146d1f9afa": 31,
    "960cec30-d8bb-4d4c-92f3-ec634d923f8e": 85,
    "9cfd6e0a-1756-4452-9524-ec866855c9de": 47,
    "9cfd6e0a-1756-4452-9524-ec866855c9de/agent-a62d60080d6b8b436": 63,
    "9cfd6e0a-1756-4452-9524-ec866855c9de/agent-a6ddf137c30284b22": 40,
    A758: 32,
    "4bedea77bb33b9c5f280371eae21ea97": 2,  # OPENAI_trace.json
    "cdbd7b99cef221c28dd6d03c27d09b4c": 3,  # GOOGLE_trace.json
    "9135313a4e40fe254d48742d230ea040": 3,  # SMOLAGENTS_trace.json
}


@pytest.fixture(scope="module")
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip(f"agent sessions not found at {CORPUS} (see its README)")
    return CORPUS


def _turns_in_graph(driver: Any, tenant: str) -> dict[str, int]:
    records = driver.execute_query(
        "MATCH (t:Trajectory {tenant: $tenant}) OPTIONAL MATCH (u:Turn {trajectory_uid: t.uid}) "
        "RETURN t.id AS id, count(u) AS turns",
        tenant=tenant,
    ).records
    return {r["id"]: r["turns"] for r in records}


def test_ingest_sessions_and_traces_every_tool_call_no_dead_letters(
    corpus: Path, driver: Any, neo4j_settings: Settings, ingested: Ingest, tenant: str
) -> None:
    s = ingested(corpus, tenant=tenant, args=("--embedder", "none")).summary
    assert (s.files, s.records, s.ingested, s.dead_lettered) == (10, 16, 16, 0)
    assert s.turns == sum(TURNS.values()) == 599
    assert _turns_in_graph(driver, tenant) == TURNS

    db = neo4j_settings.neo4j.database
    # The second identical `uv run` failed like the first: its why-chain reaches the failure
    # states of that run, and the brief lists the open failures with their error verbatim.
    chain = why_chain(driver, database=db, tenant=tenant, trajectory=A758, turn=18, depth=3)
    text = json.dumps(chain)
    assert "Failed to query Python interpreter" in text
    brief = build_brief(driver, database=db, tenant=tenant, trajectory=A758, budget=600)
    assert "Open failures" in brief.text
    assert "No such file or directory" in brief.text
    edits = driver.execute_query(
        "MATCH (s:State {tenant: $tenant, trajectory_id: $tid, kind: 'file_changed'}) "
        "RETURN s.subject AS path",
        tenant=tenant,
        tid=A758,
    ).records
    assert any(r["path"].endswith("review_tool/cli.py") for r in edits)  # the Edit's file


def _calls(path: Path) -> list[tuple[int, int, dict[str, Any]]]:
    """(line of the tool_use, line of its result, tool_use) of the main line, in order."""
    out: list[tuple[int, int, dict[str, Any]]] = []
    results: dict[str, int] = {}
    lines = path.read_bytes().splitlines()
    for n, raw in enumerate(lines, start=1):
        rec = json.loads(raw)
        content = (rec.get("message") or {}).get("content") if rec.get("type") else None
        for part in content if isinstance(content, list) else []:
            if part.get("type") == "tool_use":
                out.append((n, 0, part))
            elif part.get("type") == "tool_result":
                results[part["tool_use_id"]] = n
    return [(n, results.get(p["id"], 0), p) for n, _, p in out]


def _as_ingested_alone(
    ingested: Ingest, driver: Any, db: str, tenant: str, lines: list[bytes], folder: Path
) -> None:
    """The session's graph in ``tenant`` is what an ingest of these transcript lines alone,
    into a fresh tenant, builds, down to the tenant's shared nodes: no identifier or failure
    signature left over that only an earlier version used."""
    folder.mkdir()
    path = folder / f"{A758}.jsonl"
    path.write_bytes(b"".join(lines))
    clean = ingested(path, args=NO_MODELS)
    assert clean.summary.dead_lettered == 0
    assert trajectory_digest(driver, db, tenant, A758) == trajectory_digest(
        driver, db, clean.tenant, A758
    )
    assert _labels(driver, db, tenant) == _labels(driver, db, clean.tenant)


def _labels(driver: Any, db: str, tenant: str) -> dict[str, int]:
    records = driver.execute_query(cypher.COUNT_TENANT_BY_LABEL, tenant=tenant, database_=db)
    return {r["label"]: r["n"] for r in records.records}


def test_hook_incremental_writes_equal_a_batch_ingest(
    corpus: Path,
    driver: Any,
    neo4j_settings: Settings,
    ingested: Ingest,
    tenant: str,
    tmp_path: Path,
) -> None:
    source = corpus / "claude-code" / f"{A758}.jsonl"
    lines = source.read_bytes().splitlines(keepends=True)
    calls = _calls(source)
    upto = calls[18][0] - 1  # everything before the 19th call: 18 answered calls
    growing = tmp_path / "live" / f"{A758}.jsonl"
    growing.parent.mkdir()
    growing.write_bytes(b"")
    db = neo4j_settings.neo4j.database
    engine = HookEngine(driver, database=db)
    try:
        written = 0
        for first, result_at, part in calls[:18]:
            end = max(first, result_at)
            with growing.open("ab") as f:
                f.write(b"".join(lines[written:end]))
            written = end
            _after_call(engine, tenant, growing, part["id"])
        with growing.open("ab") as f:
            f.write(b"".join(lines[written:upto]))
        _after_call(engine, tenant, growing, None)
    finally:
        engine.close()
    assert _turns_in_graph(driver, tenant) == {A758: 18}

    _as_ingested_alone(ingested, driver, db, tenant, lines[:upto], tmp_path / "batch")


def _after_call(engine: HookEngine, tenant: str, path: Path, tool_use_id: Any) -> Outcome:
    """What the hook does at PostToolUse, without waiting for the call's result."""
    call = CLAUDE_CODE.call_of({"transcript_path": str(path), "tool_use_id": tool_use_id})
    return engine.after_tool_call(CLAUDE_CODE, tenant=tenant, call=call, wait_s=0)


def _live_session(
    corpus: Path, tmp_path: Path, engine: HookEngine, tenant: str
) -> tuple[list[bytes], list[int], Callable[[int], None]]:
    """The real session's lines, the line after each tool call's result, and a hook call
    that sees the transcript grown to a given line (written whole each time)."""
    source = corpus / "claude-code" / f"{A758}.jsonl"
    lines = source.read_bytes().splitlines(keepends=True)
    at = [max(first, result_at) for first, result_at, _ in _calls(source)]
    growing = tmp_path / "live" / f"{A758}.jsonl"
    growing.parent.mkdir()

    def hook_sees(upto: int) -> None:
        growing.write_bytes(b"".join(lines[:upto]))
        _after_call(engine, tenant, growing, None)

    return lines, at, hook_sees


def test_hook_rewrites_whole_when_another_writer_replaced_the_session(
    corpus: Path,
    driver: Any,
    neo4j_settings: Settings,
    ingested: Ingest,
    tenant: str,
    tmp_path: Path,
) -> None:
    """The hook sends only what changed since its last write. A batch ingest of the same
    session in between (a nightly job reading the transcript folder) replaces what the hook
    wrote: the hook's next write must then rewrite the trajectory whole, not add its delta to
    the other version (a mix stored under the hook's hash, which every later ingest would
    skip as unchanged)."""
    db = neo4j_settings.neo4j.database
    engine = HookEngine(driver, database=db)
    lines, at, hook_sees = _live_session(corpus, tmp_path, engine, tenant)

    try:
        hook_sees(at[5])
        other = tmp_path / "nightly" / f"{A758}.jsonl"
        other.parent.mkdir()
        other.write_bytes(b"".join(lines[: at[12]]))  # a longer version, by another writer
        assert ingested(other, args=NO_MODELS, tenant=tenant).summary.dead_lettered == 0
        assert _turns_in_graph(driver, tenant) == {A758: 13}
        hook_sees(at[8])  # the hook's own next version
    finally:
        engine.close()
    assert _turns_in_graph(driver, tenant) == {A758: 9}
    _as_ingested_alone(ingested, driver, db, tenant, lines[: at[8]], tmp_path / "alone")


def test_hook_write_waiting_for_identifiers_a_delete_removes_writes_the_session_whole(
    corpus: Path,
    driver: Any,
    neo4j_settings: Settings,
    ingested: Ingest,
    tenant: str,
    tmp_path: Path,
) -> None:
    """`trajgraph delete` removed the session, and its orphan identifiers are being removed
    while the hook writes the session's next version, which uses them: the hook's write
    waits for them, and when the delete commits, it goes on and writes the session whole
    (before, Neo4j's "Unable to load NODE" failed the hook's write)."""
    db = neo4j_settings.neo4j.database
    engine = HookEngine(driver, database=db)
    lines, at, hook_sees = _live_session(corpus, tmp_path, engine, tenant)

    try:
        hook_sees(at[5])
        uid = ids.trajectory_uid(tenant, A758)
        gone = driver.execute_query(
            cypher.DELETE_TRAJECTORY_NODE, uid=uid, batch=governance.BATCH, database_=db
        ).records[0]
        held = [(cypher.DELETE_ORPHAN_IDENTIFIERS, {"uids": sorted(gone["identifiers"])})]
        errors = while_held(driver, db, held, lambda: hook_sees(at[8]))
    finally:
        engine.close()
    assert not errors, errors
    assert _turns_in_graph(driver, tenant) == {A758: 9}
    _as_ingested_alone(ingested, driver, db, tenant, lines[: at[8]], tmp_path / "alone")


@pytest.fixture
def hook_env(neo4j_settings: Settings, tmp_path: Path) -> Iterator[dict[str, str]]:
    env = child_env(neo4j_settings, TRAJGRAPH_HOOK_DIR=str(tmp_path / "hook"), PYTHONPATH=str(REPO))
    yield env


def _hook(env: dict[str, str], payload: Any, *flags: str) -> subprocess.CompletedProcess[bytes]:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return subprocess.run(
        [sys.executable, "-m", "trajgraph.cli", "hook", "claude-code", *flags],
        input=data,
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_hook_end_to_end_silence_reminder_and_pass_through(
    corpus: Path, hook_env: dict[str, str], tenant: str, tmp_path: Path
) -> None:
    source = corpus / "claude-code" / f"{A758}.jsonl"
    lines = source.read_bytes().splitlines(keepends=True)
    calls = _calls(source)
    live = tmp_path / "live" / f"{A758}.jsonl"
    live.parent.mkdir()
    hook_dir = Path(hook_env["TRAJGRAPH_HOOK_DIR"])

    def pre(n: int, *flags: str) -> subprocess.CompletedProcess[bytes]:
        line, _, part = calls[n]
        live.write_bytes(b"".join(lines[:line]))  # the transcript as it was at that call
        payload = {
            "session_id": A758,
            "transcript_path": str(live),
            "cwd": str(tmp_path),
            "hook_event_name": "PreToolUse",
            "tool_name": part["name"],
            "tool_input": part["input"],
            "tool_use_id": part["id"],
        }
        return _hook(hook_env, payload, "--tenant", tenant, *flags)

    # No server yet and --no-start: silence, exit 0, the reason logged.
    r = pre(18, "--no-start")
    assert (r.returncode, r.stdout, r.stderr) == (0, b"", b"")
    assert "no hook server is listening" in (hook_dir / "hook.log").read_text()

    with hook_server(hook_env, hook_dir):
        # The second identical `uv run`: a reminder citing the first. By default (auto) it
        # reaches Claude Code's model the way that works there: the call is denied once with
        # the reminder as the reason (docs/hooks.md, which channel reaches the model) ...
        r = pre(18, "--budget-ms", "60000")
        assert r.returncode == 0 and r.stderr == b""
        denied = json.loads(r.stdout)["hookSpecificOutput"]
        assert denied["hookEventName"] == "PreToolUse" and denied["permissionDecision"] == "deny"
        assert "Failed to query Python interpreter" in denied["permissionDecisionReason"]
        assert "[turn 17;" in denied["permissionDecisionReason"]
        # ... and the same call made again right after goes through: no loop.
        r = pre(18, "--budget-ms", "60000")
        assert (r.returncode, r.stdout) == (0, b"")
        # additionalContext on request (the call proceeds).
        r = pre(18, "--budget-ms", "60000", "--decision", "context")
        out = json.loads(r.stdout)["hookSpecificOutput"]
        assert "permissionDecision" not in out
        assert "Failed to query Python interpreter" in out["additionalContext"]
        # The next call (cd elsewhere, then run): nothing to say.
        r = pre(19, "--budget-ms", "60000")
        assert (r.returncode, r.stdout) == (0, b"")
        # Internal errors pass through silently: a transcript that does not exist, bad JSON.
        missing = {
            "session_id": "x",
            "transcript_path": str(tmp_path / "nope.jsonl"),
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": "ls"},
        }
        for payload in (missing, b"{not json", b"[]"):
            r = _hook(hook_env, payload, "--budget-ms", "60000")
            assert (r.returncode, r.stdout, r.stderr) == (0, b"", b"")
        log = (hook_dir / "hook.log").read_text()
        assert "cannot read the transcript" in log and "hook input is not JSON" in log
        # A budget too small to answer in: silence, logged as a timeout.
        live.write_bytes(b"".join(lines))
        r = pre(20, "--budget-ms", "1")
        assert (r.returncode, r.stdout) == (0, b"")
    assert not (hook_dir / "hook.sock").exists()

    # Without a server, the first call starts one in the background and passes through.
    r = pre(18)
    assert (r.returncode, r.stdout) == (0, b"")
    deadline = time.monotonic() + 90
    while not alive(hook_dir / "hook.sock"):
        assert time.monotonic() < deadline, "the hook did not start its server"
        time.sleep(0.2)
    stop = subprocess.run(
        [sys.executable, "-m", "trajgraph.cli", "hook", "stop"],
        env=hook_env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert stop.returncode == 0 and b"hook server stopped" in stop.stdout
    assert not (hook_dir / "hook.sock").exists()


def test_stream_follows_a_growing_session_file(
    corpus: Path,
    driver: Any,
    neo4j_settings: Settings,
    ingested: Ingest,
    tenant: str,
    tmp_path: Path,
) -> None:
    source = corpus / "claude-code" / f"{A758}.jsonl"
    lines = source.read_bytes().splitlines(keepends=True)
    live = tmp_path / "projects" / "-home-u-proj"
    live.mkdir(parents=True)
    target = live / source.name
    db = neo4j_settings.neo4j.database
    tid_uid = ids.trajectory_uid(tenant, A758)
    with growing(target, lines, first=40, cut=50, chunk=20, pause_s=0.7):
        follow(tmp_path / "projects", tenant, neo4j_settings, tmp_path / "dl", duration_s=16)
    turns = scalar(driver, "MATCH (t:Turn {trajectory_uid: $u}) RETURN count(t)", u=tid_uid)
    assert turns == 32
    batch = ingested(source, args=NO_MODELS).tenant
    assert trajectory_digest(driver, db, tenant, A758) == trajectory_digest(driver, db, batch, A758)
