"""Evidence from the log itself: the lines of turns that answer, chosen by fused signals.

Every turn gets a score from the signals that point at it: the steps the question names
(and their neighbours: the state "at the start of step N" is the observation of step N-1),
BM25 of the turn against the question, and what the engine found (similarity seeds, graph
hops, identifier hits, current values, code results). Inside the chosen turns every line
gets a score too: its turn's score, raised by its own BM25 against the question and by the
states the engine found on it; lines next to a matching line come along (a price sits two
lines under its product). Lines are taken best first until the budget is full or nothing
relevant is left, then printed by turn:

    [turn 8] action: scroll [down]
    [1493] link 'Elmwood Inn Fine Teas, Orange Vanilla …'
    …
    [2316] link '4 Reviews'

The text is verbatim (lines right-stripped, blank lines dropped, very long lines in
pieces); ``…`` marks lines left out; a line already shown for an earlier turn is not shown
again, so a long list that every observation repeats costs its tokens once.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from trajgraph.queries.retrieval.anchors import Anchors
from trajgraph.queries.retrieval.lexical import TurnIndex, Unit, line_tokens, query_terms

NEIGHBOUR = 0.4  # anchor weight of the steps next to a named one
SHORT_RANGE = 16  # a named range up to this many turns is read as a whole
RANGE_WEIGHT = 0.75
SCOPE_WEIGHT = 0.15  # a long range or "until step N": the turns it covers, weakly
OUT_OF_SCOPE = 0.4  # factor for turns outside the range a question limits itself to
LEXICAL_WEIGHT = 0.6
LINE_FLOOR = 0.3  # a line of a relevant turn is worth this share of its turn's score
ACTION_FLOOR = 1.0  # what the agent did (and the turn's number) is worth more than a line
CONTEXT_SHARE = 0.5  # lines next to a matching line
CONTEXT_BEFORE = 3  # a matching line's heading or item name usually sits above it
CONTEXT_AFTER = 1
DECAY = 0.93  # each further line of a turn is worth this much of the one before
NAMED_DECAY = 0.97
NOVELTY_FLOOR = 0.4  # a line that adds no new word keeps this share of its value
MIN_VALUE = 0.005  # below this a line is not relevant: stop instead of padding
FLOOR_SCORE = 0.05  # a turn nothing points at, when something else is relevant
CANDIDATE_TEXT = 1.5  # lines are scored up front for turns holding this many budgets of text
CHARS_PER_TOKEN = 4
MIN_CANDIDATES = 8
HEADER_ACTION_CHARS = 240
NAMED_SHARE = 0.8  # of the budget, at most, for the named turns together
OTHER_SHARE = 0.35  # for any other turn
GAP = "…"


@dataclass
class Passage:
    turn: int
    text: str
    tokens: int  # as counted while choosing (the context's own count is the one that holds)
    score: float
    why: str


@dataclass
class Signals:
    """What points at turns, besides the question's own words."""

    anchors: Anchors = field(default_factory=Anchors)
    # turn -> (score in [0, 1], why) from seeds, graph hops, identifiers, code results
    boosts: dict[int, tuple[float, str]] = field(default_factory=dict)
    # turn -> verbatim values (states the engine found): the lines holding them matter
    hints: dict[int, list[str]] = field(default_factory=dict)


def anchor_weights(anchors: Anchors, turns: Iterable[int]) -> dict[int, tuple[float, str]]:
    present = set(turns)
    out: dict[int, tuple[float, str]] = {}

    def put(t: int, w: float, why: str) -> None:
        if t in present and w > out.get(t, (0.0, ""))[0]:
            out[t] = (w, why)

    for lo, hi in anchors.ranges:
        short = hi - lo + 1 <= SHORT_RANGE
        for t in range(lo, hi + 1) if short else sorted(present):
            if lo <= t <= hi:
                put(t, RANGE_WEIGHT if short else SCOPE_WEIGHT, f"in steps {lo}-{hi}")
        put(lo, 1.0, "named in the question")
        put(hi, 1.0, "named in the question")
    if anchors.upto is not None:
        put(anchors.upto, 0.6, "named in the question")
    if anchors.after is not None:
        put(anchors.after, 0.8, "named in the question")
        put(anchors.after + 1, 0.6, "right after the named step")
    for p in anchors.points:
        put(p - 1, NEIGHBOUR, "the step before a named one")
        put(p + 1, NEIGHBOUR, "the step after a named one")
    for p in anchors.points:
        put(p, 1.0, "named in the question")
    return out


def select(index: TurnIndex, question: str, signals: Signals, budget: int) -> list[Passage]:
    """Passages (one per turn, by turn) whose rendering fits ``budget`` tokens."""
    if budget <= 0 or not index.turns:
        return []
    anchors = signals.anchors
    q = query_terms(anchors.without_refs(question))
    lexical = index.turn_scores(q)
    top = max(lexical.values(), default=0.0)
    score: dict[int, float] = {}
    why: dict[int, str] = {}
    named = anchor_weights(anchors, index.turns)
    for t, (w, reason) in named.items():
        score[t] = w
        why[t] = reason
    for t, s in lexical.items():
        score[t] = score.get(t, 0.0) + LEXICAL_WEIGHT * s / top
        why.setdefault(t, "matches the question's words")
    for t, (w, reason) in signals.boosts.items():
        if t in index.actions:
            score[t] = score.get(t, 0.0) + w
            if t not in named:
                why[t] = reason
    scope = anchors.scope()
    if scope is not None:
        lo, hi = scope
        for t in score:
            if not lo <= t <= hi:
                score[t] *= OUT_OF_SCOPE
    if not score:
        return []
    peak = max(score.values())
    for t in score:
        score[t] /= peak

    # The best turns, up to a few times the budget's worth of text, have their lines scored
    # now (only a turn the question's words occur in has lines they occur in); the others
    # enter by their headers, and their lines are cut only if the budget gets that far.
    ranked = sorted((t for t in score if score[t] >= FLOOR_SCORE), key=lambda t: -score[t])
    room = budget * CANDIDATE_TEXT * CHARS_PER_TOKEN
    now: list[int] = []
    for t in ranked:
        if room <= 0 and len(now) >= MIN_CANDIDATES:
            break
        now.append(t)
        room -= len(index.actions[t]) + len(index.observations[t])
    line_lex = index.unit_scores(q, [t for t in now if t in lexical])
    line_top = max((x for xs in line_lex.values() for x in xs), default=0.0) or 1.0
    value: dict[Key, float] = {}
    for t in now:
        _value_lines(index, t, score[t], line_lex.get(t), line_top, signals.hints.get(t, []), value)

    def expand(t: int) -> dict[Key, float]:
        lex = index.unit_scores(q, [t]).get(t) if t in lexical else None
        more: dict[Key, float] = {}
        _value_lines(index, t, score[t], lex, line_top, signals.hints.get(t, []), more)
        return more

    # Once something is relevant, every other turn is a candidate too, at the floor: after
    # the relevant lines, the budget goes to the rest of the log (all of it, when it fits)
    # rather than staying empty.
    for t in index.turns:
        if score.get(t, 0.0) < FLOOR_SCORE:
            score[t] = FLOOR_SCORE
            why.setdefault(t, "more of the log")
    scored = set(now)
    later = [t for t in index.turns if t not in scored]
    return _fill(index, value, later, expand, score, why, named, budget)


Key = tuple[int, int]  # (turn, position of the line in the turn)


def _value_lines(
    index: TurnIndex,
    t: int,
    s: float,
    lex: list[float] | None,
    top: float,
    hints: list[str],
    value: dict[Key, float],
) -> None:
    """The value of each line of turn ``t`` (turn score ``s``) into ``value``."""
    units = index.units_of(t)
    for k, u in enumerate(units):
        own = lex[k] / top if lex else 0.0
        if hints and any(h in u.text for h in hints):
            own = max(own, 0.8)
        floor = ACTION_FLOOR if u.part == "action" else LINE_FLOOR
        key = (t, k)
        value[key] = max(value.get(key, 0.0), s * (floor + own))
        if own > 0.25:  # neighbours in the same part come along
            near = s * (floor + CONTEXT_SHARE * own)
            for j in range(max(0, k - CONTEXT_BEFORE), min(len(units), k + CONTEXT_AFTER + 1)):
                if j != k and units[j].part == u.part:
                    value[(t, j)] = max(value.get((t, j), 0.0), near)


def _fill(
    index: TurnIndex,
    value: dict[Key, float],
    rest: list[int],
    expand: Callable[[int], dict[Key, float]],
    score: dict[int, float],
    why: dict[int, str],
    named: dict[int, tuple[float, str]],
    budget: int,
) -> list[Passage]:
    named_turns = {t for t, (w, _) in named.items() if w >= 1.0}
    named_cap = max(int(budget * NAMED_SHARE / max(1, len(named_turns))), int(budget * 0.3))
    other_cap = int(budget * OTHER_SHARE)
    chosen: dict[int, list[int]] = {}
    spent: dict[int, int] = {}
    shown: dict[str, int] = {}  # line text -> the turn it was first chosen for
    used = 0
    # Lazy greedy with diminishing returns per turn: each line taken from a turn makes its
    # next one worth a little less (less for a named turn), so the budget covers the turns
    # that answer rather than the longest of them. Equal values interleave turns (first
    # lines of each turn, then second lines, ...). Novelty: a line whose words the context
    # already has is worth less than one that adds new ones (a repeated log line).
    covered: set[str] = set()
    heap, pending = _first_heap(index, value, rest, expand, score)
    over: list[tuple[float, int, int]] = []  # lines over their turn's share
    capped = True
    opened: list[int] = []  # turns of the rest of the log whose header is in
    while heap or opened or (capped and over):
        if not heap and opened:
            # The headers of the rest of the log are placed; their other lines (worth less
            # than any header) are cut and offered only now, when there is room left.
            for t in opened:
                _offer(heap, value, expand(t), skip=set(chosen[t]))
            opened = []
            heapq.heapify(heap)
            continue
        if not heap:  # budget left after every turn had its share: the lines over it
            capped = False
            heap, over = over, []
            heapq.heapify(heap)
        neg, k, t = heapq.heappop(heap)
        if t in pending:
            head = index.head_of(t)
            if head is None:
                continue
            u = head
        else:
            units = index.units_of(t)
            if not units:
                continue
            u = units[k]
        header = k == 0 and u.part == "action"
        current = value[(t, k)] * (NAMED_DECAY if t in named_turns else DECAY) ** len(
            chosen.get(t, ())
        )
        if not header and u.tf:
            new = len(u.tf.keys() - covered)
            current *= NOVELTY_FLOOR + (1 - NOVELTY_FLOOR) * new / len(u.tf)
        if current < -neg - 1e-9:
            if current >= MIN_VALUE:
                heapq.heappush(heap, (-current, k, t))
            continue
        key = u.text.strip()
        if not header and shown.get(key, t) != t:
            continue  # already shown for another turn
        opening = 0 if t in chosen else _header_tokens(index, t)
        # The first action line is the header itself; others may need a gap marker.
        cost = opening if header else opening + u.tokens + 1
        if used + cost > budget:
            continue
        cap = named_cap if t in named_turns else other_cap
        if capped and spent.get(t, 0) + cost > cap:
            over.append((neg, k, t))  # a turn's share is a preference, not a wall
            continue
        chosen.setdefault(t, []).append(k)
        spent[t] = spent.get(t, 0) + cost
        used += cost
        shown.setdefault(key, t)
        covered.update(u.tf)
        if t in pending:
            pending.discard(t)
            if score[t] > FLOOR_SCORE:  # a relevant turn: its lines compete right away
                _offer(heap, value, expand(t), skip={k}, push=True)
            else:
                opened.append(t)
    return [
        Passage(t, _render(index, t, sorted(ks)), spent[t], score.get(t, 0.0), why.get(t, ""))
        for t, ks in sorted(chosen.items())
    ]


Entry = tuple[float, int, int]  # (-value, line position, turn): a line offered to the context


def _first_heap(
    index: TurnIndex,
    value: dict[Key, float],
    rest: list[int],
    expand: Callable[[int], dict[Key, float]],
    score: dict[int, float],
) -> tuple[list[Entry], set[int]]:
    """The lines offered first, and the turns of the rest of the log whose header stands
    for them until it is taken."""
    heap = [(-v, k, t) for (t, k), v in value.items() if v >= MIN_VALUE]
    # The rest of the log enters by its headers; a turn's other lines (and the cost of
    # cutting it into lines) follow only once its header is in.
    pending = {t for t in rest if index.head_of(t) is not None}
    for t in pending:
        value[(t, 0)] = score[t] * ACTION_FLOOR
        heap.append((-value[(t, 0)], 0, t))
    for t in rest:
        if t not in pending:  # no action: its lines enter right away
            _offer(heap, value, expand(t))
    heapq.heapify(heap)
    return heap, pending


def _offer(
    heap: list[Entry],
    value: dict[Key, float],
    more: dict[Key, float],
    skip: Collection[int] = (),
    push: bool = False,
) -> None:
    """Offer the lines ``more`` (but those at positions ``skip``): pushed one by one onto
    the heap, or appended (the caller heapifies)."""
    for (t, j), v in more.items():
        if j in skip:
            continue
        value[(t, j)] = v
        if push:
            heapq.heappush(heap, (-v, j, t))
        else:
            heap.append((-v, j, t))


def _header(index: TurnIndex, t: int) -> str:
    head = index.head_of(t)
    action = ""
    if head is not None:
        action = head.text.strip()
        if len(action) > HEADER_ACTION_CHARS:
            action = action[: HEADER_ACTION_CHARS - 1] + "…"
    return f"[turn {t}] action: {action}" if action else f"[turn {t}]"


def _header_tokens(index: TurnIndex, t: int) -> int:
    cached = index.header_tokens.get(t)
    if cached is None:
        cached = index.header_tokens[t] = line_tokens(_header(index, t)) + 1
    return cached


def _render(index: TurnIndex, t: int, picked: list[int]) -> str:
    units = index.units_of(t)
    lines = [_header(index, t)]
    first = 0 if units and units[0].part == "action" else None
    wanted = set(picked) - {first}
    extra_action = any(units[k].part == "action" for k in wanted)
    prev: Unit | None = None
    prev_pos = first if first is not None else -1
    shown_obs_label = False
    for pos, u in enumerate(units):
        if pos not in wanted:
            continue
        if u.part == "observation" and extra_action and not shown_obs_label:
            lines.append("observation:")
            shown_obs_label = True
        contiguous = pos == prev_pos + 1
        if not contiguous:
            lines.append(GAP)
        if contiguous and prev is not None and prev.part == u.part and prev.line == u.line:
            lines[-1] += u.text  # pieces of one long line
        else:
            lines.append(u.text)
        prev, prev_pos = u, pos
    if prev_pos < len(units) - 1 and len(lines) > 1:
        lines.append(GAP)
    return "\n".join(lines)
