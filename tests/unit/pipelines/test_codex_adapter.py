"""Codex CLI rollouts: synthetic lines for each rule, and every real rollout in
../shared/corpora/codex-sessions (read in place, skipped when absent).

The expected turn count of a real file is counted here from the raw lines, independently of
the adapter: the ``response_item`` lines whose payload type is a tool call
(``function_call``, ``custom_tool_call``, ``local_shell_call``, ``web_search_call``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.paths import CODEX_SESSIONS
from trajgraph.core.errors import InputError
from trajgraph.extractors.heuristic import HeuristicExtractor
from trajgraph.extractors.windows import build_windows
from trajgraph.pipelines.adapters import normalize, split_records
from trajgraph.pipelines.adapters.codex import (
    ESCALATED,
    output_text,
    patch_paths,
    render_action,
)
from trajgraph.schemas.trajectory import validate

SID = "019e0000-1111-7222-8333-444455556666"
CALL_TYPES = ("function_call", "custom_tool_call", "local_shell_call", "web_search_call")


def line(kind: str, payload: dict[str, Any], ts: str = "2026-05-11T08:27:17.490Z") -> dict:
    return {"timestamp": ts, "type": kind, "payload": payload}


def meta(**extra: Any) -> dict[str, Any]:
    return line(
        "session_meta",
        {
            "id": SID,
            "cwd": "/repo/app",
            "cli_version": "0.125.0",
            "originator": "codex-tui",
            **extra,
        },
    )


def item(**payload: Any) -> dict[str, Any]:
    return line("response_item", payload)


def event(**payload: Any) -> dict[str, Any]:
    return line("event_msg", payload)


def call(call_id: str, name: str, args: Any) -> dict[str, Any]:
    raw = args if isinstance(args, str) else json.dumps(args)
    return item(type="function_call", name=name, arguments=raw, call_id=call_id)


def out(call_id: str, output: Any, kind: str = "function_call_output") -> dict[str, Any]:
    return item(type=kind, call_id=call_id, output=output)


def jsonl(*records: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def load(data: bytes, path: str = "rollout-2026-05-11T11-26-55-x.jsonl") -> list[dict[str, Any]]:
    records = list(split_records(path, data))
    assert [r.format for r in records] == ["codex"]  # detected, one record per file
    trajs = [t for rec in records for t in normalize(rec)]
    for t in trajs:
        validate(t)
    return trajs


def test_one_turn_per_call_with_output_exit_codes_and_context() -> None:
    data = jsonl(
        meta(git={"branch": "main", "repository_url": "git@x:y.git"}),
        line("turn_context", {"cwd": "/repo/app", "model": "gpt-5.5"}),
        item(type="message", role="developer", content=[{"type": "input_text", "text": "rules"}]),
        item(
            type="message",
            role="user",
            content=[
                {"type": "input_text", "text": "<environment_context>x</environment_context>"}
            ],
        ),
        event(type="user_message", message="fix the failing test"),
        item(
            type="message",
            role="user",
            content=[{"type": "input_text", "text": "fix the failing test"}],
        ),
        item(
            type="reasoning",
            summary=[{"type": "summary_text", "text": "Run the tests first."}],
            encrypted_content="gAAA",
        ),
        call("c1", "exec_command", {"cmd": "pytest -q", "workdir": "/repo/app"}),
        out(
            "c1",
            "Chunk ID: a\nWall time: 1.0 seconds\nProcess exited with code 1\nOutput:\n"
            "E   AssertionError: 2 != 3\n",
        ),
        # the old shell tool: argv list, exit code inside the output JSON
        call("c2", "shell", {"command": ["bash", "-lc", "cat setup.cfg"]}),
        out(
            "c2",
            json.dumps(
                {"output": "No such file", "metadata": {"exit_code": 2, "duration_seconds": 0.1}}
            ),
        ),
        # a process still running when its call returned: the exit code comes with the event
        call("c3", "exec_command", {"cmd": "npm test"}),
        out("c3", "Chunk ID: b\nProcess running with session ID 7\nOutput:\n"),
        call("c4", "write_stdin", {"session_id": 7, "chars": ""}),
        event(type="exec_command_end", call_id="c3", exit_code=0, aggregated_output="ok"),
        out("c4", "Chunk ID: c\nOutput:\nok\n"),
        item(type="message", role="assistant", content=[{"type": "output_text", "text": "Done."}]),
    )
    [traj] = load(data)
    assert traj["id"] == SID and traj["format"] == "codex"
    assert traj["task"] == "fix the failing test"
    turns = traj["turns"]
    assert [t["action"] for t in turns] == [
        "pytest -q",
        "cat setup.cfg",
        "npm test",
        'write_stdin({"session_id": 7, "chars": ""})',
    ]
    assert "Process exited with code 1" in turns[0]["observation"]
    assert turns[1]["observation"] == "Exit code 2\nNo such file"
    assert turns[2]["observation"].startswith("Exit code 0\n")
    assert "Run the tests first." in turns[0]["thought"] and "rules" not in turns[0]["thought"]
    assert "environment_context" not in turns[0].get("thought", "")
    m = traj["metadata"]
    assert m["cwd"] == "/repo/app" and m["cli_version"] == "0.125.0" and m["model"] == "gpt-5.5"
    assert m["git_branch"] == "main" and m["git_repository_url"] == "git@x:y.git"
    assert (m["tool_calls"], m["failed_calls"], m["exit_codes"]) == (4, 2, 3)
    assert m["encrypted_reasoning"] == 1 and m["final_text"] == "Done."
    # the extractor sees the exit codes
    ex = HeuristicExtractor().extract_windows(build_windows(traj, budget_tokens=2048), task="")
    codes = {e.turn: [s.value for s in e.states if s.kind == "exit_code"] for e in ex.extractions}
    assert codes[0] == ["1"] and codes[1] == ["2"] and codes[2] == ["0"]


def test_apply_patch_is_an_edit_of_every_path() -> None:
    patch = (
        "*** Begin Patch\n*** Update File: src/a.py\n@@\n-x = 1\n+x = 2\n"
        "*** Add File: tests/test_a.py\n+def test(): pass\n*** Delete File: old.py\n*** End Patch"
    )
    data = jsonl(
        meta(),
        item(
            type="custom_tool_call",
            status="completed",
            call_id="p1",
            name="apply_patch",
            input=patch,
        ),
        event(type="patch_apply_end", call_id="p1", success=True, stdout="Success."),
        out(
            "p1",
            json.dumps(
                {
                    "output": "Success. Updated the following files:\nM src/a.py\n",
                    "metadata": {"exit_code": 0},
                }
            ),
            "custom_tool_call_output",
        ),
        call(
            "p2",
            "apply_patch",
            {"input": "*** Begin Patch\n*** Update File: b.py\n@@\n-y\n+z\n*** End Patch"},
        ),
        event(type="patch_apply_end", call_id="p2", success=False, stderr="context not found"),
        out("p2", "apply_patch verification failed: context not found"),
    )
    [traj] = load(data)
    first, second = traj["turns"]
    assert first["action"].startswith(
        "apply_patch src/a.py tests/test_a.py old.py\n*** Begin Patch"
    )
    assert first["observation"].startswith("Exit code 0\nSuccess.")
    assert second["observation"].startswith("Exit code 1\n")
    assert traj["metadata"]["failed_calls"] == 1
    ex = HeuristicExtractor().extract_windows(build_windows(traj, budget_tokens=2048), task="")
    changed = [s.subject for s in ex.extractions[0].states if s.kind == "file_changed"]
    assert changed == ["src/a.py", "tests/test_a.py", "old.py"]
    assert patch_paths("*** Begin Patch\n*** Update File: a\n*** Move to: b\n*** End Patch") == [
        "a",
        "b",
    ]


def test_compacted_marker_unknown_lines_torn_last_line_and_bad_arguments() -> None:
    data = (
        jsonl(
            meta(),
            event(type="user_message", message="go"),
            call("a", "exec_command", "[REDACTED_ARGUMENTS len=153 sha=23291271]"),
            out("a", "[REDACTED_OUTPUT len=5030 sha=28c2f7e1]"),
            line("compacted", {"message": "", "replacement_history": []}),
            {"timestamp": "2026-05-11T09:00:00Z", "type": "some_future_line", "payload": {}},
            item(type="ghost_snapshot", ghost_commit={}),
            item(
                type="web_search_call",
                id="ws_1",
                status="completed",
                action={"type": "search", "query": "codex hooks"},
            ),
            call("b", "exec_command", '{"cmd": "ls", '),  # cut: not JSON
        )
        + b'{"timestamp": "2026-05-11T09:01:00Z", "type": "response_item", "payl'
    )
    [traj] = load(data)
    turns = traj["turns"]
    assert [t["action"] for t in turns] == [
        "exec_command([REDACTED_ARGUMENTS len=153 sha=23291271])",
        "web_search codex hooks",
        'exec_command({"cmd": "ls", )',
    ]
    assert "compacted" in turns[1]["thought"]
    m = traj["metadata"]
    assert m["compactions"] == [1] and m["torn_last_line"] is True
    assert m["unanswered_calls"] == 1 and m["tool_calls"] == 3
    assert m["skipped_records"]["some_future_line"] == 1
    assert m["skipped_records"]["response_item/ghost_snapshot"] == 1


def test_a_bad_line_in_the_middle_is_kept_as_a_number_and_no_rollout_line_is_an_error() -> None:
    data = (
        jsonl(meta())
        + b"not json\n"
        + jsonl(call("a", "exec_command", {"cmd": "ls"}), out("a", "x"))
    )
    [traj] = load(data)
    assert traj["metadata"]["bad_lines"] == [2] and len(traj["turns"]) == 1
    with pytest.raises(InputError):
        normalize(next(iter(split_records("r.jsonl", jsonl({"x": 1}), "codex"))))


def test_render_and_output_helpers() -> None:
    assert render_action("shell", {"command": ["bash", "-lc", "make test"]}) == "make test"
    assert render_action("shell", {"command": ["rg", "-n", "a b"]}) == "rg -n 'a b'"
    assert render_action("update_plan", {"plan": []}) == 'update_plan({"plan": []})'
    escalated = {"cmd": "ps -ef", "sandbox_permissions": "require_escalated"}
    assert render_action("exec_command", escalated) == "ps -ef\n" + ESCALATED
    legacy = {"command": ["bash", "-lc", "ps"], "with_escalated_permissions": True}
    assert render_action("shell", legacy).endswith(ESCALATED)
    assert output_text([{"type": "input_text", "text": "a"}, {"type": "input_image"}]) == (
        "a\n[image]",
        None,
    )
    assert output_text('{"output": "x", "metadata": {"exit_code": 3}}') == ("x", 3)
    assert output_text("Process exited with code 0\nOutput:\n") == (
        "Process exited with code 0\nOutput:\n",
        0,
    )


# -- the real rollouts -------------------------------------------------------------------------


def rollouts() -> list[Path]:
    if not CODEX_SESSIONS.is_dir():
        pytest.skip(f"Codex sessions not found at {CODEX_SESSIONS} (see its README)")
    files = sorted(CODEX_SESSIONS.rglob("*.jsonl"))
    assert len(files) == 9
    return files


def raw_counts(path: Path) -> tuple[int, int]:
    """(tool calls, lines that are not JSON) counted from the raw lines."""
    calls = bad = 0
    for raw in path.read_bytes().splitlines():
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except ValueError:
            bad += 1
            continue
        payload = rec.get("payload") if isinstance(rec, dict) else None
        if rec.get("type") == "response_item" and isinstance(payload, dict):
            calls += payload.get("type") in CALL_TYPES
    return calls, bad


def test_every_real_rollout_has_one_turn_per_tool_call() -> None:
    seen = {}
    for path in rollouts():
        calls, bad = raw_counts(path)
        [traj] = load(path.read_bytes(), str(path))
        assert len(traj["turns"]) == calls, path.name
        assert traj["metadata"]["tool_calls"] == calls
        assert len(traj["metadata"].get("bad_lines") or []) == bad == 0
        seen[path.parent.name + "/" + path.name[:30]] = (len(traj["turns"]), traj["metadata"])
    # the published counts (README: 102 and 38 function/custom calls; + 3 web searches)
    codemie = {k: v for k, v in seen.items() if k.startswith("codemie-code")}
    assert sorted(n for n, _ in codemie.values()) == [38, 105]
    assert sum(n for k, (n, _) in seen.items() if k.startswith("localpush")) == 745
    assert [n for k, (n, _) in seen.items() if k.startswith("agent-history")] == [0]


def test_real_exit_codes_are_recovered_where_the_file_has_them() -> None:
    for path in rollouts():
        [traj] = load(path.read_bytes(), str(path))
        m = traj["metadata"]
        if path.parent.name == "codemie-code":
            # every exec_command / apply_patch call reports its code (text, JSON or event)
            shell = [
                t
                for t in traj["turns"]
                if not t["action"].startswith(("update_plan(", "web_search", "write_stdin("))
            ]
            coded = [
                t
                for t in shell
                if "xit code" in t["observation"] or "exited with code" in t["observation"]
            ]
            assert m["exit_codes"] >= len(coded) > 0.8 * len(shell), path.name
            assert m["failed_calls"] > 0
        else:  # redacted: outputs replaced, no exit code left to recover
            assert m["exit_codes"] == 0
    lp = [p for p in rollouts() if "019c8a59" in p.name]
    [traj] = load(lp[0].read_bytes(), str(lp[0]))
    assert traj["metadata"]["compactions"] == [258]
