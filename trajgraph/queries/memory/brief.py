"""The brief: a compact digest of one trajectory, generated from the graph, within a token budget.

Sections, each line citing its turns:

* the task;
* **open failures**: actions whose latest run failed (an error state, or a non-zero exit
  code) and that no later run of the same command fixed, with the error verbatim and their
  known causes (states with a CAUSES edge to the failing action or to a result it showed);
* **failed attempts**: failures a later run of the same command got past;
* **current state**: per subject and attribute, the state nothing supersedes, with the turn
  that set it and the value it replaced;
* **identifiers touched most**: paths, commands, tables, URLs ... by the turns mentioning them.

Trimming is by priority: lines are taken round-robin from the sections (open failures, then
failed attempts, current state, identifiers; newest and changed first within each) while the
rendered text fits the budget, counted with the project's tiktoken encoding. Nothing is hand
maintained: ``before_turn`` gives the brief as it would have read before that turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import neo4j

from trajgraph.core.tokens import check_budget, count_tokens, encode, get_encoding
from trajgraph.extractors.actions import first_line, same_action
from trajgraph.queries.lessons.hints import turn_lessons
from trajgraph.queries.lessons.lookup import SignatureLessons
from trajgraph.queries.memory.store import (
    QUERY_TIMEOUT_S,
    CurrentState,
    Memory,
    TurnRecord,
    is_exit_note,
    open_memory,
)

DEFAULT_BUDGET = 400
MIN_BUDGET = 60
MAX_BUDGET = 4000
TASK_SHARE = 1 / 5  # of the budget, at most, for the task line
VALUE_CHARS = 100
ACTION_CHARS = 90
ERROR_CHARS = 200
MAX_CANDIDATES = 60  # lines tried per section
IDENTIFIER_KINDS = ("path", "url", "command", "table", "column", "element", "symbol", "sql")
# Lines taken from each section per round: failures first, identifiers least.
SECTIONS = (
    ("open_failures", "Open failures", 2),
    ("failed_attempts", "Failed attempts", 2),
    ("current_state", "Current state", 2),
    ("identifiers", "Identifiers touched most", 1),
)


@dataclass
class FailureGroup:
    """Runs of one action (same canonical form) that failed."""

    action: str  # the first line of the action
    turns: list[int]  # failing runs, oldest first
    error: str  # of the latest failing run, verbatim (cut at ERROR_CHARS)
    resolved_at: int | None = None  # a later run of the same command that did not fail
    causes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def last(self) -> int:
        return self.turns[-1]


def failure_groups(turns: Sequence[TurnRecord]) -> list[FailureGroup]:
    """Failed actions grouped by canonical form, each with the later success (same command)
    that resolved it, if any; newest failure first."""
    groups: list[tuple[TurnRecord, FailureGroup]] = []
    for rec in turns:
        if not rec.failed:
            continue
        group = next((g for r, g in groups if same_action(r.canon, rec.canon)), None)
        if group is None:
            group = FailureGroup(first_line(rec.action, ACTION_CHARS), [], "")
            groups.append((rec, group))
        group.turns.append(rec.turn)
        group.error = rec.failure_text(ERROR_CHARS)
    for rec, group in groups:
        head = rec.canon.head
        group.resolved_at = next(
            (
                u.turn
                for u in turns
                if u.turn > group.last and not u.failed and head and u.canon.head == head
            ),
            None,
        )
    return sorted((g for _, g in groups), key=lambda g: -g.last)


@dataclass
class Line:
    section: str
    text: str
    item: dict[str, Any]
    # Shorter versions (text, item) tried in turn when the line does not fit the budget.
    shorter: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@dataclass
class Brief:
    trajectory: str
    before_turn: int | None
    budget: int
    tokens: int
    text: str
    sections: dict[str, list[dict[str, Any]]]
    omitted: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def build_brief(
    driver: neo4j.Driver,
    *,
    database: str,
    tenant: str,
    trajectory: str,
    budget: int = DEFAULT_BUDGET,
    before_turn: int | None = None,
    timeout_s: float = QUERY_TIMEOUT_S,
) -> Brief:
    check_budget(budget, MIN_BUDGET, MAX_BUDGET)
    with open_memory(
        driver,
        database=database,
        tenant=tenant,
        trajectory=trajectory,
        before_turn=before_turn,
        timeout_s=timeout_s,
    ) as memory:
        return brief_of(memory, budget)


def brief_of(memory: Memory, budget: int = DEFAULT_BUDGET) -> Brief:
    groups = failure_groups(memory.turns)
    actions = {t.turn: t.action for t in memory.turns}
    open_ = [g for g in groups if g.resolved_at is None]
    causes = memory.failure_causes([g.last for g in open_])
    for g in open_:
        g.causes = causes.get(g.last, [])
    seen_elsewhere = turn_lessons(memory, [g.last for g in open_])
    candidates: dict[str, list[Line]] = {
        "open_failures": [_open_line(g, seen_elsewhere.get(g.last, [])) for g in open_],
        "failed_attempts": [_attempt_line(g) for g in groups if g.resolved_at is not None],
        "current_state": [_state_line(s, actions) for s in _ranked_states(memory.current_states)],
        "identifiers": [_identifier_line(r) for r in _identifiers(memory)],
    }
    head = _header(memory)
    task = _task_line(memory.task, budget, head)
    chosen = _fit(head, task, candidates, budget)
    text = _render(head, task, chosen)
    return Brief(
        trajectory=memory.trajectory,
        before_turn=memory.before_turn,
        budget=budget,
        tokens=count_tokens(text),
        text=text,
        sections={k: [line.item for line in v] for k, v in chosen.items()},
        omitted={k: len(candidates[k]) - len(chosen[k]) for k in candidates},
    )


# -- lines ---------------------------------------------------------------------------------------


def _turns(turns: Sequence[int]) -> str:
    shown = list(turns)
    if len(shown) > 4:
        shown = [*shown[:2], *shown[-2:]]
        return f"turns {shown[0]}, {shown[1]} … {shown[2]}, {shown[3]} ({len(turns)} runs)"
    return ("turn " if len(shown) == 1 else "turns ") + ", ".join(map(str, shown))


def _cut(text: str, limit: int) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _open_line(g: FailureGroup, elsewhere: Sequence[SignatureLessons] = ()) -> Line:
    text = f"- {_turns(g.turns)}: `{g.action}` → {g.error or 'failed'}"
    causes = list(
        dict.fromkeys(
            f"turn {c['turn']} `{_cut(c['subject'], 60)}` = {_cut(c['value'], 60)}"
            for c in g.causes
        )
    )[:3]
    if causes:
        text += "; known causes: " + "; ".join(causes)
    item = {"turns": g.turns, "action": g.action, "error": g.error, "causes": g.causes}
    lesson = max(elsewhere, key=lambda s: len(s.runs), default=None)
    if lesson is None or not lesson.runs:
        return Line("open_failures", text, item)
    n, ok = len(lesson.runs), len(lesson.got_past)
    seen = f"seen in {n} other run{'s' if n != 1 else ''}, {ok} got past it"
    summary = {"signature": lesson.signature, "runs": n, "got_past": ok}
    variants: list[tuple[str, dict[str, Any]]] = []
    if lesson.resolutions:
        top = lesson.resolutions[0]
        step = top.steps[-1] if top.steps else None
        how = f"`{first_line(step['action'], ACTION_CHARS)}`" if step else "re-running it"
        by = (
            f"; got past it by {how} (e.g. {top.trajectory} turn "
            f"{step['turn'] if step else top.resolved_turn}, worked in {len(top.worked_in)})"
        )
        best = {
            "trajectory": top.trajectory,
            "turn": step["turn"] if step else top.resolved_turn,
            "action": first_line(step["action"], ACTION_CHARS) if step else None,
            "worked_in": len(top.worked_in),
        }
        variants.append((f"{text}; {seen}{by}", {**item, "lessons": {**summary, "top": best}}))
    variants.append((f"{text}; {seen}", {**item, "lessons": summary}))
    variants.append((text, item))
    first, *rest = variants
    return Line("open_failures", first[0], first[1], rest)


def _attempt_line(g: FailureGroup) -> Line:
    text = (
        f"- {_turns(g.turns)}: `{g.action}` → {g.error or 'failed'} "
        f"(a later run got past it at turn {g.resolved_at})"
    )
    item = {"turns": g.turns, "action": g.action, "error": g.error, "resolved_at": g.resolved_at}
    return Line("failed_attempts", text, item)


def _ranked_states(states: Sequence[CurrentState]) -> list[CurrentState]:
    """Changed values first, then values, file changes and results; newest first within."""
    shown = [
        s
        for s in states
        if s.kind != "error"
        and not (s.kind == "exit_code" and s.value.strip() != "0")
        and not (s.kind == "status" and is_exit_note(s.value))  # "exit code: 0" again
    ]
    rank = {"value": 0, "file_changed": 0, "status": 1, "other": 1, "exit_code": 2}
    return sorted(
        shown,
        key=lambda s: (s.previous is None, rank.get(s.kind, 1), -s.turn, s.subject, s.value),
    )


def _state_line(s: CurrentState, actions: dict[int, str]) -> Line:
    prev = s.previous
    since = f"turn {s.turn}" + (f"; was {_cut(prev[0], 60)} at turn {prev[1]}" if prev else "")
    if s.kind == "file_changed":
        what = "" if s.value == s.subject else f": {_cut(s.value, VALUE_CHARS)}"
        by = first_line(actions.get(s.turn, ""), 60)
        text = f"- `{_cut(s.subject, 80)}` changed{what} (turn {s.turn}: `{by}`)"
    else:
        text = f"- `{_cut(s.subject, 80)}` {s.attribute} = {_cut(s.value, VALUE_CHARS)} ({since})"
    item = {
        "subject": s.subject,
        "attribute": s.attribute,
        "kind": s.kind,
        "value": s.value,
        "turn": s.turn,
        "previous": {"value": prev[0], "turn": prev[1]} if prev else None,
    }
    return Line("current_state", text, item)


def _identifiers(memory: Memory) -> list[dict[str, Any]]:
    rows = memory.identifiers(IDENTIFIER_KINDS, limit=40)
    # A bare command word (ls, cat) is habit, not a thing the agent works on.
    return [r for r in rows if not (r["kind"] == "command" and " " not in r["name"])][:12]


def _identifier_line(r: dict[str, Any]) -> Line:
    turns = r["turns"]
    text = f"- `{_cut(r['name'], 80)}` ({r['kind']}): {len(turns)} turns, {turns[0]} … {turns[-1]}"
    item = {
        "name": r["name"],
        "kind": r["kind"],
        "turns": len(turns),
        "first_turn": turns[0],
        "last_turn": turns[-1],
    }
    return Line("identifiers", text, item)


# -- budget --------------------------------------------------------------------------------------


def _header(memory: Memory) -> str:
    # The same text with or without before_turn: the brief of turns < t reads exactly like
    # the brief of a graph built from those turns (the JSON says before_turn).
    span = f"turns 0–{memory.last_turn}" if memory.last_turn is not None else "no turns"
    return f"Brief of {memory.trajectory} ({span})"


def _task_line(task: str, budget: int, head: str) -> str:
    flat = " ".join((task or "").split())
    if not flat:
        return ""
    room = min(int(budget * TASK_SHARE), budget - count_tokens(head) - 8)
    if room <= 4:
        return ""
    tokens = encode(flat)
    if len(tokens) <= room - 2:
        return f"Task: {flat}"
    cut = get_encoding().decode(tokens[: room - 3]).rstrip()
    return f"Task: {cut}…"


def _render(head: str, task: str, chosen: dict[str, list[Line]]) -> str:
    out = [head] + ([task] if task else [])
    for key, title, _ in SECTIONS:
        if chosen.get(key):
            out.append(f"{title}:")
            out.extend(line.text for line in chosen[key])
    return "\n".join(out)


def _fit(
    head: str, task: str, candidates: dict[str, list[Line]], budget: int
) -> dict[str, list[Line]]:
    chosen: dict[str, list[Line]] = {key: [] for key, _, _ in SECTIONS}
    queues = {key: list(candidates[key][:MAX_CANDIDATES]) for key, _, _ in SECTIONS}
    used = count_tokens(_render(head, task, chosen))
    while any(queues.values()) and used < budget:
        for key, _, per_round in SECTIONS:
            for _ in range(per_round):
                if not queues[key]:
                    break
                line = queues[key].pop(0)
                for text, item in [(line.text, line.item), *line.shorter]:
                    chosen[key].append(Line(line.section, text, item))
                    cost = count_tokens(_render(head, task, chosen))
                    if cost <= budget:
                        used = cost
                        break
                    chosen[key].pop()  # a shorter line (of this or another section) may fit
    return chosen
