"""Two saved evaluations compared question by question (trajgraph/evaluation/compare.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trajgraph.core.errors import InputError
from trajgraph.evaluation import compare
from trajgraph.evaluation.harness import main as eval_main


def _rows(method: str, shift: dict[str, float], episodes: int = 10) -> list[dict[str, Any]]:
    """Two questions per capability per episode; ``shift`` moves one capability's values."""
    rows = []
    for e in range(episodes):
        for cap in ("recall", "causal"):
            for q in range(2):
                base = 0.2 + 0.05 * ((e * 3 + q) % 7)
                rows.append(
                    {
                        "episode": f"ep-{e}",
                        "domain": "Gaming" if e % 2 else "Web",
                        "question": f"{cap} question {q}",
                        "type": cap,
                        "method": method,
                        "coverage": base + shift.get(cap, 0.0) * (1 + (e % 3 == 0)),
                        "answer_turn_recall": None,
                    }
                )
    return rows


def _save(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps(rows))
    return path


def test_gaps_pair_questions_and_the_interval_brackets_the_difference() -> None:
    gaps, unpaired = compare.paired(
        _rows("x", {"recall": -0.1}), _rows("x", {}), a_method="x", b_method="x"
    )
    by = {g.group: g for g in gaps}
    assert [g.group for g in gaps] == ["recall", "causal", "overall"]
    assert unpaired == 0
    recall = by["recall"]
    assert recall.questions == 20 and recall.episodes == 10 and recall.differing == 20
    assert recall.diff == pytest.approx(-0.14)  # -0.1, doubled in episodes 0, 3, 6, 9
    assert recall.low < recall.diff < recall.high < -0.1  # uneven shifts: a real interval
    assert recall.verdict(0.01) == "A worse by > 0.01"
    assert by["causal"].verdict(0.01) == "same"
    assert by["causal"].low == by["causal"].high == 0.0
    assert by["overall"].questions == 40


def test_a_gap_inside_the_tolerance_only_counts_when_the_whole_interval_is() -> None:
    gaps, _ = compare.paired(
        _rows("x", {"recall": 0.004}), _rows("x", {}), a_method="x", b_method="x"
    )
    recall = gaps[0]
    assert recall.verdict(0.01) == "within ±0.01"
    assert recall.verdict(0.001) == "A better by > 0.001"
    wide = compare.Gap("recall", 10, 10, 0.5, 0.5, -0.03, 0.02, 3)
    assert wide.verdict(0.01) == "undecided at ±0.01"
    # Zero is outside, the tolerance inside: the direction is known, the size is not.
    worse = compare.Gap("recall", 10, 10, 0.4, 0.5, -0.09, -0.004, 3)
    assert worse.verdict(0.01) == "A worse, by more than 0.01 or not: undecided"
    better = compare.Gap("recall", 10, 10, 0.5, 0.4, 0.005, 0.03, 3)
    assert better.verdict(0.01) == "A better, by more than 0.01 or not: undecided"
    assert compare.Gap("x", 4, 4, 0.5, 0.4, 0.05, 0.2, 2).label(0.01).endswith("rough)")
    lone = compare.Gap("x", 10, 1, 0.6, 0.4, 0.2, 0.2, 10)
    assert lone.label(0.01) == "one episode: no interval" and lone.interval() == "-"
    assert wide.verdict(0.9999999) == "within ±0.9999999"


def test_the_interval_is_reproducible_and_resamples_episodes_not_questions() -> None:
    a, b = _rows("x", {"recall": -0.1}), _rows("x", {})
    first, _ = compare.paired(a, b, a_method="x", b_method="x")
    again, _ = compare.paired(a, b, a_method="x", b_method="x")
    assert first == again
    by_domain, _ = compare.paired(a, b, a_method="x", b_method="x", key="domain")
    assert by_domain[-1] == first[-1]  # "overall" whatever the groups before it
    # Duplicating every question inside its episode changes nothing: the episodes are the
    # units resampled. A question-level bootstrap would narrow the interval.
    doubled_a = a + [{**r, "question": r["question"] + " again"} for r in a]
    doubled_b = b + [{**r, "question": r["question"] + " again"} for r in b]
    doubled, _ = compare.paired(doubled_a, doubled_b, a_method="x", b_method="x")
    assert (doubled[0].low, doubled[0].high) == pytest.approx((first[0].low, first[0].high))


def test_a_group_named_overall_stays_apart_and_float_noise_is_no_difference() -> None:
    a = [
        {"episode": f"e{e}", "question": q, "method": "m", "type": t, "coverage": v}
        for e in range(10)
        for q, t, v in (("q0", "recall", 0.5), ("q1", "overall", 0.5))
    ]
    b = [{**r, "coverage": 0.4 if r["type"] == "overall" else 0.1 + 0.2} for r in a]
    for r in a:
        if r["type"] == "recall":
            r["coverage"] = 0.3
    gaps, _ = compare.paired(a, b, a_method="m", b_method="m")
    assert [g.group for g in gaps] == ["recall", "overall (a group)", "overall"]
    assert gaps[0].differing == 0 and gaps[0].verdict(0.01) == "same"  # 0.3 and 0.1 + 0.2
    assert (gaps[1].questions, gaps[1].diff) == (10, pytest.approx(0.1))
    assert (gaps[2].questions, gaps[2].diff, gaps[2].differing) == (20, pytest.approx(0.05), 10)


def test_a_question_asked_twice_in_an_episode_pairs_in_order() -> None:
    a: list[dict[str, Any]] = [
        {"episode": "e", "question": "q", "method": "m", "type": "recall", "coverage": v}
        for v in (0.0, 1.0)
    ]
    b = [{**r, "coverage": 1.0 - float(r["coverage"])} for r in a]
    gaps, unpaired = compare.paired(a, b, a_method="m", b_method="m")
    assert unpaired == 0
    assert gaps[0].questions == 2 and gaps[0].differing == 2


def test_two_methods_of_one_file_by_domain_and_unpaired_questions(tmp_path: Path) -> None:
    rows = _rows("trajgraph_auto", {"causal": 0.2}) + _rows("bm25", {})[:-4]
    path = _save(tmp_path / "one.json", rows)
    text = compare.main(
        [path, path], ["trajgraph_auto", "bm25"], metric="coverage", key="domain", tolerance=0.01
    )
    assert "A = one.json trajgraph_auto, B = one.json bm25" in text
    assert "| Gaming | " in text and "| Web | " in text
    assert "4 question(s) scored on one side only are left out" in text
    overall = next(line for line in text.splitlines() if line.startswith("| overall"))
    assert (
        "| 36 | 9 |" in overall
    )  # episode 9 is all on one side and "A better by > 0.01" in overall


def test_the_cli_prints_the_table_and_bad_files_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _save(tmp_path / "a.json", _rows("trajgraph_auto", {"recall": -0.1}))
    b = _save(tmp_path / "b.json", _rows("trajgraph_auto", {}))
    assert eval_main(["--compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "| recall | 20 | 10 |" in out and "A worse by > 0.01" in out

    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(InputError, match=r"broken\.json: not a saved evaluation"):
        eval_main(["--compare", str(broken), str(b)])
    with pytest.raises(
        InputError, match=r"b.json: no rows of method 'bm25' \(it has trajgraph_auto\)"
    ):
        eval_main(["--compare", str(a), str(b), "--compare-methods", "trajgraph_auto", "bm25"])
    rows = _rows("trajgraph_auto", {})
    rows[3]["coverage"] = "0.5"
    odd = _save(tmp_path / "odd.json", rows)
    with pytest.raises(InputError, match=r"odd\.json: row 4 has coverage '0.5', not a share"):
        eval_main(["--compare", str(a), str(odd)])
    for bad in ("NaN", "Infinity", "1" + "0" * 400, "true", "1e308", "-0.5", "1.5"):
        (tmp_path / "odd.json").write_text(json.dumps(rows).replace('"0.5"', bad))
        with pytest.raises(
            InputError, match=r"odd\.json: row 4 has coverage .*not a share from 0 to 1"
        ):
            eval_main(["--compare", str(a), str(odd)])
    _save(tmp_path / "rows.json", [{"episode": "e", "question": "q"}])
    with pytest.raises(InputError, match=r"rows\.json: row 1: method must be text"):
        eval_main(["--compare", str(tmp_path / "rows.json"), str(b)])
    with pytest.raises(InputError, match="no question has answer_turn_recall on both sides"):
        eval_main(["--compare", str(a), str(b), "--metric", "answer_turn_recall"])
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match=r"deep\.json: not a saved evaluation .*nested too deep"):
        eval_main(["--compare", str(deep), str(b)])
    with pytest.raises(SystemExit):
        eval_main(["--compare", str(a), str(b), "some-episodes/"])
    for misuse in (["--tolerance", "-0"], ["--tolerance", "1"]):
        with pytest.raises(SystemExit):
            eval_main(["--compare", str(a), str(b), *misuse])
    capsys.readouterr()
    with pytest.raises(SystemExit):
        eval_main(["some-episodes/", "--by", "domain"])  # a run, not a comparison
    assert "--by: only with --compare" in capsys.readouterr().err
