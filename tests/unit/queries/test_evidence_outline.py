"""The outline of a long run's edits and runs (queries/retrieval/evidence_outline.py): when a
question gets one, what its rows say, and what it leaves out."""

from __future__ import annotations

import json

from trajgraph.core.tokens import count_tokens
from trajgraph.queries.retrieval.anchors import find_anchors
from trajgraph.queries.retrieval.evidence_outline import (
    MAX_ROWS,
    MAX_TOKENS,
    compact_action,
    outline,
    outlines,
    wants_outline,
)
from trajgraph.queries.retrieval.lexical import TurnIndex


def _call(tool: str, **args: str) -> str:
    return f"{tool}: {json.dumps(args)}"


def _run() -> TurnIndex:
    """A repair run: views and searches, a script created and run, the fix, the passing run."""
    turns = []
    for i in range(10):
        turns.append((_call("str_replace_editor", command="view", path=f"/w/repo/pkg/m{i}.py"), ""))
    turns += [
        (_call("str_replace_editor", command="create", path="/w/repro.py", file_text="x"), ""),
        (
            _call("execute_bash", command="cd /w/repo && python /w/repro.py"),
            "Traceback (most recent call last):\n  File x\nValueError: bad quote\n"
            "[Command finished with exit code 1]",
        ),
        (_call("execute_bash", command="grep -n quote pkg/card.py"), "12: quote"),
        (
            _call("str_replace_editor", command="str_replace", path="/w/repo/pkg/io/card.py"),
            "The file /w/repo/pkg/io/card.py has been edited. Review the changes",
        ),
        (
            _call("execute_bash", command="cd /w/repo && python /w/repro.py"),
            "all 12 cases passed\n[Command finished with exit code 0]",
        ),
        ("think: " + json.dumps({"thought": "done"}), "Your thought has been logged."),
    ]
    return TurnIndex.build(
        {"idx": i, "action": a, "observation": o} for i, (a, o) in enumerate(turns)
    )


def test_questions_that_span_the_run_or_ask_for_a_step_get_an_outline() -> None:
    for q in (
        "Which step caused the successful resolution of the issue?",
        "What was the progression from reproduction to the fix?",
        "What was the root cause and how was it resolved?",
        "What was the last step where the approach changed from exploration to a fix?",
        # a named step, and the question asks which earlier step changed something
        "At step 41, what is the last step when the validation logic was changed?",
    ):
        assert wants_outline(q, find_anchors(q)), q
    for q in (
        "At step 12, what exact action did the agent execute?",  # a named step has its view
        "What is the value of retries in config.ini?",
    ):
        assert not wants_outline(q, find_anchors(q)), q


def test_the_outline_lists_edits_and_runs_with_outcomes_not_views() -> None:
    table = outline(_run(), 0, 15)
    assert table is not None
    assert table.turns == [10, 11, 13, 14]  # the views, the grep and the thought are left out
    rows = dict(r.split(": ", 1) for r in table.rows)
    assert rows["10"] == "str_replace_editor create w/repro.py"  # a path's last two parts
    assert rows["11"] == "execute_bash python /w/repro.py → ValueError: bad quote"
    assert rows["13"] == "str_replace_editor str_replace io/card.py"  # no outcome for edits
    assert rows["14"] == "execute_bash python /w/repro.py → all 12 cases passed"


def test_no_outline_for_short_runs_or_runs_without_edits_and_runs() -> None:
    idx = _run()
    assert outline(idx, 10, 15) is None  # 6 turns: the passages show them whole
    moves = TurnIndex.build({"idx": i, "action": "go north", "observation": ""} for i in range(40))
    assert outline(moves, 0, 39) is None
    q = "Which step caused the successful resolution?"
    assert [t.title for t in outlines(idx, q, find_anchors(q))] == ["edits and runs of turns 0-15"]
    assert (
        outlines(idx, "At step 3, what was shown?", find_anchors("At step 3, what was shown?"))
        == []
    )


def test_a_long_run_keeps_every_edit_and_the_run_after_it_first() -> None:
    turns = []
    for i in range(30):
        turns.append({"idx": 3 * i, "action": f"python check_{i}.py", "observation": "ok"})
        turns.append({"idx": 3 * i + 1, "action": f"sed -i 's/a/b/' f{i}.py", "observation": ""})
        turns.append({"idx": 3 * i + 2, "action": f"python check_{i}.py", "observation": "ok"})
    table = outline(TurnIndex.build(turns), 0, 89)
    assert table is not None and len(table.rows) == MAX_ROWS
    edits = [3 * i + 1 for i in range(30)]
    assert set(table.turns) <= set(edits) | {3 * i + 2 for i in range(30)} | {0}
    assert set(table.turns) & set(edits) == set(edits[:MAX_ROWS])


def test_compact_action() -> None:
    assert compact_action('execute_bash: {"command": "cd /w && python -m pytest -q t.py"}') == (
        "execute_bash python -m pytest -q t.py"
    )
    # a short first line is read with the next one (what the code does, not just imports)
    assert compact_action('execute_code({"code": "import requests\\nrequests.get(u)"})') == (
        "execute_code import requests requests.get(u)"
    )
    assert compact_action('execute_bash: {"command": "python -c \\"\\nprint(1)\\n\\""}') == (
        'execute_bash python -c " print(1)'
    )
    assert compact_action("cd /repo && pytest tests/test_x.py") == "pytest tests/test_x.py"
    assert len(compact_action("x" * 500)) <= 72


def test_the_outline_fits_its_token_bound_dropping_its_least_wanted_rows() -> None:
    turns = [
        {
            "idx": i,
            "action": "sed -i " + " ".join(f"k{i}q{j}z" for j in range(12)),
            "observation": "",
        }
        for i in range(20)
    ] + [
        {"idx": 20 + i, "action": f"python run_{i}.py", "observation": f"r{i} failed"}
        for i in range(20)
    ]
    table = outline(TurnIndex.build(turns), 0, 39)
    assert table is not None and count_tokens(table.render()) <= MAX_TOKENS
    assert 3 <= len(table.rows) < MAX_ROWS
    assert table.turns == list(range(len(table.rows)))  # the edits, first ones first
