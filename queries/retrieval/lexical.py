"""Lexical scoring inside one trajectory: its turns cut into lines, BM25 over turns and lines.

A ``TurnIndex`` holds a trajectory's turns as *units*: the action's lines and the
observation's lines (blank lines dropped, very long lines cut at a separator into pieces),
each with its stemmed terms and its token cost. It is built once per trajectory version and
cached by the engine, so a question costs a pass over term counts, not over text.

Terms are lower-cased words and identifiers; words get a light suffix stemming ("reviews",
"reviewed" → "review") so a question's wording matches the log's.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from trajgraph.pipelines.tokens import count_tokens

_WORD = re.compile(r"[A-Za-z0-9_]+")
MAX_UNIT_CHARS = 400  # a longer line (JSON on one line, minified pages) is cut into pieces
# Decoration: a run of one repeated character (==== rules, ____ headers, padding spaces
# inside a line) costs tokens and says nothing; it is shown as a short run and "…".
_RUN = re.compile(r"([=_\-*#~+.:|/\\ ])\1{15,}")
_ESCAPED_NL = "\\n"
MIN_SEGMENT_CHARS = 60
_CUT_AT = re.compile(r"', '|\", \"|\}, \{|[.;!?] |, |\s")

# Words that carry no meaning in a question about a trajectory (structure, not content).
_QUESTION_STOP = """
a an the of to in on at for and or is are was were be been being did do does doing what which
who whom whose when where why how many much it its this that these those with from by as into
than then there their they them we you i me my our your he she his her if so not no yes can
could would should will shall may might must has have had having also any all each every some
such only own same other just very about above below over under again further once here both
few more most step steps turn turns agent agents time times action actions observation
observations trajectory happen happened specific exact exactly please provide identify list
describe explain based during throughout given whole entire
"""
QUESTION_STOP = frozenset(_QUESTION_STOP.split())


def stem(word: str) -> str:
    """A light, deterministic suffix stemmer for English words; identifiers (digits,
    underscores) are kept as they are."""
    w = word.lower()
    if len(w) <= 3 or not w.isalpha():
        return w
    for suffix, keep in (("ies", "y"), ("sses", "ss"), ("ing", ""), ("ed", ""), ("s", "")):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            if suffix == "s" and w.endswith(("ss", "us", "is")):
                break
            w = w[: len(w) - len(suffix)] + keep
            if suffix in ("ing", "ed") and w[-1] == w[-2] and w[-1] not in "lsz":
                w = w[:-1]  # stopped, running
            break
    # "change", "changes", "changed" and "changing" all end as "chang".
    return w[:-1] if len(w) > 3 and w.endswith("e") else w


def terms(text: str) -> list[str]:
    return [stem(w) for w in _WORD.findall(text) if len(w) > 1 or w.isdigit()]


def query_terms(question: str) -> list[str]:
    """The question's content terms, stemmed, once each, in order."""
    out: list[str] = []
    for w in _WORD.findall(question):
        lw = w.lower()
        if lw in QUESTION_STOP or (len(w) < 2 and not w.isdigit()):
            continue
        t = stem(w)
        if t not in out:
            out.append(t)
    return out


@dataclass
class Unit:
    turn: int
    part: str  # "action" or "observation"
    line: int  # position within its part (consecutive pieces of one line share it)
    text: str
    tokens: int
    tf: Counter[str]
    length: int


@dataclass
class TurnIndex:
    """The units of a trajectory's turns, with document frequencies for BM25."""

    turns: list[int]
    actions: dict[int, str]
    observations: dict[int, str]
    units: list[Unit]
    by_turn: dict[int, list[int]]  # turn -> unit positions, in order
    unit_df: Counter[str]
    turn_tf: dict[int, Counter[str]]
    turn_len: dict[int, int]
    turn_df: Counter[str]
    chars: int
    _avg_unit: float = field(default=1.0)
    _avg_turn: float = field(default=1.0)

    @classmethod
    def build(cls, turns: Iterable[dict[str, object]]) -> TurnIndex:
        units: list[Unit] = []
        by_turn: dict[int, list[int]] = {}
        turn_tf: dict[int, Counter[str]] = {}
        turn_len: dict[int, int] = {}
        actions: dict[int, str] = {}
        observations: dict[int, str] = {}
        chars = 0
        order: list[int] = []
        for t in turns:
            idx = int(t["idx"])  # type: ignore[call-overload]
            action = str(t.get("action") or "")
            obs = str(t.get("observation") or "")
            chars += len(action) + len(obs)
            order.append(idx)
            actions[idx] = action
            observations[idx] = obs
            mine: list[int] = []
            total: Counter[str] = Counter()
            for part, text in (("action", action), ("observation", obs)):
                for n, piece in _pieces(text):
                    words = terms(piece)
                    tf = Counter(words)
                    total.update(tf)
                    mine.append(len(units))
                    units.append(
                        Unit(idx, part, n, piece, count_tokens(piece) + 1, tf, max(1, len(words)))
                    )
            by_turn[idx] = mine
            turn_tf[idx] = total
            turn_len[idx] = max(1, sum(total.values()))
        unit_df: Counter[str] = Counter()
        for u in units:
            unit_df.update(u.tf.keys())
        turn_df: Counter[str] = Counter()
        for tf in turn_tf.values():
            turn_df.update(tf.keys())
        index = cls(
            order, actions, observations, units, by_turn, unit_df, turn_tf, turn_len, turn_df, chars
        )
        index._avg_unit = sum(u.length for u in units) / max(1, len(units))
        index._avg_turn = sum(turn_len.values()) / max(1, len(turn_len))
        return index

    def turn_scores(self, q: Sequence[str]) -> dict[int, float]:
        """BM25 of every turn (action and observation together) against the query terms."""
        n = len(self.turn_tf)
        out: dict[int, float] = {}
        for idx, tf in self.turn_tf.items():
            s = _bm25(q, tf, self.turn_len[idx], self._avg_turn, self.turn_df, n)
            if s > 0:
                out[idx] = s
        return out

    def unit_scores(self, q: Sequence[str], positions: Iterable[int]) -> dict[int, float]:
        """BM25 of the given units against the query terms (document = one unit)."""
        n = len(self.units)
        out: dict[int, float] = {}
        for i in positions:
            u = self.units[i]
            s = _bm25(q, u.tf, u.length, self._avg_unit, self.unit_df, n)
            if s > 0:
                out[i] = s
        return out


def _bm25(
    q: Sequence[str], tf: Counter[str], length: int, avg: float, df: Counter[str], n: int
) -> float:
    s = 0.0
    norm = 1.2 * (0.25 + 0.75 * length / avg)
    for w in q:
        f = tf.get(w)
        if f:
            idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
            s += idf * f * 2.2 / (f + norm)
    return s


def _pieces(text: str) -> list[tuple[int, str]]:
    """Non-blank lines (right-stripped, verbatim otherwise); a line over MAX_UNIT_CHARS is cut
    into pieces at a separator near the limit, so one huge line does not take the budget."""
    out: list[tuple[int, str]] = []
    for n, raw in enumerate(text.split("\n")):
        line = raw.rstrip()
        if not line.strip():
            continue
        body = line.lstrip()
        line = line[: len(line) - len(body)] + _RUN.sub(lambda m: m.group(1) * 6 + "…", body)
        for segment in _segments(line):
            while len(segment) > MAX_UNIT_CHARS:
                cut = _cut(segment)
                out.append((n, segment[:cut]))
                segment = segment[cut:]
            if segment.strip():
                out.append((n, segment))
    return out


def _segments(line: str) -> list[str]:
    """A long line holding escaped newlines (a file written by a JSON tool call) in its own
    lines, short ones joined to the next."""
    if len(line) <= MAX_UNIT_CHARS or line.count(_ESCAPED_NL) < 3:
        return [line]
    parts = [p + _ESCAPED_NL for p in line.split(_ESCAPED_NL)]
    parts[-1] = parts[-1][: -len(_ESCAPED_NL)]
    out: list[str] = []
    for p in parts:
        if out and len(out[-1]) < MIN_SEGMENT_CHARS:
            out[-1] += p
        else:
            out.append(p)
    return out


def _cut(line: str) -> int:
    lo = MAX_UNIT_CHARS // 2
    best = None
    for m in _CUT_AT.finditer(line, lo, MAX_UNIT_CHARS):
        best = m.end()
    return best or MAX_UNIT_CHARS
