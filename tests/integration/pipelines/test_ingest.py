"""Batch ingest against the real Neo4j server and the real agent logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from apache_beam.runners.runner import PipelineState

from tests.integration.ingesting import Ingest, scalar
from tests.integration.servers import child_env
from trajgraph.demo import DEMO_ID, sample_trajectory, write_sample
from trajgraph.graph import cypher
from trajgraph.pipelines import ingest_pipeline as pipeline
from trajgraph.pipelines.adapters import normalize, split_records


def _expected_turns(files: list[Path]) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in files:
        for rec in split_records(str(f), f.read_bytes()):
            for t in normalize(rec):
                out[t["id"]] = len(t["turns"])
    return out


def _counts(driver: Any, tenant: str) -> tuple[int, int]:
    nodes = scalar(driver, cypher.COUNT_TENANT_NODES, tenant=tenant)
    rels = scalar(driver, cypher.COUNT_TENANT_RELATIONSHIPS, tenant=tenant)
    return nodes, rels


def test_every_real_file_lands_with_adapter_counts_and_reingest_is_a_no_op(
    shared_dir: Path, driver: Any, ingested: Ingest, tenant: str
) -> None:
    files = sorted(p for p in shared_dir.rglob("*") if p.is_file() and p.name != "README.md")
    expected = _expected_turns(files)
    assert len(expected) >= 7  # 1 + 1 + 1 + spider rollouts + 3 tau-bench episodes

    run = ingested(shared_dir, tenant=tenant)
    first = run.summary
    assert first.dead_lettered == 0, (run.dead_letter / "dead-letter.jsonl").read_text()
    assert first.records == first.ingested == len(expected)
    assert first.balanced
    assert first.turns == sum(expected.values())

    rows = driver.execute_query(cypher.COUNT_TRAJECTORY_TURNS, tenant=tenant).records
    assert {r["id"]: r["turns"] for r in rows} == expected

    labels = {
        r["label"]: r["n"]
        for r in driver.execute_query(cypher.COUNT_TENANT_BY_LABEL, tenant=tenant).records
    }
    assert labels["Trajectory"] == len(expected)
    assert labels["Turn"] == sum(expected.values())
    assert labels["State"] > 0 and labels["Object"] > 0 and labels["Identifier"] > 0

    # Every state and turn was embedded once; the re-ingest below embeds nothing.
    assert first.counters["embedded"] == labels["State"] + labels["Turn"]

    before = _counts(driver, tenant)
    second = ingested(shared_dir, tenant=tenant).summary
    assert second.unchanged == len(expected)
    assert second.rows_written == 0
    assert second.counters.get("embedded", 0) == 0
    assert _counts(driver, tenant) == before


def test_every_edge_cites_turns_and_supersedes_stays_in_subject(
    shared_dir: Path, driver: Any, ingested: Ingest, tenant: str
) -> None:
    ingested(shared_dir / "swe-agent", tenant=tenant)
    missing = scalar(
        driver,
        "MATCH (a {tenant: $tenant})-[r:CAUSES|ASSOCIATED|SUPERSEDES]->() "
        "WHERE r.turns IS NULL OR size(r.turns) = 0 RETURN count(r) AS n",
        tenant=tenant,
    )
    assert missing == 0
    bad = scalar(
        driver,
        "MATCH (a:State {tenant: $tenant})-[:SUPERSEDES]->(b:State) "
        "WHERE a.subject <> b.subject OR a.attribute <> b.attribute OR a.turn <= b.turn "
        "OR a.trajectory_uid <> b.trajectory_uid RETURN count(*) AS n",
        tenant=tenant,
    )
    assert bad == 0
    causes = scalar(
        driver,
        "MATCH (:Turn {tenant: $tenant})-[r:CAUSES]->(:State) RETURN count(r)",
        tenant=tenant,
    )
    assert causes > 0


def test_bad_lines_go_to_dead_letter_and_the_rest_lands(
    driver: Any, ingested: Ingest, tenant: str, tmp_path: Path
) -> None:
    good = sample_trajectory()
    other = {**good, "id": "second-good"}
    path = tmp_path / "mixed.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps(good),
                json.dumps(good)[:120],  # truncated line
                "[1, 2, 3]",  # not an object
                json.dumps(other),
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    run = ingested(path, tenant=tenant)
    summary = run.summary
    assert (summary.records, summary.ingested, summary.dead_lettered) == (4, 2, 2)
    dead = [
        json.loads(line)
        for line in (run.dead_letter / "dead-letter.jsonl").read_text().splitlines()
    ]
    assert sorted(d["locator"] for d in dead) == ["line 2", "line 3"]
    assert all(d["source"] == str(path) for d in dead)
    assert all(d["reason"] for d in dead)
    ids = {
        r["id"] for r in driver.execute_query(cypher.COUNT_TRAJECTORY_TURNS, tenant=tenant).records
    }
    assert ids == {DEMO_ID, "second-good"}


def test_a_changed_trajectory_is_rewritten_without_stale_states(
    driver: Any, ingested: Ingest, tenant: str, tmp_path: Path
) -> None:
    path = write_sample(tmp_path)
    ingested(path, tenant=tenant)
    traj = sample_trajectory()
    traj["turns"] = traj["turns"][:3]
    path.write_text(json.dumps(traj) + "\n", encoding="utf-8")
    summary = ingested(path, tenant=tenant).summary
    assert summary.ingested == 1 and summary.unchanged == 0
    turns = driver.execute_query(
        "MATCH (t:Turn {tenant: $tenant}) RETURN max(t.idx) AS m, count(t) AS n", tenant=tenant
    ).records[0]
    assert (turns["m"], turns["n"]) == (2, 3)
    late = scalar(
        driver, "MATCH (s:State {tenant: $tenant}) WHERE s.turn > 2 RETURN count(s)", tenant=tenant
    )
    assert late == 0


def test_no_match_is_a_clear_error(ingested: Ingest, tenant: str, tmp_path: Path) -> None:
    from trajgraph.core.errors import InputError

    with pytest.raises(InputError, match="no input files match"):
        ingested(str(tmp_path / "nothing-*.jsonl"), tenant=tenant)


def test_the_pipeline_runs_bare_from_its_own_flags(
    driver: Any, neo4j_settings: Any, tenant: str, tmp_path: Path
) -> None:
    # `python -m trajgraph.pipelines.ingest_pipeline`: the pipeline without the job around it;
    # flags it does not know (here --direct_num_workers) go to Beam.
    path = tmp_path / "mixed.jsonl"
    path.write_text(json.dumps(sample_trajectory()) + "\n[1, 2, 3]\n", encoding="utf-8")
    argv = [str(path), "--tenant", tenant, "--embedder", "none", "--extractor", "heuristic"]
    argv += ["--dead-letter", str(tmp_path / "dl"), "--direct_num_workers", "1"]
    result = pipeline.run(argv, settings=neo4j_settings)
    assert result.state == PipelineState.DONE
    ids = {
        r["id"] for r in driver.execute_query(cypher.COUNT_TRAJECTORY_TURNS, tenant=tenant).records
    }
    assert ids == {DEMO_ID}
    dead = (tmp_path / "dl" / "dead-letter.jsonl").read_text().splitlines()
    assert [json.loads(d)["locator"] for d in dead] == ["line 2"]


def test_many_small_trajectories_leave_stderr_empty(
    driver: Any, neo4j_settings: Any, tenant: str, tmp_path: Path
) -> None:
    """A run that went well says so on stdout and nothing on stderr: many one-turn
    trajectories made Beam's batch-size fit print numpy warnings there, a dozen lines that
    read like a traceback's."""
    import subprocess
    import sys

    log = tmp_path / "small.jsonl"
    log.write_text(
        "".join(
            json.dumps({"id": f"s{i}", "turns": [{"action": "ls", "observation": f"f{i}"}]}) + "\n"
            for i in range(300)
        )
    )
    env = child_env(neo4j_settings)
    exe = Path(sys.executable).with_name("trajgraph")
    argv = [str(exe), "ingest", str(log), "--tenant", tenant, "--progress", "off"]
    argv += ["--extractor", "heuristic", "--embedder", "none", "--dead-letter", str(tmp_path)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr == ""
    assert "300" in proc.stdout
