"""The ``messages`` adapter (OpenAI Chat Completions, LangChain/LangGraph, OpenAI Responses /
Agents SDK items) and what a user whose logs are almost canonical is told.

Every fixture is written here by hand in the shape the framework exports; none is real data.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.chat_logs import (
    CHAT,
    CHAT_ACTIONS,
    CHAT_OBSERVATIONS,
    ITEMS,
    LANGCHAIN,
    LANGCHAIN_ACTIONS,
)
from trajgraph.core.errors import InputError, SchemaValidationError
from trajgraph.pipelines.adapters import normalize, split_records
from trajgraph.pipelines.adapters.base import LineFile
from trajgraph.schemas.trajectory import Trajectory, validate

_CLASSES = {
    "system": "SystemMessage",
    "human": "HumanMessage",
    "ai": "AIMessage",
    "tool": "ToolMessage",
}


def read(name: str, data: bytes, fmt: str | None = None) -> list[Trajectory]:
    out = []
    for record in split_records(name, data, fmt):
        for traj in normalize(record):
            out.append(validate(traj, locator=record.locator))
    return out


def dump(value: Any) -> bytes:
    return json.dumps(value).encode()


def test_openai_chat_array():
    (traj,) = read("run.json", dump(CHAT))
    assert traj["format"] == "messages" and traj["id"] == "run"
    assert traj["task"] == "tests/test_config.py::test_port fails. Fix it."
    turns = traj["turns"]
    assert [t["action"] for t in turns] == CHAT_ACTIONS  # the system prompt is no turn
    assert [t["observation"] for t in turns] == CHAT_OBSERVATIONS  # by tool_call_id
    assert turns[0]["thought"] == "Run the test first." and "thought" not in turns[1]
    assert [t["actor"] for t in turns] == ["agent"] * 6
    assert traj["metadata"]["messages"] == len(CHAT)


def test_assistant_text_is_answered_by_the_next_user_message():
    (traj,) = read("run.json", dump(CHAT))
    assert len(traj["turns"]) == 6  # the last user message answers the text-only turn
    assert traj["turns"][-1]["observation"] == "Thanks."


def test_request_body_and_thread_ids():
    (traj,) = read("req.json", dump({"model": "gpt-4o", "messages": CHAT}))
    assert traj["metadata"]["model"] == "gpt-4o" and traj["id"] == "req"
    (traj,) = read("t.json", dump({"thread_id": "thread-42", "messages": CHAT}))
    assert traj["id"] == "thread-42" and traj["metadata"]["thread_id"] == "thread-42"
    assert [t["action"] for t in traj["turns"]] == CHAT_ACTIONS


def test_jsonl_of_conversations_is_one_trajectory_per_line_with_distinct_ids():
    data = b"\n".join(dump({"messages": m}) for m in (CHAT, CHAT[:4], LANGCHAIN))
    trajectories = read("finetune.jsonl", data)
    assert [t["id"] for t in trajectories] == [
        "finetune/line-1",
        "finetune/line-2",
        "finetune/line-3",
    ]
    assert [len(t["turns"]) for t in trajectories] == [6, 1, 3]


def test_jsonl_of_one_message_per_line_is_one_conversation():
    lines = [json.dumps(m) for m in CHAT]
    lines.insert(3, "{not json")  # a bad line in the middle is skipped and listed
    data = ("\n".join(lines) + '\n{"role": "assistant", "con').encode()  # torn last line
    (record,) = split_records("chat.jsonl", data)
    assert record.locator == "file" and isinstance(record.payload, LineFile)
    (traj,) = read("chat.jsonl", data)
    assert traj["id"] == "chat" and [t["action"] for t in traj["turns"]] == CHAT_ACTIONS
    assert traj["metadata"]["bad_lines"] == [4] and traj["metadata"]["torn_last_line"] is True
    # --format messages reads it the same way
    (again,) = read("chat.jsonl", data, "messages")
    assert again["turns"] == traj["turns"]


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param(lambda ms: {"messages": ms}, id="model_dump"),
        pytest.param(
            lambda ms: [
                {"type": m["type"], "data": {k: v for k, v in m.items() if k != "type"}} for m in ms
            ],
            id="messages_to_dict",
        ),
        pytest.param(
            lambda ms: [
                {
                    "lc": 1,
                    "type": "constructor",
                    "id": ["langchain", "schema", "messages", _CLASSES[m["type"]]],
                    "kwargs": {k: v for k, v in m.items() if k != "type"},
                }
                for m in ms
            ],
            id="dumpd",
        ),
    ],
)
def test_langchain_serializations(shape):
    (traj,) = read("lg.json", dump(shape(LANGCHAIN)))
    assert traj["format"] == "messages" and traj["task"] == "How many orders are there?"
    assert [t["action"] for t in traj["turns"]] == LANGCHAIN_ACTIONS
    assert traj["turns"][0]["observation"] == 'syntax error at or near "order"'
    assert traj["turns"][1]["thought"] == "Quote it."


def test_responses_items():
    (traj,) = read("agent.json", dump(ITEMS))
    turns = traj["turns"]
    assert traj["task"] == "Why does the build fail?"
    assert [t["action"] for t in turns] == [
        'shell({"command": ["make"]})',
        "shell({})",
        'search_docs({"q": "Error 1"})',
        "internal/db is missing.",
    ]
    assert [t["observation"] for t in turns[:3]] == [
        "make: *** [build] Error 1",  # joined by call_id, not by position
        "second",
        "no results",  # a hosted tool's own output
    ]
    assert turns[0]["thought"] == "CI log." and "thought" not in turns[1]


def test_responses_object_with_text_input():
    body = {"id": "resp_9", "object": "response", "input": "Why?", "output": ITEMS[1:]}
    (traj,) = read("resp.json", dump(body))
    assert traj["id"] == "resp_9" and traj["task"] == "Why?" and len(traj["turns"]) == 4


def test_unmatched_results_and_foreign_elements_are_counted():
    messages = [
        {"role": "user", "content": "go"},
        {"role": "tool", "tool_call_id": "nobody", "content": "stray"},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "ok"},
        {"role": "system", "content": "(sniffing looks at the first five)"},
        {"something": "else"},
    ]
    (traj,) = read("x.json", dump(messages))
    assert traj["metadata"]["unmatched_tool_results"] == 1
    assert traj["metadata"]["skipped_messages"] == 1
    assert [(t["action"], t["observation"]) for t in traj["turns"]] == [("done", "ok")]


def test_explicit_format_on_an_array_of_conversations():
    data = dump([{"messages": CHAT}, {"messages": LANGCHAIN}])
    trajectories = read("many.json", data)
    assert [t["id"] for t in trajectories] == ["many/item-0", "many/item-1"]
    assert read("many.json", data, "messages") == trajectories


def test_other_formats_are_not_taken_for_messages():
    mini = {"trajectory_format": "mini-swe-agent-1", "messages": CHAT, "info": {}}
    (record,) = split_records("m.traj.json", dump(mini))
    assert record.format == "mini-swe-agent"
    canonical = {"id": "c", "turns": [{"idx": 0, "action": "ls", "observation": ""}]}
    (record,) = split_records("c.json", dump(canonical))
    assert record.format == "canonical"


def test_format_mismatch_names_the_messages_shape():
    with pytest.raises(InputError, match="format 'messages' does not fit: expected chat"):
        list(split_records("x.json", dump({"foo": 1}), "messages"))


# -- near misses of the canonical shape --------------------------------------------------------


def canonical_line(turn: dict[str, Any], **top: Any) -> bytes:
    return dump({"id": "r", "task": "t", **top, "turns": [turn]})


@pytest.mark.parametrize(
    "line,fix",
    [
        (
            canonical_line({"idx": 0, "action": "ls", "output": "a"}),
            "rename 'output' to 'observation'",
        ),
        (
            canonical_line({"index": 0, "action": "ls", "observation": "a"}),
            "rename 'index' to 'idx'",
        ),
        (canonical_line({"step": 0, "cmd": "ls", "result": "a"}), "rename 'cmd' to 'action'"),
        (
            canonical_line({"idx": "3", "action": "ls", "observation": "a"}),
            "idx must be a JSON integer (3, not the string '3')",
        ),
        (
            canonical_line({"idx": 0, "action": {"tool": "ls"}, "observation": "a"}),
            "action is text: write a structured value as JSON text",
        ),
        (canonical_line({"idx": 0, "action": "ls"}), "a turn needs idx, action and observation"),
        (
            canonical_line({"idx": 0, "action": "ls", "observation": "a"}, model="m"),
            "put 'model' under 'metadata'",
        ),
        (
            canonical_line({"idx": 0, "action": "ls", "observation": "a"}, instruction="t2"),
            "rename 'instruction' to 'task'",
        ),
    ],
)
def test_near_miss_canonical_names_the_fix(line, fix):
    with pytest.raises(SchemaValidationError) as err:
        read("runs.jsonl", line)
    assert fix in str(err.value)
    assert "runs.jsonl [line 1]" in str(err.value)


def test_turns_under_another_name():
    line = dump({"id": "r", "steps": [{"step": 1, "command": "ls", "output": "a"}]})
    (record,) = split_records("runs.jsonl", line)
    with pytest.raises(InputError) as err:
        normalize(record)
    text = str(err.value)
    assert "runs.jsonl [line 1]" in text
    assert "turns under 'steps': rename that key to 'turns'" in text
    assert "bring-your-own-format" in text
    assert "tried" not in text  # the long list of every format is left out for a near miss


def test_unknown_format_points_to_conversion():
    with pytest.raises(InputError, match="bring-your-own-format"):
        list(split_records("x.json", dump({"foo": [1, 2]})))


def test_id_less_lines_of_one_file_are_kept_apart():
    turns = [{"idx": 0, "action": "ls", "observation": ""}]
    data = b"\n".join(
        [dump({"turns": turns}), dump({"turns": turns}), dump({"id": "own", "turns": turns})]
    )
    assert [t["id"] for t in read("runs.jsonl", data)] == ["runs/line-1", "runs/line-2", "own"]
    # a whole-file record keeps the file stem, and an id equal to the stem is the record's own
    assert read("runs.json", dump({"turns": turns}))[0]["id"] == "runs"
    assert read("runs.jsonl", dump({"id": "runs", "turns": turns}))[0]["id"] == "runs"
    # a file's only record keeps the stem too (blank lines around it are no records), as
    # before id-less records of several were told apart: its graph id does not change
    assert read("one.jsonl", b"\n" + dump({"turns": turns}) + b"\n\n")[0]["id"] == "one"
    assert read("one.json", dump([{"turns": turns}]))[0]["id"] == "one"
    two = dump([{"turns": turns}, {"turns": turns}])
    assert [t["id"] for t in read("two.json", two)] == ["two/item-0", "two/item-1"]
