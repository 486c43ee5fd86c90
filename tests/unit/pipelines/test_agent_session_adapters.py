"""Claude Code transcripts and OpenTelemetry GenAI traces: synthetic records and the real
files in ../shared/corpora/agent-sessions.

Expected counts were read from the files with jq, independently of the adapters:
  main line:  jq 'select(.type=="assistant") | .message.content[]? | select(.type=="tool_use")'
  sub-agents: the same over .data.message.message of agent_progress records, per .data.agentId
  traces:     jq '[.spans[] | select(.attributes["gen_ai.operation.name"]=="execute_tool")]'
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.paths import AGENT_SESSIONS as CORPUS
from trajgraph.core.errors import InputError
from trajgraph.pipelines.adapters import normalize, split_records
from trajgraph.pipelines.adapters.claude_code import observation_text, render_action
from trajgraph.schemas.trajectory import validate

SID = "11111111-2222-3333-4444-555555555555"

# session -> (main-line tool calls, {agent id: tool calls})
SESSIONS = {
    "0b6fff8a-4d86-4dbd-b022-9e7a745a9eae": (
        109,
        {"a959a4ebb78a20e7e": 13, "ab486a506a5776f8e": 25},
    ),
    "282fceea-d848-47e9-98f3-78bf9b6db456": (49, {"aa918c69e3202d44f": 2, "abfa9931579c53806": 47}),
    "727104af-66bb-4918-b81e-0c90a4511e07": (48, {}),
    "9265f0e5-0af7-4fa9-834a-5f146d1f9afa": (31, {}),
    "960cec30-d8bb-4d4c-92f3-ec634d923f8e": (85, {}),
    "9cfd6e0a-1756-4452-9524-ec866855c9de": (
        47,
        {"a62d60080d6b8b436": 63, "a6ddf137c30284b22": 40},
    ),
    "a758b6ba-8d47-447c-bead-7f25794b7319": (32, {}),
}
TRACES = {"OPENAI_trace.json": 2, "GOOGLE_trace.json": 3, "SMOLAGENTS_trace.json": 3}


def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip(f"agent sessions not found at {CORPUS} (see its README)")
    return CORPUS


def load(path: str, data: bytes, fmt: str | None = None) -> list[dict[str, Any]]:
    records = list(split_records(path, data, fmt))
    return [t for rec in records for t in normalize(rec)]


def jsonl(*records: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def rec(kind: str, content: Any, uuid: str, parent: str | None, **extra: Any) -> dict[str, Any]:
    role = "assistant" if kind == "assistant" else "user"
    return {
        "type": kind,
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": SID,
        "isSidechain": False,
        "timestamp": f"2026-03-14T10:00:{len(uuid):02d}Z",
        "message": {"role": role, "content": content},
        **extra,
    }


def tool_use(id_: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": id_, "name": name, "input": args}


def result(id_: str, content: Any, is_error: bool = False) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": id_, "content": content, "is_error": is_error}


def small_session() -> list[dict[str, Any]]:
    return [
        {"type": "file-history-snapshot", "messageId": "m0", "snapshot": {}},
        rec("user", "fix the crash in app.py", "u1", None),
        rec("assistant", [{"type": "thinking", "thinking": ""}], "a1", "u1"),
        rec(
            "assistant",
            [
                {"type": "text", "text": "Let me run it."},
                tool_use("t1", "Bash", {"command": "python app.py"}),
            ],
            "a2",
            "a1",
        ),
        {"type": "progress", "data": {"type": "hook_progress"}, "uuid": "p1", "sessionId": SID},
        rec(
            "user",
            [result("t1", "Exit code 1\nTraceback (most recent call last):\nKeyError: 'x'", True)],
            "u2",
            "a2",
        ),
        rec(
            "assistant",
            [
                tool_use(
                    "t2",
                    "Edit",
                    {"file_path": "/w/app.py", "old_string": "d['x']", "new_string": "d.get('x')"},
                )
            ],
            "a3",
            "u2",
        ),
        rec(
            "user",
            [result("t2", "<tool_use_error>File has not been read yet.</tool_use_error>", True)],
            "u3",
            "a3",
        ),
        rec("user", "read it first", "u4", "u3"),
        rec("assistant", [tool_use("t3", "Read", {"file_path": "/w/app.py"})], "a4", "u4"),
        rec("user", [result("t3", "     1→d = {}\n     2→print(d['x'])")], "u5", "a4"),
        {"type": "brand-new-record", "sessionId": SID, "whatever": 1},
        rec(
            "assistant",
            [tool_use("t4", "Agent", {"prompt": "look around", "description": "explore"})],
            "a5",
            "u5",
        ),
        {
            "type": "progress",
            "uuid": "p2",
            "sessionId": SID,
            "parentToolUseID": "t4",
            "data": {
                "type": "agent_progress",
                "agentId": "sub1",
                "message": {
                    "type": "user",
                    "message": {
                        "role": "user",
                        "content": [{"type": "text", "text": "look around"}],
                    },
                },
            },
        },
        {
            "type": "progress",
            "uuid": "p3",
            "sessionId": SID,
            "parentToolUseID": "t4",
            "data": {
                "type": "agent_progress",
                "agentId": "sub1",
                "message": {
                    "type": "assistant",
                    "message": {
                        "role": "assistant",
                        "content": [tool_use("s1", "Bash", {"command": "ls"})],
                    },
                },
            },
        },
        {
            "type": "progress",
            "uuid": "p4",
            "sessionId": SID,
            "parentToolUseID": "t4",
            "data": {
                "type": "agent_progress",
                "agentId": "sub1",
                "message": {
                    "type": "user",
                    "message": {"role": "user", "content": [result("s1", "app.py")]},
                },
            },
        },
        rec("user", [result("t4", [{"type": "text", "text": "only app.py"}])], "u6", "a5"),
        rec("assistant", [{"type": "text", "text": "Done."}], "a6", "u6"),
    ]


# -------------------------------------------------------------------------- Claude Code


def test_claude_code_turns_context_failures_and_subagents():
    data = jsonl(*small_session())
    main, sub = load("/x/s.jsonl", data)
    assert main["id"] == SID and main["format"] == "claude-code"
    assert main["task"] == "fix the crash in app.py"
    assert [t["action"].split("\n")[0] for t in main["turns"]] == [
        "python app.py",
        "edit /w/app.py",
        "read /w/app.py",
        'Agent({"prompt": "look around", "description": "explore"})',
    ]
    t0, t1, t2, t3 = main["turns"]
    assert t0["thought"] == "Let me run it." and t0["observation"].startswith("Exit code 1\n")
    assert "<old_str>\nd['x']\n</old_str>\n<new_str>\nd.get('x')\n</new_str>" in t1["action"]
    assert t1["observation"] == "Error: File has not been read yet."
    assert t2["thought"] == "User: read it first"
    assert t3["observation"] == "only app.py"
    assert main["metadata"]["final_text"] == "Done."
    assert main["metadata"]["failed_calls"] == 2
    assert main["metadata"]["skipped_records"]["brand-new-record"] == 1
    assert main["metadata"]["subagents"] == [f"{SID}/agent-sub1"]
    assert sub["id"] == f"{SID}/agent-sub1" and sub["task"] == "look around"
    assert [(t["action"], t["observation"]) for t in sub["turns"]] == [("ls", "app.py")]
    for t in (main, sub):
        validate(copy.deepcopy(t))


def test_claude_code_torn_last_line_is_not_an_error_and_pending_call_is_a_turn():
    records = small_session()[:4]  # the Bash call has no result yet
    data = jsonl(*records) + b'{"type": "user", "message": {"role": "us'
    (main,) = load("/x/s.jsonl", data)
    assert main["metadata"]["torn_last_line"] is True
    assert main["metadata"]["unanswered_calls"] == 1
    assert [(t["action"], t["observation"]) for t in main["turns"]] == [("python app.py", "")]


def test_claude_code_bad_middle_line_is_skipped_and_named():
    records = small_session()
    data = jsonl(*records[:3]) + b"{not json\n" + jsonl(*records[3:])
    main = load("/x/s.jsonl", data)[0]
    assert main["metadata"]["bad_lines"] == [4]
    assert len(main["turns"]) == 4


def test_claude_code_is_detected_only_for_transcripts():
    canonical = jsonl({"id": "a", "turns": []}, {"id": "b", "turns": []})
    assert [r.format for r in split_records("/x/c.jsonl", canonical)] == [None, None]
    (record,) = split_records("/x/s.jsonl", jsonl(*small_session()))
    assert (record.format, record.locator) == ("claude-code", "file")
    with pytest.raises(InputError, match="no user or assistant record"):
        load("/x/s.jsonl", jsonl(small_session()[0]), "claude-code")


def test_claude_code_render_and_observation_rules():
    multi = render_action(
        "MultiEdit",
        {
            "file_path": "/a.py",
            "edits": [{"old_string": "a", "new_string": "b", "replace_all": True}],
        },
    )
    assert multi == (
        "edit /a.py\n<old_str>\na\n</old_str>\n<new_str>\nb\n</new_str>\n"
        "<replace_all>true</replace_all>"
    )
    assert (
        render_action("Write", {"file_path": "/a.py", "content": "x = 1\n"})
        == "write /a.py\nx = 1\n"
    )
    assert render_action("Grep", {"pattern": "def"}) == 'Grep({"pattern": "def"})'
    assert observation_text("Exit code 2\nboom", True) == "Exit code 2\nboom"
    assert observation_text("File does not exist.", True) == "Error: File does not exist."
    assert observation_text("fine", False) == "fine"


@pytest.mark.parametrize("session", list(SESSIONS))
def test_claude_code_real_sessions_account_for_every_tool_call(session):
    path = corpus() / "claude-code" / f"{session}.jsonl"
    trajs = load(str(path), path.read_bytes())
    main_calls, agents = SESSIONS[session]
    assert trajs[0]["id"] == session
    assert len(trajs[0]["turns"]) == main_calls
    assert {t["id"].split("/agent-")[1]: len(t["turns"]) for t in trajs[1:]} == agents
    for t in trajs:
        assert [turn["idx"] for turn in t["turns"]] == list(range(len(t["turns"])))
        assert t["task"].strip()
        validate(copy.deepcopy(t))


def test_claude_code_real_failures_keep_exit_codes():
    path = corpus() / "claude-code" / "a758b6ba-8d47-447c-bead-7f25794b7319.jsonl"
    main = load(str(path), path.read_bytes())[0]
    uv = [t for t in main["turns"] if t["action"].startswith("uv run python -c")]
    assert len(uv) == 2
    assert all(
        t["observation"].startswith("Exit code 2\nerror: Failed to query Python interpreter")
        for t in uv
    )
    assert main["turns"][21]["observation"] == (
        "Exit code 127\n/bin/bash: line 1: /tmp/review-tool-venv/bin/python: "
        "No such file or directory"
    )
    assert main["metadata"]["failed_calls"] == 8  # the README's count of is_error results


# -------------------------------------------------------------------------- OpenTelemetry


def otlp(*spans: dict[str, Any]) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "bot"}}]
                },
                "scopeSpans": [{"scope": {"name": "x"}, "spans": list(spans)}],
            }
        ]
    }


def span(name: str, sid: str, start: int, attrs: dict[str, Any], **extra: Any) -> dict[str, Any]:
    def value(v: Any) -> dict[str, Any]:
        return {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}

    return {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": sid,
        "parentSpanId": "b7ad6b7169203331" if sid != "b7ad6b7169203331" else "",
        "name": name,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 10),
        "attributes": [{"key": k, "value": value(v)} for k, v in attrs.items()],
        **extra,
    }


def test_otel_otlp_json_turns_task_context_and_failures():
    doc = otlp(
        span(
            "invoke_agent helper",
            "b7ad6b7169203331",
            1,
            {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"},
        ),
        span(
            "chat gpt-4o",
            "0000000000000002",
            2,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": "book a flight"}]}]
                ),
                "gen_ai.output.messages": json.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": "Searching."}]}]
                ),
                "gen_ai.usage.input_tokens": 10,
            },
        ),
        span(
            "execute_tool search",
            "0000000000000004",
            5,
            {
                "gen_ai.tool.name": "search",
                "gen_ai.tool.call.arguments": '{"q": "SFO"}',
                "gen_ai.tool.call.result": "3 flights",
            },
        ),
        span(
            "execute_tool book",
            "0000000000000003",
            9,
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "book",
                "error.type": "TimeoutError",
            },
            status={"code": 2, "message": "upstream timed out"},
        ),
    )
    (traj,) = load("/x/t.json", json.dumps(doc).encode())
    assert traj["format"] == "otel-genai" and traj["id"] == "0af7651916cd43dd8448eb211c80319c"
    assert traj["task"] == "book a flight"
    assert [(t["action"], t["observation"]) for t in traj["turns"]] == [
        ('search({"q": "SFO"})', "3 flights"),
        ("book({})", "Error: TimeoutError: upstream timed out"),
    ]
    assert traj["turns"][0]["thought"] == "Searching."
    assert traj["metadata"]["failed_calls"] == 1 and traj["metadata"]["service"] == "bot"
    validate(copy.deepcopy(traj))


def test_otel_sdk_span_list_groups_by_conversation_id():
    def sdk(
        trace: str, sid: str, name: str, attrs: dict[str, Any], status: str = "OK"
    ) -> dict[str, Any]:
        return {
            "name": name,
            "context": {"trace_id": trace, "span_id": sid},
            "parent_id": None,
            "start_time": f"2025-09-16T12:00:0{sid[-1]}Z",
            "status": {"status_code": status},
            "attributes": attrs,
        }

    spans = [
        sdk(
            "0x01",
            "0x1",
            "execute_tool ls",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.conversation.id": "c9",
                "gen_ai.tool.args": "{}",
            },
        ),
        sdk(
            "0x02",
            "0x2",
            "execute_tool cat",
            {"gen_ai.operation.name": "execute_tool", "gen_ai.conversation.id": "c9"},
            "ERROR",
        ),
        sdk("0x03", "0x3", "execute_tool pwd", {"gen_ai.operation.name": "execute_tool"}),
    ]
    trajs = load("/x/spans.json", json.dumps(spans).encode())
    assert sorted((t["id"], len(t["turns"])) for t in trajs) == [
        ("00000000000000000000000000000003", 1),
        ("c9", 2),
    ]
    c9 = next(t for t in trajs if t["id"] == "c9")
    assert c9["turns"][1]["observation"] == "Error: ERROR"


def test_otel_rejects_traces_without_genai_spans():
    doc = otlp(span("GET /", "0000000000000009", 1, {"http.method": "GET"}))
    with pytest.raises(InputError, match="gen_ai"):
        load("/x/t.json", json.dumps(doc).encode())


@pytest.mark.parametrize("name", list(TRACES))
def test_otel_real_traces(name):
    path = corpus() / "otel-genai" / name
    (traj,) = load(str(path), path.read_bytes())
    assert traj["format"] == "otel-genai"
    assert len(traj["turns"]) == TRACES[name]
    assert "America/New_York" in traj["task"]
    assert traj["turns"][0]["action"].startswith("get_current_time(")
    assert '"timezone": "America/New_York"' in traj["turns"][0]["observation"]
    validate(copy.deepcopy(traj))


def test_claude_code_subagent_own_transcript_is_its_record(tmp_path: Path) -> None:
    session = tmp_path / f"{SID}.jsonl"
    session.write_bytes(jsonl(*small_session()))
    sidechain = [
        {**r, "isSidechain": True, "agentId": "sub1"}
        for r in (
            rec("user", "look around", "x1", None),
            rec("assistant", [tool_use("s1", "Bash", {"command": "ls"})], "x2", "x1"),
            rec("user", [result("s1", "app.py")], "x3", "x2"),
        )
    ]
    own = tmp_path / SID / "subagents" / "agent-sub1.jsonl"
    own.parent.mkdir(parents=True)
    own.write_bytes(jsonl(*sidechain))
    main = load(str(session), session.read_bytes())
    assert [t["id"] for t in main] == [SID]  # the progress copy yields to the own file
    (sub,) = load(str(own), own.read_bytes())
    assert sub["id"] == f"{SID}/agent-sub1" and sub["task"] == "look around"
    assert [(t["action"], t["observation"]) for t in sub["turns"]] == [("ls", "app.py")]


def test_otel_iso_times_read_alike_on_python_3_10_and_later():
    # 3.10's datetime.fromisoformat takes 3 or 6 fraction digits only; exporters write 1 to 9.
    from trajgraph.pipelines.adapters.otel_genai import _ns

    second = 1758024001 * 1_000_000_000  # 2025-09-16T12:00:01Z
    assert _ns("2025-09-16T12:00:01Z") == second
    assert _ns("2025-09-16T12:00:01.123456789Z") == second + 123_456_000
    assert _ns("2025-09-16T12:00:01.5+00:00") == second + 500_000_000
    assert _ns("2025-09-16T14:00:01.25+02:00") == second + 250_000_000
    assert _ns("2025-09-16T12:00:01.123Z") == second + 123_000_000
    assert _ns("1758024001000000000") == second
    assert _ns("yesterday at noon") is None
