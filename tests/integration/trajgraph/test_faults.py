"""Nightly ingests that survive faults: Neo4j killed mid-write, the LLM server failing
part-way. Each ends with a rerun (with the manifest) whose graph digest equals a clean run's.

a. A private Neo4j (own port, data and run dir under tmp_path; the shared server's jars) is
   SIGKILLed while `trajgraph ingest` writes into it in a subprocess. The ingest is frozen
   (SIGSTOP) once the poll sees a third of the turns, so the kill provably lands mid-write:
   the counts at that moment are asserted to be partial, and the kill is retried in a fresh
   tenant should the write ever finish before the poll sees it.
b. The local OpenAI-compatible server answers the first requests, then fails every request
   (5xx and dropped connections, retries exhausted; or one 401, fatal for the run). The run
   finishes (exit 3): the heuristic stands in for the unanswered windows and the manifest
   marks their files ``degraded`` (after the 401: the rest is dead-lettered, ``failed``). A
   rerun against the healthy server reads only those files, asks only for the windows nobody
   answered (the answered ones come from the LLM cache), and ends with the digest of a clean
   LLM run. That equality holds because the fake model is deterministic; with a real model,
   a rerun guarantees the structure (every window extracted by the LLM, nothing left
   degraded or dead-lettered), not byte-identical findings.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI, fake_llm_settings
from tests.integration.ingesting import Ingest
from tests.integration.servers import Private
from tests.paths import REPO
from trajgraph.core import process as ls_process
from trajgraph.core.settings import Settings
from trajgraph.graph import digest
from trajgraph.graph import local_server as ls
from trajgraph.jobs.summary import EXIT_FAILED, EXIT_PARTIAL

WRITE_RETRY_S = 3


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "trajgraph.cli", "ingest", *args, "--progress", "off"]


def _kill_mid_write(
    private: Private, shared_dir: Path, tenant: str, tmp: Path, want: dict[str, int]
) -> tuple[subprocess.Popen[str], dict[str, int]]:
    """Start the ingest; once a third of the turns are in, freeze it, SIGKILL Neo4j, let it
    go on.

    Returns the process and the tenant's counts at the kill, or raises RuntimeError when the
    write finished before the poll saw it partial (the caller retries)."""
    proc = subprocess.Popen(
        _cli(
            str(shared_dir),
            "--tenant",
            tenant,
            "--extractor",
            "heuristic",
            "--embedder",
            "hash",
            "--batch-size",
            "1",  # one statement per row (a transaction per trajectory): ~20 s of writes
            "--manifest",
            str(tmp / "manifest.json"),
            "--metrics",
            str(tmp / "metrics.json"),
            "--dead-letter",
            str(tmp / "dl"),
            "--json",
        ),
        # Neo4j stays down until the test restarts it: the run's retries (30 s by default)
        # would only make the test wait for the failure it expects.
        env={**private.env(), "TRAJGRAPH_NEO4J_WRITE_RETRY_S": str(WRITE_RETRY_S)},
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        counts = private.labels(tenant)
        if counts.get("Turn", 0) >= want["Turn"] // 3:
            os.kill(proc.pid, signal.SIGSTOP)  # freeze the writer between two transactions
            counts = private.labels(tenant)
            if sum(counts.values()) >= sum(want.values()):  # it got everything in before
                os.kill(proc.pid, signal.SIGCONT)
                break
            pid = ls.status(private.settings.neo4j, private.settings.local).pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            while ls_process.alive(pid):
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGCONT)
            return proc, counts
        time.sleep(0.02)
    proc.kill()
    proc.communicate()
    raise RuntimeError("the ingest wrote everything before the poll saw a partial graph")


def _nightly(
    p: Private, shared_dir: Path, tenant: str, work: Path, run: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    """The nightly command (heuristic, hash embedder, the manifest in ``work``), to the end."""
    argv = [str(shared_dir), "--tenant", tenant, "--extractor", "heuristic"]
    argv += ["--embedder", "hash", "--manifest", str(work / "manifest.json")]
    argv += ["--dead-letter", str(work / f"dl-{run}"), "--json", *extra]
    return subprocess.run(
        _cli(*argv), env=p.env(), cwd=REPO, capture_output=True, text=True, timeout=300
    )


@pytest.mark.timeout(600)
def test_neo4j_killed_mid_write_then_a_manifest_rerun_equals_a_clean_run(
    private_neo4j: Private, ingested: Ingest, shared_dir: Path, tmp_path: Path
) -> None:
    p = private_neo4j
    t0 = time.monotonic()

    # A clean run into its own tenant: the reference digest and sizes.
    args = ("--extractor", "heuristic", "--embedder", "hash")
    clean = ingested(shared_dir, tenant="clean", args=args, settings=p.settings).summary
    assert clean.exit_code == 0 and clean.dead_lettered == 0
    want = p.digest("clean")
    want_counts = p.labels("clean")
    total = sum(want_counts.values())

    for attempt in range(3):
        tenant = f"faulty-{attempt}"
        work = tmp_path / tenant
        try:
            proc, at_kill = _kill_mid_write(p, shared_dir, tenant, work, want_counts)
            break
        except RuntimeError:
            continue
    else:
        pytest.fail("three ingests finished before a partial graph could be seen")
    killed_at = time.monotonic()
    out, err = proc.communicate(timeout=180)
    exit_seconds = time.monotonic() - killed_at

    # Killed mid-write: some turns were in, not all, and nothing was complete.
    assert 0 < at_kill["Turn"] < want_counts["Turn"], at_kill
    assert sum(at_kill.values()) < total
    # The ingest failed with exit 1 and said why, as JSON, in its summary and its metrics.
    assert proc.returncode == EXIT_FAILED, (out, err[-3000:])
    summary = json.loads(out)
    assert summary["status"] == "failed" and summary["error"]
    assert "Neo4j" in summary["error"] or "ServiceUnavailable" in summary["error"], summary
    metrics = json.loads((work / "metrics.json").read_text())
    assert (metrics["status"], metrics["exit_code"]) == ("failed", 1)
    assert metrics["error"] == summary["error"] and metrics["finished_at"]
    assert not (work / "manifest.json").exists()  # no file is marked done

    # Restart: what was committed survived, and it is not the clean graph.
    ls.start(p.settings.neo4j, p.settings.local, log=lambda m: print(m, file=sys.stderr))
    after_restart = p.labels(tenant)
    assert 0 < after_restart.get("Turn", 0) <= want_counts["Turn"]
    assert p.digest(tenant) != want

    # The nightly rerun: the same command, no manual repair.
    rerun = _nightly(p, shared_dir, tenant, work, "rerun", "--metrics", str(work / "metrics.json"))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    fixed = json.loads(rerun.stdout)
    assert fixed["status"] == "ok" and fixed["files_skipped"] == 0
    assert fixed["ingested"] == clean.ingested  # every partial trajectory was rewritten
    assert p.labels(tenant) == want_counts
    assert p.digest(tenant) == want

    # And the night after: the manifest skips every file, the graph stays the same.
    again = _nightly(p, shared_dir, tenant, work, "again")
    assert again.returncode == 0, again.stderr[-3000:]
    quiet = json.loads(again.stdout)
    assert quiet["files"] == 0 and quiet["files_skipped"] == clean.files
    assert p.digest(tenant) == want
    print(
        f"\nkill after {at_kill.get('Turn', 0)}/{want_counts['Turn']} turns "
        f"({sum(at_kill.values())}/{total} nodes); {after_restart.get('Turn', 0)} turns "
        f"durable after restart; ingest exited {proc.returncode} {exit_seconds:.1f} s after "
        f"the kill; digest {want[:12]} equal after the rerun; {time.monotonic() - t0:.0f} s"
    )


# -- b. the LLM server fails part-way ---------------------------------------------------------


def _llm_settings(base: Settings, fake: FakeOpenAI, cache: Path) -> Settings:
    return dataclasses.replace(base, llm=fake_llm_settings(fake, cache_path=cache))


LLM = ("--extractor", "llm", "--embedder", "none")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fault", ["outage", "rejected-key"])
def test_llm_failing_part_way_then_a_healthy_rerun_equals_a_clean_llm_run(
    fault: str,
    shared_dir: Path,
    driver: Any,
    neo4j_settings: Settings,
    ingested: Ingest,
    tenant: str,
    tmp_path: Path,
    fake_llm: FakeOpenAI,
) -> None:
    """outage: after half the requests every one fails (5xx, dropped connections): the
    heuristic stands in, the files are ``degraded``. rejected-key: a 401 half-way is fatal
    for the run: the extractor stops asking, the trajectories left are dead-lettered, the
    files ``failed``. Either way the run finishes with exit 3 and the rerun heals it."""
    db = neo4j_settings.neo4j.database
    clean_settings = _llm_settings(neo4j_settings, fake_llm, tmp_path / "clean-cache.sqlite3")
    clean_run = ingested(shared_dir, args=LLM, settings=clean_settings)
    clean = clean_run.summary
    assert clean.exit_code == 0 and clean.llm.get("fallbacks", 0) == 0
    clean_requests = len(fake_llm.chat_requests)
    want = digest.graph_digest(driver, db, clean_run.tenant)

    fake_llm.reset()
    answered = clean_requests // 2
    if fault == "outage":
        fake_llm.script(*["ok"] * answered, *["500", "drop", "503"] * 40)
    else:
        fake_llm.script(*["ok"] * answered, "401")
    settings = _llm_settings(neo4j_settings, fake_llm, tmp_path / "cache.sqlite3")
    manifest = str(tmp_path / "manifest.json")
    args = (*LLM, "--manifest", manifest)
    hurt = ingested(shared_dir, tenant=tenant, args=args, settings=settings).summary
    assert (hurt.status, hurt.exit_code) == ("partial", EXIT_PARTIAL)
    assert hurt.balanced and hurt.records == clean.records
    assert 0 < len(hurt.files_retry) <= clean.files
    entries = json.loads(Path(manifest).read_text())["scopes"][0]["files"]
    retry = {k for k, v in entries.items() if v["status"] != "done"}
    assert {os.path.abspath(f) for f in hurt.files_retry} == retry
    if fault == "outage":  # nothing lost: the heuristic stood in
        assert hurt.dead_lettered == 0 and hurt.ingested == clean.ingested
        assert hurt.turns == clean.turns
        assert 0 < hurt.windows_degraded < clean.windows
        assert hurt.llm["errors"] >= 3 and hurt.llm.get("skipped_server_down", 0) > 0
        assert {entries[k]["status"] for k in retry} == {"degraded"}
    else:  # the key was refused: no guessing, the rest is dead-lettered with the reason
        assert 0 < hurt.dead_lettered < clean.records and hurt.windows_degraded == 0
        assert len(fake_llm.chat_requests) == answered + 1  # it stopped asking
        assert {entries[k]["status"] for k in retry} == {"failed"}
    assert digest.graph_digest(driver, db, tenant) != want

    # The rerun against the healthy server reads only those files and asks only for the
    # windows nobody answered (answered ones come from the cache).
    fake_llm.reset()
    healed = ingested(shared_dir, tenant=tenant, args=args, settings=settings).summary
    assert (healed.status, healed.exit_code) == ("ok", 0)
    assert healed.files == len(hurt.files_retry)
    assert healed.files_skipped == clean.files - len(hurt.files_retry)
    assert healed.windows_degraded == 0 and healed.llm.get("fallbacks", 0) == 0
    assert 0 < len(fake_llm.chat_requests) < clean_requests
    assert healed.llm.get("windows", 0) + hurt.llm.get("windows", 0) == clean.windows
    assert digest.graph_digest(driver, db, tenant) == want
    entries = json.loads(Path(manifest).read_text())["scopes"][0]["files"]
    assert {v["status"] for v in entries.values()} == {"done"}
    print(
        f"\nLLM {fault} after {answered} of {clean_requests} requests: "
        f"{hurt.windows_degraded}/{clean.windows} windows by the heuristic, "
        f"{hurt.dead_lettered}/{clean.records} records dead-lettered, "
        f"{len(hurt.files_retry)}/{clean.files} files to retry; rerun: "
        f"{len(fake_llm.chat_requests)} requests, {healed.llm.get('cache_hits', 0)} cache "
        f"hits; digest {want[:12]} equal"
    )
