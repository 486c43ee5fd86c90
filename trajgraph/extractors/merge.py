"""Merge the window extractions of one trajectory into one TrajectoryExtraction.

* windows are processed sorted by turn, so the result does not depend on arrival order;
* state keys stay as extracted unless two collide, then the later one is re-keyed
  ``t<turn>.<key>`` (``~2``, ``~3`` ... if that is taken too) and its edges follow;
* objects with the same verbatim name become one, with the union of their turns;
* SUPERSEDES links each state to the states of the latest earlier turn with the same
  (subject, attribute) (every one, when that turn showed several). Added/removed lines are
  members of a list, not successive values, so they do not supersede each other; instead a
  removed line supersedes the latest earlier "added" state of the same subject and value;
* cross-window CAUSES: a state causes the first later action (within ``HORIZON`` turns) that
  uses one of its associated objects verbatim (bare command words like ``ls`` excepted),
  and an error (or a non-zero exit code) causes the next action, since agents react to
  failures;
* a re-run whose result changed (a SUPERSEDES pair with different values) is caused by the
  file edits made in between to files the trajectory had touched by the earlier run;
* edges are deduped (turn lists unioned) and edges whose endpoints do not exist are dropped.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from trajgraph.extractors.heuristic import occurs
from trajgraph.schemas.extraction import (
    AssociationItem,
    CauseItem,
    ObjectItem,
    StateItem,
    SupersedesItem,
    TrajectoryExtraction,
    WindowExtraction,
)

HORIZON = 20  # turns ahead searched for the action that uses a state's object
_LIST_KINDS = frozenset({"line_added", "line_removed"})


def merge(
    trajectory_turns: Sequence[dict[str, Any]], windows: Iterable[WindowExtraction]
) -> TrajectoryExtraction:
    ordered = _sorted_windows(list(windows))
    turn_ids = [int(t["idx"]) for t in trajectory_turns]
    if not turn_ids:  # no turn list given: trust the windows' own turns
        turn_ids = sorted({w.turn for w in ordered})
    actions = {int(t["idx"]): str(t.get("action") or "") for t in trajectory_turns}

    states, causes, associations = _rekeyed(ordered)
    objects = _merged_objects(ordered)
    state_keys = {s.key for s in states}
    valid = _EndpointCheck(set(turn_ids), state_keys, set(objects))

    edges = _Edges()
    for c in causes:
        if valid(c.src) and valid(c.dst) and c.src != c.dst:
            edges.add_cause(c.src, c.dst, c.turns, c.reason)
    for a in associations:
        if valid(a.a) and valid(a.b) and a.a != a.b:
            edges.add_association(a.a, a.b, a.turns)
    # A bare command word (ls, cat, get_user_details) recurs in most actions: reusing it is
    # habit, not consequence, so it does not carry a state into a later turn.
    generic = {n for n, o in objects.items() if o.kind == "command" and " " not in n}
    _cross_window_causes(states, edges, sorted(set(turn_ids)), actions, generic)
    supersedes = _supersedes(states)
    _changed_result_causes(states, supersedes, objects, edges, actions)
    _quoted_edit_causes(states, edges)

    return TrajectoryExtraction(
        states=states,
        objects=list(objects.values()),
        causes=edges.causes(),
        associations=edges.associations(),
        supersedes=supersedes,
    )


MAX_EDITS_PER_CHANGE = 5
MAX_QUOTED_EDITS = 2
_TOKEN = re.compile(r"[\w][\w./:=+-]*[\w]")


def _changed_result_causes(
    states: list[StateItem],
    supersedes: list[SupersedesItem],
    objects: dict[str, ObjectItem],
    edges: _Edges,
    actions: dict[int, str],
) -> None:
    """A re-run whose result differs from the earlier run (exit 1 → 0, another error) was
    changed by the edits made in between, to files the trajectory had already touched by the
    earlier run. The re-run itself rarely names the file, so identifier reuse misses this.

    "In between" starts at the last earlier run of the same action, not at the older state
    (which may come from another command that reported the same kind of error): what changed
    the result is what changed since that run. When the new result quotes what an edit wrote
    (``got pool_size=12`` after the edit that wrote ``pool_size=12``), only the quoted edits
    are linked: they are the explanation; otherwise the last few edits are."""
    by_key = {s.key: s for s in states}
    edits = [s for s in states if s.kind == "file_changed"]
    runs_of: dict[str, list[int]] = defaultdict(list)
    for t in sorted(actions):
        if actions[t].strip():
            runs_of[actions[t].strip()].append(t)
    for sup in supersedes:
        newer = by_key.get(sup.newer.removeprefix("state:"))
        older = by_key.get(sup.older.removeprefix("state:"))
        if newer is None or older is None or newer.value == older.value:
            continue
        if newer.kind in _LIST_KINDS or newer.kind == "file_changed":
            continue
        # The last earlier run of the same action is the baseline the result changed from;
        # an action run for the first time compares with the older state's turn.
        runs = runs_of.get(actions.get(newer.turn, "").strip(), [])
        i = bisect_left(runs, newer.turn)
        start = runs[i - 1] if i > 0 else older.turn
        between = [
            e
            for e in edits
            if start < e.turn < newer.turn
            and (obj := objects.get(e.subject)) is not None
            and min(obj.turns, default=newer.turn) <= older.turn
        ]
        quoted = [e for e in between if _quotes_edit(newer, older, e)]
        for e in quoted or between[-MAX_EDITS_PER_CHANGE:]:
            how = f"quotes `{e.value}` written by the edit" if quoted else "changed"
            edges.add_cause(
                f"state:{e.key}",
                f"state:{newer.key}",
                [e.turn, newer.turn],
                f"edit of `{e.subject}` between turn {start} and turn {newer.turn} "
                f"{how}: {newer.attribute} from {older.value!r} to {newer.value!r}",
            )


def _quoted_edit_causes(states: list[StateItem], edges: _Edges) -> None:
    """An error that quotes what an earlier edit wrote (``got pool_size=12`` after the edit
    that wrote ``pool_size=12``) was caused by the latest such edit, however many turns and
    other edits lie in between, and even on the first run of the failing command."""
    written: dict[str, list[tuple[int, StateItem]]] = defaultdict(list)
    for e in sorted((s for s in states if s.kind == "file_changed"), key=lambda s: s.turn):
        for part in _distinctive(e.value):
            written[part].append((e.turn, e))
    if not written:
        return
    for s in states:
        if s.kind != "error":
            continue
        latest: dict[str, StateItem] = {}
        for token in set(_TOKEN.findall(f"{s.value}\n{s.text}")):
            history = written.get(token)
            if not history:
                continue
            i = bisect_right([t for t, _ in history], s.turn - 1)
            if i:
                latest[token] = history[i - 1][1]
        for part, e in sorted(latest.items(), key=lambda kv: -kv[1].turn)[:MAX_QUOTED_EDITS]:
            edges.add_cause(
                f"state:{e.key}",
                f"state:{s.key}",
                [e.turn, s.turn],
                f"the error quotes `{part}`, written by the edit of `{e.subject}` at turn {e.turn}",
            )


def _distinctive(text: str) -> list[str]:
    """Parts of an edit worth matching verbatim: ``key=value``, paths, numbers with letters;
    not plain words, which any later message may contain."""
    return [
        p
        for p in _TOKEN.findall(text)[:20]
        if len(p) >= 4 and any(c.isalnum() for c in p) and any(c in "=/." or c.isdigit() for c in p)
    ]


def _quotes_edit(result: StateItem, older: StateItem, edit: StateItem) -> bool:
    """The new result names a distinctive part the edit wrote (``key=value``, a number or
    identifier of 4+ characters) that the older result did not name."""

    def names(s: StateItem, part: str) -> bool:
        return occurs(part, s.value) or occurs(part, s.text)

    parts = [p for p in edit.value.split() if len(p) >= 4 and any(c.isalnum() for c in p)]
    return any(names(result, p) and not names(older, p) for p in parts[:20])


def _sorted_windows(windows: list[WindowExtraction]) -> list[WindowExtraction]:
    turns = [w.turn for w in windows]
    if len(set(turns)) == len(turns):
        return sorted(windows, key=lambda w: w.turn)
    # Several extractions of one turn (re-runs, two extractors): order them by content so the
    # result is still independent of arrival order.
    return sorted(windows, key=lambda w: (w.turn, w.extractor, w.model_dump_json()))


def _rekeyed(
    windows: list[WindowExtraction],
) -> tuple[list[StateItem], list[CauseItem], list[AssociationItem]]:
    """States with trajectory-unique keys, and every window edge rewritten to those keys."""
    taken: set[str] = set()
    states: list[StateItem] = []
    causes: list[CauseItem] = []
    associations: list[AssociationItem] = []
    remaps: list[dict[str, str]] = []
    first: dict[str, str] = {}  # a key as extracted → its final key where first defined
    for w in windows:
        remap: dict[str, str] = {}
        for s in w.states:
            key = _free_key(s.key, s.turn, taken)
            taken.add(key)
            remap.setdefault(s.key, key)  # a key repeated inside a window: edges mean the first
            first.setdefault(s.key, key)
            update: dict[str, Any] = {} if key == s.key else {"key": key}
            if s.extractor is None:
                update["extractor"] = w.extractor
            states.append(s.model_copy(update=update) if update else s)
        remaps.append(remap)

    for w, remap in zip(windows, remaps, strict=True):

        def ref(r: str, remap: dict[str, str] = remap) -> str:
            # A window's own states first; then a state another window defined (an LLM reply
            # covering several windows may link them); otherwise the edge dangles and is dropped.
            if r.startswith("state:"):
                key = r[len("state:") :]
                found = remap.get(key) or first.get(key)
                return f"state:{found}" if found else f"dangling:{key}"
            return r

        causes.extend(
            CauseItem(src=ref(c.src), dst=ref(c.dst), turns=c.turns, reason=c.reason)
            for c in w.causes
        )
        associations.extend(
            AssociationItem(a=ref(a.a), b=ref(a.b), turns=a.turns) for a in w.associations
        )
    return states, causes, associations


def _free_key(key: str, turn: int, taken: set[str]) -> str:
    if key not in taken:
        return key
    candidate = f"t{turn}.{key}"
    n = 2
    while candidate in taken:
        candidate = f"t{turn}.{key}~{n}"
        n += 1
    return candidate


def _merged_objects(windows: list[WindowExtraction]) -> dict[str, ObjectItem]:
    kinds: dict[str, ObjectItem] = {}
    turns: dict[str, set[int]] = defaultdict(set)
    for w in windows:
        for o in w.objects:
            if not o.name:
                continue
            kinds.setdefault(o.name, o)
            turns[o.name].update(o.turns or [w.turn])
    return {
        name: ObjectItem(name=name, kind=first.kind, turns=sorted(turns[name]))
        for name, first in kinds.items()
    }


class _EndpointCheck:
    def __init__(self, turns: set[int], states: set[str], objects: set[str]) -> None:
        self.turns, self.states, self.objects = turns, states, objects

    def __call__(self, ref: str) -> bool:
        kind, _, rest = ref.partition(":")
        if kind == "turn":
            try:
                return int(rest) in self.turns
            except ValueError:
                return False
        if kind == "state":
            return rest in self.states
        if kind == "object":
            return rest in self.objects
        return False


class _Edges:
    """Deduped edges in first-seen order; a repeated edge only adds its evidence turns."""

    def __init__(self) -> None:
        self._causes: dict[tuple[str, str], tuple[set[int], str]] = {}
        self._assoc: dict[frozenset[str], tuple[str, str, set[int]]] = {}
        self._state_objects: dict[str, list[str]] = defaultdict(list)

    def add_cause(self, src: str, dst: str, turns: Iterable[int], reason: str) -> None:
        old = self._causes.get((src, dst))
        if old is None:
            self._causes[(src, dst)] = (set(turns), reason)
        else:
            old[0].update(turns)

    def add_association(self, a: str, b: str, turns: Iterable[int]) -> None:
        key = frozenset((a, b))
        old = self._assoc.get(key)
        if old is None:
            self._assoc[key] = (a, b, set(turns))
            for state, other in ((a, b), (b, a)):
                if state.startswith("state:") and other.startswith("object:"):
                    self._state_objects[state].append(other[len("object:") :])
        else:
            old[2].update(turns)

    def causes(self) -> list[CauseItem]:
        return [
            CauseItem(src=src, dst=dst, turns=sorted(turns), reason=reason)
            for (src, dst), (turns, reason) in self._causes.items()
        ]

    def associations(self) -> list[AssociationItem]:
        return [AssociationItem(a=a, b=b, turns=sorted(t)) for a, b, t in self._assoc.values()]

    def objects_of(self, state_ref: str) -> list[str]:
        """Names of the objects associated with a state, in edge order."""
        return self._state_objects.get(state_ref, [])


def _supersedes(states: list[StateItem]) -> list[SupersedesItem]:
    out: list[SupersedesItem] = []
    # (subject, attribute) -> the states of the latest turn that showed it: one run may show
    # several (two errors of one command), and a later state replaces every one of them, so
    # none stays "current" (nothing supersedes it) after a re-run no longer shows it.
    latest: dict[tuple[str, str], list[StateItem]] = {}
    added: dict[tuple[str, str], StateItem] = {}  # (subject, value) of the latest added line
    by_turn: dict[int, list[StateItem]] = defaultdict(list)
    for s in states:
        by_turn[s.turn].append(s)
    for turn in sorted(by_turn):
        group = by_turn[turn]
        # Links only go to earlier turns, so compute them all before this turn updates `latest`.
        for s in group:
            if s.kind in _LIST_KINDS:
                removed = added.get((s.subject, s.value)) if s.kind == "line_removed" else None
                olders = [removed] if removed is not None else []
            else:
                olders = latest.get((s.subject, s.attribute), [])
            for older in olders:
                out.append(
                    SupersedesItem(
                        newer=f"state:{s.key}", older=f"state:{older.key}", turns=[turn, older.turn]
                    )
                )
        this_turn: dict[tuple[str, str], list[StateItem]] = defaultdict(list)
        for s in group:
            if s.kind == "line_added":
                added[(s.subject, s.value)] = s
            elif s.kind not in _LIST_KINDS:
                this_turn[(s.subject, s.attribute)].append(s)
        latest.update(this_turn)
    return out


def _cross_window_causes(
    states: list[StateItem],
    edges: _Edges,
    turn_ids: list[int],
    actions: dict[int, str],
    generic: set[str],
) -> None:
    position = {t: i for i, t in enumerate(turn_ids)}
    for s in states:
        i = position.get(s.turn)
        if i is None:
            continue
        later = turn_ids[i + 1 : i + 1 + HORIZON]
        ref = f"state:{s.key}"
        if later and (s.kind == "error" or (s.kind == "exit_code" and s.value.strip() != "0")):
            nxt = later[0]
            edges.add_cause(ref, f"turn:{nxt}", [s.turn, nxt], "the next action reacts to it")
        for name in edges.objects_of(ref):
            if name in generic:
                continue
            for u in later:
                if occurs(name, actions.get(u, "")):
                    edges.add_cause(ref, f"turn:{u}", [s.turn, u], f"`{name}` is used next")
                    break
