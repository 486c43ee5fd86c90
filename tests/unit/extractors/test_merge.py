"""Per-trajectory merge: keys, objects, SUPERSEDES, cross-window CAUSES, determinism."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from trajgraph.extractors.heuristic import HeuristicExtractor
from trajgraph.extractors.merge import HORIZON, merge
from trajgraph.extractors.windows import build_windows
from trajgraph.schemas.extraction import (
    AssociationItem,
    CauseItem,
    ObjectItem,
    StateItem,
    StateKind,
    TrajectoryExtraction,
    WindowExtraction,
)


def turns(*actions: str) -> list[dict]:
    return [{"idx": i, "action": a, "observation": ""} for i, a in enumerate(actions)]


def state(
    key: str,
    turn: int,
    subject: str = "python run.py",
    attribute: str = "exit_code",
    value: str = "0",
    kind: StateKind = "exit_code",
) -> StateItem:
    return StateItem(
        key=key, subject=subject, attribute=attribute, value=value, kind=kind, turn=turn, text="x"
    )


def win(turn: int, states: list[StateItem], objects: Sequence[str] = ()) -> WindowExtraction:
    """A window whose action produced its states, each associated with every object."""
    objs = [ObjectItem(name=n, kind="path", turns=[turn]) for n in objects]
    return WindowExtraction(
        turn=turn,
        states=states,
        objects=objs,
        causes=[CauseItem(src=f"turn:{turn}", dst=f"state:{s.key}", turns=[turn]) for s in states],
        associations=[
            AssociationItem(a=f"state:{s.key}", b=f"object:{o.name}", turns=[turn])
            for s in states
            for o in objs
        ],
    )


def edges(result: TrajectoryExtraction) -> set[tuple[str, str]]:
    return {(c.src, c.dst) for c in result.causes}


# --- SUPERSEDES --------------------------------------------------------------------------------


def test_supersedes_chain_links_each_state_to_the_previous_one() -> None:
    ws = [
        win(0, [state("t0.s0", 0, value="1")]),
        win(1, [state("t1.s0", 1, subject="ls", value="0")]),
        win(2, [state("t2.s0", 2, value="1")]),
        win(4, [state("t4.s0", 4, value="0")]),
    ]
    result = merge(turns("a", "b", "c", "d", "e"), ws)
    assert [(s.newer, s.older, s.turns) for s in result.supersedes] == [
        ("state:t2.s0", "state:t0.s0", [2, 0]),
        ("state:t4.s0", "state:t2.s0", [4, 2]),
    ]


def test_states_of_one_turn_do_not_supersede_each_other() -> None:
    ws = [
        win(0, [state("a", 0, attribute="value", kind="value", value="1")]),
        win(
            1,
            [
                state("b", 1, attribute="value", kind="value", value="2"),
                state("c", 1, attribute="value", kind="value", value="3"),
            ],
        ),
    ]
    result = merge(turns("x", "y"), ws)
    assert {(s.newer, s.older) for s in result.supersedes} == {
        ("state:b", "state:a"),
        ("state:c", "state:a"),
    }


def test_a_later_state_supersedes_every_state_of_the_latest_turn() -> None:
    # A run that showed two errors of one command, then a re-run showing one: both earlier
    # errors are replaced, so neither stays "current" (nothing supersedes it) at the end.
    def err(key: str, turn: int, value: str) -> StateItem:
        return state(key, turn, subject="python r.py", attribute="error", kind="error", value=value)

    ws = [
        win(0, [err("a1", 0, "Error Case 1: boom"), err("a2", 0, "Error Case 2: bang")]),
        win(2, [err("c2", 2, "Error Case 2: bang")]),
        win(3, [err("d2", 3, "Error Case 2: bang")]),
    ]
    result = merge(turns("python r.py", "edit", "python r.py", "python r.py"), ws)
    assert {(s.newer, s.older) for s in result.supersedes} == {
        ("state:c2", "state:a1"),
        ("state:c2", "state:a2"),
        ("state:d2", "state:c2"),
    }
    superseded = {s.older for s in result.supersedes}
    assert [k for k in ("a1", "a2", "c2", "d2") if f"state:{k}" not in superseded] == ["d2"]


def test_list_lines_only_supersede_when_removed() -> None:
    def added(key: str, turn: int, value: str) -> StateItem:
        return state(key, turn, subject="ls", attribute="line", value=value, kind="line_added")

    ws = [
        win(0, [added("a0", 0, "x.py"), added("a1", 0, "y.py")]),
        win(1, [added("a2", 1, "z.py")]),
        win(2, [state("r0", 2, value="x.py", subject="ls", attribute="line", kind="line_removed")]),
    ]
    result = merge(turns("ls", "ls", "ls"), ws)
    assert [(s.newer, s.older) for s in result.supersedes] == [("state:r0", "state:a0")]


# --- cross-window CAUSES ---------------------------------------------------------------------


def test_state_causes_first_later_action_using_its_object() -> None:
    ws = [win(0, [state("s", 0, subject="cat > run.py")], objects=["run.py"])]
    actions = turns("cat > run.py", "ls", "python run.py", "python run.py --again")
    result = merge(actions, ws)
    assert edges(result) == {("turn:0", "state:s"), ("state:s", "turn:2")}
    cause = next(c for c in result.causes if c.dst == "turn:2")
    assert cause.turns == [0, 2] and "run.py" in cause.reason


def test_object_must_occur_as_a_word_and_within_the_horizon() -> None:
    ws = [win(0, [state("s", 0)], objects=["run.py"])]
    far = ["noop"] * (HORIZON + 1) + ["python run.py"]
    assert edges(merge(turns("x", "cat prerun.pyc", *far), ws)) == {("turn:0", "state:s")}


def test_error_and_failed_exit_cause_the_next_action() -> None:
    ws = [
        win(
            3,
            [
                state(
                    "e",
                    3,
                    subject="ValueError",
                    attribute="error",
                    kind="error",
                    value="ValueError: x",
                )
            ],
        ),
        win(5, [state("x", 5, value="2"), state("ok", 5, subject="ls", value="0")]),
    ]
    t = [{"idx": i, "action": f"step {i}", "observation": ""} for i in (3, 5, 9)]
    result = merge(t, ws)
    assert ("state:e", "turn:5") in edges(result)  # next turn by position, not idx + 1
    assert ("state:x", "turn:9") in edges(result)
    assert not any(c.src == "state:ok" and c.dst.startswith("turn:") for c in result.causes)


def test_bare_command_words_do_not_carry_causes() -> None:
    w = WindowExtraction(
        turn=0,
        states=[state("s", 0, subject="ls -la")],
        objects=[ObjectItem(name="ls", kind="command", turns=[0])],
        associations=[AssociationItem(a="state:s", b="object:ls", turns=[0])],
    )
    assert edges(merge(turns("ls -la", "ls"), [w])) == set()


# --- keys, objects, endpoints --------------------------------------------------------------------


def test_colliding_keys_are_rekeyed_and_edges_follow() -> None:
    ws = [
        win(0, [state("s1", 0)], objects=["a.py"]),
        win(1, [state("s1", 1, subject="other")], objects=["b.py"]),
    ]
    result = merge(turns("x", "y"), ws)
    assert [s.key for s in result.states] == ["s1", "t1.s1"]
    assert ("turn:1", "state:t1.s1") in edges(result)
    assert {(a.a, a.b) for a in result.associations} == {
        ("state:s1", "object:a.py"),
        ("state:t1.s1", "object:b.py"),
    }


def test_objects_merge_by_name_with_union_of_turns() -> None:
    ws = [
        WindowExtraction(turn=2, objects=[ObjectItem(name="a.py", kind="quoted", turns=[2])]),
        WindowExtraction(turn=0, objects=[ObjectItem(name="a.py", kind="path", turns=[0])]),
        WindowExtraction(turn=1, objects=[ObjectItem(name="b", kind="other", turns=[1, 0])]),
    ]
    result = merge(turns("x", "y", "z"), ws)
    assert [(o.name, o.kind, o.turns) for o in result.objects] == [
        ("a.py", "path", [0, 2]),  # kind of the first occurrence (by turn)
        ("b", "other", [0, 1]),
    ]


def test_dangling_and_duplicate_edges() -> None:
    w = WindowExtraction(
        turn=1,
        states=[state("s", 1)],
        objects=[ObjectItem(name="o", kind="other", turns=[1])],
        causes=[
            CauseItem(src="turn:1", dst="state:s", turns=[1]),
            CauseItem(src="turn:1", dst="state:s", turns=[0]),  # duplicate: turns are unioned
            CauseItem(src="turn:7", dst="state:s", turns=[7]),  # no such turn
            CauseItem(src="state:nope", dst="turn:1", turns=[1]),  # no such state
            CauseItem(src="state:s", dst="state:s", turns=[1]),  # self loop
            CauseItem(src="bogus", dst="turn:1", turns=[1]),
        ],
        associations=[
            AssociationItem(a="state:s", b="object:o", turns=[1]),
            AssociationItem(a="object:o", b="state:s", turns=[2]),  # same pair reversed
            AssociationItem(a="state:s", b="object:missing", turns=[1]),
        ],
    )
    result = merge(turns("a", "b"), [w])
    assert [(c.src, c.dst, c.turns) for c in result.causes] == [("turn:1", "state:s", [0, 1])]
    assert [(a.a, a.b, a.turns) for a in result.associations] == [("state:s", "object:o", [1, 2])]


def test_empty_inputs() -> None:
    assert merge([], []) == TrajectoryExtraction()
    assert merge(turns("a"), []) == TrajectoryExtraction()


# --- end to end with the heuristic extractor ---------------------------------------------------

OK = "<returncode>0</returncode>\n<output>\n</output>"
TRAJ: dict[str, Any] = {
    "id": "demo",
    "turns": [
        {
            "idx": 0,
            "action": "cat <<'EOF' > reproduce.py\nimport app\nEOF",
            "observation": OK,
        },
        {
            "idx": 1,
            "action": "python3 reproduce.py",
            "observation": "<returncode>1</returncode>\n<output>\n"
            "Traceback (most recent call last):\n"
            '  File "/repo/reproduce.py", line 1, in <module>\n'
            "ValueError: max() arg is an empty sequence\n</output>",
        },
        {
            "idx": 2,
            "action": "sed -i 's/except TypeError:/except (TypeError, ValueError):/' app/s.py",
            "observation": OK,
        },
        {
            "idx": 3,
            "action": "python3 reproduce.py",
            "observation": OK.replace("</output>", "Success! Lastmod: None\n</output>"),
        },
        {
            "idx": 4,
            "action": "rm reproduce.py",
            "observation": OK,
        },
    ],
}


def _extract(traj: dict) -> list[WindowExtraction]:
    ex = HeuristicExtractor()
    return [ex.extract(w) for w in build_windows(traj, budget_tokens=1024)]


def test_end_to_end_story() -> None:
    result = merge(TRAJ["turns"], _extract(TRAJ))
    by_key = {s.key: s for s in result.states}

    def find(turn: int, kind: str, attribute: str | None = None) -> str:
        return next(
            f"state:{s.key}"
            for s in result.states
            if s.turn == turn and s.kind == kind and attribute in (None, s.attribute)
        )

    created, error, fixed = find(0, "file_changed"), find(1, "error"), find(2, "file_changed")
    assert by_key[fixed[6:]].value == "except (TypeError, ValueError):"
    causes = edges(result)
    assert (created, "turn:1") in causes  # reproduce.py is created, then run
    assert (error, "turn:2") in causes  # the agent reacts to the error
    assert (find(1, "exit_code"), "turn:2") in causes  # non-zero exit code, too
    sup = {(s.newer, s.older) for s in result.supersedes}
    assert (find(3, "exit_code"), find(1, "exit_code")) in sup  # exit 0 replaces exit 1
    assert (find(3, "status", "output"), find(1, "status", "output")) in sup
    assert (find(4, "file_changed"), created) in sup  # rm replaces the created file
    objects = {o.name: o.turns for o in result.objects}
    assert objects["reproduce.py"] == [0, 1, 3, 4]
    assert objects["python3 reproduce.py"] == [1, 3]


def test_merge_is_deterministic_under_shuffling() -> None:
    windows = _extract(TRAJ)
    expected = merge(TRAJ["turns"], windows)
    assert merge(TRAJ["turns"], windows) == expected
    rng = random.Random(1)
    for _ in range(10):
        shuffled = windows[:]
        rng.shuffle(shuffled)
        assert merge(TRAJ["turns"], shuffled).model_dump_json() == expected.model_dump_json()


def test_duplicate_turn_windows_are_ordered_by_content() -> None:
    a = win(0, [state("s", 0, value="1")])
    b = win(0, [state("s", 0, value="2")])
    first = merge(turns("x"), [a, b])
    assert merge(turns("x"), [b, a]) == first
    assert sorted(s.key for s in first.states) == ["s", "t0.s"]


def test_an_edit_between_two_runs_causes_the_changed_result() -> None:
    from trajgraph.demo import sample_trajectory
    from trajgraph.extractors import get_extractor
    from trajgraph.extractors.windows import build_windows

    traj = {**sample_trajectory(), "tenant": "default"}
    ex = get_extractor("heuristic")
    merged = merge(traj["turns"], [ex.extract(w) for w in build_windows(traj, budget_tokens=2048)])
    by_key = {s.key: s for s in merged.states}
    changed = [
        (by_key[c.src.removeprefix("state:")], by_key[c.dst.removeprefix("state:")])
        for c in merged.causes
        if c.src.startswith("state:") and c.dst.startswith("state:")
    ]
    assert [(e.kind, e.subject, e.turn, r.kind, r.value, r.turn) for e, r in changed] == [
        ("file_changed", "src/calc.py", 3, "exit_code", "0", 5)
    ]


def _state_causes(traj: dict) -> list[tuple[int, str, int, str]]:
    merged = merge(traj["turns"], _extract(traj))
    by_key = {s.key: s for s in merged.states}
    out: list[tuple[int, str, int, str]] = []
    for c in merged.causes:
        if c.src.startswith("state:") and c.dst.startswith("state:"):
            src, dst = by_key[c.src[6:]], by_key[c.dst[6:]]
            out.append((src.turn, src.kind, dst.turn, dst.kind))
    return out


FAIL = "FAILED tests/test_pool.py::test_pool - AssertionError: expected pool=8, got pool={v}"


def _pool_turns(*steps: tuple[str, str]) -> dict:
    return {
        "id": "pool",
        "task": "fix the pool",
        "turns": [{"idx": i, "action": a, "observation": o} for i, (a, o) in enumerate(steps)],
    }


def test_an_error_that_quotes_an_edit_is_caused_by_it_even_on_a_first_run() -> None:
    traj = _pool_turns(
        ("cat config.ini", "pool=8\nport=80"),
        ("sed -i 's/^pool=.*/pool=12/' config.ini", ""),
        ("sed -i 's/^port=.*/port=81/' config.ini", ""),
        ("ls", "a\nb"),
        ("pytest tests/test_pool.py", FAIL.format(v=12) + "\n1 failed in 0.1s"),
    )
    causes = _state_causes(traj)
    assert (1, "file_changed", 4, "error") in causes  # wrote pool=12, which the error quotes
    assert not any(src == 2 and dst == 4 for src, _, dst, _ in causes)  # port=81 is unrelated


def test_a_changed_result_compares_with_the_last_run_of_the_same_command() -> None:
    traj = _pool_turns(
        ("cat config.ini", "pool=8"),
        ("pytest tests/test_pool.py", "1 passed in 0.1s"),
        ("sed -i 's/^pool=.*/pool=3/' config.ini", ""),
        ("pytest tests/test_other.py", "E       AssertionError: boom\n1 failed"),
        ("sed -i 's/^mode=.*/mode=fast/' config.ini", ""),
        ("pytest tests/test_pool.py", "E       AssertionError: small\n1 failed"),
    )
    causes = _state_causes(traj)
    # The AssertionError of turn 5 supersedes turn 3's (another test), but the baseline is the
    # passing run of the same command at turn 1: both edits since then are candidates.
    assert {(2, "file_changed", 5, "error"), (4, "file_changed", 5, "error")} <= set(causes)
