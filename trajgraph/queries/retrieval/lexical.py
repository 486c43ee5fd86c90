"""Lexical scoring inside one trajectory: its turns cut into lines, BM25 over turns and lines.

A ``TurnIndex`` holds a trajectory's turns with their stemmed term counts, and cuts a turn
into *units* (the action's lines and the observation's lines, blank lines dropped, very long
lines cut at a separator into pieces, each with its terms and, when needed, its token cost)
only when the turn is a candidate for the context. It is built once per trajectory version
and cached by the engine, so a question costs a pass over term counts, not over text.

Terms are lower-cased words and identifiers; words get a light suffix stemming ("reviews",
"reviewed" → "review") so a question's wording matches the log's.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from trajgraph.core.tokens import count_tokens

_WORD = re.compile(r"[A-Za-z0-9_]+")
MAX_UNIT_CHARS = 200  # a longer line (JSON on one line, minified pages) is cut into pieces
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


WORD_CHARS = 6  # characters per word, to turn a text's length into a word count


@lru_cache(maxsize=4096)
def _term_start(term: str) -> Callable[[str], list[str]]:
    """findall of ``term`` where it starts a word (a stem matches its inflections)."""
    return re.compile(r"(?<![a-z0-9_])" + re.escape(term)).findall


@lru_cache(maxsize=65536)
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


class Unit:
    """One line (or piece of a long line) of a turn's action or observation."""

    __slots__ = ("_tokens", "length", "line", "part", "text", "tf", "turn")

    def __init__(self, turn: int, part: str, line: int, text: str, tf: Counter[str]) -> None:
        self.turn = turn
        self.part = part  # "action" or "observation"
        self.line = line  # position within its part (pieces of one long line share it)
        self.text = text
        self.tf = tf
        self.length = max(1, sum(tf.values()))
        self._tokens = -1

    @property
    def tokens(self) -> int:
        """Its cost in the context (with its newline), counted when first needed."""
        if self._tokens < 0:
            self._tokens = line_tokens(self.text) + 1
        return self._tokens


@lru_cache(maxsize=65536)
def line_tokens(text: str) -> int:
    """Tokens of one line (at most MAX_UNIT_CHARS): log lines and headers repeat across turns,
    trajectories and questions, so their counts are cached."""
    return count_tokens(text)


@dataclass
class TurnIndex:
    """A trajectory's turns, for BM25 at two levels. Turns are scored by counting where each
    query term starts a word in the turn's lower-cased text (C-speed regex scans: a stem
    matches its inflections, "fail" in "failed"); a turn's lines (units) are cut and their
    terms counted only when that turn is a candidate for the context."""

    turns: list[int]
    actions: dict[int, str]
    observations: dict[int, str]
    lowered: dict[int, str]
    chars: int
    header_tokens: dict[int, int] = field(default_factory=dict)  # filled by passages.py
    _units: dict[int, list[Unit]] = field(default_factory=dict)
    _heads: dict[int, Unit | None] = field(default_factory=dict)

    @classmethod
    def build(cls, turns: Iterable[dict[str, object]]) -> TurnIndex:
        actions: dict[int, str] = {}
        observations: dict[int, str] = {}
        lowered: dict[int, str] = {}
        chars = 0
        order: list[int] = []
        for t in turns:
            if t.get("idx") is None:
                # A turn a rewrite deleted while this read ran (Neo4j reads are read-committed,
                # not snapshots: a node deleted under the read shows no properties).
                continue
            idx = int(t["idx"])  # type: ignore[call-overload]
            action = str(t.get("action") or "")
            obs = str(t.get("observation") or "")
            chars += len(action) + len(obs)
            order.append(idx)
            actions[idx] = action
            observations[idx] = obs
            lowered[idx] = f"{action}\n{obs}".lower()
        return cls(order, actions, observations, lowered, chars)

    def head_of(self, turn: int) -> Unit | None:
        """The first line of the turn's action (its header), without cutting the rest."""
        units = self._units.get(turn)
        if units is not None:
            return units[0] if units and units[0].part == "action" else None
        if turn not in self._heads:
            pieces = _pieces(self.actions.get(turn, ""))
            self._heads[turn] = (
                Unit(turn, "action", 0, pieces[0][1], Counter(terms(pieces[0][1])))
                if pieces
                else None
            )
        return self._heads[turn]

    def units_of(self, turn: int) -> list[Unit]:
        """The turn's lines (action first), cut and counted on first use."""
        units = self._units.get(turn)
        if units is None:
            units = [
                Unit(turn, part, n, piece, Counter(terms(piece)))
                for part, text in (
                    ("action", self.actions.get(turn, "")),
                    ("observation", self.observations.get(turn, "")),
                )
                for n, piece in _pieces(text)
            ]
            self._units[turn] = units
        return units

    def turn_scores(self, q: Sequence[str]) -> dict[int, float]:
        """BM25 of every turn (action and observation together) against the query terms."""
        n = len(self.lowered)
        if not n or not q:
            return {}
        lengths = {t: max(1, len(text) // WORD_CHARS) for t, text in self.lowered.items()}
        avg = sum(lengths.values()) / n
        out: dict[int, float] = {}
        for term in q:
            starts = _term_start(term)
            counts = {t: c for t, text in self.lowered.items() if (c := len(starts(text)))}
            if not counts:
                continue
            idf = math.log(1 + (n - len(counts) + 0.5) / (len(counts) + 0.5))
            for t, f in counts.items():
                norm = 1.2 * (0.25 + 0.75 * lengths[t] / avg)
                out[t] = out.get(t, 0.0) + idf * f * 2.2 / (f + norm)
        return out

    def unit_scores(self, q: Sequence[str], turns: Iterable[int]) -> dict[int, list[float]]:
        """BM25 of each line of ``turns`` against the query terms: a line is the document,
        a term's rarity is counted over these lines (a menu every turn repeats matches
        everything and weighs little)."""
        units = {t: self.units_of(t) for t in turns}
        df: Counter[str] = Counter()
        n = lengths = 0
        for us in units.values():
            for u in us:
                df.update(w for w in q if w in u.tf)
                n += 1
                lengths += u.length
        avg = lengths / max(1, n)
        return {t: [_bm25(q, u.tf, u.length, avg, df, n) for u in us] for t, us in units.items()}


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


# -- full-text query ----------------------------------------------------------------------------

_LUCENE_SPECIAL = re.compile(r'([+\-&|!(){}\[\]^"~*?:\\/])')
_TERM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-/]*")
_STOP_WORDS = """
a an the of to in on at for and or is are was were be been did do does what which who when why
how many much times time agent agents it its this that these those with from by as into after
before then than there their they them we you i me my our
"""
_STOP = frozenset(_STOP_WORDS.split())


# Lucene refuses a query of more than 1,024 clauses (the server then reports a failed
# procedure, which would read as an outage). Every term is a clause in each field of the
# index (state_text has three), a phrase's terms each count: a long question keeps the
# identifiers and words that fit, in order, within this many terms (3 x 300 < 1,024).
MAX_QUERY_TERMS = 300
# An upper bound on the terms a part is analysed into: each run of ASCII word characters is
# at most one, and so is each other word character (an ideograph is a term of its own).
_ASCII_RUN = re.compile(r"[A-Za-z0-9_]+")
_OTHER_WORD_CHAR = re.compile(r"[^\W\x00-\x7f]")


def lucene_query(question: str, identifiers: Sequence[str]) -> str:
    """A Lucene query: every identifier as an exact phrase, every other word as a term, all
    special characters escaped (a question is data, never query syntax); at most
    MAX_QUERY_TERMS terms."""
    parts = ['"' + _escape(i) + '"' for i in identifiers if i.strip()]
    for word in _TERM.findall(question):
        w = word.lower().strip(".-/")
        if w and w not in _STOP and len(w) > 1:
            parts.append(_escape(w))
    kept: list[str] = []
    terms = 0
    for part in dict.fromkeys(parts):
        n = max(1, len(_ASCII_RUN.findall(part)) + len(_OTHER_WORD_CHAR.findall(part)))
        if terms + n <= MAX_QUERY_TERMS:
            kept.append(part)
            terms += n
    return " OR ".join(kept)


def _escape(text: str) -> str:
    return _LUCENE_SPECIAL.sub(lambda m: "\\" + m.group(1), text)
