"""The retrieval engine against the real Neo4j: the shared real logs plus a synthetic
trajectory whose answers are known, embedded by the configured (by default the static)
embedder."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI
from tests.integration.ingesting import Ingest
from tests.trajectories import canonical_log
from trajgraph import cli
from trajgraph.core.errors import ConfigError, NotFoundError
from trajgraph.core.settings import LLMSettings, Settings
from trajgraph.extractors.base import Stats
from trajgraph.extractors.llm_client import ChatClient
from trajgraph.graph.embedders import HashEmbedder, embedder_name, get_embedder
from trajgraph.pipelines.adapters import normalize, split_records
from trajgraph.queries.retrieval.retriever import Retriever

SYNTHETIC = canonical_log(
    "synthetic-retries",
    "Make tests/test_api.py pass: the client must retry 5 times.",
    [
        ("cat config.yaml", "retries=3\ntimeout=10"),
        (
            "pytest tests/test_api.py",
            "FAILED tests/test_api.py::test_retry - AssertionError: expected 5 retries, got 3\n"
            "1 failed in 0.12s",
        ),
        ("sed -i 's/retries=3/retries=5/' config.yaml", ""),
        ("cat config.yaml", "retries=5\ntimeout=10"),
        ("pytest tests/test_api.py", "1 passed in 0.10s"),
        ("pytest tests/test_api.py -k retry", "1 passed"),
    ],
)
DJANGO = "django__django-16255"


@pytest.fixture(scope="module")
def corpus(shared_dir: Path, ingested: Ingest) -> str:
    """A tenant holding the real logs and the synthetic trajectory (deleted afterwards)."""
    run = ingested(shared_dir, SYNTHETIC)
    assert run.summary.balanced and run.summary.dead_lettered == 0
    return run.tenant


@pytest.fixture(scope="module")
def engine(driver: Any, neo4j_settings: Settings) -> Retriever:
    return Retriever(
        driver,
        database=neo4j_settings.neo4j.database,
        embedder=get_embedder(neo4j_settings.embedder),
    )


def test_states_and_turns_carry_embeddings_of_the_recorded_space(
    driver: Any, corpus: str, engine: Retriever, neo4j_settings: Settings
) -> None:
    rows = driver.execute_query(
        "MATCH (n {tenant: $t}) WHERE n:State OR n:Turn "
        "RETURN count(n) AS n, count(n.embedding) AS embedded, "
        "min(size(n.embedding)) AS lo, max(size(n.embedding)) AS hi",
        t=corpus,
    ).records[0]
    assert rows["n"] == rows["embedded"] > 0
    dim = engine.embedder.dim
    assert rows["lo"] == rows["hi"] == dim
    space = driver.execute_query(
        "MATCH (e:EmbeddingSpace {name: 'nodes'}) RETURN e.model AS m, e.dim AS d"
    ).records[0]
    assert (space["m"], space["d"]) == (embedder_name(neo4j_settings.embedder), dim)


def test_why_a_failure_happened_reaches_the_turn_that_caused_it(
    engine: Retriever, corpus: str
) -> None:
    r = engine.retrieve(
        "Why did test_retry fail?", tenant=corpus, trajectory="synthetic-retries", budget_tokens=800
    )
    assert "graph" in r.tools
    assert any(e.kind == "turn" and e.turn == 1 for e in r.items)  # the failing pytest run
    failure = [e for e in r.items if e.kind == "state" and "AssertionError" in e.text]
    assert failure and failure[0].turn == 1
    assert r.context_tokens <= 800
    turns = [e.turn for e in r.items if e.turn is not None]
    assert turns == sorted(turns)  # time-ordered


def test_effects_of_the_edit_reach_the_passing_run(engine: Retriever, corpus: str) -> None:
    r = engine.retrieve(
        "What happened after the edit of config.yaml?",
        tenant=corpus,
        trajectory="synthetic-retries",
        mode="graph",
        depth=3,
    )
    hops = [e for e in r.items if e.source == "hop" and "downstream" in e.why]
    assert any(e.turn == 4 for e in hops), [(e.turn, e.why) for e in r.items]


def test_counting_questions_run_code_and_match_the_true_count(
    engine: Retriever, corpus: str, shared_dir: Path
) -> None:
    r = engine.retrieve(
        "How many times did the agent run pytest?", tenant=corpus, trajectory="synthetic-retries"
    )
    assert "code" in r.tools
    assert r.counts["code_result"]["count"] == 3
    named = [e.turn for e in r.items if e.why == "named in the code's result"]
    assert named == [1, 4, 5]

    # The same on a real log, against a count made here from the file itself.
    path = shared_dir / "mini-swe-agent" / f"{DJANGO}.traj.json"
    (traj,) = [t for rec in split_records(str(path), path.read_bytes()) for t in normalize(rec)]
    truth = sum(1 for t in traj["turns"] if "python3" in (t.get("action") or ""))
    real = engine.retrieve(
        "How many times did the agent run `python3`?", tenant=corpus, trajectory=DJANGO
    )
    assert real.counts["code_result"]["count"] == truth > 0


def test_current_value_wins_over_the_superseded_one(engine: Retriever, corpus: str) -> None:
    r = engine.retrieve(
        "What is the current value of retries?",
        tenant=corpus,
        trajectory="synthetic-retries",
        budget_tokens=300,
    )
    # A setting shown by `cat config.yaml` or written by `sed -i` is config.yaml's.
    retries = [
        e for e in r.items if e.kind == "state" and e.text.startswith("`config.yaml` retries")
    ]
    current = [e for e in retries if e.current]
    assert [e.text for e in current] == ["`config.yaml` retries = 5 (turn 3)"]
    assert {e.text for e in retries if not e.current} >= {"`config.yaml` retries = 3 (turn 0)"}
    assert all(e.why.startswith("earlier value") for e in retries if not e.current)
    assert "`config.yaml` retries = 5" in r.context


def test_identifiers_come_back_verbatim_with_counts(engine: Retriever, corpus: str) -> None:
    ident = "tests/test_api.py::test_retry"
    r = engine.retrieve(
        f"Where does `{ident}` appear?", tenant=corpus, trajectory="synthetic-retries"
    )
    assert "keyword" in r.tools
    assert r.counts["identifier_turns"][ident] == 1
    hits = [e for e in r.items if e.source == "identifier"]
    assert hits and all(ident in e.text for e in hits)
    assert ident in r.context


def test_keyword_search_counts_per_trajectory_and_escapes_query_syntax(
    engine: Retriever, corpus: str
) -> None:
    r = engine.retrieve("ValueError lastmod", tenant=corpus, mode="keyword")
    assert r.counts["keyword_hits_by_trajectory"].get(DJANGO, 0) > 0
    # Lucene syntax in a question is text, not a query error.
    odd = engine.retrieve('lastmod:bar AND (baz OR "qux~ \\', tenant=corpus, mode="keyword")
    assert odd.counts["keyword_hits_by_trajectory"].get(DJANGO, 0) > 0  # "lastmod" still found


def test_tenants_do_not_see_each_other(engine: Retriever, corpus: str) -> None:
    other = engine.retrieve("Why did test_retry fail?", tenant=f"nobody-{uuid.uuid4().hex}")
    assert other.items == []
    with pytest.raises(NotFoundError, match="no trajectory"):
        engine.retrieve("why", tenant="nobody", trajectory="synthetic-retries")


def test_read_only_cypher_runs_and_writes_are_refused(engine: Retriever, corpus: str) -> None:
    ok = engine.retrieve(
        "count turns",
        tenant=corpus,
        mode="code",
        cypher_query="MATCH (t:Turn {tenant: $tenant}) RETURN count(t) AS n",
    )
    assert ok.counts["cypher_rows"] == 1
    assert '"n": 99' in ok.context  # 93 real turns + 6 synthetic
    bad = engine.retrieve(
        "write", tenant=corpus, mode="code", cypher_query="CREATE (n:Evil {x: 1}) RETURN n"
    )
    assert "code_error" in bad.counts


def test_read_only_cypher_stays_inside_the_graph(engine: Retriever, corpus: str) -> None:
    # A READ transaction still lets LOAD CSV read the server's files and fetch URLs, shows
    # the server's configuration and users: none of that is the graph.
    for query, says in (
        ("LOAD CSV FROM 'file:///etc/passwd' AS line RETURN line", "LOAD CSV"),
        ("CALL { LOAD CSV FROM 'http://127.0.0.1:9/x' AS l RETURN l } RETURN 1", "LOAD CSV"),
        ("CALL dbms.listConfig() YIELD name, value RETURN name, value", "dbms.listConfig"),
        ("SHOW USERS", "administration"),
        ("SHOW PROCEDURES", "SHOW"),
    ):
        r = engine.retrieve("q", tenant=corpus, mode="code", cypher_query=query)
        assert "cypher_rows" not in r.counts, query
        assert r.counts["code_error"].startswith("cypher refused:"), r.counts
        assert says in r.counts["code_error"], r.counts
        assert "root:" not in r.context
    ok = engine.retrieve(
        "labels",
        tenant=corpus,
        mode="code",
        cypher_query="CALL db.labels() YIELD label RETURN label",
    )
    assert ok.counts["cypher_rows"] >= 3


def test_read_only_cypher_stays_inside_the_graph_in_nested_plans(
    engine: Retriever, corpus: str
) -> None:
    # A subquery inside an expression (a list comprehension, CASE, reduce) is planned as a
    # nested plan that is no operator of the plan tree; TERMINATE TRANSACTIONS and db.*
    # procedures that act on the server are allowed by a READ transaction too.
    fetched: list[bytes] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        url = f"http://127.0.0.1:{server.getsockname()[1]}/x.csv"
        answering = threading.Thread(target=_answer_http, args=(server, fetched), daemon=True)
        answering.start()
        for query, says in (
            (
                f"RETURN CASE WHEN true THEN COLLECT {{ LOAD CSV FROM '{url}' AS l "
                "RETURN l[0] } END AS x",
                "LOAD CSV",
            ),
            (
                "RETURN [x IN [1] | COLLECT { CALL dbms.listConfig() YIELD name, value "
                "RETURN name + '=' + value }] AS x",
                "dbms.listConfig",
            ),
            (
                "RETURN reduce(s = [], x IN [1] | s + COLLECT { CALL dbms.showCurrentUser() "
                "YIELD username RETURN username }) AS x",
                "dbms.showCurrentUser",
            ),
            ("TERMINATE TRANSACTIONS ['neo4j-transaction-1']", "TERMINATE TRANSACTIONS"),
            ("CALL db.stats.collect('QUERIES')", "db.stats.collect"),
            ("CALL db.stats.retrieve('QUERIES') YIELD data RETURN data", "db.stats.retrieve"),
            ("CALL db.clearQueryCaches()", "db.clearQueryCaches"),
        ):
            r = engine.retrieve("q", tenant=corpus, mode="code", cypher_query=query)
            assert "cypher_rows" not in r.counts, (query, r.context)
            assert r.counts["code_error"].startswith("cypher refused:"), r.counts
            assert says in r.counts["code_error"], r.counts
    assert fetched == []
    # Reads of the graph in nested plans, and strings that only name LOAD CSV, still run.
    ok = engine.retrieve(
        "q",
        tenant=corpus,
        mode="code",
        cypher_query="RETURN 'LOAD CSV' AS s, [x IN [1] | COUNT { CALL db.labels() "
        "YIELD label RETURN label }] AS n, CASE WHEN true THEN COLLECT { MATCH (t:Turn "
        "{tenant: $tenant, trajectory_id: 'synthetic-retries'}) RETURN t.idx } END AS idx",
    )
    assert ok.counts["cypher_rows"] == 1, ok.counts
    assert '"s": "LOAD CSV"' in ok.context


def _answer_http(server: socket.socket, requests: list[bytes]) -> None:
    # Answers every request with a one-line CSV, so a fetch that got through ends at once.
    with contextlib.suppress(OSError):
        while True:
            conn, _ = server.accept()
            with conn:
                requests.append(conn.recv(4096))
                conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\na\n")


def test_another_embedding_model_is_refused_not_mixed(driver: Any, corpus: str) -> None:
    from trajgraph.core.settings import load

    wrong = Retriever(driver, database=load().neo4j.database, embedder=HashEmbedder(64))
    with pytest.raises(ConfigError, match="all-MiniLM-L6-v2"):
        wrong.retrieve("anything", tenant=corpus)


def test_cli_search_prints_context_and_json(
    corpus: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        [
            "search",
            "How many times did the agent run pytest?",
            "--tenant",
            corpus,
            "--trajectory",
            "synthetic-retries",
            "--json",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["counts"]["code_result"]["count"] == 3
    assert out["tools"] == ["embedding", "code"]
    # the same question typed without shell quotes: its words arrive as separate arguments
    words = ["How", "many", "times", "did", "the", "agent", "run", "pytest?"]
    argv = ["search", *words, "--tenant", corpus, "--trajectory", "synthetic-retries", "--json"]
    assert cli.main(argv) == 0
    unquoted = json.loads(capsys.readouterr().out)
    assert unquoted["question"] == "How many times did the agent run pytest?"
    assert unquoted["counts"]["code_result"]["count"] == 3


def test_given_code_runs_in_auto_and_is_refused_where_it_would_not_run(
    corpus: str, capsys: pytest.CaptureFixture[str]
) -> None:
    scope = ["--tenant", corpus, "--trajectory", "synthetic-retries"]
    code = ["--code", "result = {'n': len(turns)}"]
    # a why-question routes to the graph, not to code: the code given runs as well
    assert cli.main(["search", "Why did test_retry fail?", *scope, *code, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "code" in out["tools"] and out["counts"]["code_result"] == {"n": 6}  # its six turns
    assert cli.main(["search", "Why did test_retry fail?", *scope, *code, "--mode", "graph"]) == 2
    assert "run in mode 'code' or 'auto', not 'graph'" in capsys.readouterr().err


def test_with_an_llm_the_model_routes_and_writes_the_code(
    driver: Any, neo4j_settings: Settings, corpus: str, fake_llm: FakeOpenAI
) -> None:
    client = ChatClient(LLMSettings(model="fake", base_url=fake_llm.url, timeout_s=2), Stats())
    engine = Retriever(
        driver,
        database=neo4j_settings.neo4j.database,
        embedder=get_embedder(neo4j_settings.embedder),
        llm=client,
    )
    fake_llm.route_reply = {
        "decision": "NEED_CODE",
        "direction": "none",
        "code": 'result = {"count": sum(1 for t in turns if "cat" in t["action"])}',
        "reason": "a count over all turns",
    }
    r = engine.retrieve("Tally the file reads", tenant=corpus, trajectory="synthetic-retries")
    assert r.route.startswith("auto: LLM: a count over all turns")
    assert r.tools == ["embedding", "code"]
    assert r.counts["code_result"] == {"count": 2}
    (req,) = fake_llm.chat_requests
    assert req.body["response_format"]["json_schema"]["name"] == "trajgraph_route"
    assert "<<<DATA>>>" in req.body["messages"][1]["content"]

    # A broken router reply falls back to the rules; retrieval still answers.
    fake_llm.script("schema_invalid")
    fallback = engine.retrieve(
        "Why did test_retry fail?", tenant=corpus, trajectory="synthetic-retries"
    )
    assert fallback.route.startswith("auto: rules (LLM router failed)")
    assert "graph" in fallback.tools
    client.close()


def test_without_embeddings_the_other_tools_still_answer(
    driver: Any, neo4j_settings: Settings, corpus: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Retriever(
        driver,
        database=neo4j_settings.neo4j.database,
        embedder=get_embedder(neo4j_settings.embedder),
    )
    monkeypatch.setattr(engine, "_check_space", lambda: False)  # as after --embedder none
    assert not engine.has_vectors
    r = engine.retrieve(
        "How many times did the agent run pytest?", tenant=corpus, trajectory="synthetic-retries"
    )
    assert "embedding" not in r.tools and r.counts["code_result"]["count"] == 3
    assert "no embeddings" in r.route
    why = engine.retrieve("Why did test_retry fail?", tenant=corpus, trajectory="synthetic-retries")
    assert why.tools[:2] == ["keyword", "graph"]  # full-text hits seed the traversal
    assert any(e.kind == "turn" and e.turn == 1 for e in why.items)


def test_a_call_keeps_the_space_check_it_started_with(
    driver: Any, neo4j_settings: Settings, corpus: str
) -> None:
    """Another thread's check changing the engine's answer half way through a call (a move
    racing it) does not turn the call into a keyword-only one "without embeddings"."""
    inner = get_embedder(neo4j_settings.embedder)
    engine: Retriever

    class _OtherThreadChecks:
        name, dim = inner.name, getattr(inner, "dim", 0)

        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            engine._space_ok = False  # what a concurrent check that found a move leaves
            return inner.embed(texts)

        def close(self) -> None:
            inner.close()

    engine = Retriever(
        driver, database=neo4j_settings.neo4j.database, embedder=_OtherThreadChecks()
    )
    r = engine.retrieve("Why did test_retry fail?", tenant=corpus, trajectory="synthetic-retries")
    assert "embedding" in r.tools and "no embeddings" not in r.route


def test_a_named_step_anchors_the_context_on_its_verbatim_lines(
    engine: Retriever, corpus: str
) -> None:
    r = engine.retrieve(
        "What did the agent see at step 3?", tenant=corpus, trajectory="synthetic-retries"
    )
    assert r.context_tokens <= 1000
    # The named turn comes with its action and its observation, verbatim.
    assert "[turn 3] action: cat config.yaml\nretries=5\ntimeout=10" in r.context
    named = [e for e in r.items if e.kind == "turn" and e.turn == 3]
    assert named and named[0].source == "anchor"


def test_aggregates_count_in_the_named_scope_and_changes_come_from_the_graph(
    engine: Retriever, corpus: str
) -> None:
    r = engine.retrieve(
        "Until step 4, what actions has the agent performed and how frequently?",
        tenant=corpus,
        trajectory="synthetic-retries",
    )
    assert "code" in r.tools
    assert "[actions in turns 0-4 (5 turns)]" in r.context
    assert "pytest tests/test_api.py ×2 (turns 1, 4)" in r.context
    assert "-k retry" not in r.context.split("\n[turn")[0]  # turn 5 is out of scope
    changed = engine.retrieve(
        "What changed in config.yaml between step 0 and step 3?",
        tenant=corpus,
        trajectory="synthetic-retries",
    )
    # The SUPERSEDES chain of (config.yaml, retries), with the turns that set each value.
    assert "config.yaml retries: 3 (0) → 5 (2)" in changed.context


def _repair_run() -> dict[str, Any]:
    """A long repair run in a tool-call log: reads, a script that fails, the fix, the pass."""

    def call(tool: str, **args: str) -> str:
        return f"{tool}: {json.dumps(args)}"

    turns = [
        (call("str_replace_editor", command="view", path=f"/w/repo/pkg/mod{i}.py"), f"line {i}")
        for i in range(20)
    ]
    turns += [
        (call("str_replace_editor", command="create", path="/w/repro.py"), "File created"),
        (
            call("execute_bash", command="cd /w/repo && python /w/repro.py"),
            "Traceback (most recent call last):\n  File x\nValueError: quote lost at 65\n",
        ),
        (call("str_replace_editor", command="str_replace", path="/w/repo/pkg/io/card.py"), ""),
        (call("execute_bash", command="cd /w/repo && python /w/repro.py"), "all 12 cases pass"),
    ]
    return {
        "id": "repair-outline",
        "task": "Fix the lost quote in pkg/io/card.py",
        "turns": [{"idx": i, "action": a, "observation": o} for i, (a, o) in enumerate(turns)],
    }


def test_a_question_about_the_whole_run_gets_its_edits_and_runs(
    ingested: Ingest, engine: Retriever
) -> None:
    # Issue 34: "which step caused the resolution?" names no step; the outline of the run's
    # edits and runs, with outcomes, says which edit came before the passing run.
    run = ingested(_repair_run())
    r = engine.retrieve(
        "Which step caused the successful resolution of the quote issue?",
        tenant=run.tenant,
        trajectory="repair-outline",
        budget_tokens=600,
    )
    assert "[edits and runs of turns 0-23]" in r.context
    assert "22: str_replace_editor str_replace io/card.py" in r.context
    assert "23: execute_bash python /w/repro.py → all 12 cases pass" in r.context
    assert "21: execute_bash python /w/repro.py → ValueError: quote lost at 65" in r.context
    assert r.context_tokens <= 600
    # A question about one named step gets no outline.
    named = engine.retrieve(
        "At step 21, what error did the script raise?",
        tenant=run.tenant,
        trajectory="repair-outline",
        budget_tokens=600,
    )
    assert "[edits and runs" not in named.context
