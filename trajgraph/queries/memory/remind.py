"""Reminder or silence: before the agent's next action, say what the graph knows against it.

Offline rules, in priority order (the first that holds answers; none holding is silence):

1. ``repeated_failure``: the same or a near-identical action (extractors/actions.py) already
   failed, its latest run failed, and only read-only actions happened since, so nothing it
   depends on changed. The reminder quotes the error verbatim and cites the failing runs.
2. ``undoes_fix``: the action reverts a file (``git checkout -- F``, ``git stash``, ``rm F``,
   ``undo_edit F``) or sets a key an earlier fix set (``sed … retries=2`` after ``retries=5``)
   where that fix is an edit the graph says changed a failing re-run into a passing one (the
   merge's edit → result CAUSES edge), the failure named the file (and the key the edit
   set), and the re-run still passes.
3. ``changed_state``: the action uses ``key=value`` with a value the key *had*, while the
   graph shows it changed since by an action that named the key and its new value; or it
   uses a path that an earlier ``rm`` removed and nothing recreated.
4. ``failed_elsewhere``: the trajectory has an open failure, the action is a command other
   runs of the tenant ran after the same failure (same signature, extractors/signatures.py),
   the failure came back after it there, and no run got past it that way (cross-run
   lessons, queries/lessons/).

Silence (``reminder: null``) is the normal answer. With an LLM configured, the model sees the
brief plus the evidence these rules gather and answers reminder-or-null as schema-validated
JSON (queries/llm_remind.py); an invalid reply falls back to the rules.
"""

from __future__ import annotations

import re
from typing import Any

import neo4j

from trajgraph.core.errors import ConfigError
from trajgraph.extractors.actions import (
    NEAR_IDENTICAL,
    Canon,
    assignments,
    canonical,
    canonical_command,
    first_line,
    is_read_only,
    mentions_path,
    revert_of,
    same_action,
    same_path,
    similarity,
    used_values,
    verdict,
    writes_path,
)
from trajgraph.extractors.identifiers import find_identifiers
from trajgraph.queries.lessons import hints
from trajgraph.queries.memory.findings import Finding, Reminder, from_findings
from trajgraph.queries.memory.llm_remind import ask_llm
from trajgraph.queries.memory.store import QUERY_TIMEOUT_S, Memory, TurnRecord, open_memory

MAX_ACTION_CHARS = 20_000
_VAGUE_VALUES = frozenset({"null", "none", "true", "false", "nil", "undefined", ""})
ACTION_CHARS = 80


def check_action(next_action: str) -> None:
    if not next_action or not next_action.strip():
        raise ConfigError("next_action is empty")
    if len(next_action) > MAX_ACTION_CHARS:
        raise ConfigError(f"next_action is limited to {MAX_ACTION_CHARS} characters")


def remind(
    driver: neo4j.Driver,
    *,
    database: str,
    tenant: str,
    trajectory: str,
    next_action: str,
    before_turn: int | None = None,
    llm: Any = None,  # extractors.llm_client.ChatClient, when an LLM is configured
    timeout_s: float = QUERY_TIMEOUT_S,
) -> Reminder:
    check_action(next_action)
    with open_memory(
        driver,
        database=database,
        tenant=tenant,
        trajectory=trajectory,
        before_turn=before_turn,
        timeout_s=timeout_s,
    ) as memory:
        return remind_with(memory, next_action, llm=llm)


def remind_with(memory: Memory, next_action: str, *, llm: Any = None) -> Reminder:
    findings = offline_findings(memory, next_action)
    if llm is not None:
        return ask_llm(llm, memory, next_action, findings)
    return from_findings(memory, findings)


def offline_findings(memory: Memory, next_action: str) -> list[Finding]:
    """Every rule that holds for ``next_action``, in priority order."""
    canon = canonical(next_action)
    found: list[Finding | None] = [
        repeated_failure(memory.turns, canon),
        undoes_fix(memory, next_action),
        stale_value(memory, next_action),
        removed_path(memory, next_action),
    ]
    if not any(found):
        found.append(failed_elsewhere(memory, next_action))
    return [f for f in found if f is not None]


# -- rule 1: the same action already failed --------------------------------------------------


def similar_runs(turns: list[TurnRecord], canon: Canon) -> list[tuple[TurnRecord, float]]:
    """Earlier runs of the same or a near-identical action, oldest first, with similarity."""
    out = []
    for rec in turns:
        score = similarity(rec.canon, canon)
        if score >= NEAR_IDENTICAL:
            out.append((rec, score))
    return out


def repeated_failure(turns: list[TurnRecord], canon: Canon) -> Finding | None:
    if canon.kind == "empty":
        return None
    runs = similar_runs(turns, canon)
    if not runs:
        return None
    last, _ = runs[-1]
    if not last.failed:
        return None  # the latest run of it worked: running it again is fine
    since = [r for r in turns if r.turn > last.turn]
    if any(not r.read_only for r in since):
        return None  # something changed since (an edit, a command, a reply): a retry is fair
    failed = [r.turn for r, _ in runs if r.failed]
    exact = same_action(last.canon, canon)
    shown = first_line(last.action, ACTION_CHARS)
    if last.action.strip().count("\n"):
        shown += " …"
    what = (
        f"The same action (`{shown}`) already failed"
        if exact
        else f"A near-identical command (`{shown}`) already failed"
    )
    others = [t for t in failed if t != last.turn][-3:]
    also = f" (also at turn{'s' if len(others) > 1 else ''} {', '.join(map(str, others))})"
    text = (
        f"{what} at turn {last.turn}{also if others else ''}: "
        f"{last.failure_text().rstrip('. ')}. "
        + (
            "Only read-only steps ran since, so expect the same result."
            if since
            else "It was the previous step."
        )
    )
    return Finding("repeated_failure", text, [*others, last.turn])


# -- rule 4: what other runs tried after the same failure, in vain ------------------------------


def failed_elsewhere(memory: Memory, action: str) -> Finding | None:
    """The action is a command other runs ran after this trajectory's open failure (same
    signature), the failure came back after it there, and no run got past it that way
    (queries/lessons/hints.py). Cites this trajectory's failing runs; the text names the
    other runs and turns."""
    found = hints.failed_elsewhere(memory, action)
    if found is None:
        return None
    return Finding("failed_elsewhere", hints.reminder_text(found), found.own_turns[-3:])


# -- rule 2: undoing a fix ---------------------------------------------------------------------


def undoes_fix(memory: Memory, action: str) -> Finding | None:
    revert = revert_of(action)
    command = canonical_command(action)
    sets = dict(assignments(command))
    if revert is None and not sets:
        return None
    # Newest fix first; of one fix's evidence, a test summary says more than an exit code.
    ranked = sorted(memory.fixes, key=lambda f: (-f["edit_turn"], f["kind"] == "exit_code"))
    for fix in ranked:
        if not (
            verdict(fix["kind"], fix["fixed_value"]) == "pass"
            and verdict(fix["failed_kind"], fix["failed_value"]) == "fail"
            and verdict(fix["current_kind"] or "", fix["current_value"] or "") == "pass"
        ):
            continue
        path = fix["file"]
        pairs = assignments(fix["fragment"]) if fix["fragment"] != path else []
        failure = fix["failed_text"] or ""
        # The failure was about what the edit changed: it names the file, and the key the
        # edit set when it set one.
        related = mentions_path(failure, path) and (
            not pairs or any(_has_word(failure, k) for k, _ in pairs)
        )
        if not related:
            continue
        how = None
        if revert is not None and (
            revert.all_files or any(same_path(p, path) for p in revert.paths)
        ):
            how = f"`{first_line(revert.how, ACTION_CHARS)}` reverts `{path}`"
        elif pairs and writes_path(action, path):
            for key, value in pairs:
                new = sets.get(key)
                if new is not None and new != value:
                    how = f"it sets `{key}={new}` in `{path}` over the fix's `{key}={value}`"
                    break
        if how is None:
            continue
        text = (
            f"This would undo the fix of turn {fix['edit_turn']}: {how}. After that edit "
            f"(`{first_line(fix['edit_action'], ACTION_CHARS)}`), `{_short(fix['subject'])}` "
            f"went from {_result(fix['failed_kind'], fix['failed_value'])} (turn "
            f"{fix['failed_turn']}) to {_result(fix['kind'], fix['fixed_value'])} (turn "
            f"{fix['fixed_turn']})."
        )
        return Finding(
            "undoes_fix", text, sorted({fix["failed_turn"], fix["edit_turn"], fix["fixed_turn"]})
        )
    return None


def _result(kind: str, value: str) -> str:
    return f"exit code {value.strip()}" if kind == "exit_code" else repr(_short(value))


def _has_word(text: str, word: str) -> bool:
    return re.search(rf"(?<![\w.-]){re.escape(word)}(?![\w-])", text) is not None


def _short(text: str, limit: int = 80) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# -- rule 3: acting on a state that changed ------------------------------------------------------


def stale_value(memory: Memory, action: str) -> Finding | None:
    """``key=old`` in the action while the key has held another value since a turn whose
    action set it (named the key and the new value)."""
    pairs = [(k, v) for k, v in used_values(action) if v.lower() not in _VAGUE_VALUES]
    if not pairs:
        return None
    history = memory.value_history([k for k, _ in pairs])
    by_key: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in history:
        by_key.setdefault((row["subject"], row["attribute"]), []).append(row)
    for key, old in pairs:
        for (subject, attribute), rows in by_key.items():
            if key not in (subject, attribute):
                continue
            name = f"`{key}`" if subject == key else f"`{key}` in `{subject}`"
            current = rows[-1]
            if current["value"] == old or old in current["value"]:
                continue
            # The turn from which the current value has held.
            since = current
            for row in reversed(rows):
                if row["value"] != current["value"]:
                    break
                since = row
            earlier = [r for r in rows if r["turn"] < since["turn"] and r["value"] == old]
            if not earlier:
                continue
            setter = since["action"] or ""
            if is_read_only(setter) or not (_has_word(setter, key) and current["value"] in setter):
                continue  # the value changed by a lookup (another record), not by the agent
            text = (
                f"{name} is {current['value']!r} since turn {since['turn']} "
                f"(`{first_line(setter, ACTION_CHARS)}`), no longer {old!r} as at turn "
                f"{earlier[-1]['turn']}."
            )
            return Finding("changed_state", text, [earlier[-1]["turn"], since["turn"]])
    return None


def removed_path(memory: Memory, action: str) -> Finding | None:
    """The action uses a path that an earlier ``rm`` removed, and nothing recreated it."""
    names = [n for n, kind in find_identifiers(action, action=True) if kind == "path"]
    if not names:
        return None
    actions = {t.turn: t.action for t in memory.turns}
    files = [s for s in memory.current_states if s.kind == "file_changed"]
    for name in names:
        if writes_path(action, name):
            continue  # recreating it
        for state in files:
            if not same_path(state.subject, name):
                continue
            revert = revert_of(actions.get(state.turn, ""))
            if (
                revert is None
                or not revert.how.lstrip().startswith("rm")
                or not any(same_path(p, name) for p in revert.paths)
            ):
                continue
            recreated = any(
                o.turn > state.turn and same_path(o.subject, name) and o is not state for o in files
            )
            if recreated:
                continue
            text = (
                f"`{name}` was removed at turn {state.turn} "
                f"(`{first_line(revert.how, ACTION_CHARS)}`) and nothing recreated it since."
            )
            return Finding("changed_state", text, [state.turn])
    return None
