"""The synthetic episodes behind the evaluation: reproducible, sized, and every answer true."""

from __future__ import annotations

import re

from trajgraph.core.tokens import count_tokens
from trajgraph.evaluation.synthetic import GOOD, generate


def test_same_seed_same_episode_and_size_near_target() -> None:
    assert generate(5, 16_000) == generate(5, 16_000)
    assert generate(5, 16_000) != generate(6, 16_000)
    ep = generate(5, 64_000)
    tokens = sum(count_tokens(t["action"]) + count_tokens(t["observation"]) for t in ep["turns"])
    assert 0.95 * 64_000 <= tokens <= 1.1 * 64_000
    assert [t["idx"] for t in ep["turns"]] == list(range(len(ep["turns"])))


def test_every_answer_is_backed_by_its_needles() -> None:
    ep = generate(7, 32_000)
    turns = ep["turns"]
    types = {q["type"] for q in ep["qa_pairs"]}
    assert types == {"recall", "causal", "state_updating", "state_abstraction"}
    for q in ep["qa_pairs"]:
        needles = [turns[i] for i in q["needles"]]
        if q["type"] == "recall":
            assert any(q["answer"] in t["observation"] for t in needles)
        elif q["type"] == "state_updating":
            key, value = q["answer"].split("=")
            (last,) = needles
            assert f"{key}={value}" in last["action"] + last["observation"]
            later = [
                t
                for t in turns[last["idx"] + 1 :]
                if f"{key}=" in t["action"] and "config.ini" in t["action"]
            ]
            assert later == []  # nothing sets the key afterwards: it is the current value
        elif q["type"] == "causal":
            setter, fail = needles
            assert "FAILED" in fail["observation"] and q["answer"] in fail["observation"]
            assert q["answer"] in setter["action"] and "config.ini" in setter["action"]
            key = q["answer"].split("=")[0]
            assert q["answer"] != f"{key}={GOOD[key]}"
            between = turns[setter["idx"] + 1 : fail["idx"]]
            assert not any(
                f"{key}=" in t["action"] and "config.ini" in t["action"] for t in between
            )
            earlier = [t for t in turns[: fail["idx"]] if t["action"] == fail["action"]]
            assert not earlier or "FAILED" not in earlier[-1]["observation"]  # it broke here
        else:
            assert q["needles"] == []  # counts are scored by coverage only
            if "pytest" in q["question"]:
                runs = [t for t in turns if t["action"].startswith("pytest ")]
                assert q["answer"] == str(len(runs))
            else:
                sets = [t for t in turns if t["action"].endswith(" config.ini")]
                assert q["answer"] == str(len(sets) - 1)  # the first is `cat config.ini`


def test_needles_spread_over_the_horizon() -> None:
    ep = generate(3, 128_000)
    needles = sorted({n for q in ep["qa_pairs"] for n in q["needles"]})
    last = len(ep["turns"]) - 1
    middle = [n for n in needles if last * 0.3 < n < last * 0.7]
    assert middle, "needles only at the ends"
    assert all(
        re.match(r"^(pytest|sed|echo|cat config|python|sha256sum)", ep["turns"][n]["action"])
        for n in needles
    )
