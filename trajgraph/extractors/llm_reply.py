"""Checking an LLM reply: JSON, then the strict schema, then every claim against its window.

A reply that is not JSON or breaks the schema is *invalid* (the extractor asks once for a
repair). A valid reply is then *filtered*: objects whose name, states whose value and items
whose quoted text (`...` or "...") are not verbatim in their window are dropped, as are
references to turns outside the trajectory or to dropped items. Filtering never fails: what
survives is kept, and what was dropped is counted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import jsonschema
from jsonschema.exceptions import best_match

from trajgraph.core.errors import LLMReplyError
from trajgraph.extractors.base import find_verbatim, is_verbatim
from trajgraph.extractors.llm_prompt import PackedWindow
from trajgraph.extractors.structured import loads_reply, without_bounds
from trajgraph.schemas.extraction import (
    AssociationItem,
    CauseItem,
    ExtractionReply,
    ObjectItem,
    StateItem,
    WindowExtraction,
    WindowFindings,
    reply_json_schema,
)

_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*)\n\s*```\s*$", re.DOTALL)
_QUOTED = re.compile(r"`([^`\n]+)`|\"([^\"\n]+)\"")
MAX_ERROR_CHARS = 400


# The old name of LLMReplyError, the one error type of every unusable LLM reply (the extractor
# asks once for a repair on it; the message says where the reply is not JSON or not valid).
InvalidReply = LLMReplyError


@lru_cache(maxsize=1)
def _validator() -> jsonschema.protocols.Validator:
    # Structure only: the schema's bounds help a model stop, but a server that ignores them
    # (OpenAI strict mode gets none, json_object and prompt servers see them as text) may send
    # 17 objects or a long value, and that is no reason to throw a good reply away.
    schema = without_bounds(reply_json_schema())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def parse_reply(content: str | None) -> ExtractionReply:
    if content is None or not content.strip():
        raise LLMReplyError("the reply is empty")
    fenced = _FENCE.match(content)  # json_object servers sometimes wrap JSON in a fence
    text = fenced.group(1) if fenced else content
    try:
        data = loads_reply(text)
    except json.JSONDecodeError as e:
        raise LLMReplyError(f"the reply is not JSON: {e}") from e
    error = best_match(_validator().iter_errors(data))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        raise LLMReplyError(f"at {where}: {error.message}"[:MAX_ERROR_CHARS])
    return ExtractionReply.model_validate(data)


@dataclass
class Filtered:
    extractions: dict[int, WindowExtraction] = field(default_factory=dict)
    rejected_identifiers: int = 0  # names, values and quoted text not verbatim in the window
    rejected_refs: int = 0  # items or edges pointing at turns or items that do not exist
    rejected: list[str] = field(default_factory=list)  # a few examples, for the log


def filter_reply(
    reply: ExtractionReply,
    windows: Sequence[PackedWindow],
    trajectory_turns: Sequence[int],
    extractor: str,
) -> Filtered:
    """Per-window extractions holding only what the windows support (see module doc)."""
    out = Filtered()
    by_turn = {w.turn: w for w in windows}
    known_turns = set(trajectory_turns)
    # Keys are made trajectory-unique by their window's turn; a reply may refer to a state of
    # another window it reports, so the mapping is reply-wide (first definition wins).
    keys: dict[str, str] = {}
    taken: set[str] = set()
    kept: dict[int, tuple[WindowFindings, list[StateItem], list[ObjectItem]]] = {}
    for item in reply.windows:
        pw = by_turn.get(item.turn)
        if pw is None or item.turn in kept:
            out.rejected_refs += 1
            continue
        states = []
        for s in item.states:
            if not _state_ok(s, pw, out):
                continue
            base = s.key if s.key.startswith(f"t{pw.turn}.") else f"t{pw.turn}.{s.key}"
            key, n = base, 2
            while key in taken:
                key, n = f"{base}~{n}", n + 1
            taken.add(key)
            keys.setdefault(s.key, key)
            value = find_verbatim(s.value, *pw.texts) or s.value
            states.append(s.model_copy(update={"key": key, "value": value, "extractor": extractor}))
        kept[item.turn] = (item, states, _objects(item.objects, pw, out))

    names = {o.name for _, _, objs in kept.values() for o in objs}
    for turn, (item, states, objects) in kept.items():
        pw = by_turn[turn]

        def ref(r: str) -> str | None:
            kind, _, rest = r.partition(":")
            if kind == "state" and rest in keys:
                return f"state:{keys[rest]}"
            if kind == "object" and rest in names:
                return r
            if kind == "turn" and rest.strip().isdigit() and int(rest) in known_turns:
                return f"turn:{int(rest)}"
            return None

        causes: list[CauseItem] = []
        for c in item.causes:
            src, dst = ref(c.src), ref(c.dst)
            if src is None or dst is None or src == dst:
                out.rejected_refs += 1
            elif not _quotes_verbatim(c.reason, pw.hay):
                _reject(out, f"cause reason {c.reason!r}")
            else:
                causes.append(
                    CauseItem(
                        src=src, dst=dst, turns=_turns(c.turns, known_turns, turn), reason=c.reason
                    )
                )
        associations: list[AssociationItem] = []
        for a in item.associations:
            x, y = ref(a.a), ref(a.b)
            if x is None or y is None or x == y or x.startswith("turn:") or y.startswith("turn:"):
                out.rejected_refs += 1
            else:
                associations.append(
                    AssociationItem(a=x, b=y, turns=_turns(a.turns, known_turns, turn))
                )
        out.extractions[turn] = WindowExtraction(
            turn=turn,
            states=states,
            objects=objects,
            causes=causes,
            associations=associations,
            extractor=extractor,
        )
    return out


def _state_ok(s: StateItem, pw: PackedWindow, out: Filtered) -> bool:
    allowed = {pw.turn} | ({pw.window.prev_turn} if pw.window.prev_turn is not None else set())
    if s.turn not in allowed:
        out.rejected_refs += 1
        return False
    if find_verbatim(s.value, *pw.texts) is None:
        _reject(out, f"state value {s.value!r}")
        return False
    if not (_quotes_verbatim(s.text, pw.hay) and _quotes_verbatim(s.subject, pw.hay)):
        _reject(out, f"state text {s.text!r}")
        return False
    return True


def _objects(items: Sequence[ObjectItem], pw: PackedWindow, out: Filtered) -> list[ObjectItem]:
    objects: dict[str, ObjectItem] = {}
    w = pw.window
    for o in items:
        name = find_verbatim(o.name, *pw.texts)
        if name is None:
            _reject(out, f"object {o.name!r}")
            continue
        # The turns an object is mentioned in are checked, not taken from the reply.
        turns = [w.turn] if find_verbatim(name, w.action, w.observation) is not None else []
        if w.prev_turn is not None and find_verbatim(name, pw.prev_text) is not None:
            turns.insert(0, w.prev_turn)
        objects.setdefault(name, ObjectItem(name=name, kind=o.kind, turns=turns))
    return list(objects.values())


def _quotes_verbatim(text: str, hay: str) -> bool:
    """Every `quoted` or "quoted" span of a free-text field is a verbatim quote."""
    for m in _QUOTED.finditer(text):
        span = m.group(1) or m.group(2)
        if span.strip() and not is_verbatim(span, hay):
            return False
    return True


def _turns(turns: Sequence[int], known: set[int], default: int) -> list[int]:
    good = sorted({t for t in turns if t in known})
    return good or [default]


def _reject(out: Filtered, what: str) -> None:
    out.rejected_identifiers += 1
    if len(out.rejected) < 5:
        out.rejected.append(what)
