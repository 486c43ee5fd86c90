"""Offline aggregate tools over a trajectory's turns: small tables that cite turns.

Similarity cannot count. These answer "how many / how often", "when first / last", "what
did the agent do between step A and step B" and "what changed from step A to step B" with
plain code over the turns (no model, no sandbox needed: the code is ours), each as a short
table whose rows cite the turns they come from:

* ``action_counts``: how often each action (and each command: the action's first word,
  e.g. the tool name) was taken, in the scope the question names;
* ``occurrences``: for each phrase the question names (quoted text, identifiers): how many
  actions and observations contain it, and the first and last turn;
* ``timeline``: one line per turn of a range, its action;
* ``state_changes``: between two turns, each subject's values in order, read from the
  graph's SUPERSEDES chains, and the list members that appeared or went away;
* ``changes``: the same from the two observations alone (``key: value`` lines whose value
  changed, lines only one of them has), when the graph has no states there.

``intents`` is the rule router's choice of tools for a question; ``tables_for`` runs them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from trajgraph.queries.retrieval.anchors import Anchors
from trajgraph.queries.retrieval.lexical import TurnIndex, query_terms, terms

MAX_ROWS = 25
MAX_CELL = 90
MAX_TURNS_LISTED = 8
MAX_TIMELINE = 60
MAX_CHANGES = 6

_COUNT = re.compile(
    r"\b(how\s+many|how\s+often|how\s+frequent\w*|frequen\w*|count\w*|number\s+of|tally|"
    r"total|times)\b",
    re.IGNORECASE,
)
_FIRST_LAST = re.compile(
    r"\b(first|last|earliest|latest|final|when\s+did|at\s+(?:what|which)\s+(?:step|turn)|"
    r"which\s+(?:step|turn))\b",
    re.IGNORECASE,
)
_ACTIONS = re.compile(
    r"\b(what|which|list|sequence\s+of)\s+(?:\w+\s+){0,3}?(actions?|commands?|tools?|"
    r"moves?|steps?\s+(?:did|were))\b|\bwhat\s+did\s+the\s+agent\s+do\b",
    re.IGNORECASE,
)
_ACTION_WORDS = re.compile(
    r"\b(actions?|commands?|tools?|(?:tool\s+)?calls?|moves?|steps|turns|times|interact\w*|"
    r"perform\w*|execut\w*|ran|runs?|invok\w*|us(?:e|ed|es)\b)",
    re.IGNORECASE,
)
_CHANGE = re.compile(
    r"\b(chang\w*|differ\w*|updat\w*|evolv\w*|transition\w*|compar\w*|appear\w*|"
    r"disappear\w*|removed?|added|became|no\s+longer|delta|moved?)\b",
    re.IGNORECASE,
)
_QUOTED = re.compile(r"`([^`\n]{2,80})`|\"([^\"\n]{2,80})\"|(?<!\w)'([^'\n]{2,80})'(?!\w)")
_HEAD = re.compile(r"\s*([A-Za-z_][\w.\-]*)")
_KV = re.compile(r"^\s*[-*]?\s*([A-Za-z_][\w .\-]{0,40}?)\s*(?::|=)\s+(\S.{0,150})$")
_WS = re.compile(r"\s+")


@dataclass
class Table:
    title: str
    rows: list[str]
    turns: list[int]  # the turns the rows cite

    def render(self) -> str:
        return "\n".join([f"[{self.title}]", *self.rows])


Intent = Literal["occurrences", "action_counts", "changes"]


def intents(question: str, anchors: Anchors, phrases: Sequence[str]) -> tuple[Intent, ...]:
    """The aggregates a question asks for (the rule router's choice, no model):

    * ``occurrences``: it names phrases (quoted text, identifiers) and counts them or asks
      when they first / last appeared;
    * ``action_counts``: it counts actions, commands, tool calls, moves ("how many times",
      "how frequently"), or asks which actions a long range of steps took;
    * ``changes``: it asks what changed between two steps it names.
    """
    scope = anchors.scope()
    counting = _COUNT.search(question) is not None
    asks_actions = _ACTIONS.search(question) is not None
    about_actions = asks_actions or _ACTION_WORDS.search(question) is not None
    out: list[Intent] = []
    if phrases and (counting or _FIRST_LAST.search(question)):
        out.append("occurrences")
    long_range = scope is not None and scope[1] - scope[0] > 15
    if (counting and about_actions) or (asks_actions and long_range):
        out.append("action_counts")
    if _CHANGE.search(question) and len(anchors.named) >= 2:
        out.append("changes")
    return tuple(out)


def tables_for(
    index: TurnIndex,
    question: str,
    anchors: Anchors,
    phrases: Sequence[str],
    wanted: Sequence[Intent] | None = None,
    graph_changes: Callable[[int, int], Table] | None = None,
) -> list[Table]:
    """The tables of the ``wanted`` aggregates (default: ``intents`` of the question).
    ``graph_changes(a, b)`` reads what changed between two turns from the graph's
    SUPERSEDES chains; the plain difference of the two observations stands in when it finds
    nothing."""
    if wanted is None:
        wanted = intents(question, anchors, phrases)
    scope = anchors.scope()
    if scope is None:
        scope = (min(index.turns, default=0), max(index.turns, default=0))
    lo, hi = scope
    out: list[Table] = []
    if "occurrences" in wanted and phrases:
        table = occurrences(index, phrases, lo, hi)
        if table.rows:
            out.append(table)
    if "action_counts" in wanted:
        out.append(action_counts(index, lo, hi))
    named = anchors.named
    if "changes" in wanted and len(named) >= 2:
        a, b = min(named), max(named)
        found = graph_changes(a, b) if graph_changes is not None else None
        if found is None or not found.rows:
            found = changes(index, a, b, question)
        if found.rows:
            out.append(found)
    return out


def quoted_phrases(question: str) -> list[str]:
    return [next(g for g in m.groups() if g).strip() for m in _QUOTED.finditer(question)]


def _turn_list(turns: Sequence[int]) -> str:
    """``3, 5-9, 12, …`` (runs collapsed, at most MAX_TURNS_LISTED items)."""
    items: list[str] = []
    i = 0
    while i < len(turns) and len(items) < MAX_TURNS_LISTED:
        j = i
        while j + 1 < len(turns) and turns[j + 1] == turns[j] + 1:
            j += 1
        items.append(str(turns[i]) if j == i else f"{turns[i]}-{turns[j]}")
        i = j + 1
    return ", ".join(items) + (", …" if i < len(turns) else "")


def _cell(text: str) -> str:
    one = _WS.sub(" ", text).strip()
    return one if len(one) <= MAX_CELL else one[: MAX_CELL - 1] + "…"


def _in(index: TurnIndex, lo: int, hi: int) -> list[int]:
    return [t for t in index.turns if lo <= t <= hi]


def action_counts(index: TurnIndex, lo: int, hi: int) -> Table:
    turns = _in(index, lo, hi)
    exact: dict[str, list[int]] = {}
    heads: dict[str, list[int]] = {}
    for t in turns:
        action = _WS.sub(" ", index.actions.get(t, "")).strip()
        if not action:
            continue
        exact.setdefault(action, []).append(t)
        m = _HEAD.match(action)
        if m:
            heads.setdefault(m.group(1), []).append(t)
    title = f"actions in turns {lo}-{turns[-1] if turns else hi} ({len(turns)} turns)"
    rows: list[str] = []
    short = exact and len(exact) <= MAX_ROWS * 2 and max(map(len, exact)) <= MAX_CELL
    if short:
        for action, at in sorted(exact.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))[:MAX_ROWS]:
            rows.append(f"{action} ×{len(at)} (turns {_turn_list(at)})")
    by_head = sorted(heads.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
    if not short or len(by_head) < len(exact):
        rows.append("by command: " + ", ".join(f"{h} ×{len(at)}" for h, at in by_head[:MAX_ROWS]))
    if not short:
        repeated = [(a, at) for a, at in exact.items() if len(at) > 1]
        for action, at in sorted(repeated, key=lambda kv: -len(kv[1]))[:8]:
            rows.append(f"{_cell(action)} ×{len(at)} (turns {_turn_list(at)})")
    return Table(title, rows, [t for at in exact.values() for t in at])


def occurrences(index: TurnIndex, phrases: Sequence[str], lo: int, hi: int) -> Table:
    turns = _in(index, lo, hi)
    rows: list[str] = []
    cited: list[int] = []
    for phrase in dict.fromkeys(p for p in phrases if p.strip()):
        needle = phrase.lower()
        acts = [t for t in turns if needle in index.actions.get(t, "").lower()]
        obs = [t for t in turns if needle in index.observations.get(t, "").lower()]
        if not acts and not obs:
            rows.append(f"'{_cell(phrase)}': not in turns {lo}-{hi}")
            continue
        parts = []
        if acts:
            parts.append(f"in {len(acts)} actions (turns {_turn_list(acts)})")
        if obs:
            parts.append(f"in {len(obs)} observations (turns {_turn_list(obs)})")
        both = sorted(set(acts) | set(obs))
        rows.append(
            f"'{_cell(phrase)}': " + "; ".join(parts) + f"; first turn {both[0]}, last {both[-1]}"
        )
        cited += both
    return Table(f"occurrences in turns {lo}-{hi}", rows, sorted(set(cited)))


def timeline(index: TurnIndex, lo: int, hi: int) -> Table:
    turns = _in(index, lo, hi)[:MAX_TIMELINE]
    rows = [f"{t}: {_cell(index.actions.get(t, ''))}" for t in turns]
    return Table(f"actions of turns {lo}-{hi}", rows, turns)


def state_changes(rows: Sequence[dict[str, object]], a: int, b: int, question: str) -> Table:
    """The graph's changes in turns (a, b]: per subject, its values in order (from the
    SUPERSEDES chain), and the list members that appeared or went away; the subjects the
    question names first."""
    asked = set(query_terms(question))
    chains: dict[tuple[str, str], list[tuple[int, str]]] = {}
    members: list[tuple[int, str, str]] = []
    for r in rows:
        subject, attribute = str(r["subject"]), str(r["attribute"])
        turn, value = int(r["turn"]), str(r["value"])  # type: ignore[call-overload]
        if r["kind"] in ("line_added", "line_removed"):
            members.append((turn, "+" if r["kind"] == "line_added" else "-", value))
            continue
        chain = chains.setdefault((subject, attribute), [])
        if not chain and r["old_value"] is not None:
            chain.append((int(r["old_turn"]), str(r["old_value"])))  # type: ignore[call-overload]
        chain.append((turn, value))

    def weight(words: str) -> int:
        return -len(asked.intersection(terms(words)))

    rows_out: list[str] = []
    cited: set[int] = set()
    for (subject, attribute), chain in sorted(
        chains.items(), key=lambda kv: (weight(" ".join(kv[0])), kv[1][0][0])
    )[:MAX_ROWS]:
        name = subject if attribute == "value" else f"{subject} {attribute}"
        steps = " → ".join(f"{_cell(v)} ({t})" for t, v in chain[:8])
        rows_out.append(f"{_cell(name)}: {steps}" + (" → …" if len(chain) > 8 else ""))
        cited.update(t for t, _ in chain)
    for turn, sign, value in sorted(members, key=lambda m: (weight(m[2]), m[0]))[: MAX_ROWS // 2]:
        rows_out.append(f"turn {turn} {sign} {_cell(value)}")
        cited.add(turn)
    title = f"changes in turns {a}-{b} (values in order, with their turns)"
    return Table(title, rows_out, sorted(cited))


def _values(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _KV.match(line)
        if m:
            out.setdefault(m.group(1).strip(), m.group(2).strip())
    return out


def changes(index: TurnIndex, a: int, b: int, question: str = "") -> Table:
    """What differs between the observations of turns a and b: changed ``key: value``
    lines, then the lines only one of them has, those sharing the question's words first."""
    if a not in index.observations or b not in index.observations:
        return Table(f"changes from turn {a} to turn {b}", [], [])
    before, after = index.observations[a], index.observations[b]
    rows: list[str] = []
    va, vb = _values(before), _values(after)
    for key in va:
        if key in vb and va[key] != vb[key]:
            rows.append(f"{_cell(key)}: {_cell(va[key])} → {_cell(vb[key])}")
    old = [x.strip() for x in before.splitlines() if x.strip()]
    new = [x.strip() for x in after.splitlines() if x.strip()]
    old_set, new_set = set(old), set(new)
    kv_lines = {k for k in va if k in vb and va[k] != vb[k]}

    def is_kv(line: str) -> bool:
        m = _KV.match(line)
        return m is not None and m.group(1).strip() in kv_lines

    gone = [x for x in dict.fromkeys(old) if x not in new_set and not is_kv(x)]
    came = [x for x in dict.fromkeys(new) if x not in old_set and not is_kv(x)]
    asked = set(query_terms(question))

    def relevant(lines: list[str]) -> list[str]:
        hits = sorted(lines, key=lambda x: -len(asked.intersection(terms(x))))
        return [x for x in hits if asked.intersection(terms(x))][:MAX_CHANGES]

    rows += [f"only in turn {a}: {_cell(x)}" for x in relevant(gone)]
    rows += [f"only in turn {b}: {_cell(x)}" for x in relevant(came)]
    if gone or came:
        rows.append(f"({len(gone)} lines only in turn {a}, {len(came)} only in turn {b})")
    counts = Counter({a: 1, b: 1})
    return Table(f"changes from turn {a} to turn {b}", rows, sorted(counts))
