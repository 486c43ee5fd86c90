"""``trajgraph hook codex`` end to end against the real Neo4j (a warm hook server, the hook as
a subprocess with the hook's stdin JSON), and the project memory at SessionStart and
UserPromptSubmit for both agents, from the real Claude Code sessions of
../shared/corpora/agent-sessions (skipped when absent).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.ingesting import NO_MODELS, Ingest
from tests.integration.servers import child_env, hook_server
from tests.paths import AGENT_SESSIONS, REPO
from trajgraph.core.settings import Settings

REVIEW_TOOL = (
    "/home/ubuntu/charming-with-claude/experiments/2026-03-13-code-review-skills-our-data/"
    "charming-analysis/review-tool"
)
A758 = "a758b6ba-8d47-447c-bead-7f25794b7319"
SID = "019e7777-0000-7000-8000-000000000001"


@pytest.fixture
def server(neo4j_settings: Settings, tmp_path: Path) -> Iterator[dict[str, str]]:
    env = child_env(neo4j_settings, TRAJGRAPH_HOOK_DIR=str(tmp_path / "hook"), PYTHONPATH=str(REPO))
    with hook_server(env, tmp_path / "hook"):
        yield env


def hook(env: dict[str, str], agent: str, payload: dict[str, Any], *flags: str) -> Any:
    r = subprocess.run(
        [sys.executable, "-m", "trajgraph.cli", "hook", agent, "--budget-ms", "60000", *flags],
        input=json.dumps(payload).encode(),
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert (r.returncode, r.stderr) == (0, b"")
    return json.loads(r.stdout)["hookSpecificOutput"] if r.stdout.strip() else None


def rollout(version: str) -> list[dict[str, Any]]:
    def line(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        return {"timestamp": "2026-06-01T10:00:00.000Z", "type": kind, "payload": payload}

    def call(cid: str, cmd: str) -> dict[str, Any]:
        args = json.dumps({"cmd": cmd})
        return line(
            "response_item",
            {"type": "function_call", "name": "exec_command", "arguments": args, "call_id": cid},
        )

    def out(cid: str, text: str) -> dict[str, Any]:
        return line(
            "response_item", {"type": "function_call_output", "call_id": cid, "output": text}
        )

    failing = (
        "Process exited with code 1\nOutput:\nTraceback (most recent call last):\n"
        '  File "app.py", line 3, in <module>\n    import yaml\n'
        "ModuleNotFoundError: No module named 'yaml'\n"
    )
    return [
        line("session_meta", {"id": SID, "cwd": "/work/demo", "cli_version": version}),
        line("event_msg", {"type": "user_message", "message": "run the app"}),
        call("c0", "python app.py"),
        out("c0", failing),
        call("c1", "ls"),
        out("c1", "Process exited with code 0\nOutput:\napp.py\n"),
        call("c2", "python app.py"),  # pending: the hook is asked about it
    ]


def write(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_codex_hook_reminds_through_the_channel_its_version_shows(
    server: dict[str, str], tenant: str, tmp_path: Path
) -> None:
    path = tmp_path / "rollout-2026-06-01T10-00-00-x.jsonl"
    pending = {
        "session_id": SID,
        "transcript_path": str(path),
        "cwd": "/work/demo",
        "hook_event_name": "PreToolUse",
        "model": "gpt-5.5",
        "permission_mode": "default",
        "tool_name": "Bash",
        "tool_input": {"command": "python app.py"},
        "tool_use_id": "c2",
    }
    # 0.125: PreToolUse additionalContext is rejected there, so the call is denied once.
    write(path, rollout("0.125.0"))
    denied = hook(server, "codex", pending, "--tenant", tenant)
    assert denied["permissionDecision"] == "deny"
    assert "No module named 'yaml'" in denied["permissionDecisionReason"]
    assert "[turn 0;" in denied["permissionDecisionReason"]
    assert hook(server, "codex", pending, "--tenant", tenant) is None  # then let through
    # A call that never failed (not in the rollout yet: the hook input says what it is): silence.
    ls = {"tool_input": {"command": "ls"}, "tool_use_id": "c9"}
    assert hook(server, "codex", {**pending, **ls}, "--tenant", tenant) is None
    # 0.129 and later: additionalContext (openai/codex #20692); another session, same calls.
    other = tmp_path / "rollout-2026-06-01T11-00-00-y.jsonl"
    lines = rollout("0.130.0")
    lines[0]["payload"]["id"] = SID.replace("0001", "0002")
    write(other, lines)
    ctx = hook(
        server,
        "codex",
        {**pending, "session_id": lines[0]["payload"]["id"], "transcript_path": str(other)},
        "--tenant",
        tenant,
    )
    assert "permissionDecision" not in ctx and "No module named 'yaml'" in ctx["additionalContext"]
    # PostToolUse brings the finished call into the graph; the answer is always silence.
    write(other, [*lines, lines[3] | {"payload": {**lines[3]["payload"], "call_id": "c2"}}])
    post = {**pending, "hook_event_name": "PostToolUse", "transcript_path": str(other)}
    assert hook(server, "codex", {**post, "tool_response": "x"}, "--tenant", tenant) is None


def test_session_start_and_prompt_memory_from_earlier_sessions_of_the_project(
    server: dict[str, str], ingested: Ingest, tenant: str
) -> None:
    if not AGENT_SESSIONS.is_dir():
        pytest.skip(f"agent sessions not found at {AGENT_SESSIONS} (see its README)")
    ingested(AGENT_SESSIONS / "claude-code", tenant=tenant, args=NO_MODELS)
    start = {
        "session_id": A758,
        "transcript_path": None,
        "cwd": REVIEW_TOOL,
        "hook_event_name": "SessionStart",
        "source": "startup",
        "model": "gpt-5.5",
        "permission_mode": "default",
    }
    for agent in ("codex", "claude-code"):
        said = hook(server, agent, start, "--tenant", tenant)
        assert said["hookEventName"] == "SessionStart"
        text = said["additionalContext"]
        # the other review-tool session (a758b6ba itself is left out): its uv venv failures
        # and what got past them, citing session and turn
        assert "1 earlier session" in text and "282fceea turn 26" in text
        assert "Got past it at 282fceea turn 28" in text and "a758b6ba" not in text
    prompt = {**start, "hook_event_name": "UserPromptSubmit", "turn_id": "t1"}
    venv = "set up the venv with uv venv"
    # said at this session's start already: not again
    assert hook(server, "codex", {**prompt, "prompt": venv}, "--tenant", tenant) is None
    # another session's first prompt about it: the items the prompt is about
    other = {**prompt, "session_id": "p-1", "prompt": venv}
    about = hook(server, "codex", other, "--tenant", tenant)
    assert about["hookEventName"] == "UserPromptSubmit" and "uv venv" in about["additionalContext"]
    assert hook(server, "codex", other, "--tenant", tenant) is None  # once per session
    # an unrelated prompt: silence
    fresh = {**prompt, "session_id": "p-2", "prompt": "write the README"}
    assert hook(server, "codex", fresh, "--tenant", tenant) is None
    # a folder no session worked in: silence
    assert hook(server, "codex", {**start, "cwd": "/nowhere"}, "--tenant", tenant) is None
    # the CLI prints the same memory
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "trajgraph.cli",
            "brief",
            "--project",
            REVIEW_TOOL,
            "--tenant",
            tenant,
        ],
        capture_output=True,
        env=server,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0 and b"282fceea turn 26" in r.stdout and b"a758b6ba turn 17" in r.stdout
