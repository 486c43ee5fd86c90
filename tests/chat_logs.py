"""Chat message logs in the shapes agent frameworks export (OpenAI Chat Completions,
LangGraph ``model_dump()``, Agents SDK ``to_input_list()``), written by hand for the tests of
the ``messages`` adapter: no real data."""

from __future__ import annotations

from typing import Any

# An OpenAI-compatible agent loop: two calls in one reply, answered out of order.
CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "tests/test_config.py::test_port fails. Fix it."},
    {
        "role": "assistant",
        "content": "Run the test first.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"cmd": "pytest -x"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "E   assert 8080 == 9090\n1 failed"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "app/config.py"}'},
            },
            {
                "id": "call_3",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"cmd": "git log -1"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_3", "content": "commit 1a2b3c"},
    {"role": "tool", "tool_call_id": "call_2", "content": "PORT = 8080"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_4",
                "type": "function",
                "function": {
                    "name": "edit_file",
                    "arguments": '{"path": "app/config.py", "old": "8080", "new": "9090"}',
                },
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_4", "content": "edited app/config.py"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_5",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"cmd": "pytest -x"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_5", "content": "1 passed"},
    {"role": "assistant", "content": "PORT was 8080; the test expects 9090."},
    {"role": "user", "content": "Thanks."},
]
CHAT_ACTIONS = [
    'bash({"cmd": "pytest -x"})',
    'read_file({"path": "app/config.py"})',
    'bash({"cmd": "git log -1"})',
    'edit_file({"path": "app/config.py", "old": "8080", "new": "9090"})',
    'bash({"cmd": "pytest -x"})',
    "PORT was 8080; the test expects 9090.",
]
CHAT_OBSERVATIONS = [
    "E   assert 8080 == 9090\n1 failed",
    "PORT = 8080",
    "commit 1a2b3c",
    "edited app/config.py",
    "1 passed",
    "Thanks.",  # the user's reply to the text-only message
]

# LangGraph state, messages dumped with model_dump(): type human/ai/tool, calls {name,args,id}.
LANGCHAIN = [
    {"type": "system", "content": "You are a data agent.", "additional_kwargs": {}},
    {"type": "human", "content": "How many orders are there?", "id": "m1"},
    {
        "type": "ai",
        "content": "",
        "tool_calls": [
            {
                "name": "sql",
                "args": {"query": "SELECT count(*) FROM order"},
                "id": "q1",
                "type": "tool_call",
            }
        ],
    },
    {"type": "tool", "content": 'syntax error at or near "order"', "tool_call_id": "q1"},
    {
        "type": "ai",
        "content": "Quote it.",
        "tool_calls": [
            {"name": "sql", "args": {"query": "SELECT count(*) FROM orders"}, "id": "q2"}
        ],
    },
    {"type": "tool", "content": "[(1542,)]", "tool_call_id": "q2", "name": "sql"},
    {"type": "ai", "content": "There are 1542 orders."},
]
LANGCHAIN_ACTIONS = [
    'sql({"query": "SELECT count(*) FROM order"})',
    'sql({"query": "SELECT count(*) FROM orders"})',
    "There are 1542 orders.",
]

# Agents SDK result.to_input_list(): Responses items.
ITEMS = [
    {"role": "user", "content": "Why does the build fail?"},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "CI log."}]},
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "c1",
        "name": "shell",
        "arguments": '{"command": ["make"]}',
    },
    {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "shell", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c2", "output": "second"},
    {"type": "function_call_output", "call_id": "c1", "output": "make: *** [build] Error 1"},
    {
        "type": "mcp_call",
        "id": "mcp_1",
        "name": "search_docs",
        "arguments": '{"q": "Error 1"}',
        "output": "no results",
    },
    {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "internal/db is missing.", "annotations": []}],
    },
]
