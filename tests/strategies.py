"""Hypothesis strategies for hostile input, shared by the fuzz tests: JSON values (huge and
negative integers, non-finite numbers, control characters, lone surrogates, injections, wrong
types), log files of every format built from skeletons whose fields may be any of those, and
damage to the bytes (truncation, invalid UTF-8, a BOM, NUL)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from trajgraph.schemas.trajectory import max_turn_idx

HOSTILE_TEXT = st.sampled_from(
    [
        "",
        "x",
        "\x00",
        "\x1b[31mred\x1b[0m",
        "\x9b2J",
        "a\u2028b\u0085c",
        "\u202egnp.exe",
        "\ud800",
        "\udfff lone",
        "😀" * 3,
        "' OR 1=1 //",
        "`) DETACH DELETE n //",
        "<script>alert(1)</script>",
        "../../etc/passwd",
        "a" * 700,
        "{}",
        "null",
    ]
)
TEXT = st.one_of(st.text(max_size=40), HOSTILE_TEXT)
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**63, 2**53, -1, 10**400, max_turn_idx(), max_turn_idx() + 1]),
    st.floats(allow_nan=True, allow_infinity=True),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=12,
)


# The values most likely to break something, drawn often on purpose.
EDGE_VALUES: st.SearchStrategy[Any] = st.sampled_from(
    [
        2**63,
        10**400,
        -1,
        max_turn_idx() + 1,
        float("nan"),
        float("inf"),
        "",
        "\x1b[2J",
        "\ud800",
        "a\u2028b",
        None,
        [],
        {},
        True,
    ]
)


def _maybe(value: Any) -> Any:
    """A strategy that is usually ``value``, often an edge value, sometimes any JSON."""
    return st.one_of(st.just(value), st.just(value), st.just(value), EDGE_VALUES, JSON)


def _msg(role: str, content: Any) -> Any:
    return st.fixed_dictionaries({"role": _maybe(role), "content": _maybe(content)})


TURN = st.fixed_dictionaries(
    {"idx": _maybe(0), "action": _maybe("ls -la"), "observation": _maybe("total 0")},
    optional={"reward": NUMBERS, "thought": TEXT, "timestamp": TEXT, "actor": TEXT},
)


@st.composite
def canonical(draw: Any) -> tuple[str, Any]:
    turns = draw(st.lists(TURN, max_size=4))
    for n, turn in enumerate(turns):  # mostly increasing, as logs are
        if turn["idx"] == 0:
            turn["idx"] = n
    obj = draw(
        st.fixed_dictionaries(
            {"id": _maybe("c-1"), "task": _maybe("fix it"), "turns": st.just(turns)},
            optional={"tenant": TEXT, "metadata": JSON, "outcome": SCALARS, "format": TEXT},
        )
    )
    return "canonical.jsonl", obj


@st.composite
def swe_agent(draw: Any) -> tuple[str, Any]:
    step = st.fixed_dictionaries(
        {"action": _maybe("ls"), "observation": _maybe("a.py"), "thought": _maybe("hmm")},
        optional={"response": TEXT, "state": JSON},
    )
    history = st.lists(
        st.fixed_dictionaries(
            {"role": _maybe("user"), "content": _maybe("Fix the bug")},
            optional={"is_demo": st.booleans()},
        ),
        max_size=3,
    )
    obj = {
        "trajectory": draw(st.lists(step, max_size=4)),
        "history": draw(history),
        "info": draw(_maybe({"exit_status": "submitted", "submission": "diff"})),
    }
    return "run.traj", obj


@st.composite
def mini_swe_agent(draw: Any) -> tuple[str, Any]:
    messages = draw(
        st.lists(
            st.one_of(
                _msg("system", "You are an agent"),
                _msg("user", "Fix the bug"),
                _msg("assistant", "THOUGHT: look\n```bash\nls\n```"),
                _msg("user", "<returncode>0</returncode><output>a</output>"),
            ),
            max_size=5,
        )
    )
    obj = {
        "messages": messages,
        "trajectory_format": "mini-swe-agent-1",
        "instance_id": draw(_maybe("django__django-1")),
        "info": draw(_maybe({"exit_status": "Submitted"})),
    }
    return "run.traj.json", obj


@st.composite
def openhands(draw: Any) -> tuple[str, Any]:
    action = st.fixed_dictionaries(
        {
            "id": _maybe(1),
            "source": _maybe("agent"),
            "action": _maybe("run"),
            "args": _maybe({"command": "ls"}),
        },
        optional={"message": TEXT, "timestamp": TEXT, "tool_call_metadata": JSON},
    )
    observation = st.fixed_dictionaries(
        {
            "id": _maybe(2),
            "source": _maybe("agent"),
            "observation": _maybe("run"),
            "content": _maybe("a.py"),
            "cause": _maybe(1),
        },
        optional={"extras": JSON, "timestamp": TEXT},
    )
    events = draw(st.lists(st.one_of(action, observation), min_size=1, max_size=5))
    return "events.json", events


@st.composite
def spider_agent(draw: Any) -> tuple[str, Any]:
    call = st.fixed_dictionaries(
        {"name": _maybe("execute_sql"), "arguments": _maybe('{"sql": "SELECT 1"}')}
    )
    conversation = draw(
        st.lists(
            st.one_of(
                _msg("user", "How many rows?"),
                st.fixed_dictionaries(
                    {
                        "role": st.just("assistant"),
                        "content": _maybe("let me look"),
                        "tool_calls": st.lists(call, max_size=2),
                    }
                ),
                _msg("tool", "1"),
            ),
            max_size=5,
        )
    )
    items = [{"instance_id": draw(_maybe("sf_bq1")), "conversation": conversation}]
    return "spider.json", items


@st.composite
def tau_bench(draw: Any) -> tuple[str, Any]:
    call = st.fixed_dictionaries(
        {
            "id": _maybe("call_1"),
            "function": st.fixed_dictionaries(
                {"name": _maybe("get_user"), "arguments": _maybe('{"id": 1}')}
            ),
        }
    )
    traj = draw(
        st.lists(
            st.one_of(
                _msg("system", "policy"),
                _msg("user", "I want a refund"),
                st.fixed_dictionaries(
                    {
                        "role": st.just("assistant"),
                        "content": _maybe(None),
                        "tool_calls": st.lists(call, max_size=2),
                    }
                ),
                st.fixed_dictionaries(
                    {
                        "role": st.just("tool"),
                        "content": _maybe("{}"),
                        "tool_call_id": _maybe("call_1"),
                    }
                ),
            ),
            max_size=6,
        )
    )
    episode = {
        "task_id": draw(_maybe(3)),
        "trial": draw(_maybe(0)),
        "reward": draw(_maybe(1.0)),
        "info": draw(_maybe({"task": {"instruction": "refund", "user_id": "u1"}})),
        "traj": traj,
    }
    return "gpt-4o-airline.json", [episode]


@st.composite
def ama_bench(draw: Any) -> tuple[str, Any]:
    step = st.fixed_dictionaries(
        {"turn_idx": _maybe(0), "action": _maybe("go north"), "observation": _maybe("a room")}
    )
    obj = {
        "episode_id": draw(_maybe("ep-1")),
        "task": draw(_maybe("find the key")),
        "trajectory": draw(st.lists(step, max_size=4)),
        "qa_pairs": draw(_maybe([])),
    }
    return "ama.jsonl", obj


class JsonLines(list[Any]):
    """Records written one per line (a Claude Code transcript, an OTLP file export)."""


def nested(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = {"a": value} if levels % 2 else [value]
    return value


def deep_json_text(levels: int) -> str:
    """JSON text nested ``levels`` deep (json.dumps itself recurses, and stops near 1,000)."""
    return '{"a": ' * levels + '"x"' + "}" * levels


def deep_span_file(levels: int) -> bytes:
    """An OTel SDK span list whose ``gen_ai.tool.args`` nests ``levels`` deep."""
    span = {
        "name": "execute_tool run",
        "context": {"trace_id": "0x" + "3" * 32, "span_id": "0x" + "4" * 16},
        "parent_id": None,
        "status": {"status_code": "OK"},
        "attributes": {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.args": "ARGS"},
    }
    return json.dumps([span]).replace('"ARGS"', deep_json_text(levels)).encode()


# Nesting around the parser's limit (pipelines/adapters/base.py MAX_JSON_DEPTH = 128): within
# it a record must travel the whole pipeline, past it it must be refused cleanly.
DEEP = st.integers(100, 400).map(nested)


def _text_or_lone(value: str) -> Any:
    """Usually ``value``; often the same with a lone surrogate (half an emoji) in it."""
    return st.one_of(
        st.just(value), _maybe(value), st.just(value + "\ud83d"), st.just("\udfff" + value)
    )


@st.composite
def claude_code(draw: Any) -> tuple[str, Any]:
    sid = draw(_text_or_lone("s-1"))
    use_id = draw(_text_or_lone("toolu_1"))
    records = [
        {
            "type": "user",
            "sessionId": sid,
            "uuid": draw(_text_or_lone("u1")),
            "cwd": draw(_text_or_lone("/repo")),
            "message": {"role": "user", "content": draw(_text_or_lone("Fix the bug"))},
        },
        {
            "type": "assistant",
            "sessionId": sid,
            "message": {
                "role": "assistant",
                "model": draw(_text_or_lone("m")),
                "content": [
                    {"type": "text", "text": draw(_text_or_lone("Looking"))},
                    {
                        "type": "tool_use",
                        "id": use_id,
                        "name": draw(_text_or_lone("Bash")),
                        "input": draw(
                            st.one_of(
                                st.fixed_dictionaries({"command": _text_or_lone("ls")}),
                                _maybe({"file_path": "/a.py", "old_string": "x"}),
                                DEEP,
                            )
                        ),
                    },
                ],
            },
        },
        {
            "type": "user",
            "sessionId": sid,
            "message": {
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": use_id,
                        "content": draw(st.one_of(_text_or_lone("a.py"), JSON, DEEP)),
                        "is_error": draw(_maybe(False)),
                    }
                ]
            },
        },
        {"type": "file-history-snapshot", "snapshot": draw(st.one_of(JSON, DEEP))},
    ]
    extra = draw(st.lists(st.sampled_from(records), max_size=2))
    return "session.jsonl", JsonLines(records + extra)


@st.composite
def otel_genai(draw: Any) -> tuple[str, Any]:
    def span(n: int) -> Any:
        return st.fixed_dictionaries(
            {
                "name": _text_or_lone("execute_tool run"),
                "context": st.just({"trace_id": "0x" + "1" * 32, "span_id": f"0x{n:016x}"}),
                "parent_id": st.just(None),
                "start_time": _maybe("2026-01-01T00:00:00Z"),
                "status": _maybe({"status_code": "OK"}),
                "attributes": st.fixed_dictionaries(
                    {
                        "gen_ai.operation.name": _maybe("execute_tool"),
                        "gen_ai.tool.name": _text_or_lone("run"),
                        "gen_ai.tool.args": st.one_of(_text_or_lone("{}"), JSON, DEEP),
                        "gen_ai.tool.call.result": _text_or_lone("ok"),
                        "gen_ai.input.messages": _text_or_lone(
                            '[{"role": "user", "content": "do it \\ud83d"}]'
                        ),
                    }
                ),
            }
        )

    spans = [draw(span(n)) for n in range(draw(st.integers(1, 3)))]
    if draw(st.booleans()):
        return "trace.jsonl", JsonLines(spans)  # one span per line
    return "trace.json", spans


SKELETONS = {
    "canonical": canonical(),
    "swe-agent": swe_agent(),
    "mini-swe-agent": mini_swe_agent(),
    "openhands": openhands(),
    "spider-agent": spider_agent(),
    "tau-bench": tau_bench(),
    "ama-bench": ama_bench(),
    "claude-code": claude_code(),
    "otel-genai": otel_genai(),
}


@st.composite
def damaged_bytes(draw: Any, obj: Any, name: str) -> bytes:
    ascii_only = draw(st.booleans())
    if isinstance(obj, JsonLines):
        text = "\n".join(json.dumps(r, ensure_ascii=ascii_only, allow_nan=True) for r in obj)
    else:
        text = json.dumps(obj, ensure_ascii=ascii_only, allow_nan=True)
    data = text.encode("utf-8", "surrogatepass")
    if name.endswith(".jsonl") and draw(st.booleans()):
        # A second line, and sometimes a damaged one.
        data += b"\n" + draw(st.sampled_from([b"{not json", b"[]", b"null", data, b"  "]))
    damage = draw(st.sampled_from(["none", "none", "truncate", "bad-utf8", "bom", "nul"]))
    if damage == "truncate" and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif damage == "bad-utf8":
        cut = draw(st.integers(0, len(data)))
        data = data[:cut] + b"\xff\xfe\xc3" + data[cut:]
    elif damage == "bom":
        data = b"\xef\xbb\xbf" + data
    elif damage == "nul":
        data = data.replace(b'"', b'"\x00', 1)
    return data


# -- log rotation under a followed stream (tests/unit/pipelines/test_stream_rotation.py) --------

# Steps of a writer and a log tool: append n events, rotate by rename (the writer keeps
# appending to the renamed file until it reopens) or by copy and truncate, reopen, poll.
ROTATION_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 4)),
        st.tuples(st.sampled_from(["rename", "copytruncate", "reopen", "poll"]), st.just(0)),
    ),
    min_size=1,
    max_size=25,
)


# -- requests from an OpenAPI document -------------------------------------------------------


def _resolve(schema: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        node: Any = spec
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        schema = node
    return schema


def valid_value(schema: dict[str, Any], spec: dict[str, Any], extra: Any = None) -> Any:
    """A strategy for values the schema allows (the subset FastAPI emits). ``extra``: a
    strategy of domain values mixed into strings (real ids, so requests reach data)."""
    schema = _resolve(schema, spec)
    if "anyOf" in schema:
        return st.one_of([valid_value(s, spec, extra) for s in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "integer":
        return st.integers(schema.get("minimum"), schema.get("maximum"))
    if kind == "number":
        return st.floats(schema.get("minimum"), schema.get("maximum"), allow_nan=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "string":
        low, high = schema.get("minLength", 0), schema.get("maxLength", 60)
        text = st.text(min_size=low, max_size=min(high, 60))
        if high > 60:  # sometimes right at the limit
            text = st.one_of(text, st.just("q" * high))
        return st.one_of(text, extra) if extra is not None else text
    if kind == "object":
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        return st.fixed_dictionaries(
            {k: valid_value(v, spec, extra) for k, v in props.items() if k in required},
            optional={
                k: valid_value(v, spec, extra) for k, v in props.items() if k not in required
            },
        )
    if kind == "array":
        return st.lists(valid_value(schema.get("items", {}), spec, extra), max_size=3)
    return JSON


def invalid_value(schema: dict[str, Any], spec: dict[str, Any]) -> Any:
    """A strategy for values just or far outside the schema: bounds +-1, huge, wrong types."""
    schema = _resolve(schema, spec)
    options = [JSON]
    kind = schema.get("type")
    for bound, step in (("minimum", -1), ("maximum", 1)):
        if bound in schema:
            options.append(st.just(schema[bound] + step))
    if kind == "string" and "maxLength" in schema:
        options.append(st.just("x" * (schema["maxLength"] + 1)))
    if kind == "integer":
        options.append(st.sampled_from([2**63, -(2**63) - 1, 10**30]))
    return st.one_of(options)
