"""Property-based fuzzing of every format adapter (hypothesis; fixed seed and bounded budget in
CI: the ``ci`` profile of tests/conftest.py).

Inputs: files of each format built from skeletons whose every field may be replaced by a
hostile JSON value (huge and negative integers, non-finite numbers, control characters, lone
surrogates, wrong types, deep nesting), then written as bytes with damage (truncation,
invalid UTF-8, a BOM); and the real logs of ../shared/trajectories mutated the same way.

Invariants, for every input:
* reading, splitting, normalizing and validating raise nothing but an InputError naming the
  file (and record): one bad record is a dead letter, never a crash;
* what validates can be written: UTF-8 encodable, ids by the one id rule, every turn idx and
  reward within the contract's ranges; its windows, heuristic extraction and graph rows build.
"""

from __future__ import annotations

import copy
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.strategies import JSON, SKELETONS, damaged_bytes
from trajgraph.core.errors import InputError
from trajgraph.extractors import get_extractor
from trajgraph.extractors.merge import merge
from trajgraph.extractors.windows import build_windows
from trajgraph.graph.rows import build_rows, content_hash
from trajgraph.pipelines.adapters import FORMATS, normalize, split_records
from trajgraph.schemas.ids import id_problem
from trajgraph.schemas.trajectory import max_turn_idx, validate

TRIED: Counter[str] = Counter()
OUTCOMES: Counter[str] = Counter()


def check_file(name: str, data: bytes, fmt: str | None = None) -> None:
    """The invariants for one input file (see the module docstring)."""
    TRIED[fmt or "detected"] += 1
    source = f"/logs/{name}"
    try:
        records = list(split_records(source, data, fmt, max_record_bytes=1 << 20))
    except InputError as e:
        assert e.source == source
        OUTCOMES["file refused"] += 1
        return
    for record in records:
        try:
            trajectories = normalize(record)
        except InputError as e:
            assert (e.source, e.locator) == (source, record.locator)
            OUTCOMES["record refused"] += 1
            continue
        for traj in trajectories:
            traj["tenant"] = "fuzz"
            try:
                valid = validate(traj, locator=record.locator)
            except InputError as e:
                assert e.locator == record.locator
                OUTCOMES["schema refused"] += 1
                continue
            check_writable(dict(valid))
            OUTCOMES["valid"] += 1


def check_writable(traj: dict[str, Any]) -> None:
    json.dumps(traj, ensure_ascii=False, allow_nan=False).encode("utf-8")
    assert id_problem(traj["id"]) is None
    for turn in traj["turns"]:
        assert 0 <= turn["idx"] <= max_turn_idx()
        reward = turn.get("reward")
        assert reward is None or math.isfinite(reward)
    windows = build_windows(traj, budget_tokens=256)
    extractor = get_extractor("heuristic")
    try:
        batch = extractor.extract_windows(windows, task=str(traj.get("task") or ""))
        merged = merge(traj["turns"], batch.extractions)
        digest = content_hash(traj, merged, extractor=extractor.fingerprint)
        build_rows(traj, merged, extractor=extractor.label, content_hash=digest)
    finally:
        extractor.close()


FUZZ = settings(
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    deadline=None,
)


@pytest.mark.parametrize("fmt", sorted(SKELETONS))
@FUZZ
@given(data=st.data())
def test_every_adapter_survives_hostile_input(fmt: str, data: Any) -> None:
    name, obj = data.draw(SKELETONS[fmt])
    raw = data.draw(damaged_bytes(obj, name))
    check_file(name, raw)
    if data.draw(st.booleans()):  # the same file with --format named explicitly
        check_file(name, raw, fmt)


@FUZZ
@given(data=st.data())
def test_any_json_in_any_file_name_is_refused_cleanly(data: Any) -> None:
    name = data.draw(st.sampled_from(["x.json", "x.jsonl", "x.traj", "x.ndjson", "x.parquet"]))
    raw = data.draw(damaged_bytes(data.draw(JSON), name))
    check_file(name, raw, data.draw(st.sampled_from([None, *FORMATS])))


def _real_logs() -> list[Path]:
    from tests.paths import SHARED

    return sorted(p for p in SHARED.rglob("*") if p.is_file() and p.suffix != ".md")


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in list(value.items())[:30]:
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:10]):
            out += _paths(v, (*prefix, i))
    return out


@pytest.mark.parametrize("path", _real_logs(), ids=lambda p: p.name)
@FUZZ
@given(data=st.data())
def test_real_logs_mutated_stay_dead_letters_not_crashes(path: Path, data: Any) -> None:
    original = json.loads(path.read_bytes())
    obj = copy.deepcopy(original)
    for _ in range(data.draw(st.integers(1, 3))):
        where = data.draw(st.sampled_from(_paths(obj)))
        replacement = data.draw(JSON)
        if not where:
            obj = replacement
            continue
        parent = obj
        for key in where[:-1]:
            parent = parent[key]
        if data.draw(st.booleans()) and isinstance(parent, dict):
            parent.pop(where[-1], None)
        else:
            parent[where[-1]] = replacement
    check_file(path.name, data.draw(damaged_bytes(obj, path.name)))


def test_zz_report_the_inputs_tried() -> None:
    # Read with -s: the counts for the closing note.
    print(f"\nadapter fuzz: inputs {dict(TRIED)}; outcomes {dict(OUTCOMES)}")
    assert sum(TRIED.values()) > 0
