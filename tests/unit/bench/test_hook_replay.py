"""The hook replay's log oracle: which calls a reminder is due for, and what confirms one."""

from __future__ import annotations

import json
from typing import Any

from bench.hook_replay import calls_of, cases, same_failure

SID = "s-1"


def line(kind: str, content: list[dict[str, Any]]) -> bytes:
    role = "assistant" if kind == "assistant" else "user"
    record = {
        "type": kind,
        "sessionId": SID,
        "uuid": kind,
        "message": {"role": role, "content": content},
    }
    return json.dumps(record).encode() + b"\n"


def bash(id_: str, command: str) -> bytes:
    return line(
        "assistant",
        [{"type": "tool_use", "id": id_, "name": "Bash", "input": {"command": command}}],
    )


def result(id_: str, text: str, error: bool) -> bytes:
    part = {"type": "tool_result", "tool_use_id": id_, "content": text, "is_error": error}
    return line("user", [part])


def test_a_repeat_that_fails_the_same_way_is_a_case():
    lines = [
        bash("a", "uv run python -c 'import x'"),
        result("a", "Exit code 2\nerror: Failed to query Python interpreter", True),
        bash("b", "ls .venv"),
        result("b", "bin lib", False),
        bash("c", "uv run python -c 'import x' 2>&1"),
        result("c", "Exit code 2\nerror: Failed to query Python interpreter", True),
        bash("d", "uv run python -c 'import x'"),
        result("d", "ok", False),
    ]
    calls = calls_of(lines)
    assert [(c.index, c.upto, c.result_at, c.is_error) for c in calls] == [
        (0, 1, 2, True),
        (1, 3, 4, False),
        (2, 5, 6, True),
        (3, 7, 8, False),
    ]
    assert cases(calls) == {"c"}  # d repeats it too, but succeeded: no reminder was due
    assert same_failure(calls[2], calls[0]) and not same_failure(calls[3], calls[0])


def test_a_write_in_between_means_no_case():
    lines = [
        bash("a", "make"),
        result("a", "Exit code 2\nerror: missing header", True),
        bash("b", "touch header.h"),
        result("b", "", False),
        bash("c", "make"),
        result("c", "Exit code 2\nerror: missing header", True),
    ]
    assert cases(calls_of(lines)) == set()
