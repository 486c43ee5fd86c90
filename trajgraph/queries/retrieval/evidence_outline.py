"""Evidence for long runs: an outline of what the run *did*, one line per step that changed
something or ran something, for questions that span the run or ask which step did a thing.

On a 45-75 k-token run a 2,000-token context holds the lines of a few dozen turns; a question
such as "which step caused the successful resolution?" or "what was the progression from
reproduction to the fix?" names no step, and its answer is a step number or the sequence of
edits and runs, spread over the whole run. What a user's own long log needs there is what a
person skimming it would write down (issue 34):

* the **edits** (a file created, a string replaced, ``sed -i``, a heredoc written) with the
  turn and the file, so the turn that introduced a name and those that changed it are there;
* the **runs** (scripts, tests, code cells) with their outcome (the error line, else the last
  line the run printed), so the run that failed and the one that passed are there;
* not the other steps (views, searches, thoughts, a game's moves): a run with fewer than
  ``MIN_ROWS`` edits and runs gets no outline.

``wants_outline`` is the rule: no step named (a named step has its own view) and the question
asks for a step ("which step", "at what point") or spans the run (progression, root cause,
resolution, evidence, hurdles, approach); or a step named and the question asks which step
changed something by then ("at step 41, what is the last step when the validation logic was
changed?"), with the outline up to the named step. The outline is a ``Table`` like the
aggregates, so the context's block share bounds it; it is built from the turns' own text, no
model.
"""

from __future__ import annotations

import json
import re

from trajgraph.core.tokens import count_tokens
from trajgraph.extractors.heuristic import error_lines
from trajgraph.queries.retrieval.aggregates import Table
from trajgraph.queries.retrieval.anchors import Anchors
from trajgraph.queries.retrieval.lexical import TurnIndex

MAX_ROWS = 22  # ~20 tokens a row
# Within the context's share of one block at a 2,000-token budget (context.ONE_BLOCK_SHARE),
# which would otherwise cut the table's middle: rows of least priority go first.
MAX_TOKENS = 480
MIN_TURNS = 12  # a shorter run is shown whole by the passages anyway
MIN_ROWS = 3  # edits and runs: fewer is not an outline
ACTION_CHARS = 72
OUTCOME_CHARS = 48

_ASKS_STEP = re.compile(
    r"\b(?:which|what)\s+(?:\w+\s+){0,3}?(?:step|turn|action)s?\b|\bat\s+what\s+point\b",
    re.IGNORECASE,
)
# A question that names a step and asks when something was changed before it ("at step 41,
# what is the last step when the validation logic was changed?"): the edits up to that step.
_ASKS_CHANGE = re.compile(
    r"\b(?:chang|modif|edit|implement|fix|introduc|updat|add)\w*\b", re.IGNORECASE
)
_SPANS_RUN = re.compile(
    r"\b(?:progression|progress(?:ed)?|overall|throughout|entire|whole\s+(?:run|session|task)"
    r"|root\s+cause|resolv\w*|resolution|succe\w*|hurdles?|obstacles?|challenges?|approach"
    r"|strategy|workflow|sequence|evidence|summar\w*)\b",
    re.IGNORECASE,
)
# "tool: {json}" (OpenHands, AMA-Bench) and "tool({json})" (function-call logs)
_CALL = re.compile(r"^\s*([A-Za-z_][\w.-]*)\s*(?::\s*|\()\s*(\{.*\})\s*\)?\s*$", re.DOTALL)
_CD_PREFIX = re.compile(r"^\s*cd\s+\S+\s*&&\s*")
_EDIT_COMMANDS = frozenset({"create", "str_replace", "insert", "write", "edit", "undo_edit"})
_EDIT_TOOLS = re.compile(r"(?:^|_)(?:write|save|saver|edit|patch|create)(?:_|$)", re.IGNORECASE)
_SHELL_EDIT = re.compile(
    r"\bsed\s+-i|\btee\b|>\s*[\w./-]+\.\w+|<<\s*['\"]?EOF|\bpatch\b|\bgit\s+apply"
)
_RUN = re.compile(
    r"\b(?:python\d?(?:\.\d+)?|pytest|tox|node|npm|go\s+test|cargo|make|bin/test|runtests)\b"
    r"|^(?:execute_code|run_code|python)\b",
    re.IGNORECASE,
)
# Lines a tool prints around every result: they say nothing about this one.
_NOISE_LINE = re.compile(
    r"^\[.*\]$|^Your thought has been logged|^[-=_*#~.]{3,}$|^File created successfully"
    r"|^Review the changes|^The file \S+ has been edited|^Content successfully saved",
    re.IGNORECASE,
)
_ARG_ORDER = ("command", "path", "file", "url", "query", "code", "step_index", "content")


def wants_outline(question: str, anchors: Anchors) -> bool:
    if anchors.points or anchors.ranges:
        # A named step has its own view, unless the question asks which step changed
        # something by then: the answer is another, earlier step.
        return bool(_ASKS_STEP.search(question) and _ASKS_CHANGE.search(question))
    return bool(_ASKS_STEP.search(question) or _SPANS_RUN.search(question))


def outlines(index: TurnIndex, question: str, anchors: Anchors) -> list[Table]:
    """The outline of the question's scope when ``wants_outline``, else nothing."""
    if not wants_outline(question, anchors) or not index.turns:
        return []
    lo, hi = min(index.turns), max(index.turns)
    scope = anchors.scope()
    if anchors.points or anchors.ranges:
        hi = max(anchors.named)  # "at step 41, the last step when …": up to the named step
    elif scope is not None:
        lo, hi = scope
    table = outline(index, lo, hi)
    return [table] if table is not None else []


def outline(index: TurnIndex, lo: int, hi: int) -> Table | None:
    """The run's edits and runs in turns lo..hi, runs with their outcomes, by turn; at most
    ``MAX_ROWS`` (edits first, then the run after each edit, then other runs); None for a
    short run or one with too few edits and runs."""
    turns = [t for t in index.turns if lo <= t <= hi]
    if len(turns) < MIN_TURNS:
        return None
    # Priority: 3 an edit, 2 the first run after an edit (what tested it), 1 another run,
    # 0 the rest; ties by turn, so a long run keeps its first edits and runs.
    kind = {t: _priority(index.actions.get(t, "")) for t in turns}
    ranked: list[tuple[int, int]] = []
    edited = False
    for t in turns:
        p = {2: 3, 1: 1}.get(kind[t], 0)
        if kind[t] == 2:
            edited = True
        elif kind[t] == 1 and edited:
            p, edited = 2, False
        ranked.append((p, t))
    # A run that edits and runs nothing (moves in a game, clicks on a page) has no outline:
    # its steps are the passages' business.
    if sum(1 for p, _ in ranked if p > 0) < MIN_ROWS:
        return None
    ranked = [(p, t) for p, t in ranked if p > 0]
    by_priority = [t for _, t in sorted(ranked, key=lambda pt: (-pt[0], pt[1]))[:MAX_ROWS]]
    row: dict[int, str] = {}
    for t in by_priority:
        action = compact_action(index.actions.get(t, ""))
        outcome = "" if kind[t] == 2 else _outcome(index.observations.get(t, ""))
        row[t] = f"{t}: {action}" + (f" → {outcome}" if outcome else "")
    title = f"edits and runs of turns {lo}-{hi}"
    while len(by_priority) > MIN_ROWS and (
        count_tokens(Table(title, [row[t] for t in by_priority], []).render()) > MAX_TOKENS
    ):
        by_priority.pop()
    chosen = sorted(by_priority)
    return Table(title, [row[t] for t in chosen], chosen)


def compact_action(action: str) -> str:
    """One short line for an action: a tool call as its tool and salient arguments (the
    command, the path's last parts, the first line of code), a shell command without its
    leading ``cd DIR &&``."""
    text = (action or "").strip()
    m = _CALL.match(text)
    if m is not None:
        try:
            args = json.loads(m.group(2))
        except ValueError:
            args = None
        if isinstance(args, dict):
            parts = [m.group(1)]
            for key in _ARG_ORDER:
                value = args.get(key)
                if value is None or value == "":
                    continue
                value = _first_line(str(value))
                if key == "command":
                    value = _CD_PREFIX.sub("", value)
                elif key in ("path", "file"):
                    value = "/".join(value.rstrip("/").split("/")[-2:])
                parts.append(value)
                if len(" ".join(parts)) >= ACTION_CHARS:
                    break
            return _cut(" ".join(parts), ACTION_CHARS)
    return _cut(_CD_PREFIX.sub("", _first_line(text)), ACTION_CHARS)


def _priority(action: str) -> int:
    m = _CALL.match(action or "")
    if m is not None:
        try:
            args = json.loads(m.group(2))
        except ValueError:
            args = {}
        if isinstance(args, dict):
            if str(args.get("command", "")) in _EDIT_COMMANDS or _EDIT_TOOLS.search(m.group(1)):
                return 2
            command = str(args.get("command") or args.get("code") or "")
            if _SHELL_EDIT.search(command):
                return 2
            if "code" in args or _RUN.search(command):
                return 1
            return 0
    if _SHELL_EDIT.search(action or ""):
        return 2
    return 1 if _RUN.search(action or "") else 0


def _outcome(observation: str) -> str:
    """The error line a run ended with, else its last line that says something."""
    errors = error_lines(observation[-4000:]) if observation else []
    if errors:
        return _cut(errors[-1], OUTCOME_CHARS)
    for line in reversed(observation.strip().splitlines()[-40:]):
        line = line.strip()
        if line and not _NOISE_LINE.match(line):
            return _cut(line, OUTCOME_CHARS)
    return ""


def _first_line(text: str) -> str:
    """The first non-empty line; with the next one when it opens a block (``python -c "``)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    if len(lines) > 1 and (len(lines[0]) < 24 or lines[0].endswith(('"', "'", ":", "("))):
        return f"{lines[0]} {lines[1]}"
    return lines[0]


def _cut(text: str, limit: int) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 1].rstrip() + "…"
