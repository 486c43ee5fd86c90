"""The ingest manifest on its own (no Beam, no Neo4j): change detection with the size+mtime
fast path, retries of failed and degraded files, configuration changes, scopes per tenant
and id prefix, missing files, atomic writes and the one-job lock."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from trajgraph.core.errors import ConfigError, TrajgraphError
from trajgraph.jobs import manifest as m
from trajgraph.jobs.manifest import Manifest, Plan, file_key

CFG = "cfg-1"


def _files(tmp_path: Path, n: int = 3) -> list[str]:
    out = []
    for i in range(n):
        f = tmp_path / "logs" / f"run-{i}.jsonl"
        f.parent.mkdir(exist_ok=True)
        f.write_text(json.dumps({"id": f"t{i}", "turns": []}) + "\n")
        out.append(str(f))
    return out


def _plan(man: Manifest, files: list[str], tenant: str = "a", **kw: Any) -> Plan:
    return man.plan(files, tenant=tenant, id_prefix=kw.pop("id_prefix", ""), config=CFG, **kw)


def _record(
    man: Manifest,
    plan: Plan,
    tenant: str = "a",
    failed: dict[str, int] | None = None,
    degraded: dict[str, int] | None = None,
    **kw: Any,
) -> None:
    man.record(
        plan,
        tenant=tenant,
        id_prefix=kw.pop("id_prefix", ""),
        config=kw.pop("config", CFG),
        failed=failed or {},
        degraded=degraded or {},
    )


def _reasons(plan: Plan) -> dict[str, str]:
    return {Path(f.source).name: f.reason for f in plan.todo}


def _round_trip(man: Manifest) -> Manifest:
    man.save()
    return Manifest.load(man.path)


def test_new_files_are_planned_then_skipped_after_a_recorded_run(tmp_path: Path) -> None:
    files = _files(tmp_path)
    man = Manifest.load(tmp_path / "manifest.json")  # absent: empty
    plan = _plan(man, files)
    assert set(_reasons(plan).values()) == {"new"} and not plan.skipped
    _record(man, plan)
    man = _round_trip(man)

    again = _plan(man, files)
    assert again.todo == [] and len(again.skipped) == 3
    entry = man.scope("a", "")["files"][file_key(files[0])]
    assert entry["status"] == "done" and entry["source"] == files[0]
    assert entry["sha256"] == m.sha256_file(files[0])
    assert entry["size"] == os.stat(files[0]).st_size
    assert entry["ingested_at"]


def test_size_and_mtime_are_a_fast_path_and_the_hash_decides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _files(tmp_path)
    man = Manifest(tmp_path / "manifest.json")
    _record(man, _plan(man, files))
    hashed: list[str] = []
    real = m.sha256_file

    def counting(path: str) -> str:
        hashed.append(path)
        return real(path)

    monkeypatch.setattr(m, "sha256_file", counting)

    assert _plan(man, files).todo == [] and hashed == []  # nothing read: size+mtime match

    st = os.stat(files[0])
    os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))  # touched only
    plan = _plan(man, files)
    assert plan.todo == [] and hashed == [files[0]]  # re-hashed, same content: skipped
    _record(man, plan)  # the new mtime is remembered: the next plan hashes nothing
    hashed.clear()
    assert _plan(man, files).todo == [] and hashed == []

    Path(files[1]).write_text(json.dumps({"id": "t1", "turns": [1]}) + "\n")
    assert _reasons(_plan(man, files)) == {"run-1.jsonl": "changed"}

    # Same size and mtime, other bytes: the fast path trusts the stat (documented limit),
    # and --rescan reads every file anyway.
    st = os.stat(files[2])
    Path(files[2]).write_text(Path(files[2]).read_text().replace("t2", "x2"))
    os.utime(files[2], ns=(st.st_atime_ns, st.st_mtime_ns))
    assert "run-2.jsonl" not in _reasons(_plan(man, files))
    assert _reasons(_plan(man, files, rescan=True))["run-2.jsonl"] == "rescan"


def test_failed_and_degraded_files_are_retried_until_they_succeed(tmp_path: Path) -> None:
    files = _files(tmp_path)
    man = Manifest(tmp_path / "manifest.json")
    plan = _plan(man, files)
    _record(man, plan, failed={file_key(files[0]): 2}, degraded={file_key(files[1]): 5})
    man = _round_trip(man)
    entries = man.scope("a", "")["files"]
    assert entries[file_key(files[0])]["status"] == "failed"
    assert entries[file_key(files[0])]["dead_letters"] == 2
    assert entries[file_key(files[0])]["ingested_at"] is None
    assert entries[file_key(files[1])]["status"] == "degraded"
    assert entries[file_key(files[1])]["windows_degraded"] == 5

    retry = _plan(man, files)
    assert _reasons(retry) == {"run-0.jsonl": "retry-failed", "run-1.jsonl": "retry-degraded"}
    _record(man, retry, failed={file_key(files[0]): 1})  # still failing, the other one healed
    assert _reasons(_plan(man, files)) == {"run-0.jsonl": "retry-failed"}
    _record(man, _plan(man, files))
    assert _plan(man, files).todo == []


def test_a_crashed_run_marks_nothing_done(tmp_path: Path) -> None:
    """The pipeline records only after the graph write: a run that dies before leaves the
    manifest on disk as the last successful run wrote it."""
    files = _files(tmp_path)
    man = Manifest(tmp_path / "manifest.json")
    _record(man, _plan(man, files[:1]))
    man.save()
    before = (tmp_path / "manifest.json").read_bytes()

    crashed = Manifest.load(tmp_path / "manifest.json")
    plan = _plan(crashed, files)  # planned, then the job died: no record(), no save()
    assert len(plan.todo) == 2
    assert (tmp_path / "manifest.json").read_bytes() == before
    assert len(_plan(Manifest.load(tmp_path / "manifest.json"), files).todo) == 2


def test_another_configuration_reads_every_file_again(tmp_path: Path) -> None:
    files = _files(tmp_path, 2)
    man = Manifest(tmp_path / "manifest.json")
    _record(man, _plan(man, files), config="heuristic")
    assert set(_reasons(_plan(man, files)).values()) == {"config"}
    fp = m.config_fingerprint(extractor="llm:gpt:v3", budget=2048)
    assert fp == m.config_fingerprint(budget=2048, extractor="llm:gpt:v3")
    assert fp != m.config_fingerprint(extractor="llm:gpt:v3", budget=1024)


def test_tenant_and_id_prefix_are_part_of_the_key(tmp_path: Path) -> None:
    files = _files(tmp_path, 2)
    man = Manifest(tmp_path / "manifest.json")
    _record(man, _plan(man, files, tenant="a"), tenant="a")
    man = _round_trip(man)

    other = _plan(man, files, tenant="b")  # the same files for another tenant: all new
    assert set(_reasons(other).values()) == {"new"}
    assert set(_reasons(_plan(man, files, tenant="a", id_prefix="gpt-4o/")).values()) == {"new"}
    _record(man, other, tenant="b")
    man = _round_trip(man)
    assert [(s["tenant"], s["id_prefix"]) for s in man.data["scopes"]] == [("a", ""), ("b", "")]
    assert _plan(man, files, tenant="a").todo == [] and _plan(man, files, tenant="b").todo == []


def test_relative_and_absolute_paths_are_one_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _files(tmp_path, 1)
    man = Manifest(tmp_path / "manifest.json")
    _record(man, _plan(man, files))
    monkeypatch.chdir(tmp_path)
    assert _plan(man, ["logs/run-0.jsonl"]).todo == []


def test_a_deleted_file_is_reported_once_and_forgotten(tmp_path: Path) -> None:
    files = _files(tmp_path)
    man = Manifest(tmp_path / "manifest.json")
    _record(man, _plan(man, files))
    os.unlink(files[2])
    remaining = files[:2]
    plan = _plan(man, remaining)
    assert [g["source"] for g in plan.missing] == [files[2]]
    # A known file that still exists but is not among this run's inputs is not "missing".
    assert _plan(man, files[:1]).missing == plan.missing
    _record(man, plan)
    assert file_key(files[2]) not in man.scope("a", "")["files"]
    assert _plan(man, remaining).missing == []


def test_manifest_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "state" / "manifest.json"
    files = _files(tmp_path, 2)
    man = Manifest(path)
    _record(man, _plan(man, files))
    man.save()
    good = path.read_bytes()
    assert json.loads(good)["version"] == m.VERSION

    # The process dies while the new content is written: the old file stays whole.
    man.data["broken"] = object()  # not JSON-serializable: json.dump raises half-way
    with pytest.raises(TypeError):
        man.save()
    assert path.read_bytes() == good
    del man.data["broken"]

    # ... or at the rename itself.
    def fail(*_: Any) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(m.os, "replace", fail)
    man.data["updated_at"] = "later"
    with pytest.raises(OSError, match="disk gone"):
        man.save()
    assert path.read_bytes() == good
    assert sorted(p.name for p in path.parent.iterdir()) == ["manifest.json"]  # no temp left


def test_unreadable_manifests_are_refused_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="delete it"):
        Manifest.load(path)
    path.write_text(json.dumps({"version": 99, "scopes": []}))
    with pytest.raises(ConfigError, match="version 99"):
        Manifest.load(path)
    path.write_text(json.dumps([1, 2]))
    with pytest.raises(ConfigError, match="not a trajgraph ingest manifest"):
        Manifest.load(path)


def test_one_job_per_manifest(tmp_path: Path) -> None:
    a = Manifest(tmp_path / "manifest.json")
    b = Manifest(tmp_path / "manifest.json")
    with a.lock(), pytest.raises(TrajgraphError, match="another ingest"), b.lock():
        pass
    with b.lock():  # released
        pass
