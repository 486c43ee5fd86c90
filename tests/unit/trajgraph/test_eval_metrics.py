"""The evaluation harness's scoring and baselines (no database)."""

from __future__ import annotations

from trajgraph.core.tokens import count_tokens
from trajgraph.evaluation.harness import (
    bm25,
    coverage,
    key_terms,
    long_context,
    needle_recall,
    table,
    whole_trajectory,
)
from trajgraph.evaluation.metrics import answer_turns, named_steps
from trajgraph.evaluation.synthetic import generate


def test_needle_recall_and_coverage() -> None:
    ctx = "[ep turn 3 · state]\nretries=5\n[turn 7]\naction: pytest"
    assert needle_recall(ctx, [3, 7]) == 1.0
    assert needle_recall(ctx, [3, 9]) == 0.5
    assert needle_recall(ctx, []) is None  # a count has no needle turns
    assert coverage(ctx, "retries=5") == 1.0
    assert coverage(ctx, "timeout=30") == 0.0


def test_answer_turns_are_the_steps_the_answer_names_and_the_question_does_not() -> None:
    assert answer_turns("Step 15 when examining the existing validation logic", "Which step?") == [
        15
    ]
    assert named_steps("steps 30, 37, and 41; Turn 12; Steps 4-8; Step 1 to Step 2") == {
        30,
        37,
        41,
        12,
        4,
        5,
        6,
        7,
        8,
        1,
        2,
    }
    assert named_steps("the step-7 output, Step #9, steps (20-21), steps 3 through 5") == {
        7,
        9,
        20,
        21,
        3,
        4,
        5,
    }
    assert named_steps("steps 2-500") == {2, 500}  # a long range names its ends
    assert named_steps("step " + "1" * 5000) == set()  # not a step, and no int() overflow
    # Every step of a range the question names is given away, not only its ends.
    assert answer_turns("Step 6 and step 7", "What happened in steps 4–8?") == []
    # A step the question gives away is no evidence of retrieval.
    assert answer_turns("Three steps later: step 9", "After the last scroll (Step 6)?") == [9]
    assert answer_turns("At step 27 it ran grep", "At step 27, what did it run?") == []
    assert answer_turns("It prints a string ending with quotes", "What happens?") == []
    assert named_steps("a 12-step plan, 3 steps") == set()  # numbers before "step" are counts
    # After a singular "step" a list goes on only where the word comes again.
    assert named_steps("at step 5, 3 files changed and 2 tests ran") == {5}
    assert named_steps("step 5 and 6 more, step 8 to 10") == {5, 8, 9, 10}
    assert named_steps("step 6 and step 7, turns 2 and 4") == {6, 7, 2, 4}
    ctx = "[turn 15] action: grep\n[turn 29] action: edit\nreturn 40"  # no citation of 40
    assert needle_recall(ctx, answer_turns("Step 15, then step 40", "Which steps?")) == 0.5


def test_baselines_stay_within_budget_and_bm25_finds_the_needle() -> None:
    ep = generate(4, 16_000)
    qa = next(q for q in ep["qa_pairs"] if q["type"] == "recall")
    for method in (long_context, bm25):
        ctx = method(ep, qa["question"], 1500)
        assert count_tokens(ctx) <= 1500
    turn = next(t["idx"] for t in ep["turns"] if t["action"].startswith("sha256sum"))
    assert needle_recall(bm25(ep, "sha256sum checksum dist/app.tar.gz", 1500), [turn]) == 1.0


def test_table_has_a_row_per_method_and_a_column_per_capability() -> None:
    rows = [
        {"method": "a", "type": "recall", "needle_recall": 1.0, "coverage": 1.0},
        {"method": "a", "type": "causal", "needle_recall": 0.0, "coverage": 0.5},
        {"method": "b", "type": "recall", "needle_recall": 0.5, "coverage": 0.5},
    ]
    text = table(rows).splitlines()
    # Capabilities in AMA-Bench's order (recall, causal, state updating, abstraction).
    assert text[0].split() == ["needle_recall", "recall", "causal", "overall"]
    assert text[1].split() == ["a", "1.00", "0.00", "0.50"]
    assert text[2].split() == ["b", "0.50", "-", "0.50"]


def test_key_terms_are_numbers_identifiers_and_content_words_not_in_the_question() -> None:
    answer = (
        "The minimal cause is Step 3: hover [2657] (Frozen); it costs $19.36 and "
        "analysis_step2_canonical_names.md was read."
    )
    terms = key_terms(answer, "Which earlier action is the minimal cause of this?")
    # "minimal" and "cause" are in the question; "the", "is", "it", "and", "was" are function
    # words; numbers and identifiers are kept whole.
    assert terms == [
        "step",
        "3",
        "hover",
        "2657",
        "frozen",
        "costs",
        "19.36",
        "analysis_step2_canonical_names.md",
        "read",
    ]
    assert key_terms("Yes, it is.", "") == []


def test_coverage_matches_whole_terms_case_insensitively() -> None:
    assert coverage("Price: $19.36 (4 Reviews)", "19.36 and 4 reviews") == 1.0
    assert coverage("Price: $119.36", "19.36") == 0.0  # not glued to other digits
    assert coverage("see src/flask/blueprints.py", "blueprints.py") == 1.0
    assert coverage("4 Reviews", "review") == 0.0  # a whole term, not a prefix
    # Terms the question already names are not evidence of anything.
    assert coverage("", "Step 8 holds the answer", "What does step 8 hold?") == 0.0
    assert (
        coverage("it holds the answer", "Step 8 holds the answer", "What does step 8 hold?") == 1.0
    )
    assert coverage("anything", "Step 8", "At step 8?") is None  # nothing left to find


def test_whole_trajectory_is_the_unbudgeted_ceiling() -> None:
    ep = generate(4, 16_000)
    whole = whole_trajectory(ep, "q", 100)
    assert count_tokens(whole) > 10_000  # the budget does not apply
    for qa in ep["qa_pairs"]:
        value = coverage(whole, qa["answer"], qa["question"])
        packed = coverage(bm25(ep, qa["question"], 2000), qa["answer"], qa["question"])
        assert value is None or (packed is not None and value >= packed)
