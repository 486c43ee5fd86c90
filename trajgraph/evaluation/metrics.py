"""The scores of the evaluation harness, computed the same way for every method.

* **answer-term coverage**: the share of a gold answer's *key terms* found in the context.
  Key terms are the answer's numbers, identifiers and content words that the question does
  not already contain (a term the question gives away says nothing about the context).
  A term is found when it occurs in the context as a whole token, case-insensitively:
  ``19.36`` is found in ``$19.36`` but not in ``119.36``, ``blueprints.py`` in
  ``src/flask/blueprints.py``, ``review`` not in ``reviews``. A question whose answer has no
  key terms left has no coverage (None) and is left out of the means.
* **needle recall**: the share of a question's needle turns the context cites (``turn N``).
* **answer-turn recall** (real episodes, which name no needles): the same share for the
  steps the gold answer names and the question does not ("Step 15, when it examined the
  validation logic" → turn 15). Coverage counts words, and a context can hold an answer's
  words without its step; this counts whether the evidence itself came along.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

# A term: word characters, optionally joined by . / : - (paths, URLs, versions, 19.36, a-b).
_TERM = re.compile(r"[A-Za-z0-9_]+(?:[./:\-][A-Za-z0-9_]+)*")
_NUMBER = re.compile(r"\d+(?:[.,:/\-]\d+)*")
_IDENTIFIER_MARK = re.compile(r"[\d_./:\-]|[a-z][A-Z]")
# A context cites a turn as "[turn 8]" ("return 0" in a log is no citation).
_TURN_REF = re.compile(r"\bturn (\d+)")
# What a text cites: "Step 15", "turn 3", "step-7", "Step #5", "steps (20-21)", "steps 30, 37
# and 41", "Steps 4-8" or "steps 3 through 5" (every step between), "Step 1 to Step 2". After
# a singular "step" a list goes on only where the word comes again ("step 6 and step 7"): in
# "at step 5, 3 files changed" the 3 is no step. A step number has at most 9 digits (a longer
# one is not a step, and int() of 4,301 would fail). Not the retrieval engine's parser
# (queries/retrieval/anchors.py) on purpose: a score that read answers with the engine's own
# rules would share the engine's blind spots.
_NUM = r"\d{1,9}(?!\d)"
_SEP = r"\s*(?:,\s*and|,\s*or|,|and|or|&|/|-|–|—|to|through|thru)\s*"
_RANGE_SEP = r"\s*(?:-|–|—|to|through|thru)\s*"
_WORD = r"(?:step|turn)s?[\s#]*"
_ONE = r"(?:step|turn)(?!s)[\s#]*"  # "turns 2 and 4" after it starts a list of its own
_STEP_REFS = re.compile(
    rf"\b(?:(?:step|turn)s[\s#(-]*({_NUM}(?:{_SEP}(?:{_WORD})?{_NUM})*)"
    rf"|(?:step|turn)[\s#(-]*({_NUM}(?:(?:{_RANGE_SEP}(?:{_WORD})?|{_SEP}{_ONE}){_NUM})*))",
    re.I,
)
_RANGE = re.compile(rf"({_NUM}){_RANGE_SEP}(?:{_WORD})?({_NUM})", re.I)
MAX_RANGE = 200  # a longer range names its two ends

# Function words: never key terms. (Content words are everything else of 2+ letters.)
_STOP_WORDS = """
a about above after again against all also am an and any are aren as at be because been before
being below between both but by can cannot could couldn did didn do does doesn doing don down
during each either else etc ever every few for from further had hadn has hasn have haven having
he her here hers herself him himself his how however i if in into is isn it its itself just
let ll me might more most must mustn my myself neither no nor not now of off on once only or
other ought our ours ourselves out over own per re same shall shan she should shouldn so some
such than that the their theirs them themselves then there these they this those through thus
to too under until up upon us ve very via was wasn we were weren what when where whether which
while who whom whose why will with within without won would wouldn yes yet you your yours
yourself yourselves e.g i.e
"""
STOP_WORDS = frozenset(_STOP_WORDS.split())


def key_terms(answer: str, question: str = "") -> list[str]:
    """The answer's numbers, identifiers and content words (lower-cased, in order, once
    each) that do not occur in the question."""
    out: list[str] = []
    for raw in _TERM.findall(answer):
        term = raw.lower()
        if term in out or term in STOP_WORDS:
            continue
        is_number = _NUMBER.fullmatch(raw) is not None
        is_identifier = _IDENTIFIER_MARK.search(raw) is not None
        if not (is_number or is_identifier or len(raw) >= 2):
            continue
        if question and occurs_as_term(term, question):
            continue
        out.append(term)
    return out


@lru_cache(maxsize=4096)
def _term_pattern(term: str) -> re.Pattern[str]:
    return re.compile(r"(?<![A-Za-z0-9_])" + re.escape(term) + r"(?![A-Za-z0-9_])", re.IGNORECASE)


def occurs_as_term(term: str, text: str) -> bool:
    """``term`` occurs in ``text`` not glued to other word characters, ignoring case."""
    return _term_pattern(term).search(text) is not None


def coverage(context: str, answer: str, question: str = "") -> float | None:
    """Share of the answer's key terms (see ``key_terms``) found in ``context``; None when
    the question leaves the answer no key term."""
    terms = key_terms(answer, question)
    if not terms:
        return None
    return sum(1 for t in terms if occurs_as_term(t, context)) / len(terms)


def named_steps(text: str) -> set[int]:
    """The step (turn) numbers ``text`` names, every step of a range included."""
    out: set[int] = set()
    for plural, singular in _STEP_REFS.findall(text):
        refs = plural or singular
        out.update(int(n) for n in re.findall(_NUM, refs))
        for lo, hi in _RANGE.findall(refs):
            a, b = sorted((int(lo), int(hi)))
            if b - a <= MAX_RANGE:
                out.update(range(a, b + 1))
    return out


def answer_turns(answer: str, question: str) -> list[int]:
    """The turns the gold answer names that the question does not already give away."""
    return sorted(named_steps(answer) - named_steps(question))


def needle_recall(context: str, needles: Sequence[int]) -> float | None:
    """None for a question without needles (a count over the whole trajectory)."""
    if not needles:
        return None
    cited = {int(m) for m in _TURN_REF.findall(context)}
    return sum(1 for n in needles if n in cited) / len(needles)
