"""Rows for cross-run memory: failure signatures of error states and the trajectory's
resolutions (``Signature`` and ``Resolution`` nodes, docs/lessons.md).

Built from the same normalized trajectory and merged extraction as the rest of its rows, so
a batch ingest, a stream and a re-ingest write the same nodes; every id is deterministic.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from trajgraph.extractors.resolutions import (
    RESOLUTION_VERSION,
    Episode,
    Step,
    TurnFacts,
    episodes,
    is_failure_error,
)
from trajgraph.extractors.signatures import SIGNATURE_VERSION, signature
from trajgraph.graph import node_ids
from trajgraph.schemas.extraction import StateItem

# Part of every trajectory's content hash (graph/rows.py): changed rules rewrite on re-ingest.
LESSONS_VERSION = f"signatures/{SIGNATURE_VERSION} resolutions/{RESOLUTION_VERSION}"


def full_error_line(observation: str, value: str) -> str:
    """The whole line of ``observation`` an error state's value was cut from (the extractor
    shortens long lines), or the value itself."""
    at = observation.find(value) if value else -1
    if at < 0:
        return value
    end = observation.find("\n", at)
    return observation[at : end if end >= 0 else len(observation)].strip()


def lesson_rows(
    *,
    tenant: str,
    trajectory_id: str,
    turns: list[dict[str, Any]],
    states: list[tuple[StateItem, str]],  # (state, its uid), as written
    turn_uids: dict[int, str],
    base: dict[str, Any],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(signature rows, resolution rows, resolution step rows) of one trajectory."""
    signature_rows: list[dict[str, Any]] = []
    facts, by_turn = turn_facts(turns, [s for s, _ in states])
    for s, su in states:
        text = by_turn.get(s.turn, {}).get(s.value) if s.kind == "error" else None
        if text is None or s.turn not in turn_uids:
            continue
        signature_rows.append(
            {
                "uid": node_ids.signature_uid(tenant, SIGNATURE_VERSION, text),
                "state_uid": su,
                "props": {"tenant": tenant, "version": SIGNATURE_VERSION, "text": text},
            }
        )
    errors: dict[int, dict[str, str]] = defaultdict(dict)  # turn → signature → error value
    for turn, signed in by_turn.items():
        for value, text in signed.items():
            errors[turn].setdefault(text, value)
    resolution_rows: list[dict[str, Any]] = []
    step_rows: list[dict[str, Any]] = []
    for e in episodes(facts):
        ru = node_ids.resolution_uid(tenant, trajectory_id, e.signature, e.failed_turns[0])
        resolution_rows.append(
            _resolution_row(ru, e, tenant, turn_uids, base, errors[e.failed_turns[0]])
        )
        for attempt, group in [*enumerate(e.attempts), (-1, e.steps)]:
            helped = attempt < 0
            for order, step in enumerate(group):
                step_rows.append(_step_row(ru, step, turn_uids, attempt, order, helped))
    return signature_rows, resolution_rows, step_rows


def turn_facts(
    turns: list[dict[str, Any]], states: list[StateItem]
) -> tuple[list[TurnFacts], dict[int, dict[str, str]]]:
    """What resolutions read of each turn, and per turn the signature of each error value
    that is a failure (not content a viewer printed)."""
    actions = {int(t["idx"]): t.get("action") or "" for t in turns}
    observations = {int(t["idx"]): t.get("observation") or "" for t in turns}
    exit_codes: dict[int, list[str]] = defaultdict(list)
    written: dict[int, list[str]] = defaultdict(list)
    for s in states:
        if s.kind == "exit_code":
            exit_codes[s.turn].append(s.value)
        elif s.kind == "file_changed":
            written[s.turn].append(s.subject)
    by_turn: dict[int, dict[str, str]] = defaultdict(dict)
    for s in states:
        if s.kind != "error" or s.turn not in actions:
            continue
        if not is_failure_error(actions[s.turn], s.value, exit_codes.get(s.turn, ())):
            continue
        text = signature(full_error_line(observations.get(s.turn, ""), s.value))
        if text is not None:
            by_turn[s.turn][s.value] = text
    facts = [
        TurnFacts(
            turn,
            actions[turn],
            tuple(sorted(set(by_turn.get(turn, {}).values()))),
            tuple(dict.fromkeys(written.get(turn, []))),
        )
        for turn in sorted(actions)
    ]
    return facts, by_turn


def _resolution_row(
    ru: str,
    e: Episode,
    tenant: str,
    turn_uids: dict[int, str],
    base: dict[str, Any],
    errors: dict[str, str],
) -> dict[str, Any]:
    signature_uid = node_ids.signature_uid(tenant, SIGNATURE_VERSION, e.signature)
    return {
        "uid": ru,
        "signature_uid": signature_uid,
        "failed_turn_uids": [turn_uids[t] for t in e.failed_turns],
        "resolved_turn_uid": None if e.resolved_turn is None else turn_uids[e.resolved_turn],
        "props": {
            **base,
            "signature": e.signature,
            "signature_uid": signature_uid,
            "version": SIGNATURE_VERSION,
            "error": errors.get(e.signature, ""),
            "command": e.command,
            "outcome": e.outcome,
            "retried": e.retried,
            "failed_turn": e.failed_turns[0],
            "failed_turns": e.failed_turns,
            "resolved_turn": e.resolved_turn,
            "step_turns": [s.turn for s in e.steps],
            "attempt_turns": [s.turn for group in e.attempts for s in group],
            "attempts": len(e.attempts),
        },
    }


def _step_row(
    ru: str, step: Step, turn_uids: dict[int, str], attempt: int, order: int, helped: bool
) -> dict[str, Any]:
    return {
        "resolution_uid": ru,
        "turn_uid": turn_uids[step.turn],
        "props": {
            "turn": step.turn,
            "helped": helped,
            "attempt": attempt,
            "order": order,
            # Key action names for grouping in Cypher; the engine also compares the tokens.
            "keys": [k.key for k in step.keys],
            "tokens": sorted({t for k in step.keys for t in k.tokens}),
            "key_json": json.dumps(
                [{"key": k.key, "tokens": list(k.tokens)} for k in step.keys], ensure_ascii=False
            ),
        },
    }
