"""Brief and reminder logic without a database: canonical actions, read-only steps, reverts,
pass/fail verdicts, failure grouping, budget trimming, the offline rules and the LLM reply
checks (extractors/actions.py, brief.py, remind.py, llm_remind.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from trajgraph.core.errors import LLMReplyError
from trajgraph.core.tokens import count_tokens
from trajgraph.extractors.actions import (
    canonical,
    is_read_only,
    near_identical,
    revert_of,
    same_action,
    set_values,
    used_values,
    verdict,
)
from trajgraph.queries.memory.brief import brief_of, failure_groups
from trajgraph.queries.memory.llm_remind import parse_reply, reply_schema
from trajgraph.queries.memory.remind import offline_findings, remind_with
from trajgraph.queries.memory.store import EVERYTHING, CurrentState, Result, TurnRecord


def rec(turn: int, action: str, *results: tuple[str, str, str, str]) -> TurnRecord:
    return TurnRecord(turn, action, [Result(*r) for r in results])


def fails(turn: int, action: str, error: str = "Error: boom", code: str = "1") -> TurnRecord:
    return rec(
        turn, action, ("error", action, "error", error), ("exit_code", action, "exit_code", code)
    )


@dataclass
class FakeMemory:
    """What brief_of and the rules read from queries.memory.Memory, held in lists."""

    turns: list[TurnRecord]
    current_states: list[CurrentState] = field(default_factory=list)
    fixes: list[dict[str, Any]] = field(default_factory=list)
    values: list[dict[str, Any]] = field(default_factory=list)
    idents: list[dict[str, Any]] = field(default_factory=list)
    task: str = "Make the tests pass."
    trajectory: str = "t"
    before_turn: int | None = None

    @property
    def before(self) -> int:
        return EVERYTHING if self.before_turn is None else self.before_turn

    @property
    def last_turn(self) -> int | None:
        return self.turns[-1].turn if self.turns else None

    def failure_causes(self, turns: list[int]) -> dict[int, list[dict[str, Any]]]:
        return {}

    def identifiers(self, kinds: Any, *, limit: int = 12, min_turns: int = 2) -> list[Any]:
        return self.idents[:limit]

    def value_history(self, keys: list[str]) -> list[dict[str, Any]]:
        return [v for v in self.values if v["subject"] in keys or v["attribute"] in keys]

    # No other runs here: cross-run lessons are tested in tests/integration/queries/test_lessons.py.
    def signatures_at(self, turns: list[int]) -> list[dict[str, Any]]:
        return []

    open_episodes: list[dict[str, Any]] = field(default_factory=list)

    def other_runs(self, signature_uids: list[str], action_chars: int) -> list[dict[str, Any]]:
        return []


# -- canonical actions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("python  reproduce.py", "python 'reproduce.py'"),
        ("pytest -q tests/x.py", "pytest tests/x.py -v --tb=short"),
        ("cd /repo && python reproduce.py 2>&1 | tail -20", "python reproduce.py"),
        ("grep -n -i foo a.txt", "grep -in foo a.txt"),
        ('f({"a": 1, "b": [1, 2]})', 'f({"b":[1,2],"a":1})'),
        ("edit 1:2\nx = 1   \n\n", "edit 1:2\nx = 1"),
    ],
)
def test_the_same_action_in_other_spellings(a: str, b: str) -> None:
    assert same_action(canonical(a), canonical(b))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("pytest tests/a.py", "pytest tests/b.py"),
        ("tail -n 200 log.txt", "tail -n 100 log.txt"),
        ("edit 1:2\n  x = 1", "edit 1:2\nx = 1"),  # indentation is often the fix
        ('f({"a": 1})', 'f({"a": 2})'),
        ("pip install foo", "pip install --upgrade foo"),
    ],
)
def test_different_actions_stay_different(a: str, b: str) -> None:
    assert not same_action(canonical(a), canonical(b))


def test_near_identical_commands_differ_in_flags_only() -> None:
    a = canonical('grep -A 5 "x\\|y" data/c.json')
    assert near_identical(a, canonical('grep -n "x\\|y" data/c.json'))
    assert not near_identical(a, canonical('grep -A 5 "x\\|z" data/c.json'))
    # Multi-line actions must be the same: one changed line is the point of a retry.
    assert not near_identical(canonical("edit 1:2\na\nb\nc"), canonical("edit 1:2\na\nb\nd"))


def test_read_only_steps() -> None:
    for action in (
        "cat a.py",
        "grep -rn x src | head",
        "ls -la",
        "git diff",
        "pytest -q",
        "python -m pytest tests",
        'get_user_details({"id": 1})',
        "",
        "sha256sum f",
    ):
        assert is_read_only(action), action
    for action in (
        "sed -i 's/a/b/' f",
        "echo x > f",
        "rm f",
        "python reproduce.py",
        "git stash",
        'book_reservation({"a": 1})',
        "I will now fix it.",
        "edit 1:1\nx\nend",
    ):
        assert not is_read_only(action), action
    assert not is_read_only("pytest -q", checks=False)  # a check, not a viewer


def test_reverts() -> None:
    assert revert_of("git checkout -- src/a.py").paths == ("src/a.py",)  # type: ignore[union-attr]
    assert revert_of("git stash").all_files  # type: ignore[union-attr]
    assert revert_of("git reset --hard HEAD").all_files  # type: ignore[union-attr]
    assert revert_of("rm -f a.py b.py").paths == ("a.py", "b.py")  # type: ignore[union-attr]
    assert revert_of("undo_edit src/a.py").paths == ("src/a.py",)  # type: ignore[union-attr]
    for keep in ("git stash pop", "git restore --staged a.py", "git checkout main", "ls"):
        assert revert_of(keep) is None, keep


def test_values_used_and_set() -> None:
    sed = "sed -i 's/port = 9090/port = 8000/' conf.ini"
    assert used_values(sed) == [("port", "9090")]
    assert set_values(sed) == [("port", "8000")]
    assert used_values("grep retries=3 config.ini") == [("retries", "3")]
    assert set_values('update_x({"cabin": "economy"})') == [("cabin", "economy")]
    assert used_values('get_x({"id": "A1"})') == [("id", "A1")]


def test_verdicts() -> None:
    assert verdict("exit_code", "0") == "pass" and verdict("exit_code", "2") == "fail"
    assert verdict("status", "1 failed, 2 passed in 0.1s") == "fail"
    assert verdict("status", "3 passed in 0.1s") == "pass"
    assert verdict("status", "OK") == "pass"
    assert verdict("status", "Caught ValueError: x") == "fail"
    assert verdict("status", "Serving on port 8000") is None


def test_what_counts_as_failed() -> None:
    assert fails(0, "make").failed
    assert "exit code 1" in fails(0, "make").failure_text()
    printed = rec(
        0,
        "python r.py",
        ("error", "ValueError", "error", "Caught ValueError: x"),
        ("exit_code", "python r.py", "exit_code", "0"),
    )
    assert not printed.failed  # exit code 0 wins over printed error lines
    shown = rec(0, "cat app.log", ("error", "KeyError", "error", "KeyError: 'a'"))
    assert not shown.failed  # a viewer shows errors, it does not have them
    missing = rec(0, "cat nope.txt", ("error", "cat", "error", "cat: nope.txt: No such file"))
    assert missing.failed


# -- brief ----------------------------------------------------------------------------------------


def test_failure_groups_resolve_by_a_later_success_of_the_same_command() -> None:
    turns = [
        fails(0, "pytest tests/a.py", "E AssertionError: 1 != 2"),
        rec(1, "sed -i 's/1/2/' a.py"),
        fails(2, "pytest tests/a.py", "E AssertionError: 2 != 3"),
        rec(3, "pytest tests/a.py", ("exit_code", "pytest tests/a.py", "exit_code", "0")),
        fails(4, "make deploy", "make: *** No rule to make target 'deploy'."),
    ]
    groups = failure_groups(turns)
    assert [(g.turns, g.resolved_at) for g in groups] == [([4], None), ([0, 2], 3)]
    assert groups[1].error.startswith("E AssertionError: 2 != 3")  # the latest, verbatim


def _busy_memory() -> FakeMemory:
    turns = [
        fails(i, f"make target{i % 7}", f"Error: target{i % 7} broke at step {i}")
        for i in range(40)
    ]
    states = [
        CurrentState(f"key{i}", "value", "value", str(i), i, ((str(i - 1), i - 1),))
        for i in range(40)
    ]
    idents = [
        {"name": f"src/mod{i}.py", "kind": "path", "turns": [i, i + 1, i + 2]} for i in range(12)
    ]
    return FakeMemory(turns, states, idents=idents, task="Fix the build. " * 60)


@pytest.mark.parametrize("budget", [60, 120, 400, 1000])
def test_brief_fits_its_budget_and_every_line_cites_turns(budget: int) -> None:
    b = brief_of(_busy_memory(), budget)  # type: ignore[arg-type]
    assert b.tokens == count_tokens(b.text) <= budget
    assert b.text.startswith("Brief of t (turns 0–39)")
    for line in b.text.splitlines():
        if line.startswith("- "):
            assert "turn" in line, line
    if budget >= 120:
        assert "Open failures:" in b.text  # failures come first when space is short
    assert sum(b.omitted.values()) + sum(len(v) for v in b.sections.values()) == 7 + 40 + 12


def test_brief_round_robin_gives_every_section_room() -> None:
    b = brief_of(_busy_memory(), 400)  # type: ignore[arg-type]
    assert all(b.sections[k] for k in ("open_failures", "current_state", "identifiers"))
    assert b.sections["current_state"][0]["previous"] == {"value": "38", "turn": 38}


# -- offline rules ----------------------------------------------------------------------------


def test_repeated_failure_fires_only_when_nothing_changed_since() -> None:
    turns = [
        fails(0, "make deploy", "make: *** No rule to make target 'deploy'.  Stop."),
        rec(1, "ls"),
        rec(2, "cat Makefile"),
    ]
    (f,) = offline_findings(FakeMemory(turns), "make  deploy")  # type: ignore[arg-type]
    assert f.rule == "repeated_failure" and f.cites == [0]
    assert "No rule to make target 'deploy'" in f.text and "turn 0" in f.text
    changed = [*turns, rec(3, "touch Makefile")]
    assert offline_findings(FakeMemory(changed), "make deploy") == []  # type: ignore[arg-type]
    passed = [*turns, rec(3, "make deploy", ("exit_code", "make deploy", "exit_code", "0"))]
    assert offline_findings(FakeMemory(passed), "make deploy") == []  # type: ignore[arg-type]
    assert offline_findings(FakeMemory(turns), "make build") == []  # type: ignore[arg-type]


def test_near_identical_failure_is_named() -> None:
    turns = [fails(0, 'grep -A 5 "a\\|b" c.json', "grep: c.json: No such file or directory")]
    (f,) = offline_findings(FakeMemory(turns), 'grep -n "a\\|b" c.json')  # type: ignore[arg-type]
    assert f.text.startswith("A near-identical command (`grep -A 5")


def _fix(**over: Any) -> dict[str, Any]:
    fix = {
        "edit_turn": 2, "file": "conf/app.ini", "fragment": "port = 9000",
        "edit_action": "sed -i 's/port = 8080/port = 9000/' conf/app.ini",
        "fixed_turn": 3, "subject": "pytest -q", "attribute": "tests", "kind": "status",
        "fixed_value": "1 passed in 0.1s", "failed_turn": 1, "failed_kind": "status",
        "failed_value": "1 failed in 0.1s",
        "failed_text": "pytest -q\nE AssertionError: conf/app.ini: port=8080, expected 9000",
        "current_kind": "status", "current_value": "1 passed in 0.1s", "current_turn": 3,
    }  # fmt: skip
    return {**fix, **over}


def test_undoing_a_fix() -> None:
    memory = FakeMemory([rec(i, "ls") for i in range(4)], fixes=[_fix()])
    for action in (
        "sed -i 's/port = 9000/port = 8080/' conf/app.ini",
        "git checkout -- conf/app.ini",
        "git stash",
    ):
        (f,) = offline_findings(memory, action)  # type: ignore[arg-type]
        assert f.rule == "undoes_fix" and f.cites == [1, 2, 3], action
        assert "turn 2" in f.text and "'1 failed in 0.1s'" in f.text
    for action in (
        "sed -i 's/workers = 2/workers = 4/' conf/app.ini",
        "sed -i 's/port = 8080/port = 9000/' conf/app.ini",
        "git checkout -- other.ini",
    ):
        assert offline_findings(memory, action) == [], action  # type: ignore[arg-type]
    broken = FakeMemory(memory.turns, fixes=[_fix(current_value="1 failed in 0.2s")])
    assert offline_findings(broken, "git stash") == []  # type: ignore[arg-type]
    for text in ("E AssertionError: timeout", "E AssertionError: port=8080"):
        unrelated = FakeMemory(memory.turns, fixes=[_fix(failed_text=text)])
        assert offline_findings(unrelated, "git stash") == [], text  # type: ignore[arg-type]


def test_stale_value_needs_a_change_the_agent_made() -> None:
    values = [
        {"subject": "workers", "attribute": "value", "value": "2", "turn": 0,
         "action": "cat conf/app.ini"},
        {"subject": "workers", "attribute": "value", "value": "4", "turn": 4,
         "action": "appctl config set workers 4"},
    ]  # fmt: skip
    memory = FakeMemory([rec(i, "ls") for i in range(5)], values=values)
    (f,) = offline_findings(memory, "grep workers=2 conf/app.ini")  # type: ignore[arg-type]
    assert f.rule == "changed_state" and f.cites == [0, 4] and "'4' since turn 4" in f.text
    assert offline_findings(memory, "grep workers=4 conf/app.ini") == []  # type: ignore[arg-type]
    settings = [
        {**values[0], "subject": "conf/app.ini", "attribute": "workers"},
        {**values[1], "subject": "conf/app.ini", "attribute": "workers",
         "action": "sed -i 's/^workers = .*/workers = 4/' conf/app.ini"},
        {**values[0], "subject": "deploy/other.ini", "attribute": "workers", "value": "9"},
    ]  # fmt: skip
    memory = FakeMemory(memory.turns, values=settings)
    (f,) = offline_findings(memory, "grep 'workers = 2' conf/app.ini")  # type: ignore[arg-type]
    assert f.text.startswith("`workers` in `conf/app.ini` is '4' since turn 4") and f.cites == [
        0,
        4,
    ]
    looked_up = [values[0], {**values[1], "action": 'get_config({"id": 7})'}]
    memory = FakeMemory(memory.turns, values=looked_up)
    assert offline_findings(memory, "grep workers=2 conf/app.ini") == []  # type: ignore[arg-type]


def test_removed_path() -> None:
    turns = [rec(0, "create notes.txt"), rec(1, "rm notes.txt")]
    states = [
        CurrentState("notes.txt", "content", "file_changed", "notes.txt", 1, (("notes.txt", 0),))
    ]
    memory = FakeMemory(turns, states)
    (f,) = offline_findings(memory, "cat notes.txt")  # type: ignore[arg-type]
    assert f.rule == "changed_state" and f.cites == [1] and "removed at turn 1" in f.text
    assert offline_findings(memory, "echo hi > notes.txt") == []  # type: ignore[arg-type]
    assert offline_findings(memory, "cat other.txt") == []  # type: ignore[arg-type]


def test_silence_is_a_reminder_object_too() -> None:
    r = remind_with(FakeMemory([rec(0, "ls")]), "pwd")  # type: ignore[arg-type]
    assert r.to_json() == {
        "trajectory": "t",
        "before_turn": None,
        "reminder": None,
        "cites": [],
        "rule": None,
        "source": "rules",
    }


# -- the LLM's reply ------------------------------------------------------------------------------


def test_reply_schema_is_strict() -> None:
    schema = reply_schema()
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"reminder", "cites", "rule"}


def test_replies_are_checked() -> None:
    ok = {"reminder": "`make deploy` failed at turn 3.", "cites": [3], "rule": "repeated_failure"}
    assert parse_reply(json.dumps(ok), {3}).cites == [3]
    silent = parse_reply(json.dumps({"reminder": None, "cites": [], "rule": "none"}), {3})
    assert silent.reminder is None
    bad = [
        ("{not json", "not JSON"),
        (json.dumps({"reminder": "x", "cites": [3]}), "schema"),
        (json.dumps({**ok, "cites": [3, 99]}), "does not show: [99]"),
        (json.dumps({**ok, "cites": []}), "cites no turn"),
        (json.dumps({**ok, "rule": "none"}), "rule 'none'"),
        (json.dumps({**ok, "reminder": "x" * 700}), "is too long"),  # the schema bound
    ]
    for content, why in bad:
        with pytest.raises(LLMReplyError, match=why.replace("[", r"\[").replace("]", r"\]")):
            parse_reply(content, {3})


def test_marker_echoes_and_env_settings_in_canonical_commands():
    from trajgraph.extractors.actions import canonical, similarity

    first = canonical("uv run python -c 'import x' && cat .crash.log")
    again = canonical("uv run python -c 'import x' 2>&1 && echo \"---\" && cat .crash.log")
    assert first == again  # a marker print between the commands changes nothing
    kept = canonical("make && echo done > status.txt")
    assert "status.txt" in kept.text  # a redirected echo writes a file: not a marker
    bare = canonical("/venv/bin/python -c 'import x'")
    with_env = canonical("PYTHONPATH=/src /venv/bin/python -c 'import x'")
    assert with_env.positional == bare.positional
    assert 0.75 <= similarity(bare, with_env) < 1.0  # near-identical, not the same
    assert similarity(canonical("FOO=1 make"), canonical("FOO=2 make")) < 0.75
