"""Retrieval pieces that need no database: embedders, the rule router, offline code, the
Lucene query builder and the budgeted context."""

from __future__ import annotations

import math
import re

import pytest

from tests.fake_openai import FakeOpenAI
from trajgraph.core.errors import ConfigError
from trajgraph.core.settings import EmbedderSettings, LLMSettings, load
from trajgraph.core.tokens import count_tokens
from trajgraph.graph.embedders import (
    HashEmbedder,
    LocalEmbedder,
    OpenAIEmbedder,
    dimension,
    embedder_name,
    get_embedder,
    turn_text,
)
from trajgraph.queries.retrieval import router
from trajgraph.queries.retrieval.base import Evidence
from trajgraph.queries.retrieval.context import render_context
from trajgraph.queries.retrieval.lexical import lucene_query
from trajgraph.queries.sandbox import run_python


def _cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_hash_embedder_is_deterministic_normalized_and_lexical() -> None:
    e = HashEmbedder(128)
    a, b, c, empty = e.embed(
        ["pytest tests/test_app.py failed", "tests/test_app.py failed again", "cat README", ""]
    )
    assert e.embed(["pytest tests/test_app.py failed"])[0] == a
    for v in (a, b, c, empty):
        assert len(v) == 128 and math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-9)
    assert _cos(a, b) > _cos(a, c)
    assert e.name == "hash-128" == embedder_name(EmbedderSettings(kind="hash", dim=128))


def test_local_embedder_runs_offline_and_ranks_by_meaning() -> None:
    e = LocalEmbedder()
    q, near, far = e.embed(
        ["why did the unit test fail", "FAILED tests/test_app.py - AssertionError", "ls -la /tmp"]
    )
    assert len(q) == 384 and math.isclose(sum(x * x for x in q), 1.0, rel_tol=1e-4)
    assert _cos(q, near) > _cos(q, far)
    assert (
        e.name
        == embedder_name(EmbedderSettings(kind="local"))
        == "sentence-transformers/all-MiniLM-L6-v2"
    )


def test_embedder_settings_and_errors() -> None:
    s = load({"TRAJGRAPH_EMBEDDER": "hash", "TRAJGRAPH_EMBED_DIM": "64"}).embedder
    assert (s.kind, s.dim) == ("hash", 64)
    assert get_embedder(s).dim == 64
    o = load({"TRAJGRAPH_EMBEDDER": "openai", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}).embedder
    assert o.model == "text-embedding-3-small" and o.transport.base_url == "http://127.0.0.1:9/v1"
    with pytest.raises(ConfigError, match="TRAJGRAPH_EMBEDDER"):
        load({"TRAJGRAPH_EMBEDDER": "word2vec"})
    with pytest.raises(ConfigError, match="at least 8"):
        HashEmbedder(4)


def test_turn_text_keeps_action_head_and_tail() -> None:
    obs = "HEAD " + "x" * 5000 + " TAIL"
    text = turn_text({"action": "pytest -q", "observation": obs})
    assert text.startswith("pytest -q\nHEAD") and text.endswith("TAIL") and len(text) < 600


@pytest.mark.parametrize(
    ("question", "tools", "directions"),
    [
        ("Why did the build fail?", ("graph",), ("upstream",)),
        ("What happened after the deploy?", ("graph",), ("downstream",)),
        ("What is the current value of retries?", ("graph",), ("history",)),
        ("How many times did the agent run pytest?", ("code",), ()),
        ("Summarize the task", (), ()),
        ("Where is `src/app.py` used?", ("keyword",), ()),
    ],
)
def test_rule_router(question: str, tools: tuple[str, ...], directions: tuple[str, ...]) -> None:
    r = router.rule_route(question, has_trajectory=True)
    assert r.tools == tools and r.directions == directions and r.reason


def test_counting_across_trajectories_is_keyword_not_code() -> None:
    assert router.rule_route("How many errors?", has_trajectory=False).tools == ("keyword",)


def test_question_identifiers_are_verbatim() -> None:
    ids = router.question_identifiers('Why did "tests/test_a.py::test_x" fail in src/app.py?')
    assert ids[:2] == ["tests/test_a.py::test_x", "src/app.py"]


def test_offline_code_counts_with_the_sandbox() -> None:
    turns = [
        {"idx": 0, "action": "pytest -q", "observation": "1 failed"},
        {"idx": 1, "action": "vim app.py", "observation": ""},
        {"idx": 2, "action": "pytest -q", "observation": "Traceback (most recent call last)"},
    ]
    code = router.offline_code("How many times did the agent run pytest?", [])
    assert code is not None
    assert run_python(code, turns).value == {"count": 2, "turns": [0, 2]}
    errors = router.offline_code("How many errors were there?", [])
    assert errors is not None and run_python(errors, turns).value["count"] == 2
    steps = router.offline_code("How many steps did it take?", [])
    assert steps is not None and run_python(steps, turns).value == {"count": 3}
    # An identifier with quotes in it cannot break out of the generated string literal.
    evil = router.offline_code("how many", ['x"; import os; "'])
    assert evil is not None
    assert run_python(evil, turns).value == {"count": 0, "turns": []}


def test_lucene_query_escapes_everything_a_question_may_contain() -> None:
    q = lucene_query('Why "tests/a.py::t" (AND) OR foo:bar~ \\', ["tests/a.py::t"])
    assert q.startswith('"tests\\/a.py\\:\\:t"')
    assert "foo" in q and "bar" in q
    unescaped = re.sub(r"\\.", "", q)  # drop every escaped character
    assert not set(":()~\\/") & set(unescaped)
    assert lucene_query("the of and", []) == ""


def test_lucene_query_stays_under_lucenes_clause_limit() -> None:
    # Lucene refuses a query of more than 1,024 clauses (a phrase counts each of its terms):
    # a long question of distinct words, or a long quoted span, must not reach it.
    alnum = "abcdefghijklmnopqrstuvwxyz0123456789"
    words = " ".join(a + b for a in alnum for b in alnum)  # 1,296 words, 3,887 characters
    cjk = "".join(chr(0x4E00 + i) for i in range(1500))  # one token per character
    for question, identifiers in ((words, []), (f'"{words}"', [words]), ("x", [cjk, "ab"])):
        q = lucene_query(question, identifiers)
        tokens = len(re.findall(r"[A-Za-z0-9_]+", q.replace(" OR ", " ")))
        tokens += len(re.findall(r"[^\x00-\x7f]", q))
        # Each term is a clause per field of the index (state_text has three).
        assert 0 < 3 * tokens <= 1024, tokens
    assert lucene_query("x", [cjk, "ab"]) == '"ab"'  # what fits is kept
    short = lucene_query("why did tests/a.py fail", ["tests/a.py"])
    assert short == '"tests\\/a.py" OR tests\\/a.py OR fail'


def test_context_fits_the_budget_and_is_time_ordered() -> None:
    items = [
        Evidence(f"u{i}", "turn", "t", i, "observation " * 200, "seed", 0.5, "seed")
        for i in range(10, 0, -1)
    ]
    items.append(Evidence("code", "code", "t", None, "code result: 3", "code", 1.0, "code"))
    text, used = render_context(items, 300)
    assert used <= 300 and used == count_tokens(text)
    turns = [
        int(line.split("turn ")[1].split(" ")[0])
        for line in text.splitlines()
        if line.startswith("[t turn")
    ]
    assert turns == sorted(turns) and turns
    assert "code result: 3" in text  # the highest-priority item always earns its place


def test_openai_embedder_against_the_local_server(fake_llm: FakeOpenAI) -> None:
    settings = load(
        {
            "TRAJGRAPH_EMBEDDER": "openai",
            "TRAJGRAPH_EMBED_MODEL": "embed-x",
            "TRAJGRAPH_EMBED_DIM": "32",
            "OPENAI_BASE_URL": fake_llm.url,
            "TRAJGRAPH_LLM_MAX_ATTEMPTS": "3",
        }
    ).embedder
    e = get_embedder(settings)
    assert isinstance(e, OpenAIEmbedder) and e.name == "openai:embed-x"
    fake_llm.script("429:0", "500")
    a, b = e.embed(["pytest failed", "ls"])
    assert len(a) == 32 and math.isclose(sum(x * x for x in a), 1.0, rel_tol=1e-9)
    assert a != b
    (req,) = [r for r in fake_llm.embedding_requests if r.fault == "ok"]
    assert req.body["model"] == "embed-x" and req.body["dimensions"] == 32
    assert e.stats.drain() == {"embed_calls": 3, "embed_retries_429": 1, "embed_retries_5xx": 1}
    e.close()


def test_openai_embedder_learns_its_dimension(fake_llm: FakeOpenAI) -> None:
    e = OpenAIEmbedder(
        EmbedderSettings(kind="openai", model="m", transport=LLMSettings(base_url=fake_llm.url))
    )
    assert e.dim == 0
    assert dimension(e) == 64
    e.close()


def test_api_keys_parse_and_never_print() -> None:
    good = "a" * 16
    s = load({"TRAJGRAPH_API_KEYS": f"{good}:team-a, {'b' * 20}:team-b"})
    assert s.api_keys == {good: "team-a", "b" * 20: "team-b"}
    assert good not in repr(s)
    for bad in ("nocolon", f"{good}:", ":tenant", "short:t"):
        with pytest.raises(ConfigError, match="TRAJGRAPH_API_KEYS"):
            load({"TRAJGRAPH_API_KEYS": bad})


def test_the_api_refuses_to_start_without_keys() -> None:
    from trajgraph.api import create_app

    with pytest.raises(ConfigError, match="TRAJGRAPH_API_KEYS"):
        create_app(load({}))


def test_openai_vectors_of_zeros_or_non_numbers_are_refused() -> None:
    """Found by a hostile test: a zero vector (what some servers send for an empty text) was
    written to the graph, where each cosine against it fails the query that meets it."""
    from trajgraph.core.errors import LLMReplyError
    from trajgraph.graph.embedders import _normalized

    assert _normalized([3.0, 4.0]) == [0.6, 0.8]
    for bad in ([0.0, 0.0], [float("nan"), 1.0], [float("inf"), 0.0]):
        with pytest.raises(LLMReplyError, match="zeros or non-numbers"):
            _normalized(bad)
