"""The project memory's pure parts: the project folder, which sessions are inside it, the
items built from facts, relevance to a prompt and the token budget (no Neo4j needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajgraph.core.errors import ConfigError
from trajgraph.queries.memory.project import (
    MAX_BUDGET,
    MIN_BUDGET,
    Cite,
    ProjectFacts,
    SessionTurns,
    inside,
    never_worked,
    project_brief,
    project_root,
    recurring_failures,
    relevant,
    render,
    risky_files,
)
from trajgraph.queries.memory.store import Result, TurnRecord


def test_project_root_is_the_git_root_else_the_folder(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "src" / "pkg").mkdir(parents=True)
    assert project_root(repo / "src" / "pkg") == str(repo)
    plain = tmp_path / "plain" / "x"
    plain.mkdir(parents=True)
    assert project_root(plain) == str(plain)
    assert inside("/home/u/repo/src", "/home/u/repo") and inside("/home/u/repo", "/home/u/repo/")
    assert not inside("/home/u/repo2", "/home/u/repo")


def turn(i: int, action: str, *results: tuple[str, str]) -> TurnRecord:
    return TurnRecord(i, action, [Result(k, action, "", v) for k, v in results])


FAIL = ("error", "error: Failed to create virtual environment")
SIG = ("sig1", "Failed to create virtual environment")


def facts() -> ProjectFacts:
    a = SessionTurns(
        "aaaaaaaa-1111-2222-3333-444444444444",
        [
            turn(0, "uv venv", ("exit_code", "2"), FAIL),
            turn(1, "uv venv", ("exit_code", "2"), FAIL),
            turn(2, "rm -rf .venv && uv venv", ("exit_code", "0")),
            turn(3, "make lint", ("exit_code", "1")),
        ],
        {0: [SIG], 1: [SIG]},
    )
    b = SessionTurns(
        "bbbbbbbb-1111-2222-3333-444444444444",
        [turn(0, "uv venv", ("exit_code", "0")), turn(1, "make lint", ("exit_code", "2"))],
        {},
    )
    resolved = {
        "trajectory": a.session,
        "signature_uid": "sig1",
        "resolved_turn": 2,
        "command": "uv venv",
        "helped": [{"turn": 2, "action": "rm -rf .venv && uv venv"}],
    }
    broke = {"path": "src/app.py", "trajectory": b.session, "edited": 4, "broke": 5, "error": "E"}
    return ProjectFacts([a, b], [resolved], [broke])


def test_items_cite_sessions_and_turns() -> None:
    f = facts()
    [rec] = recurring_failures(f)
    assert rec.key == "sig1" and rec.failures == 2
    assert rec.cites == [Cite(f.sessions[0].session, 0), Cite(f.sessions[0].session, 1)]
    assert "aaaaaaaa turn 0, aaaaaaaa turn 1" in rec.text
    assert "Got past it at aaaaaaaa turn 2: `rm -rf .venv && uv venv`" in rec.text
    never = never_worked(f)
    assert [i.key for i in never] == ["make lint"]  # uv venv worked in b: not "never"
    assert "failed 2 times (aaaaaaaa turn 3, bbbbbbbb turn 1)" in never[0].text
    [risky] = risky_files(f)
    assert risky.key == "src/app.py" and "bbbbbbbb turn 4" in risky.text


def test_relevance_budget_and_silence() -> None:
    items = recurring_failures(facts()) + never_worked(facts()) + risky_files(facts())
    assert [i.kind for i in relevant(items, "why does make lint fail?")] == ["never_worked"]
    assert [i.kind for i in relevant(items, "edit app.py")] == ["risky_file"]
    assert relevant(items, "hello") == []
    text, taken = render("/r", 2, items, 400)
    assert len(taken) == 3 and text.startswith("trajgraph memory of earlier sessions")
    small, few = render("/r", 2, items, 60)
    assert 0 < len(few) < 3 and len(small) < len(text)
    assert render("/r", 2, [], 400) == ("", [])
    # The budget is checked before anything is read (no driver needed), with the project's bounds.
    with pytest.raises(ConfigError, match=f"between {MIN_BUDGET} and {MAX_BUDGET} tokens, got 10"):
        project_brief(None, database="neo4j", tenant="t", project="/r", budget=10)  # type: ignore[arg-type]
