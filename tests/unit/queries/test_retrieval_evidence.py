"""Line-level evidence without a database: named steps, lexical scoring, passages within a
budget, and the offline aggregate tables."""

from __future__ import annotations

import pytest

from trajgraph.core.tokens import count_tokens
from trajgraph.queries.retrieval import aggregates
from trajgraph.queries.retrieval.anchors import find_anchors
from trajgraph.queries.retrieval.lexical import TurnIndex, query_terms, stem
from trajgraph.queries.retrieval.passages import Signals, select


@pytest.mark.parametrize(
    ("question", "points", "ranges", "upto", "after"),
    [
        ("What happened at step 8?", [8], [], None, None),
        ("Why did the test fail at turn 41?", [41], [], None, None),
        ("Compare steps 81-82.", [], [(81, 82)], None, None),
        (
            "Between the start of Step 10 and the end of Step 14, what changed?",
            [],
            [(10, 14)],
            None,
            None,
        ),
        ("From turn 0 to turn 39, how many searches?", [], [(0, 39)], None, None),
        ("Based on steps 30, 37, and 41, what can be inferred?", [30, 37, 41], [], None, None),
        ("Until step 123, what actions has the agent performed?", [], [], 123, None),
        ("What did it do after step 29?", [], [], None, 29),
        ("Steps 2 through 8 and step 12", [12], [(2, 8)], None, None),
        ("Summarize the run.", [], [], None, None),
        ("It was caused by 3 stepping stones.", [], [], None, None),
    ],
)
def test_named_steps_and_ranges(
    question: str,
    points: list[int],
    ranges: list[tuple[int, int]],
    upto: int | None,
    after: int | None,
) -> None:
    a = find_anchors(question)
    assert (a.points, a.ranges, a.upto, a.after) == (points, ranges, upto, after)
    # Step numbers are references, not search terms.
    for n in points:
        assert str(n) not in query_terms(a.without_refs(question))


def test_scope_of_a_question() -> None:
    assert find_anchors("Until step 12, how many?").scope() == (0, 12)
    assert find_anchors("between step 3 and step 9").scope() == (3, 9)
    assert find_anchors("at step 4").scope() is None


def test_stemming_lets_a_question_match_the_log() -> None:
    assert stem("reviews") == stem("review") == stem("reviewed")
    assert stem("changed") == stem("changes") == stem("change") == stem("changing")
    assert stem("stopped") == stem("stop")
    assert stem("tavily_search") == "tavily_search"  # identifiers stay as they are
    assert "agent" not in query_terms("What did the agent do at step 3?")


def _turns(n: int) -> list[dict[str, object]]:
    menu = "The available actions are: " + ", ".join(f"go to shelf {i}" for i in range(30))
    out: list[dict[str, object]] = []
    for i in range(n):
        obs = f"You arrive at shelf {i}. On the shelf {i}, you see a mug {i}.\n{menu}"
        out.append({"idx": i, "action": f"go to shelf {i}", "observation": obs})
    out[7]["observation"] = (
        "[1483] link 'Gingerbread House Kit'\n[1286] LayoutTable ''\n[2432] StaticText 'Rating:'\n"
        "[2295] generic '20%'\n[2296] link '1 Review'\n[2298] StaticText '$19.99'\n"
        + "\n".join(f"[{3000 + k}] StaticText 'filler {k}'" for k in range(300))
    )
    return out


def test_a_named_step_is_shown_first_with_its_relevant_lines_and_the_budget_holds() -> None:
    index = TurnIndex.build(_turns(40))
    q = "At step 7, how many reviews does the gingerbread kit have?"
    passages = select(index, q, Signals(find_anchors(q)), 300)
    text = "\n".join(p.text for p in passages)
    assert count_tokens(text) <= 300
    seven = next(p for p in passages if p.turn == 7)
    assert seven.why == "named in the question"
    # The matching line, and the item name three lines above it, are there; most filler is not.
    assert "[2296] link '1 Review'" in seven.text and "Gingerbread House Kit" in seven.text
    assert seven.text.count("filler") < 100 and "…" in seven.text


def test_a_line_every_turn_repeats_costs_its_tokens_once() -> None:
    index = TurnIndex.build(_turns(40))
    q = "Which shelf did the agent go to, and which mug was on it?"
    passages = select(index, q, Signals(find_anchors(q)), 1500)
    text = "\n".join(p.text for p in passages)
    # The menu every observation repeats is shown (in part) for one turn only.
    body = [x for x in text.splitlines() if not x.startswith("[turn") and x != "…"]
    assert len(body) == len(set(body)) and "go to shelf 29" in text
    assert len(passages) >= 5  # the budget buys many turns, not one list many times
    assert count_tokens(text) <= 1500


def test_nothing_relevant_means_no_padding() -> None:
    index = TurnIndex.build(_turns(10))
    assert select(index, "zebra quantum entanglement?", Signals(), 2000) == []


def test_a_turn_deleted_under_the_read_is_left_out() -> None:
    """A rewrite that commits while retrieval reads the turns (Neo4j reads are not snapshots)
    can hand back a deleted turn without properties: it is skipped, not a 500."""
    turns = _turns(8)
    turns.append({"idx": None, "action": None, "observation": None})
    index = TurnIndex.build(turns)
    assert index.turns == list(range(8))


def test_action_counts_occurrences_and_changes() -> None:
    turns = [
        {"idx": 0, "action": "look", "observation": "Score: 6\nMoves Left: 49"},
        {"idx": 1, "action": 'tavily_search({"query": "a"})', "observation": "Page 2"},
        {"idx": 2, "action": "look", "observation": "Score: 6\nMoves Left: 47\nPage Next"},
        {"idx": 3, "action": 'tavily_search({"query": "b"})', "observation": "done"},
    ]
    index = TurnIndex.build(turns)
    counts = aggregates.action_counts(index, 0, 3)
    assert counts.title == "actions in turns 0-3 (4 turns)"
    assert "look ×2 (turns 0, 2)" in counts.rows
    assert any(r.startswith("by command:") and "tavily_search ×2" in r for r in counts.rows)
    occ = aggregates.occurrences(index, ["tavily_search", "Page 2", "nowhere"], 0, 2)
    assert occ.rows[0] == "'tavily_search': in 1 actions (turns 1); first turn 1, last 1"
    assert occ.rows[1].startswith("'Page 2': in 1 observations (turns 1)")
    assert occ.rows[2] == "'nowhere': not in turns 0-2"
    diff = aggregates.changes(index, 0, 2, "What changed in moves left?")
    assert diff.rows[0] == "Moves Left: 49 → 47"
    assert "only in turn 2: Page Next" not in diff.rows  # shares no word with the question
    # The question asks: a count, in the scope it names.
    q = "Counting from turn 0 to turn 2, how many 'tavily_search' actions were recorded?"
    tables = aggregates.tables_for(index, q, find_anchors(q), aggregates.quoted_phrases(q))
    assert [t.title for t in tables] == [
        "occurrences in turns 0-2",
        "actions in turns 0-2 (3 turns)",
    ]


def test_changes_from_supersedes_chains() -> None:
    rows = [
        {
            "subject": "Moves Left",
            "attribute": "value",
            "kind": "value",
            "value": "38",
            "turn": 11,
            "old_value": "39",
            "old_turn": 10,
        },
        {
            "subject": "Moves Left",
            "attribute": "value",
            "kind": "value",
            "value": "37",
            "turn": 12,
            "old_value": "38",
            "old_turn": 11,
        },
        {
            "subject": "[2381]",
            "attribute": "line",
            "kind": "line_removed",
            "value": "[2381] generic '75%'",
            "turn": 12,
            "old_value": None,
            "old_turn": None,
        },
    ]
    table = aggregates.state_changes(rows, 10, 12, "How did the moves left change?")
    assert table.rows[0] == "Moves Left: 39 (10) → 38 (11) → 37 (12)"
    assert table.rows[1] == "turn 12 - [2381] generic '75%'"
    assert table.turns == [10, 11, 12]
