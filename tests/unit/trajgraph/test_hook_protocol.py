"""The hook's answer format and its never-break-the-agent client paths (no Neo4j needed)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from trajgraph.hooks import command
from trajgraph.hooks.replies import hook_output
from trajgraph.queries.memory.findings import Reminder


def test_output_is_silence_context_or_a_permission_decision():
    r = Reminder("s", 3, "It failed before.", [1, 2], "repeated_failure")
    assert hook_output("PreToolUse", None) is None
    assert hook_output("PostToolUse", r) is None
    ctx = (hook_output("PreToolUse", r) or {})["hookSpecificOutput"]
    assert ctx["hookEventName"] == "PreToolUse"
    assert ctx["additionalContext"].endswith(
        "It failed before. [turns 1, 2; turns count this session's tool calls from 0]"
    )
    assert "permissionDecision" not in ctx
    deny = (hook_output("PreToolUse", r, "deny") or {})["hookSpecificOutput"]
    assert (
        deny["permissionDecision"] == "deny"
        and "It failed before." in deny["permissionDecisionReason"]
    )


@pytest.mark.parametrize(
    ("stdin", "why"),
    [
        (b"", "not JSON"),
        (b"[1]", "not a JSON object"),
        (
            b'{"hook_event_name": "Stop", "transcript_path": "/x", "tool_name": "Bash"}',
            "not handled",
        ),
        (b'{"hook_event_name": "PreToolUse", "tool_name": "Bash"}', "no transcript_path"),
    ],
)
def test_bad_input_is_a_silent_pass_through(
    stdin: bytes, why: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAJGRAPH_HOOK_DIR", str(tmp_path))
    out = io.StringIO()
    assert command.main(["--no-start"], stdin=io.BytesIO(stdin), stdout=out) == 0
    assert out.getvalue() == ""
    assert why in (tmp_path / "hook.log").read_text()


def test_no_server_and_bad_flags_pass_through(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TRAJGRAPH_HOOK_DIR", str(tmp_path))
    hook = {"hook_event_name": "PreToolUse", "transcript_path": "/x.jsonl", "tool_name": "Bash"}
    out = io.StringIO()
    stdin = io.BytesIO(json.dumps(hook).encode())
    assert command.main(["--no-start"], stdin=stdin, stdout=out) == 0
    assert command.main(["--decision", "maybe"], stdin=io.BytesIO(b"{}"), stdout=out) == 0
    assert out.getvalue() == ""
    log = (tmp_path / "hook.log").read_text()
    assert "no hook server is listening" in log and "bad hook command-line flags" in log


def test_the_hook_log_is_private_and_an_open_hook_folder_is_tightened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # hook.log names transcript paths, session ids and error text: it was created 0644, and
    # a hook folder left 0755 (by an older version, or by hand) stayed so.
    import os

    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    os.chmod(hook_dir, 0o755)
    monkeypatch.setenv("TRAJGRAPH_HOOK_DIR", str(hook_dir))
    assert command.main(["--no-start"], stdin=io.BytesIO(b"[]"), stdout=io.StringIO()) == 0
    assert os.stat(hook_dir).st_mode & 0o777 == 0o700
    assert os.stat(hook_dir / "hook.log").st_mode & 0o777 == 0o600
    # The variant: a log that already exists world-readable is tightened on the next write.
    os.chmod(hook_dir / "hook.log", 0o644)
    assert command.main(["--no-start"], stdin=io.BytesIO(b"{"), stdout=io.StringIO()) == 0
    assert os.stat(hook_dir / "hook.log").st_mode & 0o777 == 0o600
    assert "not a JSON object" in (hook_dir / "hook.log").read_text()
