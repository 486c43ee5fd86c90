"""Structured output on each kind of server (extractors/structured.py): the probe, the request
shape of each dialect, the fallback chain on the errors real servers send, the bounds, and the
salvage of a reply cut off at the token limit. Servers are tests/fake_openai.py imitating each
kind over real HTTP; the real llama-cpp-python server is tests/integration/extractors/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fake_openai import FakeOpenAI
from tests.trajectories import canonical_log
from trajgraph.core.errors import LLMError
from trajgraph.core.settings import LLMSettings, load
from trajgraph.extractors import structured as so
from trajgraph.extractors.base import Stats
from trajgraph.extractors.llm import LLMExtractor
from trajgraph.extractors.llm_client import ChatClient
from trajgraph.extractors.windows import build_windows
from trajgraph.schemas.extraction import MAX_WINDOWS_PER_REQUEST, reply_json_schema

TRAJ: dict[str, Any] = canonical_log(
    "unit-structured",
    "Fix the failing test.",
    [
        ("pytest tests/test_a.py", "FAILED test_a - 3 != 4"),
        ("sed -i 's/a - b/a + b/' src/a.py", "(no output)"),
        ("pytest tests/test_a.py", "1 passed in 0.01s"),
    ],
    tenant="default",
)


def llm(fake: FakeOpenAI, **kw: Any) -> LLMSettings:
    base: dict[str, Any] = {
        "model": "fake-model",
        "base_url": fake.url,
        "timeout_s": 2.0,
        "max_attempts": 3,
        "max_backoff_s": 0.01,
        "concurrency": 1,
        "cache_path": None,
    }
    base.update(kw)
    return LLMSettings(**base)


def extract(fake: FakeOpenAI, **kw: Any) -> tuple[Any, dict[str, int]]:
    ex = LLMExtractor(llm(fake, **kw))
    try:
        batch = ex.extract_windows(build_windows(TRAJ, budget_tokens=512), task=TRAJ["task"])
        return batch, ex.drain_stats()
    finally:
        ex.close()


# -- which server, which request --------------------------------------------------------------


@pytest.mark.parametrize(
    ("base_url", "owners", "kind"),
    [
        (None, [], "openai"),
        ("https://api.openai.com/v1", ["system"], "openai"),
        ("http://127.0.0.1:8765/v1", ["me"], "llama-cpp-python"),
        ("http://127.0.0.1:8080/v1", ["llamacpp"], "llama.cpp"),
        ("http://gpu:8000/v1", ["vllm"], "vllm"),
        ("http://127.0.0.1:11434/v1", ["library"], "ollama"),
        ("http://127.0.0.1:1234/v1", ["organization_owner"], "lmstudio"),
        ("http://proxy/v1", [], "unknown"),
        ("http://proxy/v1", ["someone"], "unknown"),
    ],
)
def test_server_kind_from_the_probe(base_url: str | None, owners: list[str], kind: str) -> None:
    assert so.server_kind(base_url, owners) == kind
    assert so.CHAINS[kind][-1] in ("prompt", "json_object")  # every chain ends in a sure thing


@pytest.mark.parametrize(
    ("status", "message", "refused"),
    [
        (500, "Input should be 'text' or 'json_object' (body.response_format.type)", True),
        (500, "upstream connect error", False),  # an outage: retried, not a format problem
        (503, "overloaded", False),
        (400, "response_format json_schema is not supported", True),
        (400, "This model's maximum context length is 8192 tokens", False),  # split instead
        (422, "body.response_format.type: Input should be 'text' or 'json_object'", True),
        (401, "invalid api key for response_format", False),
        (None, "connection refused", False),
    ],
)
def test_format_rejection(status: int | None, message: str, refused: bool) -> None:
    assert so.is_format_rejection(status, message) is refused


def test_each_dialect_sends_the_schema_where_the_server_reads_it() -> None:
    schema = reply_json_schema()
    openai = so.shape("json_schema", "x", schema, "openai")
    assert openai.response_format is not None
    sent = json.dumps(openai.response_format["json_schema"]["schema"])
    assert "maxLength" not in sent and "maxItems" not in sent  # strict mode refuses them
    assert openai.response_format["json_schema"]["strict"] is True
    vllm = so.shape("json_schema", "x", schema, "vllm")
    assert vllm.response_format is not None
    assert vllm.response_format["json_schema"]["schema"] == schema  # bounds kept
    llama = so.shape("json_object_schema", "x", schema, "llama-cpp-python")
    assert llama.response_format == {"type": "json_object", "schema": schema}
    assert not llama.schema_in_prompt
    guided = so.shape("guided_json", "x", schema, "vllm")
    assert guided.extra_body == {"guided_json": schema} and guided.response_format is None
    for d in ("json_object", "prompt"):
        assert so.shape(d, "x", schema).schema_in_prompt
    msgs = so.with_schema_in_prompt([{"role": "system", "content": "S"}], {"type": "object"})
    assert msgs[0]["content"].startswith("S\n") and msgs[0]["content"].endswith('{"type":"object"}')
    with pytest.raises(ValueError, match="dialect"):
        so.shape("xml", "x", schema)


def test_reply_schema_carries_bounds_a_small_model_needs() -> None:
    schema = reply_json_schema()
    assert schema["properties"]["windows"]["maxItems"] == MAX_WINDOWS_PER_REQUEST
    state = schema["$defs"]["StateItem"]["properties"]
    assert state["value"]["maxLength"] <= 300
    long_value = {
        "windows": [
            {
                "turn": 0,
                "states": [
                    {
                        "key": "s1",
                        "subject": "x",
                        "attribute": "output",
                        "value": "y" * 5000,  # a whole `cat` output in one value
                        "kind": "value",
                        "turn": 0,
                        "text": "t",
                    }
                ],
                "objects": [],
                "causes": [],
                "associations": [],
            }
        ]
    }
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(long_value, schema)


def _bounds(node: Any) -> list[int]:
    if isinstance(node, dict):
        own = [v for k, v in node.items() if k in so.BOUND_KEYWORDS and isinstance(v, int)]
        return own + [b for v in node.values() for b in _bounds(v)]
    if isinstance(node, list):
        return [b for v in node for b in _bounds(v)]
    return []


def test_no_schema_sent_to_a_model_has_a_bound_that_kills_a_grammar_server() -> None:
    from trajgraph.evaluation.judge import Answer, Verdict
    from trajgraph.queries.memory.llm_remind import reply_schema
    from trajgraph.queries.retrieval.router import RouteDecision
    from trajgraph.schemas.extraction import strict_json_schema

    schemas = [reply_json_schema(), reply_schema()] + [
        strict_json_schema(m) for m in (RouteDecision, Answer, Verdict)
    ]
    for schema in schemas:
        found = _bounds(schema)
        assert found, "a schema without bounds lets a small model run to max_tokens"
        assert max(found) <= so.MAX_BOUND


# -- the chain on each imitated server ------------------------------------------------------------


@pytest.mark.parametrize(
    ("imitate", "first_ok", "refusals"),
    [
        ("llama-cpp-python", "json_object_schema", 0),  # the probe says "me": no 500 at all
        ("vllm-old", "guided_json", 1),
        ("fastapi-422", "json_object_schema", 1),
        ("json-mode-only", "json_object", 2),
        ("ollama", "json_schema", 0),
    ],
)
def test_the_chain_finds_the_dialect_each_server_understands(
    fake_llm: FakeOpenAI, imitate: str, first_ok: str, refusals: int
) -> None:
    fake_llm.imitate = imitate
    batch, stats = extract(fake_llm)
    assert {e.extractor for e in batch.extractions} == {"llm:fake-model"}
    assert stats.get("llm_fallbacks", 0) == 0
    assert stats[f"llm_format_{first_ok}"] == 1
    assert stats.get("llm_format_fallbacks", 0) == refusals
    assert fake_llm.probes == 1
    # A second extractor in the same process: no probe, no refusal, straight to what worked.
    n = len(fake_llm.chat_requests)
    _, again = extract(fake_llm)
    assert fake_llm.probes == 1
    assert len(fake_llm.chat_requests) == n + 1
    assert again[f"llm_format_{first_ok}"] == 1 and not again.get("llm_format_fallbacks")


def test_openai_strict_mode_gets_the_schema_without_bounds(fake_llm: FakeOpenAI) -> None:
    fake_llm.imitate = "openai"  # refuses maxLength/maxItems with a 400
    # The kind comes from the probe (owned_by "system" → openai).
    batch, stats = extract(fake_llm)
    assert stats["llm_format_json_schema"] == 1 and not stats.get("llm_format_fallbacks")
    sent = fake_llm.chat_requests[0].body["response_format"]["json_schema"]["schema"]
    assert "maxLength" not in json.dumps(sent)
    assert {e.extractor for e in batch.extractions} == {"llm:fake-model"}


def test_a_500_naming_the_format_is_not_retried(fake_llm: FakeOpenAI) -> None:
    fake_llm.imitate = "llama-cpp-python"
    stats = Stats()
    client = ChatClient(llm(fake_llm, max_attempts=5), stats)
    fmt = so.shape("json_schema", "x", {"type": "object"}).response_format
    with pytest.raises(LLMError) as e:
        client.complete([{"role": "user", "content": "hi"}], fmt)
    assert e.value.status == 500 and not e.value.fatal
    assert stats.drain() == {"llm_calls": 1}  # one attempt: an outage would have been retried
    client.close()


def test_a_fixed_dialect_is_the_only_one_tried(fake_llm: FakeOpenAI) -> None:
    fake_llm.imitate = "json-mode-only"
    batch, stats = extract(fake_llm, response_format="json_object_schema")
    assert stats["llm_fallbacks"] == 3  # refused, and no other dialect was tried
    assert fake_llm.probes == 0
    assert {e.extractor for e in batch.extractions} == {"heuristic"}


def test_a_server_refusing_every_dialect_falls_back_to_the_heuristic(
    fake_llm: FakeOpenAI,
) -> None:
    fake_llm.imitate = "json-mode-only"
    fake_llm.script("400", "400")  # then json_object is refused too (a generic 400)
    batch, _ = extract(fake_llm)
    assert [e.turn for e in batch.extractions] == [0, 1, 2]  # no window lost


# -- truncated replies ----------------------------------------------------------------------------


def _reply(n: int) -> dict[str, Any]:
    return {
        "windows": [
            {
                "turn": t,
                "states": [
                    {
                        "key": f"s{t}",
                        "subject": "pytest",
                        "attribute": "exit_code",
                        "value": "1",
                        "kind": "exit_code",
                        "turn": t,
                        "text": "tests failed",
                    }
                ],
                "objects": [{"name": f"src/f{t}.py", "kind": "path", "turns": [t]}],
                "causes": [],
                "associations": [],
            }
            for t in range(n)
        ]
    }


def test_a_raw_control_character_in_a_string_is_still_a_reply() -> None:
    from trajgraph.extractors.llm_reply import parse_reply

    raw = json.dumps(_reply(1)).replace("tests failed", "tests\tfailed\nhere")
    raw = raw.replace("\\t", "\t").replace("\\n", "\n")  # as a grammar lets a model write
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)
    parsed = parse_reply(raw)
    assert parsed.windows[0].states[0].text == "tests\tfailed\nhere"


def test_a_reply_over_the_bounds_is_kept_whole() -> None:
    """The bounds help a model stop; a server that ignores them (OpenAI strict mode is sent
    none) must not lose a good reply for its 17th object or a long value."""
    from trajgraph.extractors.llm_reply import parse_reply

    reply = _reply(1)
    reply["windows"][0]["objects"] = [
        {"name": f"src/f{i}.py", "kind": "path", "turns": [0]} for i in range(40)
    ]
    reply["windows"][0]["states"][0]["text"] = "x" * 2000
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(reply, reply_json_schema())
    parsed = parse_reply(json.dumps(reply))
    assert len(parsed.windows[0].objects) == 40
    assert len(parsed.windows[0].states[0].text) == 2000


def test_salvage_keeps_the_complete_items() -> None:
    schema = reply_json_schema()
    text = json.dumps(_reply(3))
    cut = text[: text.index('"src/f2.py"') + 5]  # inside the last window's object name
    value = so.salvage_truncated(cut, schema)
    assert value is not None
    jsonschema.validate(value, schema)
    assert [w["turn"] for w in value["windows"]] == [0, 1, 2]
    assert value["windows"][2]["objects"] == []  # the partial object is dropped
    assert value["windows"][2]["causes"] == []  # never reached: filled in
    assert value["windows"][0] == _reply(3)["windows"][0]
    assert so.salvage_truncated("no json here", schema) is None
    assert so.salvage_truncated('{"windows": [{"turn": ', schema) == {"windows": []}


@given(st.integers(min_value=0, max_value=4), st.floats(min_value=0, max_value=1))
def test_every_prefix_salvages_to_a_valid_reply_or_nothing(n: int, where: float) -> None:
    schema = reply_json_schema()
    text = json.dumps(_reply(n))
    value = so.salvage_truncated(text[: int(len(text) * where)], schema)
    if value is not None:
        jsonschema.validate(value, schema)
        full = _reply(n)["windows"]
        for w in value["windows"]:  # whatever is kept was in the reply
            assert w["turn"] in {x["turn"] for x in full}


def test_a_truncated_single_window_reply_is_salvaged_or_replaced(fake_llm: FakeOpenAI) -> None:
    ws = build_windows(TRAJ, budget_tokens=512)[:1]
    fake_llm.script("truncate")
    ex = LLMExtractor(llm(fake_llm))
    batch = ex.extract_windows(ws, task=TRAJ["task"])
    stats = ex.drain_stats()
    ex.close()
    assert [e.turn for e in batch.extractions] == [0]  # never lost
    assert stats["llm_truncated"] == 1
    assert stats.get("llm_truncated_repaired", 0) + stats.get("llm_truncated_unusable", 0) == 1
    assert len(fake_llm.chat_requests) == 1  # no repair request: it would be cut off again
    if stats.get("llm_truncated_unusable"):
        assert stats["llm_fallbacks"] == 1


# -- the embedded server as a setting ------------------------------------------------------------


def test_llm_model_local_points_at_the_embedded_server(tmp_path: Path) -> None:
    env = {"TRAJGRAPH_LLM_MODEL": "local", "TRAJGRAPH_LLM_LOCAL_RUN": str(tmp_path)}
    env["TRAJGRAPH_LLM_LOCAL_PORT"] = "8799"
    s = load(env).llm
    assert (s.model, s.base_url) == ("local", "http://127.0.0.1:8799/v1")
    assert s.concurrency == 1 and s.pack_tokens == 2000 and s.max_output_tokens == 512
    with pytest.raises(LLMError, match="trajgraph llm start") as e:
        ChatClient(s, Stats())
    assert e.value.fatal
    (tmp_path / "server.json").write_text(json.dumps({"model": "SmolLM2-135M-Instruct.Q4_1"}))
    s = load({**env, "TRAJGRAPH_LLM_PACK_TOKENS": "900"}).llm
    assert s.model == "SmolLM2-135M-Instruct.Q4_1" and s.pack_tokens == 900
    assert s.api_key is None
