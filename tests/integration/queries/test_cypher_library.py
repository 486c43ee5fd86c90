"""The analysts' Cypher library (queries/*.cypher) against the real Neo4j.

One module-scoped tenant holds the shared real logs plus two small synthetic trajectories
with known answers (a test that fails twice, a config value changed twice, an edit, then a
pass; and a second run with the same error). Every library file must have a case below: it
runs with its documented example params (tenant swapped), then with specific params.

A second tenant holds the same two synthetic runs under the same ids (so the same identifiers,
signatures and error texts by value) and a third run of the same failure that only it has:
the exact counts of the cases double as isolation checks, and the tests at the end check every
query against the other tenant's ids and uids, its plan, and hostile parameters.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import neo4j
import pytest

from tests.integration.ingesting import NO_MODELS, Ingest
from trajgraph import cli
from trajgraph.core.errors import GraphError
from trajgraph.core.settings import Settings
from trajgraph.extractors.signatures import SIGNATURE_VERSION
from trajgraph.queries import library

DJANGO = "django__django-16255"
PYDICOM = "pydicom__pydicom-1458"
TAU0 = "gpt-4o-airline.excerpt_tasks0-1-6_trial0/task0-trial0"
TAU1 = "gpt-4o-airline.excerpt_tasks0-1-6_trial0/task1-trial0"
SPIDER = "sf_bq024-rollout0"
REAL_IDS = {
    DJANGO,
    PYDICOM,
    TAU0,
    TAU1,
    "gpt-4o-airline.excerpt_tasks0-1-6_trial0/task6-trial0",
    SPIDER,
    "basic_gui_mode",
}

# -- the synthetic trajectories ---------------------------------------------------------------

PORT = "synthetic-port-fix"
DB = "synthetic-db-up"
TEST = "python -m pytest tests/test_server.py -q"
SHOW = "appctl config show conf/server.ini"
EDIT = "sed -i 's/port = 9090/port = 8000/' conf/server.ini"
ERROR = "E   ConnectionRefusedError: [Errno 111] Connection refused"
FAIL = (
    "F"
    + " " * 68
    + "[100%]\n"
    + ERROR
    + "\n============ 1 failed in 0.10s ============\nexit code: 1"
)
PASS = ".." + " " * 67 + "[100%]\n============ 2 passed in 0.05s ============\nexit code: 0"
PORT_TURNS = [
    (SHOW, "port = 8080\nworkers = 2"),  # 0
    (TEST, FAIL),  # 1
    ("appctl config set port 9090", "port = 9090"),  # 2
    (TEST, FAIL),  # 3: the same error again
    (EDIT, "exit code: 0"),  # 4: the fix, an edit of a file read at turn 0
    ("appctl config set port 8000", "port = 8000"),  # 5
    (TEST, PASS),  # 6
    (SHOW, "port = 8000\nworkers = 4"),  # 7
]
DB_TURNS = [
    (TEST, FAIL),  # 0: the same error in another run
    ("docker compose up -d db", "exit code: 0"),  # 1
    (TEST, PASS),  # 2
]
BROKE = "synthetic-broke-after-edit"  # a check that passed, then an edit broke it
CHECK = "python app.py --check"
BREAK = "sed -i 's/retries = 3/retries = x/' app.cfg"
BROKEN = (
    "Traceback (most recent call last):\n"
    "ConfigParseError: retries must be an integer, got 'x'\nexit code: 1"
)
BROKE_TURNS = [
    (CHECK, "checked app.cfg: ok\nexit code: 0"),  # 0: clean, and app.cfg is known
    (BREAK, "exit code: 0"),  # 1: the edit that breaks it
    ("cat app.cfg", "retries = x"),  # 2
    (CHECK, BROKEN),  # 3: broken
    (CHECK, BROKEN),  # 4: still broken
]
OTHER = "synthetic-other-tenant-only"  # in the other tenant only
OTHER_TURNS = [
    (TEST, FAIL),  # 0: the same error, in the other tenant
    ("appctl restart db", "exit code: 0"),  # 1
    (TEST, PASS),  # 2
]


def _trajectory(id_: str, turns: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "id": id_,
        "task": "Make tests/test_server.py pass.",
        "source": "test_cypher_library",
        "format": "canonical",
        "outcome": "submitted",
        "metadata": {"written_by": "tests/integration/queries/test_cypher_library.py"},
        "turns": [
            {"idx": i, "action": a, "observation": o, "actor": "agent"}
            for i, (a, o) in enumerate(turns)
        ],
    }


# -- fixture ----------------------------------------------------------------------------------


@dataclass
class Lib:
    driver: neo4j.Driver
    database: str
    tenant: str
    other: str  # a second tenant: PORT and DB under the same ids, and OTHER

    def example(self, name: str) -> dict[str, Any]:
        """The file's documented example params, parsed by Neo4j itself, tenant swapped."""
        params = example_params(self.driver, self.database, name)
        params["tenant"] = self.tenant
        return params

    def run(self, name: str, **overrides: Any) -> list[dict[str, Any]]:
        params = self.example(name)
        unknown = set(overrides) - set(params)
        assert not unknown, f"{name} has no params {unknown}"
        params.update(overrides)
        return library.run(self.driver, name, params, database=self.database)

    def records(self, cypher: str, **params: Any) -> list[neo4j.Record]:
        """``cypher``'s records in this database; ``$tenant`` is this tenant unless given."""
        params.setdefault("tenant", self.tenant)
        records, _, _ = self.driver.execute_query(cypher, params, database_=self.database)
        return records


def example_params(driver: neo4j.Driver, database: str, name: str) -> dict[str, Any]:
    example = library.load(name).header.get("example", "")
    assert example.startswith(":param {") and example.endswith("}"), example
    records, _, _ = driver.execute_query(
        f"RETURN {example.removeprefix(':param').strip()} AS params", database_=database
    )
    params = records[0]["params"]
    assert isinstance(params, dict)
    return dict(params)


@pytest.fixture(scope="module")
def lib(driver: neo4j.Driver, neo4j_settings: Settings, shared_dir: Path, ingested: Ingest) -> Lib:
    synthetic = [
        _trajectory(i, t) for i, t in ((PORT, PORT_TURNS), (DB, DB_TURNS), (BROKE, BROKE_TURNS))
    ]
    run = ingested(shared_dir, synthetic, args=NO_MODELS)
    assert run.summary.dead_lettered == 0
    assert run.summary.ingested == len(REAL_IDS) + 3
    other = ingested([*synthetic, _trajectory(OTHER, OTHER_TURNS)], args=NO_MODELS)
    assert other.summary.ingested == 4
    return Lib(driver, neo4j_settings.neo4j.database, run.tenant, other.tenant)


# -- helpers ----------------------------------------------------------------------------------


def _turns(rows: list[dict[str, Any]], key: str = "turn") -> list[int]:
    return [r[key] for r in rows]


def _one(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    found = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    assert len(found) == 1, (match, rows)
    return found[0]


def _state_uid(lib: Lib, trajectory: str, turn: int, kind: str) -> str:
    records = lib.records(
        "MATCH (s:State {tenant: $tenant, trajectory_id: $trajectory, turn: $turn, kind: $kind}) "
        "RETURN s.uid AS uid",
        trajectory=trajectory,
        turn=turn,
        kind=kind,
    )
    assert len(records) == 1
    return str(records[0]["uid"])


def _object_turns(lib: Lib, trajectory: str, name: str) -> list[int]:
    records = lib.records(
        "MATCH (o:Object {tenant: $tenant, trajectory_id: $trajectory, name: $name}) "
        "RETURN o.turns AS turns",
        trajectory=trajectory,
        name=name,
    )
    return sorted(records[0]["turns"])


# -- one case per library file ----------------------------------------------------------------


def case_trajectories(lib: Lib) -> None:
    rows = lib.run("trajectories")
    assert [r["id"] for r in rows] == sorted(REAL_IDS | {PORT, DB, BROKE})
    port = _one(rows, id=PORT)
    assert (port["turns"], port["format"]) == (len(PORT_TURNS), "canonical")
    assert [r["id"] for r in lib.run("trajectories", trajectory=DB)] == [DB]
    assert lib.run("trajectories", tenant=lib.tenant + "-other") == []


def case_why_chain(lib: Lib) -> None:
    rows = lib.run("why_chain")  # pydicom turn 7
    assert 7 in _turns(rows) and _turns(rows) == sorted(_turns(rows))
    # Why did the tests pass at turn 6? Because of the edit of conf/server.ini at turn 4.
    rows = lib.run("why_chain", trajectory=PORT, turn=6, depth=2)
    edit = _one(rows, kind="state", turn=4)
    assert "conf/server.ini" in edit["text"] and edit["hops"] == 1


def case_effects_of(lib: Lib) -> None:
    rows = lib.run("effects_of")  # django turn 4: the sed fix
    assert _turns(rows) == sorted(_turns(rows)) and min(_turns(rows)) == 4
    # The fix's edit state changed the reproduction script's output at turn 6.
    fixed = _one(rows, kind="state", turn=6)
    assert "Success!" in fixed["text"] and fixed["hops"] == 1
    assert any(
        reason.startswith("edit of `django/contrib/sitemaps/__init__.py`")
        for reason in fixed["reasons"]
    )

    rows = lib.run("effects_of", trajectory=PORT, turn=4, depth=1)
    assert _one(rows, kind="action", turn=4)["hops"] == 0
    six = {r["text"] for r in rows if r["turn"] == 6}
    assert any("exit_code = 0" in t for t in six) and any("2 passed" in t for t in six)
    assert {r["hops"] for r in rows} <= {0, 1}
    chain = {r["uid"] for r in rows}
    for r in rows:  # caused_by only names nodes of the chain
        assert set(r["caused_by"]) <= chain
    assert chain < {r["uid"] for r in lib.run("effects_of", trajectory=PORT, turn=4, depth=3)}

    # From one state: the first ConnectionRefusedError made the agent change the port.
    error = _state_uid(lib, PORT, 1, "error")
    rows = lib.run("effects_of", trajectory=PORT, turn=None, state=error, depth=1)
    assert _one(rows, uid=error)["hops"] == 0
    assert _one(rows, kind="action", turn=2)["text"] == "appctl config set port 9090"


def case_current_state(lib: Lib) -> None:
    rows = lib.run("current_state")  # tau-bench task 0, kind 'value'
    assert rows and all(r["kind"] == "value" for r in rows)
    assert _turns(rows) == sorted(_turns(rows))
    dest = _one(rows, subject="destination")
    assert (dest["value"], dest["turn"], dest["replaced"], dest["previous_value"]) == (
        "SEA",
        14,
        2,
        "ATL",
    )

    rows = lib.run("current_state", trajectory=PORT, kind="value")
    port = _one(rows, subject="port")
    # Set to 8000 at turn 5, shown again at turn 7; 8080 and 9090 and the first 8000 replaced.
    assert (port["value"], port["turn"], port["value_since_turn"]) == ("8000", 7, 5)
    assert (port["replaced"], port["previous_value"], port["action"]) == (3, "8000", SHOW)
    workers = _one(rows, subject="workers")
    assert (workers["value"], workers["value_since_turn"], workers["replaced"]) == ("4", 7, 1)

    rows = lib.run("current_state", trajectory=PORT, kind=None)
    exit_code = _one(rows, subject=TEST, attribute="exit_code")
    assert (exit_code["value"], exit_code["turn"], exit_code["replaced"]) == ("0", 6, 2)
    assert exit_code["previous_value"] == "1"
    # Nothing supersedes an error whose subject (the exception class) the passing run does not
    # mention: the last ConnectionRefusedError stays current. Its exit code did not.
    error = _one(rows, kind="error")
    assert (error["subject"], error["turn"], error["replaced"]) == ("ConnectionRefusedError", 3, 1)
    keys = [(r["subject"], r["attribute"]) for r in rows]
    assert len(keys) == len(set(keys))


def case_state_history(lib: Lib) -> None:
    rows = lib.run("state_history")  # tau-bench task 0, destination
    assert [(r["turn"], r["value"], r["current"]) for r in rows] == [
        (4, "SEA", False),
        (6, "ATL", False),
        (14, "SEA", True),
    ]

    rows = lib.run("state_history", trajectory=PORT, subject="port", attribute="value")
    assert [(r["turn"], r["value"]) for r in rows] == [
        (0, "8080"),
        (2, "9090"),
        (5, "8000"),
        (7, "8000"),
    ]
    assert [r["current"] for r in rows] == [False, False, False, True]
    assert [r["changed"] for r in rows] == [False, True, True, False]
    assert [[o["turn"] for o in r["supersedes"]] for r in rows] == [[], [0], [2], [5]]
    assert [[n["value"] for n in r["superseded_by"]] for r in rows] == [
        ["9090"],
        ["8000"],
        ["8000"],
        [],
    ]
    assert rows[1]["action"] == "appctl config set port 9090"

    rows = lib.run("state_history", trajectory=PORT, subject=TEST, attribute=None)
    assert _turns(rows) == sorted(_turns(rows))
    assert {r["attribute"] for r in rows} == {"exit_code", "tests", "output"}
    assert [r["value"] for r in rows if r["attribute"] == "exit_code"] == ["1", "1", "0"]


def case_identifier_timeline(lib: Lib) -> None:
    path = "django/contrib/sitemaps/__init__.py"
    rows = lib.run("identifier_timeline")  # the django path, every trajectory
    assert {r["trajectory"] for r in rows} == {DJANGO}
    assert _turns(rows) == _object_turns(lib, DJANGO, path) == [1, 4, 5, 16]
    assert [r["first_mention"] for r in rows] == [True, False, False, False]
    assert _one(rows, turn=4)["in_action"] and not _one(rows, turn=16)["in_action"]
    assert any(path in s for s in _one(rows, turn=4)["states"])

    rows = lib.run("identifier_timeline", identifier="reproduce_bug.py", trajectory=PYDICOM)
    assert _turns(rows) == _object_turns(lib, PYDICOM, "reproduce_bug.py")
    assert _turns(rows) == sorted(_turns(rows)) and 2 in _turns(rows) and 9 in _turns(rows)

    # Across trajectories: grouped by trajectory, time-ordered inside each.
    rows = lib.run("identifier_timeline", identifier="tests/test_server.py", trajectory=None)
    assert [(r["trajectory"], r["turn"]) for r in rows] == [(DB, 0), (DB, 2)] + [
        (PORT, t) for t in (1, 3, 6)
    ]
    rows = lib.run("identifier_timeline", identifier="ValueError", trajectory=None)
    assert {r["trajectory"] for r in rows} == {DJANGO, PYDICOM}
    pairs = [(r["trajectory"], r["turn"]) for r in rows]
    assert pairs == sorted(pairs)
    assert lib.run("identifier_timeline", identifier="no/such/file.py", trajectory=None) == []


def case_failures_and_causes(lib: Lib) -> None:
    rows = lib.run("failures_and_causes")  # pydicom
    assert sorted(set(_turns(rows))) == [2, 5, 6, 7] and _turns(rows) == sorted(_turns(rows))
    first = rows[0]
    assert first["subject"] == "AttributeError" and first["action"] == "python reproduce_bug.py"
    assert {"kind": "action", "turn": 2} in [
        {"kind": c["kind"], "turn": c["turn"]} for c in first["caused_by"]
    ]
    assert first["next_turn"] == 3

    rows = lib.run("failures_and_causes", trajectory=PORT)
    assert [(r["turn"], r["kind"]) for r in rows] == [
        (1, "error"),
        (1, "exit_code"),
        (3, "error"),
        (3, "exit_code"),
    ]
    err1 = rows[0]
    assert err1["value"] == ERROR and err1["action"] == TEST
    assert [c["reason"] for c in err1["caused_by"]] == ["action result"]
    assert (err1["next_turn"], err1["next_action"]) == (2, "appctl config set port 9090")
    assert 2 in [e["turn"] for e in err1["led_to"] if e["kind"] == "action"]
    exit3 = rows[3]
    assert exit3["value"] == "1" and exit3["next_action"] == EDIT
    assert exit3["superseded_by"] == [{"turn": 6, "value": "0"}]
    # The failing run at turn 3 was itself caused by the failure at turn 1 (a re-run).
    assert 1 in [c["turn"] for c in exit3["action_caused_by"]]

    rows = lib.run("failures_and_causes", trajectory=TAU0)
    assert [(r["turn"], r["kind"]) for r in rows] == [(10, "error")]
    assert rows[0]["value"].startswith("Error: payment amount does not add up")


def case_recurring_errors_across_trajectories(lib: Lib) -> None:
    rows = lib.run("recurring_errors_across_trajectories")  # min 2
    # The real logs share no error text; the synthetic runs do.
    assert len(rows) == 1
    row = rows[0]
    assert (row["error"], row["trajectories"], row["occurrences"]) == (ERROR, 2, 3)
    assert row["trajectory_ids"] == [DB, PORT] and row["subjects"] == ["ConnectionRefusedError"]
    assert row["seen_in"] == [
        {"trajectory": DB, "outcome": "submitted", "turns": [0]},
        {"trajectory": PORT, "outcome": "submitted", "turns": [1, 3]},
    ]

    rows = lib.run("recurring_errors_across_trajectories", min_trajectories=1)
    assert rows[0]["error"] == ERROR
    keys = [(-r["trajectories"], -r["occurrences"], r["error"]) for r in rows]
    assert keys == sorted(keys)
    # SWE-agent's edit linter rejected three edits in a row with the same message.
    retry = _one(rows, trajectory_ids=[PYDICOM], occurrences=3, subjects=["edit 287:295"])
    assert retry["error"].startswith("Your proposed edit has introduced new syntax error(s)")
    assert retry["seen_in"][0]["turns"] == [5, 6, 7]
    assert {r["trajectory_ids"][0] for r in rows if r["trajectories"] == 1} >= {
        DJANGO,
        PYDICOM,
        TAU0,
        SPIDER,
    }


def case_repeated_actions(lib: Lib) -> None:
    rows = lib.run("repeated_actions")  # pydicom
    run = rows[0]
    assert (run["action"], run["turns"]) == ("python reproduce_bug.py", [2, 9])
    assert run["results_differ"] and run["failed_turns"] == [2]
    # The same edit submitted twice got the same linter rejection twice.
    edit = _one(rows, turns=[6, 7])
    assert edit["action"].startswith("edit 287:295") and not edit["results_differ"]
    assert edit["distinct_results"] == 1 and edit["failed_turns"] == [6, 7]

    rows = lib.run("repeated_actions", trajectory=PORT)
    assert [(r["action"], r["turns"], r["failed_turns"]) for r in rows] == [
        (SHOW, [0, 7], []),
        (TEST, [1, 3, 6], [1, 3]),
    ]
    assert [(r["distinct_results"], r["results_differ"]) for r in rows] == [(2, True), (2, True)]
    assert lib.run("repeated_actions", trajectory=PORT, min_runs=3)[0]["action"] == TEST


def case_files_touched(lib: Lib) -> None:
    rows = lib.run("files_touched")  # django
    assert {r["trajectory"] for r in rows} == {DJANGO}
    keys = [(r["first_turn"], r["path"]) for r in rows]
    assert keys == sorted(keys)
    init = _one(rows, path="django/contrib/sitemaps/__init__.py")
    assert [(t["turn"], t["access"]) for t in init["turns"]] == [
        (1, "read"),
        (4, "edit"),
        (5, "read"),
        (16, "diff"),
    ]
    script = _one(rows, path="reproduce_issue.py")
    assert (script["edit_turns"], script["read_turns"]) == ([2, 15], [3, 6])  # written, run, rm

    rows = lib.run("files_touched", trajectory=PORT)
    conf = _one(rows, path="conf/server.ini")
    assert [(t["turn"], t["access"]) for t in conf["turns"]] == [
        (0, "read"),
        (4, "edit"),
        (7, "read"),
    ]
    assert conf["turns"][1]["action"] == EDIT
    assert _one(rows, path="tests/test_server.py")["read_turns"] == [1, 3, 6]

    everywhere = lib.run("files_touched", trajectory=None)
    assert {r["trajectory"] for r in everywhere} >= {DJANGO, PYDICOM, PORT, DB}
    all_keys = [(r["trajectory"], r["first_turn"], r["path"]) for r in everywhere]
    assert all_keys == sorted(all_keys)


def case_trajectory_summary(lib: Lib) -> None:
    rows = lib.run("trajectory_summary")  # every trajectory
    assert [r["id"] for r in rows] == sorted(REAL_IDS | {PORT, DB, BROKE})
    for r in rows:
        assert sum(k["n"] for k in r["states_by_kind"]) == r["states"]
        assert r["current_states"] <= r["states"]
    pydicom = _one(rows, id=PYDICOM)
    assert (pydicom["turns"], pydicom["errors"], pydicom["failed_turns"]) == (12, 7, [2, 5, 6, 7])
    assert (pydicom["first_action"], pydicom["last_action"]) == (
        "create reproduce_bug.py",
        "submit",
    )
    tau1 = _one(rows, id=TAU1)
    assert (tau1["states"], tau1["current_states"], tau1["actors"]) == (0, 0, ["user", "agent"])
    django = _one(rows, id=DJANGO)
    assert django["first_timestamp"] < django["last_timestamp"]

    port = lib.run("trajectory_summary", trajectory=PORT)
    assert len(port) == 1
    p = port[0]
    assert (p["turns"], p["errors"], p["nonzero_exits"], p["failed_turns"]) == (8, 2, 2, [1, 3])
    assert (p["first_action"], p["last_action"], p["outcome"]) == (SHOW, SHOW, "submitted")
    kinds = {k["kind"]: k["n"] for k in p["states_by_kind"]}
    assert kinds["file_changed"] == 1 and kinds["error"] == 2 and kinds["exit_code"] == 4


def case_commands_that_failed_then_succeeded(lib: Lib) -> None:
    rows = lib.run("commands_that_failed_then_succeeded")  # pydicom
    assert [(r["command"], r["failed_turns"], r["succeeded_at"]) for r in rows] == [
        ("python reproduce_bug.py", [2], 9)
    ]
    assert [s["turn"] for s in rows[0]["steps_between"]] == list(range(3, 9))
    assert rows[0]["last_errors"][0].startswith("error: AttributeError")

    rows = lib.run("commands_that_failed_then_succeeded", trajectory=None)
    found = {(r["trajectory"], r["command"]): r for r in rows}
    assert (DJANGO, "python3 reproduce_issue.py") in found  # the expected ValueError, then fixed
    keys = [(r["trajectory"], r["failed_turns"][0], r["command"]) for r in rows]
    assert keys == sorted(keys)
    port = found[(PORT, TEST)]
    assert (port["failed_turns"], port["succeeded_at"]) == ([1, 3], 6)
    assert [s["turn"] for s in port["steps_between"]] == [2, 4, 5]
    assert port["edits_between"] == [{"turn": 4, "path": "conf/server.ini"}]
    assert f"error: {ERROR}" in port["last_errors"] and "exit_code: 1" in port["last_errors"]
    assert "exit_code: 0" in port["success_shows"]
    db = found[(DB, TEST)]
    assert (db["failed_turns"], db["succeeded_at"], db["edits_between"]) == ([0], 2, [])
    assert db["steps_between"] == [{"turn": 1, "action": "docker compose up -d db"}]


def case_longest_causal_chains(lib: Lib) -> None:
    def check(rows: list[dict[str, Any]]) -> None:
        assert rows
        hops = [r["hops"] for r in rows]
        assert hops == sorted(hops, reverse=True)
        for r in rows:
            turns = [n["turn"] for n in r["chain"]]
            assert turns == sorted(turns)  # a cause never comes after its effect
            assert len(r["chain"]) == r["hops"] + 1 == len(r["reasons"]) + 1
            assert r["chain"][0]["kind"] == "action"
            assert (turns[0], turns[-1]) == (r["start_turn"], r["end_turn"])
        pairs = [(r["start_turn"], r["end_turn"]) for r in rows]
        assert len(pairs) == len(set(pairs))

    rows = lib.run("longest_causal_chains")  # django, 5 rows
    check(rows)
    assert len(rows) == 5 and rows[0]["hops"] >= 4

    rows = lib.run("longest_causal_chains", trajectory=PORT, limit=3)
    check(rows)
    top = rows[0]
    # failing run → re-run → same error → the edit → what used the edited file next
    assert top["start_turn"] == 1 and top["end_turn"] >= 6
    assert EDIT in [n["text"] for n in top["chain"]]
    assert any("`conf/server.ini`" in r for r in top["reasons"])


SIGNATURE = "[Errno 111] Connection refused"  # of ERROR, in both synthetic runs


def case_recurring_failures(lib: Lib) -> None:
    rows = lib.run("recurring_failures")  # min 2
    # The real logs share no failure signature; the synthetic runs do.
    assert len(rows) == 1
    row = rows[0]
    assert (row["signature"], row["runs"], row["got_past"], row["never_got_past"]) == (
        SIGNATURE,
        2,
        2,
        0,
    )
    assert row["episodes"] == 2 and row["version"] == SIGNATURE_VERSION
    # No timestamps in these logs: first and last seen fall back to run and turn order.
    assert (row["first_seen"]["trajectory"], row["first_seen"]["turn"]) == (DB, 0)
    assert (row["last_seen"]["trajectory"], row["last_seen"]["turn"]) == (PORT, 3)
    top = row["top_resolution"]
    assert top["worked_in"] == 1 and top["key"] in {
        "appctl config set port 8000",
        "docker compose up db",
        "edit conf/server.ini",
    }
    rows = lib.run("recurring_failures", min_runs=1)
    assert rows[0]["signature"] == SIGNATURE
    assert len(rows) > 1 and all(r["runs"] == 1 for r in rows[1:])
    keys = [(-r["runs"], -r["got_past"], r["signature"]) for r in rows]
    assert keys == sorted(keys)


def _signature_uid(lib: Lib, tenant: str) -> str:
    """The uid of SIGNATURE's node in ``tenant``."""
    records = lib.records(
        "MATCH (g:Signature {tenant: $tenant, text: $s}) RETURN g.uid AS uid",
        tenant=tenant,
        s=SIGNATURE,
    )
    return str(records[0]["uid"])


def case_resolutions(lib: Lib) -> None:
    rows = lib.run("resolutions")
    assert [(r["trajectory"], r["outcome"]) for r in rows] == [
        (DB, "resolved"),
        (PORT, "resolved"),
    ]
    db, port = rows
    assert (db["failed_turns"], db["resolved_turn"], db["command"]) == ([0], 2, TEST)
    assert db["error"] == ERROR.strip()
    assert [(s["turn"], s["keys"]) for s in db["resolution"]] == [(1, ["docker compose up db"])]
    assert db["resolution"][0]["action"] == "docker compose up -d db"  # verbatim
    assert db["did_not_help"] == []
    # PORT: the value set at turn 2 was followed by the same failure; the edit got past it.
    assert (port["failed_turns"], port["resolved_turn"]) == ([1, 3], 6)
    assert [s["turn"] for s in port["did_not_help"]] == [2]
    assert [s["turn"] for s in port["resolution"]] == [4, 5]
    assert port["resolution"][0]["keys"] == ["edit conf/server.ini"]
    assert port["resolution"][0]["action"] == EDIT
    # by uid too; an unknown signature has no rows
    assert lib.run("resolutions", signature=_signature_uid(lib, lib.tenant)) == rows
    assert lib.run("resolutions", signature="no such failure") == []


def case_regressions(lib: Lib) -> None:
    rows = lib.run("regressions")  # every trajectory of the tenant
    # The real logs have none (a re-run of the same action that failed after running clean).
    assert [(r["trajectory"], r["command"]) for r in rows] == [(BROKE, CHECK)]
    row = rows[0]
    assert (row["clean_at"], row["broke_at"], row["failed_turns"]) == (0, 3, [3, 4])
    assert "exit_code: 1" in row["errors"]
    assert any("retries must be an integer" in e for e in row["errors"])
    assert row["edits_between"] == [{"turn": 1, "path": "app.cfg"}]
    assert [s["turn"] for s in row["steps_between"]] == [1, 2]
    assert row["steps_between"][0]["action"] == BREAK
    # The graph blames the edit: the check's exit code changed after it.
    assert {(b["turn"], b["path"]) for b in row["blamed_edits"]} == {(1, "app.cfg")}
    assert all("app.cfg" in b["reason"] for b in row["blamed_edits"])
    assert lib.run("regressions", trajectory=PORT) == []  # fixed, never broken after a pass


CASES: dict[str, Callable[[Lib], None]] = {
    "trajectories": case_trajectories,
    "why_chain": case_why_chain,
    "effects_of": case_effects_of,
    "current_state": case_current_state,
    "state_history": case_state_history,
    "identifier_timeline": case_identifier_timeline,
    "failures_and_causes": case_failures_and_causes,
    "recurring_errors_across_trajectories": case_recurring_errors_across_trajectories,
    "repeated_actions": case_repeated_actions,
    "files_touched": case_files_touched,
    "trajectory_summary": case_trajectory_summary,
    "commands_that_failed_then_succeeded": case_commands_that_failed_then_succeeded,
    "longest_causal_chains": case_longest_causal_chains,
    "recurring_failures": case_recurring_failures,
    "resolutions": case_resolutions,
    "regressions": case_regressions,
}

# -- the tests --------------------------------------------------------------------------------


def _body(text: str) -> str:
    """The query without its comments (no library query has // inside a string)."""
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def test_every_library_file_has_a_test_case() -> None:
    assert sorted(CASES) == library.names()


@pytest.mark.parametrize("name", library.names())
def test_header_documents_exactly_the_params_the_query_uses(
    name: str, driver: neo4j.Driver, neo4j_settings: Settings
) -> None:
    query = library.load(name)
    header = query.header
    assert header.get("name") == name
    assert len(header.get("purpose", "")) > 40
    used = set(re.findall(r"\$(\w+)", _body(query.text)))
    assert "tenant" in used, f"{name} is not filtered by $tenant"
    documented = [p.name for p in library.parse_params(header.get("params", ""))]
    assert len(documented) == len(set(documented))
    assert set(documented) == used
    example = example_params(driver, neo4j_settings.neo4j.database, name)
    assert set(example) == used
    body = _body(query.text)
    assert "ORDER BY" in body.rsplit("RETURN", 1)[1], f"{name}: the final rows are not ordered"
    assert not re.search(r"\+\s*\$|\$\w+\s*\+\s*'", body), "parameters are never spliced"


@pytest.mark.parametrize("name", library.names())
def test_library_query_answers(name: str, lib: Lib) -> None:
    case = CASES.get(name)
    if case is None:
        pytest.fail(f"queries/{name}.cypher has no test case in CASES")
    # The documented example runs as written (tenant swapped), returns rows, deterministically.
    first = lib.run(name)
    assert first, f"{name}'s example returns nothing on the real logs"
    assert lib.run(name) == first
    case(lib)


def test_cli_cypher_reads_the_tenant_given(
    ingested: Ingest, capsys: pytest.CaptureFixture[str]
) -> None:
    # Like every other read command, `trajgraph cypher` takes --tenant (the default tenant
    # holds none of this run's trajectories).
    run = ingested(
        {
            "id": "cypher-tenant",
            "task": "t",
            "turns": [{"idx": 0, "action": "ls", "observation": "a"}],
        },
        args=NO_MODELS,
    )
    argv = ["cypher", "trajectories", "--param", "trajectory=null", "--tenant", run.tenant]
    assert cli.main([*argv, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rows] == ["cypher-tenant"]


def test_cli_cypher_without_a_param_is_the_callers_error(
    neo4j_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # A parameter left out is something the caller must change (exit 2, like a bad flag), not
    # a Neo4j failure a rerun may fix (exit 1); the message says which and how to pass it.
    argv = ["cypher", "why_chain", "--param", "trajectory=x", "--tenant", "nobody-here"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("trajgraph: error: ") and len(err.splitlines()) == 1
    for name in ("turn", "state", "depth"):
        assert name in err
    assert "--param" in err


# -- tenants, plans and hostile parameters ----------------------------------------------------

# Each query on PORT (or the tenant's runs), in either tenant: the same logs, the same answer.
ON_PORT: dict[str, dict[str, Any]] = {
    "trajectories": {"trajectory": PORT},
    "why_chain": {"trajectory": PORT, "turn": 6, "state": None, "depth": 3},
    "effects_of": {"trajectory": PORT, "turn": 1, "state": None, "depth": 3},
    "current_state": {"trajectory": PORT, "kind": None},
    "state_history": {"trajectory": PORT, "subject": TEST, "attribute": None},
    "identifier_timeline": {"identifier": "conf/server.ini", "trajectory": PORT},
    "failures_and_causes": {"trajectory": PORT},
    "recurring_errors_across_trajectories": {"min_trajectories": 1},
    "repeated_actions": {"trajectory": PORT},
    "files_touched": {"trajectory": PORT},
    "trajectory_summary": {"trajectory": PORT},
    "commands_that_failed_then_succeeded": {"trajectory": PORT},
    "longest_causal_chains": {"trajectory": PORT, "limit": 20},
    "recurring_failures": {"min_runs": 1},
    "resolutions": {"signature": SIGNATURE},
    "regressions": {"trajectory": BROKE},
}
PER_RUN = {"recurring_errors_across_trajectories", "recurring_failures", "resolutions"}


def _uids(lib: Lib, tenant: str) -> set[str]:
    records = lib.records(
        "MATCH (n {tenant: $tenant}) WHERE n.uid IS NOT NULL RETURN n.uid AS uid", tenant=tenant
    )
    return {r["uid"] for r in records}


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def _without_uids(value: Any) -> Any:
    """Rows with the tenant-specific parts out: uids (hashes of the tenant) and sources."""
    if isinstance(value, dict):
        return {
            k: _without_uids(v)
            for k, v in value.items()
            if k not in ("uid", "caused_by", "leads_to", "source")
        }
    if isinstance(value, list):
        return [_without_uids(v) for v in value]
    return value


def _runs_of_the_shared_failure(name: str, rows: list[dict[str, Any]]) -> int:
    if name == "resolutions":
        return len(rows)
    if name == "recurring_failures":
        return int(_one(rows, signature=SIGNATURE)["runs"])
    return int(_one(rows, error=ERROR)["trajectories"])


def test_every_query_has_params_on_port() -> None:
    assert sorted(ON_PORT) == library.names()


@pytest.mark.parametrize("name", library.names())
def test_a_tenant_sees_only_its_own_graph(name: str, lib: Lib) -> None:
    mine, theirs = _uids(lib, lib.tenant), _uids(lib, lib.other)
    assert mine and theirs and not mine & theirs
    in_mine = lib.run(name, **ON_PORT[name])
    in_theirs = library.run(
        lib.driver,
        name,
        {**lib.example(name), **ON_PORT[name], "tenant": lib.other},
        database=lib.database,
    )
    assert in_mine and in_theirs
    # No uid of the other tenant in any answer, however deep in a row.
    assert not set(_strings(in_mine)) & theirs
    assert not set(_strings(in_theirs)) & mine
    if name in PER_RUN:
        # Cross-run answers count the tenant's runs only: OTHER's failure is the other's.
        assert OTHER not in _strings(in_mine)
        assert _runs_of_the_shared_failure(name, in_mine) == 2
        assert _runs_of_the_shared_failure(name, in_theirs) == 3
    elif name == "longest_causal_chains":
        # Of equally long chains, the first by uid is shown (uids hash the tenant).
        def ends(rows: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
            return [(r["hops"], r["start_turn"], r["end_turn"]) for r in rows]

        assert ends(in_mine) == ends(in_theirs)
    else:
        # The same log in two tenants: the same answer, in the same order, to the letter.
        assert _without_uids(in_mine) == _without_uids(in_theirs)
    # The other tenant's trajectory, or its state or signature uid, is not found here.
    params = {k: OTHER if k == "trajectory" else v for k, v in ON_PORT[name].items()}
    if "trajectory" in params:
        assert lib.run(name, **params) == []
    if name in ("why_chain", "effects_of"):
        their_error = _state_uid(Lib(lib.driver, lib.database, lib.other, ""), PORT, 1, "error")
        assert lib.run(name, trajectory=PORT, turn=None, state=their_error, depth=3) == []
    if name == "resolutions":
        assert lib.run(name, signature=_signature_uid(lib, lib.other)) == []


# Plan operators a query may use although they read more than an index would, and why.
ALLOWED_IN_PLAN = {
    # The answer is the longest paths: every CAUSES path of at most 12 hops is enumerated.
    "longest_causal_chains": {"VarLengthExpand(All) (paths)"},
    # The history of a subject is its whole SUPERSEDES chain, walked breadth-first (each
    # older state once); no index gives the chain (a removed line supersedes its added one).
    "current_state": {"VarLengthExpand(Pruning,BFS,All) unbounded"},
}


@pytest.mark.parametrize("name", library.names())
def test_plan_reads_by_index_and_walks_nodes_not_paths(name: str, lib: Lib) -> None:
    # Before, why_chain and effects_of enumerated every CAUSES path up to 10 hops and only
    # then dropped the longer ones (37,781 db hits for one turn of a Django run; 9,076 now).
    from bench.cypher_library import plan_warnings

    params = {**lib.example(name), **ON_PORT[name]}
    with lib.driver.session(database=lib.database) as s:
        result = s.run("PROFILE " + library.load(name).text, params)
        list(result)
        plan = result.consume().profile
    assert plan
    assert set(plan_warnings(plan)) <= ALLOWED_IN_PLAN.get(name, set())


HUGE = "x" * 200_000


@pytest.mark.parametrize("name", library.names())
def test_hostile_values_get_an_empty_answer(name: str, lib: Lib) -> None:
    # A value nothing in the graph has: no rows, never a Neo4j error (a 200 kB string in an
    # index seek, a turn far past the end).
    for key, param in library.load(name).params.items():
        if key != "tenant" and param.kind == "string":
            assert lib.run(name, **{**ON_PORT[name], key: HUGE}) == [], key
        elif key == "turn":
            assert lib.run(name, **{**ON_PORT[name], key: 2**62}) == []


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["why_chain", "--param", "trajectory=x", "--param", "turn=1"], ["state", "depth"]),
        (
            [
                "why_chain",
                *("--param", "trajectory=x", "--param", "turn=1"),
                *("--param", "state=null", "--param", "depth=abc"),
            ],
            ["depth", "integer"],
        ),
        (
            [
                "why_chain",
                *("--param", "trajectory=x", "--param", "turn=99999999999999999999"),
                *("--param", "state=null", "--param", "depth=3"),
            ],
            ["turn", "between"],
        ),
        (
            ["longest_causal_chains", "--param", "trajectory=x", "--param", "limit=-1"],
            ["limit", "between 1 and 1000"],
        ),
        (["recurring_failures", "--param", "min_runs=[1]"], ["min_runs", "integer"]),
        (
            [
                "repeated_actions",
                "--param",
                "trajectory=x",
                "--param",
                "min_runs=2",
                "--param",
                "trajectroy=y",
            ],
            ["no parameter 'trajectroy'"],
        ),
        (
            ["identifier_timeline", "--param", 'identifier={"a": 1}', "--param", "trajectory=null"],
            [],
        ),
    ],
)
def test_cli_refuses_bad_params_in_one_line(
    argv: list[str], names: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # The caller's to fix: exit 2 and one line naming the parameter; before, these were empty
    # answers (depth 'abc', min_runs [1], a misspelt name), Neo4j's message with offsets
    # (limit -1) or an OverflowError.
    code = cli.main(["cypher", *argv, "--tenant", "nobody-here"])
    err = capsys.readouterr().err
    if not names:  # a JSON-looking string is the string itself, a value like any other
        assert code == 0, err
        return
    assert code == 2
    assert err.startswith("trajgraph: error: ") and len(err.splitlines()) == 1
    for word in names:
        assert word in err
    assert "Neo." not in err and "offset" not in err


def test_a_query_over_its_time_limit_says_so(lib: Lib) -> None:
    # Neo4j stops the transaction at the limit; the caller gets what happened and what to
    # narrow, not Neo4j's termination message. (On a fast machine the query may finish
    # inside 1 ms: then there is nothing to check.)
    params = {"tenant": lib.tenant, "trajectory": None}
    try:
        rows = library.run(
            lib.driver, "files_touched", params, database=lib.database, timeout_s=0.001
        )
    except GraphError as e:
        assert str(e).startswith("query 'files_touched' took longer than its 0.001 s limit")
        assert "narrow it" in str(e)
    else:
        assert rows
