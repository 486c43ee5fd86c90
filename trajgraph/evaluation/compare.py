"""Two saved evaluations side by side, question by question, with the uncertainty of the gap.

``trajgraph eval DIR --save A.json`` keeps every scored row; comparing two such files (two
embedders, two versions, or two methods of one file) pairs the rows by episode and question
and reports, per capability (or domain) and overall, the mean of each side, their difference
``A - B`` and a 95 % confidence interval of it. Questions of one episode share a trajectory
and rise or fall together, so the interval comes from a bootstrap that resamples whole
episodes, not questions (a question-level bootstrap gives too narrow an interval).

A goal such as "within 0.01 of B" is met only when the whole interval lies inside
``±tolerance``; an interval that reaches past it on one side only says which way A differs
but not by how much; one that reaches past it on both sides says the split is too small to
tell, which is worth knowing before tuning against it:

    trajgraph eval --compare static.json minilm.json --tolerance 0.01
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trajgraph.core.errors import InputError
from trajgraph.evaluation.report import group_order

RESAMPLES = 20_000  # the interval's ends move by about 0.001 between seeds at this count
CHUNK = 2_000  # resamples drawn at once: memory stays flat however many episodes
SEED = 20  # a fixed seed: the same two files always give the same interval
CONFIDENCE = 0.95
FEW_EPISODES = 8  # fewer clusters than this and the bootstrap interval is itself rough
SAME = 1e-9  # values closer than this are equal (0.1 + 0.2 against 0.3)


@dataclass(frozen=True)
class Gap:
    group: str  # a capability, a domain, or "overall"
    questions: int
    episodes: int
    a: float
    b: float
    low: float  # of the 95 % interval of a - b
    high: float
    differing: int  # questions whose value differs at all

    @property
    def diff(self) -> float:
        return self.a - self.b

    def verdict(self, tolerance: float) -> str:
        t = _share(tolerance)
        if self.differing == 0:
            return "same"
        if self.episodes < 2:
            return "one episode: no interval"
        if -tolerance <= self.low and self.high <= tolerance:
            return f"within ±{t}"
        if self.high < -tolerance:
            return f"A worse by > {t}"
        if self.low > tolerance:
            return f"A better by > {t}"
        # The interval excludes zero but reaches into ±tolerance on one side.
        if self.high < 0:
            return f"A worse, by more than {t} or not: undecided"
        if self.low > 0:
            return f"A better, by more than {t} or not: undecided"
        return f"undecided at ±{t}"

    def label(self, tolerance: float) -> str:
        rough = self.differing and 2 <= self.episodes < FEW_EPISODES
        return self.verdict(tolerance) + (f" ({self.episodes} episodes: rough)" if rough else "")

    def interval(self) -> str:
        return "-" if self.episodes < 2 else f"[{self.low:+.3f}, {self.high:+.3f}]"


def _share(x: float) -> str:
    return f"{x:.10f}".rstrip("0").rstrip(".")


def load_rows(path: Path) -> list[dict[str, Any]]:
    """The rows ``trajgraph eval --save`` wrote, checked enough to pair them."""
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from e
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        why = "nested too deep" if isinstance(e, RecursionError) else str(e)
        raise InputError(f"{path}: not a saved evaluation (trajgraph eval --save): {why}") from e
    except MemoryError as e:
        raise InputError(f"{path}: too large to read as a saved evaluation") from e
    if not isinstance(rows, list):
        raise InputError(f"{path}: not a saved evaluation: a JSON list of rows is expected")
    for n, r in enumerate(rows, 1):
        if not isinstance(r, dict):
            raise InputError(f"{path}: row {n} is not an object")
        missing = [k for k in ("episode", "question", "method") if not isinstance(r.get(k), str)]
        if missing:
            raise InputError(f"{path}: row {n}: {', '.join(missing)} must be text")
    return rows


def paired(
    a_rows: Sequence[dict[str, Any]],
    b_rows: Sequence[dict[str, Any]],
    *,
    a_method: str,
    b_method: str,
    metric: str = "coverage",
    key: str = "type",
    names: tuple[str, str] = ("A", "B"),
) -> tuple[list[Gap], int]:
    """Gaps per ``key`` value and overall, and how many questions only one side scored
    (``names``: what errors call the two sides, their files)."""
    a = _values(a_rows, a_method, metric, names[0])
    b = _values(b_rows, b_method, metric, names[1])
    both = sorted(a.keys() & b.keys())
    unpaired = len(a.keys() ^ b.keys())
    groups: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
    overall: list[tuple[str, float, float]] = []
    for q in both:
        (va, row), (vb, _) = a[q], b[q]
        groups[_group(row.get(key))].append((q[0], va, vb))  # A's group, should they differ
        overall.append((q[0], va, vb))
    # A generator per group: a group's interval does not depend on which groups came first.
    gaps = [_gap(g, groups[g], np.random.default_rng(SEED)) for g in group_order(groups)]
    if overall:
        gaps.append(_gap("overall", overall, np.random.default_rng(SEED)))
    return gaps, unpaired


def _group(value: object) -> str:
    """A group's name as one table cell: text only, one line, no column bar; a capability
    that calls itself "overall" stays apart from the overall row."""
    if not isinstance(value, str) or not value.strip():
        return "-"
    name = " ".join(value.split()).replace("|", "/")[:60]
    return f"{name} (a group)" if name == "overall" else name


def _values(
    rows: Sequence[dict[str, Any]], method: str, metric: str, where: str
) -> dict[tuple[str, str, int], tuple[float, dict[str, Any]]]:
    # An episode may ask the same question twice: the n-th asking pairs with the n-th.
    out: dict[tuple[str, str, int], tuple[float, dict[str, Any]]] = {}
    seen: Counter[tuple[str, str]] = Counter()
    for n, r in enumerate(rows, 1):
        if r["method"] != method:
            continue
        asked = (r["episode"], r["question"])
        seen[asked] += 1
        v = r.get(metric)
        if v is None:
            continue
        number = _finite(v)
        if number is None or not 0.0 <= number <= 1.0:
            raise InputError(
                f"{where}: row {n} has {metric} {str(v)[:40]!r}, not a share from 0 to 1"
            )
        key = (asked[0], asked[1], seen[asked])  # not (*asked, n): mypy's 3.10 mode rejects it
        out[key] = (number, r)
    return out


def _finite(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        number = float(v)
    except OverflowError:  # an integer of 400 digits
        return None
    return number if math.isfinite(number) else None


def _gap(group: str, items: list[tuple[str, float, float]], rng: np.random.Generator) -> Gap:
    by_episode: dict[str, list[float]] = defaultdict(list)
    a_sum = b_sum = 0.0
    for episode, va, vb in items:
        by_episode[episode].append(va - vb)
        a_sum += va
        b_sum += vb
    sums = np.array([sum(d) for d in by_episode.values()])
    counts = np.array([len(d) for d in by_episode.values()], dtype=float)
    means = np.empty(RESAMPLES)
    for start in range(0, RESAMPLES, CHUNK):
        draws = rng.integers(0, len(sums), size=(min(CHUNK, RESAMPLES - start), len(sums)))
        means[start : start + len(draws)] = sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
    tail = (1 - CONFIDENCE) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    n = len(items)
    return Gap(
        group,
        n,
        len(by_episode),
        a_sum / n,
        b_sum / n,
        float(low),
        float(high),
        sum(1 for _, va, vb in items if abs(va - vb) > SAME),
    )


def render(
    gaps: Sequence[Gap], *, a_name: str, b_name: str, metric: str, tolerance: float, unpaired: int
) -> str:
    lines = [
        f"{metric}: A = {a_name}, B = {b_name}; 95 % interval of A - B by an episode bootstrap",
        "",
        "| | questions | episodes | A | B | A - B | 95 % interval | differ | verdict |",
        "|---|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for g in gaps:
        lines.append(
            f"| {g.group} | {g.questions} | {g.episodes} | {g.a:.3f} | {g.b:.3f} | "
            f"{g.diff:+.3f} | {g.interval()} | {g.differing} | "
            f"{g.label(tolerance)} |"
        )
    if unpaired:
        lines.append(f"\n{unpaired} question(s) scored on one side only are left out")
    return "\n".join(lines)


def main(
    files: Sequence[Path],
    methods: Sequence[str] | None,
    *,
    metric: str,
    key: str,
    tolerance: float,
) -> str:
    """The comparison table of two saved evaluations (``methods``: A's and B's method; one
    name for both; default ``trajgraph_auto``)."""
    a_path, b_path = files
    a_method, b_method = (list(methods or ["trajgraph_auto"]) * 2)[:2]
    a_rows, b_rows = load_rows(a_path), load_rows(b_path)
    for path, rows, method in ((a_path, a_rows, a_method), (b_path, b_rows, b_method)):
        present = sorted({r["method"] for r in rows})
        if method not in present:
            raise InputError(
                f"{path}: no rows of method {method!r} (it has {', '.join(present) or 'none'})"
            )
    gaps, unpaired = paired(
        a_rows,
        b_rows,
        a_method=a_method,
        b_method=b_method,
        metric=metric,
        key=key,
        names=(str(a_path), str(b_path)),
    )
    if not gaps:
        raise InputError(
            f"{a_path} and {b_path}: no question has {metric} on both sides to compare"
        )
    return render(
        gaps,
        a_name=f"{a_path.name} {a_method}",
        b_name=f"{b_path.name} {b_method}",
        metric=metric,
        tolerance=tolerance,
        unpaired=unpaired,
    )
