"""Brief and reminder-or-silence against the real Neo4j: the real logs, a small trajectory with
one case per rule, the as-of view against graphs built from prefixes, the CLI, and the LLM
path through tests/fake_openai.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI
from tests.integration.ingesting import NO_MODELS, Ingest, Log
from trajgraph import cli
from trajgraph.core.errors import ConfigError, NotFoundError
from trajgraph.core.settings import LLMSettings, Settings
from trajgraph.extractors.base import Stats
from trajgraph.extractors.llm_client import ChatClient
from trajgraph.pipelines.adapters import normalize, split_records
from trajgraph.queries.memory.brief import build_brief
from trajgraph.queries.memory.remind import remind
from trajgraph.queries.memory.store import Memory

PYDICOM = "pydicom__pydicom-1458"
SPIDER = "sf_bq024-rollout0"
SPIDER_FILE = "spider-agent/sf_bq024.json"
DJANGO = "django__django-16255"
RULES = "synthetic-rules"
FAIL = (
    "E   AssertionError: conf/app.ini: port=8080, expected 9000\n"
    "==== 1 failed in 0.10s ====\nexit code: 1"
)
RULES_TURNS = [
    ("cat conf/app.ini", "port = 8080\nworkers = 2"),  # 0
    ("python -m pytest tests/test_app.py -q", FAIL),  # 1
    ("sed -i 's/port = 8080/port = 9000/' conf/app.ini", "exit code: 0"),  # 2: the fix
    ("python -m pytest tests/test_app.py -q", "==== 1 passed in 0.05s ====\nexit code: 0"),  # 3
    ("sed -i 's/^workers = .*/workers = 4/' conf/app.ini", "exit code: 0"),  # 4
    ("rm notes.txt", "exit code: 0"),  # 5
    ("make deploy", "make: *** No rule to make target 'deploy'.  Stop.\nexit code: 2"),  # 6
    ("ls", "Makefile\nconf\ntests"),  # 7
    ("touch Makefile", "exit code: 0"),  # 8
    ("ls conf", "app.ini"),  # 9
]


def _trajectory(id_: str, turns: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "id": id_,
        "task": "Make tests/test_app.py pass and deploy.",
        "turns": [{"idx": i, "action": a, "observation": o} for i, (a, o) in enumerate(turns)],
    }


def _real(shared: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for path in (shared / "swe-agent/pydicom__pydicom-1458.traj",
                 shared / "mini-swe-agent/django__django-16255.traj.json"):  # fmt: skip
        for record in split_records(str(path), path.read_bytes()):
            for traj in normalize(record):
                out[traj["id"]] = traj
    return out


@pytest.fixture(scope="module")
def corpus(shared_dir: Path, ingested: Ingest) -> str:
    logs: list[Log] = [
        shared_dir / "swe-agent/pydicom__pydicom-1458.traj",
        shared_dir / "mini-swe-agent/django__django-16255.traj.json",
        shared_dir / SPIDER_FILE,
        _trajectory(RULES, RULES_TURNS),
    ]
    run = ingested(*logs, args=NO_MODELS)
    assert run.summary.dead_lettered == 0 and run.summary.ingested == len(logs)
    return run.tenant


def _remind(driver: Any, settings: Settings, tenant: str, trajectory: str, action: str,
            before: int | None = None, llm: Any = None) -> Any:  # fmt: skip
    return remind(
        driver,
        database=settings.neo4j.database,
        tenant=tenant,
        trajectory=trajectory,
        next_action=action,
        before_turn=before,
        llm=llm,
    )


def _action(shared: Path, trajectory: str, turn: int) -> str:
    return str(_real(shared)[trajectory]["turns"][turn]["action"])


# -- the real logs -------------------------------------------------------------------------------


def test_a_repeated_failing_edit_in_a_real_log_is_reminded(
    driver: Any, neo4j_settings: Settings, corpus: str, shared_dir: Path
) -> None:
    # SWE-agent sent the very same edit at turns 6 and 7; turn 6 was rejected.
    action = _action(shared_dir, PYDICOM, 7)
    assert action == _action(shared_dir, PYDICOM, 6)
    r = _remind(driver, neo4j_settings, corpus, PYDICOM, action, before=7)
    assert r.rule == "repeated_failure" and r.cites == [6], r
    assert "SyntaxError: unmatched ')'" in r.reminder and "turn 6" in r.reminder
    # Before turn 6 the same edit had not been tried: turn 5 was a different edit.
    assert _remind(driver, neo4j_settings, corpus, PYDICOM, action, before=6).reminder is None


def test_a_command_that_did_not_run_is_a_failure_to_remind_of(
    driver: Any, neo4j_settings: Settings, corpus: str, shared_dir: Path
) -> None:
    # Spider-agent reports only "Command execution failed"; turn 12 repeats turn 9's grep of the
    # same pattern and file with other flags, after read-only steps.
    path = shared_dir / SPIDER_FILE
    (traj,) = [t for r in split_records(str(path), path.read_bytes()) for t in normalize(r)]
    assert traj["id"] == SPIDER
    assert traj["turns"][9]["observation"].endswith("Command execution failed")
    r = _remind(driver, neo4j_settings, corpus, SPIDER, traj["turns"][12]["action"], before=12)
    assert r.rule == "repeated_failure" and r.cites == [9], r
    assert "Command execution failed" in r.reminder
    # Before turn 9 that grep had not failed yet.
    later = _remind(driver, neo4j_settings, corpus, SPIDER, traj["turns"][12]["action"], before=9)
    assert later.reminder is None


def test_silence_for_first_time_and_fixed_actions(
    driver: Any, neo4j_settings: Settings, corpus: str, shared_dir: Path
) -> None:
    for trajectory, action, before in (
        (PYDICOM, "ls pydicom/pixel_data_handlers", 7),  # never run before
        (PYDICOM, "python -c 'import pydicom; print(pydicom.__version__)'", None),
        (PYDICOM, "python reproduce_bug.py", 9),  # failed at 2, but the handler was edited since
        (DJANGO, "python3 reproduce_issue.py", 10),  # its latest run (turn 6) succeeded
        (DJANGO, "python3 tests/runtests.py sitemaps_tests", None),  # passed at turn 14
    ):
        r = _remind(driver, neo4j_settings, corpus, trajectory, action, before)
        assert r.reminder is None and r.cites == [], (trajectory, action, r)


def test_every_step_of_the_real_logs_is_mostly_silent(
    driver: Any, neo4j_settings: Settings, corpus: str, shared_dir: Path
) -> None:
    fired = []
    steps = 0
    for traj in _real(shared_dir).values():
        for turn in traj["turns"][1:]:
            steps += 1
            r = _remind(driver, neo4j_settings, corpus, traj["id"], turn["action"], turn["idx"])
            if r.reminder:
                fired.append((traj["id"], turn["idx"], r.cites))
    assert fired == [(PYDICOM, 7, [6])]
    assert steps == 27


# -- one case per rule ----------------------------------------------------------------------------


def test_each_rule_on_a_small_trajectory(
    driver: Any, neo4j_settings: Settings, corpus: str
) -> None:
    def ask(action: str, before: int | None = None) -> Any:
        return _remind(driver, neo4j_settings, corpus, RULES, action, before)

    undo = ask("sed -i 's/port = 9000/port = 8080/' conf/app.ini")
    assert undo.rule == "undoes_fix" and undo.cites == [1, 2, 3]
    assert "'1 failed in 0.10s' (turn 1) to '1 passed in 0.05s' (turn 3)" in undo.reminder
    assert ask("git checkout -- conf/app.ini").rule == "undoes_fix"
    assert ask("git checkout -- conf/app.ini", before=3).reminder is None  # not a fix yet

    stale = ask("grep 'workers = 2' conf/app.ini")
    assert stale.rule == "changed_state" and stale.cites == [0, 4]
    assert stale.reminder.startswith("`workers` in `conf/app.ini` is '4' since turn 4 (`sed -i")
    assert ask("grep 'workers = 4' conf/app.ini").reminder is None
    assert ask("grep 'workers = 2' conf/app.ini", before=4).reminder is None

    gone = ask("cat notes.txt")
    assert (
        gone.rule == "changed_state" and gone.cites == [5] and "removed at turn 5" in gone.reminder
    )

    again = ask("make deploy", before=8)
    assert again.rule == "repeated_failure" and again.cites == [6]
    assert "make: *** No rule to make target 'deploy'.  Stop. (exit code 2)" in again.reminder
    assert ask("make deploy").reminder is None  # `touch Makefile` (turn 8) changed something
    assert ask("python -m pytest -q tests/test_app.py").reminder is None  # last run passed

    with pytest.raises(NotFoundError, match="no trajectory"):
        _remind(driver, neo4j_settings, f"{corpus}-other", RULES, "ls")
    with pytest.raises(ConfigError, match="next_action is empty"):
        ask("  ")


def test_the_brief(driver: Any, neo4j_settings: Settings, corpus: str) -> None:
    db = neo4j_settings.neo4j.database
    full = build_brief(driver, database=db, tenant=corpus, trajectory=RULES, budget=600)
    assert full.tokens <= 600
    assert "Task: Make tests/test_app.py pass and deploy." in full.text
    (failure,) = full.sections["open_failures"]
    assert failure["turns"] == [6] and failure["action"] == "make deploy"
    assert "- `conf/app.ini` workers = 4 (turn 4; was 2 at turn 0)" in full.text
    assert "- `notes.txt` changed (turn 5: `rm notes.txt`)" in full.text
    assert full.sections["failed_attempts"][0]["resolved_at"] == 3
    early = build_brief(driver, database=db, tenant=corpus, trajectory=RULES, before_turn=3)
    assert early.text.startswith(f"Brief of {RULES} (turns 0–2)") and early.before_turn == 3
    assert [f["turns"] for f in early.sections["open_failures"]] == [[1]]
    assert "workers = 2 (turn 0)" in early.text and "workers = 4" not in early.text
    assert "make deploy" not in early.text
    small = build_brief(driver, database=db, tenant=corpus, trajectory=PYDICOM, budget=100)
    assert small.tokens <= 100 and sum(small.omitted.values()) > 0
    with pytest.raises(ConfigError, match="budget"):
        build_brief(driver, database=db, tenant=corpus, trajectory=RULES, budget=10)


# -- the as-of view equals a graph built from the prefix -----------------------------------------


def test_before_turn_equals_a_graph_of_the_prefix(
    driver: Any, neo4j_settings: Settings, ingested: Ingest, corpus: str, shared_dir: Path
) -> None:
    db = neo4j_settings.neo4j.database
    rules = _trajectory(RULES, RULES_TURNS)
    cases = [(_real(shared_dir)[PYDICOM], 7), (_real(shared_dir)[DJANGO], 10), (rules, 8)]
    prefixes = [
        {k: traj[k] for k in ("id", "task")} | {"turns": [x for x in traj["turns"] if x["idx"] < t]}
        for traj, t in cases
    ]
    cut_run = ingested(*prefixes, args=NO_MODELS)
    assert cut_run.summary.dead_lettered == 0 and cut_run.summary.ingested == len(prefixes)
    prefix_tenant = cut_run.tenant
    with driver.session(database=db) as s:
        for traj, t in cases:
            seen = Memory(s, tenant=corpus, trajectory=traj["id"], before_turn=t)
            cut = Memory(s, tenant=prefix_tenant, trajectory=traj["id"])
            whole = Memory(s, tenant=corpus, trajectory=traj["id"])
            assert seen.turns == cut.turns and seen.turn_count == cut.turn_count == t
            assert seen.current_states == cut.current_states
            assert seen.fixes == cut.fixes
            assert seen.failure_causes(list(range(t))) == cut.failure_causes(list(range(t)))
            kinds = ("path", "command", "error", "symbol")
            assert seen.identifiers(kinds, limit=100) == cut.identifiers(kinds, limit=100)
            # ... and the full graph does differ, so the view is doing the work.
            assert whole.current_states != seen.current_states
    for traj, t in cases:
        for action in [traj["turns"][t]["action"], "make deploy", "cat notes.txt"]:
            a = _remind(driver, neo4j_settings, corpus, traj["id"], action, before=t)
            b = _remind(driver, neo4j_settings, prefix_tenant, traj["id"], action)
            assert (a.reminder, a.cites, a.rule) == (b.reminder, b.cites, b.rule)
        a = build_brief(driver, database=db, tenant=corpus, trajectory=traj["id"], before_turn=t)
        b = build_brief(driver, database=db, tenant=prefix_tenant, trajectory=traj["id"])
        assert (a.text, a.sections, a.omitted) == (b.text, b.sections, b.omitted)


# -- the CLI ---------------------------------------------------------------------------------------


def test_cli(corpus: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["brief", RULES, "--tenant", corpus, "--budget", "200"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"Brief of {RULES} (turns 0–9)") and "Open failures:" in text
    assert cli.main(["brief", RULES, "--tenant", corpus, "--json", "--before-turn", "3"]) == 0
    assert json.loads(capsys.readouterr().out)["before_turn"] == 3
    assert cli.main(["remind", RULES, "make deploy", "--tenant", corpus, "--before-turn", "8"]) == 0
    out = capsys.readouterr().out
    assert "already failed at turn 6" in out and out.rstrip().endswith(
        "(repeated_failure; cites turn 6)"
    )
    assert cli.main(["remind", RULES, "ls -la", "--tenant", corpus, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reminder"] is None
    assert cli.main(["remind", RULES, "ls", "--tenant", f"{corpus}-nobody"]) == 2
    assert "no trajectory" in capsys.readouterr().err


# -- with an LLM -----------------------------------------------------------------------------------


def test_the_llm_decides_and_invalid_replies_fall_back(
    driver: Any, neo4j_settings: Settings, corpus: str, fake_llm: FakeOpenAI
) -> None:
    client = ChatClient(
        LLMSettings(model="fake", base_url=fake_llm.url, timeout_s=5, max_attempts=1), Stats()
    )

    def ask(action: str, before: int | None = None) -> Any:
        return _remind(driver, neo4j_settings, corpus, RULES, action, before, llm=client)

    try:
        said = "`make deploy` failed at turn 6 (no 'deploy' target); `touch Makefile` ran since."
        fake_llm.remind_reply = {"reminder": said, "cites": [6, 8], "rule": "repeated_failure"}
        r = ask("make deploy")
        assert (r.reminder, r.cites, r.rule, r.source) == (said, [6, 8], "repeated_failure", "llm")
        (req,) = fake_llm.chat_requests
        assert req.body["response_format"]["json_schema"]["name"] == "trajgraph_remind"
        assert req.body["response_format"]["json_schema"]["strict"] is True
        system, user = (m["content"] for m in req.body["messages"])
        assert "make deploy" not in system and "<<<LOG " in user
        block = user.split("The agent's next action", 1)[1].split("<<<END", 1)[0]
        assert "make deploy" in block  # the action itself is fenced as data
        assert "No rule to make target" in user  # the evidence: the earlier failing run

        # A valid null is silence, even where the offline rules would speak.
        fake_llm.remind_reply = {"reminder": None, "cites": [], "rule": "none"}
        r = ask("make deploy", before=8)
        assert r.reminder is None and r.source == "llm"

        # Invented citations and broken replies fall back to the rules.
        fake_llm.remind_reply = {
            "reminder": "It failed at turn 42.",
            "cites": [42],
            "rule": "other",
        }
        r = ask("make deploy", before=8)
        assert r.source.startswith("rules (LLM reply invalid: cites turns the evidence does not")
        assert r.rule == "repeated_failure" and r.cites == [6]
        fake_llm.script("schema_invalid")
        r = ask("make deploy", before=8)
        assert r.source.startswith("rules (LLM reply invalid: schema") and r.cites == [6]
        fake_llm.script("500")
        r = ask("ls", before=8)
        # A transport failure: the server's text stays in the log (issue 16, item 7).
        assert r.reminder is None and r.source == "rules (LLM unavailable)"
    finally:
        client.close()
