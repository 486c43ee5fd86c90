"""validate() runs the trajectory schema compiled into Python (fastjsonschema) and asks
jsonschema, the reference implementation, only to word an error: both must agree on what
is valid, for every way a record can be wrong."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bench.validation import record
from trajgraph.core.errors import SchemaValidationError
from trajgraph.schemas import trajectory


def _turn(**changes: Any) -> dict[str, Any]:
    rec = record(3)
    rec["turns"][1].update(changes)
    return rec


def _set(**changes: Any) -> dict[str, Any]:
    rec = record(3)
    rec.update(changes)
    return rec


def _without(key: str) -> dict[str, Any]:
    rec = record(3)
    del rec[key]
    return rec


CASES: dict[str, Any] = {
    "valid": record(3),
    "valid, no turns": _set(turns=[]),
    "valid, idx 1.0": _turn(idx=1.0),
    "valid, reward null": _turn(reward=None),
    "valid, tenant": _set(tenant="team-a"),
    "idx is a bool": _turn(idx=True),
    "idx is text": _turn(idx="1"),
    "idx negative": _turn(idx=-1),
    "idx over 2^53-1": _turn(idx=2**53),
    "idx 1.5": _turn(idx=1.5),
    "action null": _turn(action=None),
    "extra turn field": _turn(output="x"),
    "extra top field": _set(steps=[]),
    "no id": _without("id"),
    "no turns": _without("turns"),
    "empty id": _set(id=""),
    "id with a newline": _set(id="a\nb"),
    "id with a bidi override": _set(id="a\u202eb"),
    "unknown format": _set(format="nope"),
    "metadata a list": _set(metadata=[]),
    "turns an object": _set(turns={}),
    "tenant empty": _set(tenant=""),
    "tenant too long": _set(tenant="t" * 129),
    "a turn that is a list": _set(turns=[[1]]),
    "not an object": ["x"],
    "a set where a list goes": _set(turns={1, 2}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_compiled_validator_agrees_with_jsonschema(name: str) -> None:
    rec = CASES[name]
    reference_ok = not list(trajectory._validator().iter_errors(rec))
    try:
        trajectory._compiled()(copy.deepcopy(rec))
        compiled_ok = True
    except Exception:
        compiled_ok = False
    assert compiled_ok == reference_ok
    assert reference_ok == name.startswith("valid")


@pytest.mark.parametrize("name", sorted(n for n in CASES if not n.startswith("valid")))
def test_an_invalid_record_is_worded_by_jsonschema(name: str) -> None:
    rec = copy.deepcopy(CASES[name])
    with pytest.raises(SchemaValidationError, match=r"schema-invalid at \S+: .+"):
        trajectory.validate(rec, locator="record 1")


def test_a_valid_record_is_filled_in_and_not_otherwise_changed() -> None:
    rec = record(2000)
    before = copy.deepcopy(rec)
    out = trajectory.validate(rec)
    assert out is rec
    assert {k: v for k, v in out.items() if k not in ("tenant", "outcome")} == before
    assert (out["tenant"], out["outcome"]) == ("default", None)
