"""The error contract: one table (trajgraph.core.errors.CONTRACT) read by the CLI (exit codes, one
line), the HTTP API (status, code, message, logging) and the MCP server (tool errors); the
one mapping of Neo4j's exceptions; credentials never printed."""

from __future__ import annotations

import json
import logging
import pickle
import socket

import pytest
from neo4j.exceptions import (
    AuthError,
    ClientError,
    ServiceUnavailable,
    SessionExpired,
    TransientError,
)
from starlette.requests import Request

from trajgraph import cli
from trajgraph.api import error_response
from trajgraph.core.errors import (
    CONTRACT,
    BusyError,
    ConfigError,
    EmbedderMismatchError,
    ExtractionError,
    GraphAuthError,
    GraphError,
    InputError,
    LLMError,
    LLMReplyError,
    NotFoundError,
    RunnerError,
    SchemaValidationError,
    ServerError,
    TrajgraphError,
    exit_code,
    meaning,
    one_line,
    public_message,
    redact,
)
from trajgraph.core.settings import load, split_userinfo
from trajgraph.graph.connection import graph_errors
from trajgraph.mcp_server import tool_error

# (error, HTTP status, code, exit code)
CASES: list[tuple[Exception, int, str, int]] = [
    (NotFoundError("trajectory", "t-1", tenant="a"), 404, "not_found", 2),
    (NotFoundError("query", "nope", hint="available: x"), 404, "not_found", 2),
    (GraphError("query failed: Neo4j is unreachable"), 503, "graph_unavailable", 1),
    # Wrong credentials: the operator must act, a rerun cannot help.
    (GraphAuthError("Neo4j rejected user 'neo4j'"), 503, "graph_unavailable", 2),
    (LLMError("the server at x failed 3 attempts", status=503), 502, "llm_unavailable", 1),
    (LLMReplyError("not JSON: Expecting value"), 502, "llm_unavailable", 1),
    (ConfigError("k must be between 1 and 50, got 0"), 400, "bad_request", 2),
    (RunnerError("the Flink job server jar is missing"), 400, "bad_request", 2),
    (
        EmbedderMismatchError("the graph's embeddings were made by hash-64"),
        503,
        "embedder_mismatch",
        2,
    ),
    (InputError("not JSON", source="a.jsonl", locator="line 3"), 400, "bad_request", 2),
    (SchemaValidationError("turns: required", source="a.jsonl"), 400, "bad_request", 2),
    (BusyError("the code sandbox is busy (2 runs in progress for 10s)"), 503, "busy", 1),
    (ServerError("Java 17 not found"), 500, "server_error", 1),
    (ExtractionError("no findings"), 500, "internal", 1),
    (TrajgraphError("something of ours"), 500, "internal", 1),
    (RuntimeError("boom"), 500, "internal", 1),
]


def test_llm_errors_are_not_extraction_errors_and_replies_have_one_type() -> None:
    assert not issubclass(LLMError, ExtractionError)
    assert issubclass(LLMReplyError, LLMError)
    from trajgraph.extractors.llm_reply import InvalidReply

    assert InvalidReply is LLMReplyError
    assert not issubclass(NotFoundError, ConfigError)


def test_not_found_carries_what_was_not_found() -> None:
    e = NotFoundError("trajectory", "django-1", tenant="team-a")
    assert (e.kind, e.name, e.tenant) == ("trajectory", "django-1", "team-a")
    assert str(e) == "no trajectory 'django-1' in tenant 'team-a'"
    for error in (e, LLMError("x", status=429), InputError("bad", source="a.jsonl")):
        again = pickle.loads(pickle.dumps(error))
        assert (type(again), str(again)) == (type(error), str(error))
        assert vars(again) == vars(error)


@pytest.mark.parametrize(("error", "status", "code", "exit"), CASES)
def test_one_table_gives_status_code_and_exit_code(
    error: Exception, status: int, code: str, exit: int
) -> None:
    m = meaning(error)
    assert (m.http_status, m.code, m.exit_code) == (status, code, exit)
    assert exit_code(error) == exit


def test_every_row_is_reachable() -> None:
    # Most specific first: no row may be shadowed by an earlier, broader one.
    for i, row in enumerate(CONTRACT):
        assert not any(issubclass(row.kind, earlier.kind) for earlier in CONTRACT[:i]), row


@pytest.mark.parametrize(("error", "status", "code", "exit"), CASES)
def test_the_cli_prints_one_line_and_exits_by_the_table(
    error: Exception, status: int, code: str, exit: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.fail(error) == exit
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("trajgraph: error: ")


def test_the_cli_maps_a_neo4j_that_does_not_answer_to_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("NEO4J_URI", f"bolt://neo4j:pw-in-uri@127.0.0.1:{port}")
    monkeypatch.setenv("TRAJGRAPH_EMBEDDER", "hash")
    for argv in (["search", "why?"], ["trajectories"], ["why", "--trajectory", "t", "--turn", "1"]):
        assert cli.main(argv) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("trajgraph: error: Neo4j is not reachable")
        assert "pw-in-uri" not in err and "Traceback" not in err
    # What the caller must change is exit 2, and is said before connecting.
    assert cli.main(["delete", "--all"]) == 2
    assert "needs --yes" in capsys.readouterr().err


def test_messages_are_one_line_without_credentials() -> None:
    e = GraphError("Neo4j at bolt://neo4j:hunter2@db:7687\nfailed")
    assert one_line(e) == "Neo4j at bolt://***@db:7687 failed"
    assert one_line(ValueError("x")) == "ValueError: x"
    assert redact("see https://u:p@x.org/a and neo4j+s://me@host") == (
        "see https://***@x.org/a and neo4j+s://***@host"
    )
    assert redact("user@example.org wrote bolt://host:7687") == (
        "user@example.org wrote bolt://host:7687"
    )


def test_remote_callers_never_see_infrastructure_details() -> None:
    assert public_message(GraphError("Neo4j at bolt://10.0.0.3 lost")) == (
        "the graph database failed or is unreachable"
    )
    assert "10.0.0.3" not in public_message(LLMError("http://10.0.0.3/v1 failed"))
    assert public_message(RuntimeError("secret detail")) == "internal error (logged on the server)"
    assert public_message(NotFoundError("trajectory", "x", tenant="a")) == (
        "no trajectory 'x' in tenant 'a'"
    )


def _request() -> Request:
    return Request({"type": "http", "method": "GET", "path": "/v1/x", "headers": []})


@pytest.mark.parametrize(
    ("error", "status", "code", "exit"), [c for c in CASES if isinstance(c[0], TrajgraphError)]
)
def test_the_api_answers_by_the_table_and_logs_only_what_is_worth_it(
    error: TrajgraphError, status: int, code: str, exit: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="trajgraph.api")
    response = error_response(error, _request())
    assert response.status_code == status
    assert json.loads(bytes(response.body)) == {
        "error": {"code": code, "message": public_message(error)}
    }
    records = [r for r in caplog.records if r.name == "trajgraph.api"]
    if status < 500:
        assert records == []  # a caller's mistake: no log line, no traceback
    elif status in (502, 503):
        assert len(records) == 1 and records[0].exc_info is None
        assert "\n" not in records[0].getMessage()
    else:
        assert len(records) == 1 and records[0].exc_info is not None


@pytest.mark.parametrize(("error", "status", "code", "exit"), CASES)
def test_mcp_tool_errors_carry_the_same_code_and_message(
    error: Exception, status: int, code: str, exit: int
) -> None:
    assert str(tool_error(error)) == f"{code}: {public_message(error)}"


@pytest.mark.parametrize(
    ("vendor", "says"),
    [
        (ServiceUnavailable("Couldn't connect to 127.0.0.1:7687"), "unreachable or was lost"),
        (SessionExpired("Failed to read from defunct connection"), "unreachable or was lost"),
        (AuthError("unauthorized"), "rejected the credentials"),
        (ClientError("Invalid input 'MATCHX'"), ""),  # the server's message, when it sent one
        (TransientError("deadlock"), ""),
    ],
)
def test_every_neo4j_exception_becomes_a_graph_error(vendor: Exception, says: str) -> None:
    with (
        pytest.raises(GraphError, match=f"^reading x failed: .*{says}") as info,
        graph_errors("reading x"),
    ):
        raise vendor
    assert info.value.__cause__ is vendor
    assert isinstance(info.value, GraphAuthError) == isinstance(vendor, AuthError)


def test_other_errors_pass_through_the_graph_mapping() -> None:
    with pytest.raises(NotFoundError), graph_errors("reading x"):
        raise NotFoundError("trajectory", "x")


def test_credentials_in_neo4j_uri_are_taken_out_of_it() -> None:
    assert split_userinfo("bolt://alice:p%40ss@db.local:7688") == (
        "bolt://db.local:7688",
        "alice",
        "p@ss",
    )
    assert split_userinfo("neo4j+s://db.example.org") == ("neo4j+s://db.example.org", None, None)
    s = load({"NEO4J_URI": "bolt://alice:s3cret@db.local:7688", "NEO4J_PASSWORD": "pw-env-7"})
    assert (s.neo4j.uri, s.neo4j.user, s.neo4j.password) == (
        "bolt://db.local:7688",
        "alice",
        "s3cret",
    )
    assert s.local.bolt_port == 7688
    assert "s3cret" not in repr(s) and "pw-env-7" not in repr(load({"NEO4J_PASSWORD": "pw-env-7"}))
    with pytest.raises(ConfigError, match="bad port") as info:
        load({"NEO4J_URI": "bolt://alice:s3cret@db.local:x"})
    assert "s3cret" not in str(info.value)
