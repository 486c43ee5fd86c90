"""Steps and turns a question names: "step 8", "turn 41", "steps 81-82", "steps 5 and 6",
"between step 10 and step 14", "from turn 0 to turn 39", "until step 123".

"Step N" and "turn N" both mean the turn with index N (in AMA-Bench files step N is
``turn_idx`` N; in trajgraph's graph a turn's ``idx``). What a question names is evidence
about *where* to look, with a weight:

* a named step (``points``) is where the answer is;
* a short range (``ranges``) is read as a whole; a long one is a scope;
* "until / before / by step N" (``upto``) and "after step N" (``after``) limit the scope.

``spans`` are the character spans the references take in the question, so that the step
numbers are not also read as search terms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_REF = r"(?:steps?|turns?)\s*#?\s*"
_EDGE = r"(?:(?:the\s+)?(?:start|beginning|end|begin)\s+of\s+)?"
_NUM = r"(\d{1,7})"
_SEP = r"\s*(?:-|–|—|to|through|thru|until|till|and)\s*"
_BETWEEN = re.compile(
    rf"\b(?:between|from)\s+{_EDGE}{_REF}{_NUM}{_SEP}{_EDGE}(?:{_REF})?{_NUM}\b", re.IGNORECASE
)
_RANGE = re.compile(
    rf"\b{_REF}{_NUM}\s*(?:-|–|—|to|through|thru)\s*(?:{_REF})?{_NUM}\b", re.IGNORECASE
)
_UPTO = re.compile(
    rf"\b(?:until|till|before|by|up\s+to|prior\s+to|through|within\s+the\s+first)\s+"
    rf"{_EDGE}{_REF}{_NUM}\b",
    re.IGNORECASE,
)
_AFTER = re.compile(rf"\b(?:after|since|following)\s+{_EDGE}{_REF}{_NUM}\b", re.IGNORECASE)
_LIST = re.compile(
    r"\b(?:steps|turns)\s+(\d{1,7}(?:\s*,\s*\d{1,7})*(?:\s*,?\s*(?:and|or|&)\s*\d{1,7})?)\b",
    re.IGNORECASE,
)
_POINT = re.compile(rf"\b{_REF}{_NUM}\b", re.IGNORECASE)
_NUMBERS = re.compile(r"\d{1,7}")

MAX_SPAN = 100_000  # a range longer than this is a typo, not a scope


@dataclass
class Anchors:
    points: list[int] = field(default_factory=list)
    ranges: list[tuple[int, int]] = field(default_factory=list)
    upto: int | None = None
    after: int | None = None
    spans: list[tuple[int, int]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.points or self.ranges or self.upto is not None or self.after is not None)

    @property
    def named(self) -> list[int]:
        """Every step the question names by number (points and range ends), in order."""
        out = list(self.points)
        for lo, hi in self.ranges:
            out += [lo, hi]
        if self.upto is not None:
            out.append(self.upto)
        if self.after is not None:
            out.append(self.after)
        return list(dict.fromkeys(out))

    def scope(self) -> tuple[int, int] | None:
        """The turns the question limits itself to (inclusive), if it does."""
        lo, hi = 0, None
        if self.ranges:
            lo = min(a for a, _ in self.ranges)
            hi = max(b for _, b in self.ranges)
        if self.upto is not None:
            hi = self.upto if hi is None else max(hi, self.upto)
        if self.after is not None:
            lo = self.after
        if hi is None and self.after is None:
            return None
        return lo, hi if hi is not None else 1 << 30

    def without_refs(self, question: str) -> str:
        """The question with its step references blanked (so "8" in "step 8" is no term)."""
        out = question
        for a, b in sorted(self.spans, reverse=True):
            out = out[:a] + " " * (b - a) + out[b:]
        return out


def find_anchors(question: str) -> Anchors:
    found = Anchors()
    taken: list[tuple[int, int]] = []

    def free(m: re.Match[str]) -> bool:
        return not any(m.start() < b and a < m.end() for a, b in taken)

    for rx in (_BETWEEN, _RANGE):
        for m in rx.finditer(question):
            if not free(m):
                continue
            a, b = int(m.group(1)), int(m.group(2))
            lo, hi = min(a, b), max(a, b)
            if hi - lo <= MAX_SPAN:
                found.ranges.append((lo, hi))
                taken.append(m.span())
    for m in _UPTO.finditer(question):
        if free(m):
            n = int(m.group(1))
            found.upto = n if found.upto is None else max(found.upto, n)
            taken.append(m.span())
    for m in _AFTER.finditer(question):
        if free(m):
            found.after = int(m.group(1))
            taken.append(m.span())
    for m in _LIST.finditer(question):
        if free(m):
            found.points += [int(x) for x in _NUMBERS.findall(m.group(1))]
            taken.append(m.span())
    for m in _POINT.finditer(question):
        if free(m):
            found.points.append(int(m.group(1)))
            taken.append(m.span())
    found.points = list(dict.fromkeys(found.points))
    found.spans = taken
    return found
