"""Lessons: other runs that hit the same failure, what got them past it, what did not help.

The failure is an error text (its error lines are found as the heuristic extractor finds
them, then signed by extractors/signatures.py) or an error turn of a trajectory in the graph
(the signatures its error states link to). For each signature the tenant has seen, the
``Resolution`` nodes of the *other* trajectories (extractors/resolutions.py; the asking
trajectory is always left out) are read and ranked:

* **resolutions** by the number of runs in which a resolution with the same key action got
  past the failure (runs whose error has the same quoted values as the asked one, such as
  the module of ``No module named 'psycopg2'``, come first), one per key action, each with
  an example run, its turns and the verbatim actions;
* **attempts that did not help**: steps the same failure followed, grouped by key action,
  the ones that never got past the failure in any run first;
* the runs that **never got past it**.

The answer is rendered within a token budget (counted with the project's tiktoken
encoding); the JSON says what was kept and what was left out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import neo4j

from trajgraph.core.errors import ConfigError, NotFoundError
from trajgraph.core.tokens import check_budget, count_tokens
from trajgraph.extractors.heuristic import error_lines
from trajgraph.extractors.resolutions import Key, share_key_action
from trajgraph.extractors.signatures import (
    SIGNATURE_VERSION,
    closest_signature,
    quoted_values,
    signature,
    typed_values,
    wrapper,
)
from trajgraph.graph import node_ids
from trajgraph.graph.connection import graph_errors, run_read
from trajgraph.graph.lesson_rows import full_error_line
from trajgraph.queries.lessons import cypher

DEFAULT_BUDGET = 500
MIN_BUDGET = 60
MAX_BUDGET = 4000
MAX_ERROR_CHARS = 20_000
MAX_SIGNATURES = 3
MAX_LOOSE_CANDIDATES = 50_000  # a tenant's signatures read for a loose match
FETCH_ACTION_CHARS = 4000
QUERY_TIMEOUT_S = 10.0
RERUN = Key("re-run without changes")  # a resolution with no step in between


@dataclass(frozen=True)
class StepView:
    turn: int
    action: str  # verbatim (cut at FETCH_ACTION_CHARS)
    keys: tuple[Key, ...]
    helped: bool
    attempt: int


@dataclass
class Episode:
    """One other run's episode of the failure, as read from its ``Resolution`` node."""

    trajectory: str
    outcome: str
    retried: bool
    failed_turns: list[int]
    resolved_turn: int | None
    command: str
    error: str
    steps: list[StepView] = field(default_factory=list)

    @property
    def resolved(self) -> bool:
        return self.outcome == "resolved"

    @property
    def helped(self) -> list[StepView]:
        return [s for s in self.steps if s.helped]

    @property
    def keys(self) -> tuple[Key, ...]:
        keys = tuple(k for s in self.helped for k in s.keys)
        return keys or (RERUN,)


@dataclass
class ResolutionLesson:
    trajectory: str
    failed_turns: list[int]
    resolved_turn: int | None
    command: str
    error: str
    steps: list[dict[str, Any]]  # turn, action (verbatim), keys
    worked_in: list[str]  # runs whose resolution shares a key action with this one
    same_error_in: list[str]  # of those, the runs whose error had the asked quoted values


@dataclass
class AttemptLesson:
    key: str
    tried_in: list[dict[str, Any]]  # trajectory, turn, action
    runs: list[str]
    never_helped: bool  # no run got past the failure with a step of this key


@dataclass
class SignatureLessons:
    signature: str
    signature_uid: str
    version: int
    asked_error: str
    runs: list[str]
    got_past: list[str]
    never_got_past: list[dict[str, Any]]  # trajectory, failed_turns, retried
    resolutions: list[ResolutionLesson]
    did_not_help: list[AttemptLesson]
    # What the asked line printed around the shared failure (a script's own context before
    # the error it caught): not matched on, shown so the answer says where it was asked.
    asked_context: str = ""


class Asked(NamedTuple):
    """One failure asked about: its known signature and the error line asked with."""

    uid: str
    signature: str
    line: str
    values: tuple[str, ...] | None = None  # None: the line's quoted values


@dataclass
class Lessons:
    tenant: str
    error: str | None
    trajectory: str | None
    turn: int | None
    budget: int
    tokens: int
    text: str
    signatures: list[dict[str, Any]]  # what the text shows, per signature
    unknown: list[str]  # signatures of the asked error no other run showed
    omitted: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def signatures_of_text(text: str) -> list[tuple[str, str]]:
    """(signature, error line) of the failures in an error text, the last one first (a
    traceback ends with its exception). Text with no line the extractor takes for an error
    (a bare message) is signed line by line from the end."""
    text = (text or "")[:MAX_ERROR_CHARS]
    lines = [full_error_line(text, v) for v in error_lines(text)]
    if not lines:
        lines = [line.strip() for line in text.splitlines() if line.strip()][-MAX_SIGNATURES:]
    out: dict[str, str] = {}
    for line in reversed(lines):
        sig = signature(line)
        if sig is not None:
            out.setdefault(sig, line)
    return list(out.items())[:MAX_SIGNATURES]


def lessons(
    driver: neo4j.Driver,
    *,
    database: str,
    tenant: str,
    error: str | None = None,
    trajectory: str | None = None,
    turn: int | None = None,
    budget: int = DEFAULT_BUDGET,
    timeout_s: float = QUERY_TIMEOUT_S,
) -> Lessons:
    """Lessons for an error text, or for the error at ``turn`` of ``trajectory``; the
    trajectory (when given) is left out of the runs asked about. NotFoundError when the
    trajectory or its turn is not there."""
    check_budget(budget, MIN_BUDGET, MAX_BUDGET)
    if error is not None and len(error) > MAX_ERROR_CHARS:
        raise ConfigError(f"error text is limited to {MAX_ERROR_CHARS} characters")
    if not (error and error.strip()) and (trajectory is None or turn is None):
        raise ConfigError("give an error text, or a trajectory and a turn")
    with (
        graph_errors("lessons query"),
        driver.session(database=database, default_access_mode=neo4j.READ_ACCESS) as session,
    ):
        reader = Reader(session, tenant, timeout_s)
        asked: list[Asked]
        if error and error.strip():
            if trajectory is not None:
                reader.check_trajectory(trajectory)
            asked, unknown = reader.match(signatures_of_text(error))
        else:
            assert trajectory is not None and turn is not None
            asked = [Asked(r["uid"], r["text"], r["error"]) for r in reader.turn(trajectory, turn)]
            unknown = []
        episodes = reader.episodes([a.uid for a in asked], exclude=trajectory)
    per_signature = [
        rank(a.uid, a.signature, a.line, episodes.get(a.uid, []), a.values)
        for a in asked[:MAX_SIGNATURES]
    ]
    text, shown, omitted = render(per_signature, unknown, budget)
    return Lessons(
        tenant=tenant,
        error=error,
        trajectory=trajectory,
        turn=turn,
        budget=budget,
        tokens=count_tokens(text),
        text=text,
        signatures=shown,
        unknown=unknown,
        omitted=omitted,
    )


class Reader:
    """The lessons' reads, in one READ session."""

    def __init__(
        self, session: neo4j.Session, tenant: str, timeout_s: float = QUERY_TIMEOUT_S
    ) -> None:
        self._session = session
        self.tenant = tenant
        self._timeout_s = timeout_s

    def read(self, statement: str, **params: Any) -> list[dict[str, Any]]:
        params = {"tenant": self.tenant, **params}
        return run_read(
            self._session, statement, params, timeout_s=self._timeout_s, doing="lessons query"
        )

    def check_trajectory(self, trajectory: str) -> None:
        tuid = node_ids.trajectory_uid(self.tenant, trajectory)
        if not self.read(cypher.TRAJECTORY_EXISTS, tuid=tuid):
            raise NotFoundError("trajectory", trajectory, tenant=self.tenant)

    def known(self, uids: list[str]) -> list[dict[str, Any]]:
        return self.read(cypher.LESSONS_KNOWN_SIGNATURES, uids=uids) if uids else []

    def match(self, found: list[tuple[str, str]]) -> tuple[list[Asked], list[str]]:
        """The asked (signature, error line) pairs the tenant has seen, and the signatures
        of the others. A signature not seen as asked may still be seen with its values
        quoted differently (``closest_signature``): then the known one is asked, with the
        values the line gives for it."""
        uids = [node_ids.signature_uid(self.tenant, SIGNATURE_VERSION, s) for s, _ in found]
        known = {r["uid"] for r in self.known(uids)}
        asked: list[Asked] = []
        unknown: list[str] = []
        texts: dict[str, str] | None = None
        for uid, (sig, line) in zip(uids, found, strict=True):
            if uid in known:
                asked.append(Asked(uid, sig, line))
                continue
            if texts is None:
                rows = self.read(
                    cypher.LESSONS_TENANT_SIGNATURES,
                    version=SIGNATURE_VERSION,
                    limit=MAX_LOOSE_CANDIDATES,
                )
                texts = {r["text"]: r["uid"] for r in rows}
            close = closest_signature(sig, list(texts))
            if close is None:
                unknown.append(sig)
            elif all(a.uid != texts[close] for a in asked):
                asked.append(Asked(texts[close], close, line, typed_values(line, close)))
        return asked, unknown

    def turn(self, trajectory: str, turn: int) -> list[dict[str, Any]]:
        self.check_trajectory(trajectory)
        turn_uid = node_ids.turn_uid(self.tenant, trajectory, turn)
        if not self.read(cypher.TURN_EXISTS, turn_uid=turn_uid):
            raise NotFoundError(
                "turn", str(turn), tenant=self.tenant, hint=f"trajectory {trajectory!r} has none"
            )
        return self.read(cypher.LESSONS_TURN_SIGNATURES, turn_uid=turn_uid)

    def episodes(self, uids: list[str], *, exclude: str | None) -> dict[str, list[Episode]]:
        """Other runs' episodes of each signature."""
        out: dict[str, list[Episode]] = {}
        if not uids:
            return out
        rows = self.read(
            cypher.LESSONS_RESOLUTIONS,
            uids=uids,
            exclude=exclude,
            action_chars=FETCH_ACTION_CHARS,
        )
        for r in rows:
            out.setdefault(r["signature_uid"], []).append(episode_of(r))
        return out


def episode_of(r: dict[str, Any]) -> Episode:
    return Episode(
        trajectory=r["trajectory"],
        outcome=r["outcome"],
        retried=bool(r["retried"]),
        failed_turns=list(r["failed_turns"] or []),
        resolved_turn=r["resolved_turn"],
        command=r["command"] or "",
        error=r["error"] or "",
        steps=[
            StepView(
                turn=s["turn"],
                action=s["action"] or "",
                keys=keys_of(s["key_json"]),
                helped=bool(s["helped"]),
                attempt=int(s["attempt"]),
            )
            for s in r["steps"]
        ],
    )


def keys_of(key_json: str | None) -> tuple[Key, ...]:
    try:
        items = json.loads(key_json or "[]")
    except ValueError:
        return ()
    return tuple(Key(str(i["key"]), tuple(i.get("tokens") or ())) for i in items)


# -- ranking ------------------------------------------------------------------------------------


def rank(
    uid: str,
    sig: str,
    asked_line: str,
    episodes: Sequence[Episode],
    asked_values: tuple[str, ...] | None = None,
) -> SignatureLessons:
    """The lessons of one signature. ``asked_values`` are the asked error's values (by
    default its quoted values) that rank the runs with the same values first."""
    runs = sorted({e.trajectory for e in episodes})
    got_past = sorted({e.trajectory for e in episodes if e.resolved})
    if asked_values is None:
        asked_values = quoted_values(asked_line)
    same_error = {
        e.trajectory for e in episodes if asked_values and quoted_values(e.error) == asked_values
    }
    resolved = [e for e in episodes if e.resolved]
    support = {id(e): _runs_sharing(e.keys, resolved) for e in resolved}
    ordered = sorted(
        resolved,
        key=lambda e: (
            e.trajectory not in same_error,
            -len(support[id(e)] & same_error),
            -len(support[id(e)]),
            len(e.helped),
            e.trajectory,
            e.failed_turns[0],
        ),
    )
    chosen: list[Episode] = []
    for e in ordered:
        if not any(share_key_action(e.keys, c.keys) for c in chosen):
            chosen.append(e)
    resolutions = [
        ResolutionLesson(
            trajectory=e.trajectory,
            failed_turns=e.failed_turns,
            resolved_turn=e.resolved_turn,
            command=e.command,
            error=e.error,
            steps=[
                {
                    "turn": s.turn,
                    "action": s.action,
                    "key_actions": [{"key": k.key, "tokens": list(k.tokens)} for k in s.keys],
                }
                for s in e.helped
            ],
            worked_in=sorted(support[id(e)]),
            same_error_in=sorted(support[id(e)] & same_error),
        )
        for e in chosen
    ]
    never = [
        {
            "trajectory": t,
            "failed_turns": _failed_turns(episodes, t),
            "retried": _retried(episodes, t),
        }
        for t in runs
        if t not in got_past
    ]
    return SignatureLessons(
        signature=sig,
        signature_uid=uid,
        version=SIGNATURE_VERSION,
        asked_error=asked_line,
        runs=runs,
        got_past=got_past,
        never_got_past=never,
        resolutions=resolutions,
        did_not_help=did_not_help(episodes, resolved),
        asked_context=wrapper(asked_line),
    )


def _runs_sharing(keys: Iterable[Key], episodes: Iterable[Episode]) -> set[str]:
    keys = tuple(keys)
    return {e.trajectory for e in episodes if share_key_action(keys, e.keys)}


def _failed_turns(episodes: Sequence[Episode], trajectory: str) -> list[int]:
    return sorted({t for e in episodes if e.trajectory == trajectory for t in e.failed_turns})


def _retried(episodes: Sequence[Episode], trajectory: str) -> bool:
    return any(e.retried for e in episodes if e.trajectory == trajectory)


def did_not_help(episodes: Sequence[Episode], resolved: Sequence[Episode]) -> list[AttemptLesson]:
    """Steps the failure followed again, grouped by key action; never helped first."""
    tried: list[tuple[Episode, StepView, Key]] = [
        (e, s, k) for e in episodes for s in e.steps if not s.helped for k in s.keys
    ]
    groups: list[tuple[Key, list[tuple[Episode, StepView]]]] = []
    for e, s, k in tried:
        for gk, members in groups:
            if share_key_action((k,), (gk,)):
                members.append((e, s))
                break
        else:
            groups.append((k, [(e, s)]))
    out = []
    for k, members in groups:
        seen: dict[tuple[str, int], StepView] = {}
        for e, s in members:
            seen.setdefault((e.trajectory, s.turn), s)
        out.append(
            AttemptLesson(
                key=k.text(),
                tried_in=[
                    {"trajectory": t, "turn": turn, "action": s.action}
                    for (t, turn), s in sorted(seen.items())
                ],
                runs=sorted({t for t, _ in seen}),
                never_helped=not any(share_key_action((k,), r.keys) for r in resolved),
            )
        )
    return sorted(out, key=lambda a: (not a.never_helped, -len(a.runs), a.key))


# -- rendering within the budget ------------------------------------------------------------------

ACTION_LINES = (12, 4, 1)  # lines of a verbatim action tried in turn, longest first


@dataclass
class _Item:
    signature: int  # index into the signatures
    section: str  # resolutions | did_not_help | never_got_past
    variants: list[str]  # rendered text, longest first
    item: dict[str, Any]


def render(
    per_signature: list[SignatureLessons], unknown: list[str], budget: int
) -> tuple[str, list[dict[str, Any]], dict[str, int]]:
    heads = [_head(s) for s in per_signature]
    items = [_items(i, s) for i, s in enumerate(per_signature)]
    queues = [list(x) for x in items]
    chosen: list[list[tuple[_Item, str]]] = [[] for _ in per_signature]
    tail = _unknown_line(unknown)

    def text() -> str:
        parts = []
        for head, picks in zip(heads, chosen, strict=True):
            parts.append(_block(head, picks))
        if tail:
            parts.append(tail)
        return "\n".join(parts) if parts else "No lessons: no failure signature in the error."

    while any(queues) and count_tokens(text()) < budget:
        for qi, queue in enumerate(queues):
            if not queue:
                continue
            item = queue.pop(0)
            for variant in item.variants:
                chosen[qi].append((item, variant))
                if count_tokens(text()) <= budget:
                    break
                chosen[qi].pop()
    shown = []
    omitted = {"resolutions": 0, "did_not_help": 0, "never_got_past": 0}
    for s, picks, all_items in zip(per_signature, chosen, items, strict=True):
        taken = {id(it) for it, _ in picks}
        sections: dict[str, list[dict[str, Any]]] = {k: [] for k in omitted}
        for it, _ in picks:
            if it.section == "never_got_past":  # one line for all of them
                sections[it.section].extend(it.item["runs"])
            else:
                sections[it.section].append(it.item)
        for it in all_items:
            if id(it) not in taken:
                omitted[it.section] += 1
        shown.append(
            {
                "signature": s.signature,
                "signature_uid": s.signature_uid,
                "version": s.version,
                "asked_error": s.asked_error,
                "asked_context": s.asked_context,
                "runs": s.runs,
                "got_past": s.got_past,
                **sections,
            }
        )
    return text(), shown, omitted


def _head(s: SignatureLessons) -> str:
    n, ok = len(s.runs), len(s.got_past)
    failure = f"Failure `{_cut(s.signature, 160)}`"
    if s.asked_context:
        failure += f" (asked after `{_cut(s.asked_context, 60)}`)"
    if not n:
        return f"{failure}: not seen in any other run."
    runs = "run" if n == 1 else "runs"
    never = n - ok
    return (
        f"{failure}: seen in {n} other {runs}; {ok} got past it"
        + (f", {never} never did" if never else "")
        + "."
    )


def _items(index: int, s: SignatureLessons) -> list[_Item]:
    res = [_resolution_item(index, i, r) for i, r in enumerate(s.resolutions, 1)]
    bad = [_attempt_item(index, a) for a in s.did_not_help]
    never = [_never_item(index, s)] if s.never_got_past else []
    # Resolutions first, then what did not help, interleaved so neither starves.
    out: list[_Item] = []
    for i in range(max(len(res), len(bad))):
        out.extend(res[i : i + 1])
        out.extend(bad[i : i + 1])
    return out + never


def _resolution_item(index: int, rank_: int, r: ResolutionLesson) -> _Item:
    n = len(r.worked_in)
    where = f"worked in {n} run{'s' if n != 1 else ''}"
    if r.same_error_in:
        where += f" ({len(r.same_error_in)} with the same error values)"
    turns = ", ".join(map(str, r.failed_turns[:3])) + (" …" if len(r.failed_turns) > 3 else "")
    plural = "s" if len(r.failed_turns) > 1 else ""
    head = (
        f"{rank_}. {where}, e.g. {r.trajectory}: failed at turn{plural} {turns} "
        f"(`{_cut(r.command, 80)}`), got past it at turn {r.resolved_turn}"
    )
    also = [t for t in r.worked_in if t != r.trajectory]
    if also:
        head += "; also " + ", ".join(also[:4]) + (" …" if len(also) > 4 else "")
    variants = []
    for lines in ACTION_LINES:
        body = [head + (":" if r.steps else " by re-running it unchanged.")]
        for s in r.steps[-4:]:
            keys = [Key(k["key"], tuple(k["tokens"])).text() for k in s["key_actions"]]
            body.append(_step_text(s["turn"], s["action"], keys, lines))
        variants.append("\n".join(body))
    item = {**asdict(r), "steps": [_shown_step(s, ACTION_LINES[0]) for s in r.steps[-4:]]}
    return _Item(index, "resolutions", variants, item)


def _attempt_item(index: int, a: AttemptLesson) -> _Item:
    n = len(a.runs)
    where = ", ".join(f"{t['trajectory']} turn {t['turn']}" for t in a.tried_in[:3])
    more = f" +{len(a.tried_in) - 3}" if len(a.tried_in) > 3 else ""
    verdict = "never got past it" if a.never_helped else "got past it elsewhere"
    head = (
        f"- `{_cut(a.key, 120)}`: the failure came back after it in {n} run{'s' if n != 1 else ''}"
        f" ({where}{more}); {verdict}"
    )
    example = a.tried_in[0]
    variants = [
        head + "\n" + _step_text(example["turn"], example["action"], [], lines)
        for lines in ACTION_LINES[1:]
    ] + [head]
    item = {**asdict(a), "tried_in": [_shown_step(t, ACTION_LINES[1]) for t in a.tried_in[:3]]}
    return _Item(index, "did_not_help", variants, item)


def _never_item(index: int, s: SignatureLessons) -> _Item:
    parts = []
    for n in s.never_got_past[:6]:
        turns = ", ".join(map(str, n["failed_turns"][:3]))
        parts.append(
            f"{n['trajectory']} (turn {turns}" + ("" if n["retried"] else ", not retried") + ")"
        )
    more = f" +{len(s.never_got_past) - 6}" if len(s.never_got_past) > 6 else ""
    text = "Never got past it: " + ", ".join(parts) + more
    return _Item(index, "never_got_past", [text], {"runs": s.never_got_past})


def _block(head: str, picks: list[tuple[_Item, str]]) -> str:
    out = [head]
    res = [v for it, v in picks if it.section == "resolutions"]
    bad = [v for it, v in picks if it.section == "did_not_help"]
    never = [v for it, v in picks if it.section == "never_got_past"]
    if res:
        out.append("Got past it:")
        out.extend(res)
    if bad:
        out.append("Did not help:")
        out.extend(bad)
    out.extend(never)
    return "\n".join(out)


def _step_text(turn: int, action: str, keys: list[str], lines: int) -> str:
    excerpt, cut = _excerpt(action, lines)
    key = f" [{'; '.join(_cut(k, 100) for k in keys)}]" if keys else ""
    if "\n" not in excerpt and not cut:
        return f"   turn {turn}: `{excerpt}`{key}"
    body = "\n".join("     " + line for line in excerpt.splitlines())
    return f"   turn {turn}{key}:\n{body}" + ("\n     …" if cut else "")


def _shown_step(s: dict[str, Any], lines: int) -> dict[str, Any]:
    excerpt, cut = _excerpt(s["action"], lines)
    return {**s, "action": excerpt, "action_truncated": cut}


def _excerpt(action: str, lines: int) -> tuple[str, bool]:
    """The first ``lines`` lines of the action, verbatim (each cut at 200 characters)."""
    all_lines = (action or "").rstrip().splitlines()
    kept = [line if len(line) <= 200 else line[:199] + "…" for line in all_lines[:lines]]
    return "\n".join(kept), len(all_lines) > lines or any(len(x) > 200 for x in all_lines[:lines])


def _unknown_line(unknown: list[str]) -> str:
    if not unknown:
        return ""
    return "No other run showed: " + "; ".join(f"`{_cut(u, 120)}`" for u in unknown)


def _cut(text: str, limit: int) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"
