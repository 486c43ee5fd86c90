"""Lone surrogates and deep nesting in the formats whose records span lines (Claude Code
transcripts, OTel span files) and in the dead letters (issue 31).

Those formats are read line by line by their adapter, not through the one parser for
untrusted records, so a lone surrogate escape (``"\\ud83d"``: an emoji cut in half by a
truncated tool output) reached the trajectory as it was. Nothing downstream can encode it:
a whole session was dead-lettered at ``extract`` with a bare ``UnicodeEncodeError``, and in
a ``sessionId`` it reached Beam's coder inside a dead letter and ended the whole run. A
value nested 800 levels parsed (Python's parser goes to about 1,000) and then broke the
pickling of its bundle between two steps: a traceback, and records 1 / ingested 0 /
dead-lettered 0."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest

from tests.strategies import deep_json_text, deep_span_file
from trajgraph.core.errors import InputError
from trajgraph.pipelines import dead_letter
from trajgraph.pipelines.adapters import normalize, split_records
from trajgraph.pipelines.adapters.base import MAX_JSON_DEPTH, Located, nesting_depth, parse_json
from trajgraph.pipelines.transforms import LocatedCoder
from trajgraph.schemas.trajectory import validate

LONE = "\\ud83d"  # as a JSON log writes it: the escape of half an emoji
FFFD = "\ufffd"


def _session(sid: str = "s-1", *, name: str = "Bash", command: str = "ls", output: str = "a.py"):
    return [
        {"type": "user", "sessionId": sid, "uuid": "u1", "message": {"content": "Fix it"}},
        {
            "type": "assistant",
            "sessionId": sid,
            "uuid": "a1",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": name, "input": {"command": command}}
                ],
            },
        },
        {
            "type": "user",
            "sessionId": sid,
            "uuid": "u2",
            "message": {
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": output}]
            },
        },
    ]


def _jsonl(records: list[dict[str, Any]]) -> bytes:
    # json.dumps escapes a lone surrogate as \udXXX, exactly what a log writer emits.
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def _adapted(name: str, data: bytes) -> list[Any]:
    out = []
    for record in split_records(f"/logs/{name}", data):
        for traj in normalize(record):
            traj["tenant"] = "t"
            valid = validate(traj, locator=record.locator)
            json.dumps(valid, ensure_ascii=False).encode("utf-8")  # strict: writable
            out.append(valid)
    return out


@pytest.mark.parametrize("where", ["sessionId", "command", "output", "name", "prompt", "uuid"])
def test_a_lone_surrogate_anywhere_in_a_claude_code_session_becomes_fffd(where: str) -> None:
    lone = "x" + "\ud83d"
    kwargs = {k: lone for k in ("command", "output", "name") if k == where}
    records = _session(lone if where == "sessionId" else "s-1", **kwargs)
    if where == "prompt":
        records[0]["message"]["content"] = lone
    if where == "uuid":
        records[1]["uuid"] = lone
    (traj,) = _adapted("s.jsonl", _jsonl(records))
    turn = traj["turns"][0]
    text = json.dumps(traj, ensure_ascii=False)
    assert "\ud83d" not in text
    expected = {
        "sessionId": traj["id"],
        "command": turn["action"],
        "output": turn["observation"],
        "name": turn["action"].split("(")[0],
        "prompt": traj["task"],
    }.get(where)
    if expected is not None:
        assert FFFD in expected, (where, expected)


def test_a_lone_surrogate_in_an_otel_span_file_becomes_fffd() -> None:
    # The variant in the other line-spanning format, in every string a span gives a turn:
    # the tool's name, its arguments, its result, and the task inside the JSON text of
    # gen_ai.input.messages (parsed by the adapter a second time).
    lone = "y\ud83d"
    span = {
        "name": "execute_tool run",
        "context": {"trace_id": "0x" + "1" * 32, "span_id": "0x" + "2" * 16},
        "parent_id": None,
        "start_time": "2026-01-01T00:00:00Z",
        "status": {"status_code": "OK"},
        "attributes": {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": lone,
            "gen_ai.tool.call.arguments": {"cmd": lone},
            "gen_ai.tool.call.result": lone,
            "gen_ai.input.messages": json.dumps([{"role": "user", "content": lone}]),
        },
    }
    (traj,) = _adapted("trace.jsonl", (json.dumps(span) + "\n").encode())
    assert traj["task"] == "y" + FFFD
    assert traj["turns"][0]["observation"] == "y" + FFFD
    assert traj["turns"][0]["action"].count(FFFD) == 2


def test_a_lone_surrogate_in_codex_call_arguments_becomes_fffd() -> None:
    # Codex writes a call's arguments as JSON text inside the line: the adapter parses them a
    # second time, with the records' own parser, so the escape inside is repaired too.
    arguments = json.dumps({"command": ["bash", "-lc", "echo x\ud83d"]})
    lines = [
        {"timestamp": "t0", "type": "session_meta", "payload": {"id": "rollout-1"}},
        {
            "timestamp": "t1",
            "type": "response_item",
            "payload": {
                "type": "function_call",
                "name": "shell",
                "call_id": "c1",
                "arguments": arguments,
            },
        },
    ]
    (traj,) = _adapted("rollout.jsonl", _jsonl(lines))
    assert traj["turns"][0]["action"] == "echo x" + FFFD


def _nested(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize("levels", [800, 990, MAX_JSON_DEPTH])
def test_otel_args_nested_past_the_limit_are_a_clear_input_error(levels: int) -> None:
    # 800 levels parsed, then broke the pickling of the bundle (a traceback, nothing counted);
    # just past the limit is refused the same way, in a whole-JSON file and in a span file.
    with pytest.raises(InputError, match=r"/logs/t\.json: .*nested too deeply"):
        list(split_records("/logs/t.json", deep_span_file(levels)))
    session = _jsonl(_session()[:2]) + deep_json_text(levels).encode() + b"\n"
    (record,) = split_records("/logs/s.jsonl", session + _jsonl(_session()[2:]))
    # In a line-spanning file the deep line is one unreadable line, not the session's end.
    (traj,) = normalize(record)
    assert traj["id"] == "s-1"


def test_nesting_just_within_the_limit_travels_the_whole_pipeline() -> None:
    # At the limit, what every later step does to a record still works from inside a deep
    # stack: the bundle's pickling between steps (LocatedCoder), validation, copies.
    (record,) = split_records("/logs/t.json", deep_span_file(MAX_JSON_DEPTH - 8))
    (traj,) = normalize(record)
    traj["tenant"] = "t"
    validate(traj)

    def deep_stack(n: int) -> bytes:  # Beam calls the coder some hundred frames down
        if n:
            return deep_stack(n - 1)
        return LocatedCoder().encode(Located("/logs/t.json", "file", traj))

    assert LocatedCoder().decode(deep_stack(300)).trajectory == traj
    pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)


def test_nesting_depth_is_counted_without_recursion() -> None:
    assert nesting_depth("x") == 0
    assert nesting_depth([[], {"a": [1]}]) == 3
    assert nesting_depth(_nested(5_000)) == MAX_JSON_DEPTH + 1  # stops counting early
    assert parse_json(deep_json_text(MAX_JSON_DEPTH)) == _nested(MAX_JSON_DEPTH)
    with pytest.raises(ValueError, match="nested too deeply"):
        parse_json(deep_json_text(MAX_JSON_DEPTH + 1))


@pytest.mark.parametrize("field", ["source", "locator", "reason"])
def test_a_dead_letter_quoting_a_lone_surrogate_is_encodable(field: str) -> None:
    # A file name that is not UTF-8 decodes to lone surrogates ("\udcff"), and a reason may
    # quote a record's: Beam's coder could not carry such a row, and the run ended.
    parts = {"source": "/logs/a.jsonl", "locator": "line 1", "reason": "bad"}
    parts[field] += "\udcff"
    rows = [
        dead_letter.row("read", parts["source"], parts["locator"], parts["reason"]),
        dead_letter.from_exception(
            "normalize",
            (parts["source"], (InputError, f"InputError: {parts['reason']}", None)),
        ),
    ]
    for r in rows:
        dead_letter.to_json_line(r).encode("utf-8")
        assert "\udcff" not in json.dumps(r, ensure_ascii=False)


def test_a_surrogate_written_as_raw_bytes_is_repaired_too() -> None:
    # The variant the fuzz found: a writer that let a lone surrogate through as its three
    # bytes (ED A0 BD), not as an escape; json.loads decodes bytes so, and kept it.
    raw = _jsonl(_session(output="out X")).replace(b"out X", b"out \xed\xa0\xbd")
    (traj,) = _adapted("s.jsonl", raw)  # a line file decodes each byte as U+FFFD
    assert traj["turns"][0]["observation"].startswith("out " + FFFD)
    assert parse_json(b'{"a": "\xed\xa0\xbd"}') == {"a": FFFD}
    assert parse_json(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}  # a BOM, as json.loads reads it


def test_an_otel_time_of_hundreds_of_digits_is_no_time_not_a_crash() -> None:
    # Found by the OTel fuzz: ns / 1e9 overflowed (OverflowError, which normalize did not
    # turn into the record's InputError: in a stream the reader itself would have failed).
    span = json.loads(deep_span_file(1))[0]
    span["start_time"] = 10**400
    (traj,) = _adapted("t.json", json.dumps([span]).encode())
    assert traj["turns"][0].get("timestamp") is None
