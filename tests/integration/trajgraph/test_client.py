"""TrajGraph, the one read-side client, against the real Neo4j: every operation, tenants as a
per-call argument, not-found errors, many threads on one client, and its lifecycle."""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import neo4j
import pytest

from tests.integration.ingesting import Ingest, retries_log
from trajgraph.client import Timeouts, TrajGraph
from trajgraph.core.errors import ConfigError, NotFoundError
from trajgraph.core.settings import Settings
from trajgraph.graph import digest

TRAJ = retries_log("client-retries")
T = str(TRAJ["id"])


@pytest.fixture
def tenant_settings(ingested: Ingest, tenant: str) -> Settings:
    """A tenant holding TRAJ, and the settings whose default tenant it is."""
    run = ingested(TRAJ, tenant=tenant)
    assert run.summary.ingested == 1
    return run.settings


def test_every_operation_through_one_client(
    tenant_settings: Settings, driver: neo4j.Driver
) -> None:
    tenant = tenant_settings.tenant
    with TrajGraph.from_settings(tenant_settings) as tg:
        assert tg.tenant == tenant and tg.llm is None
        tg.ping()
        assert [t["id"] for t in tg.trajectories()] == [T]
        assert tg.trajectory(T)["turns"] == 4
        chain = tg.why(T, turn=1, depth=3)
        assert any(n["turn"] == 1 for n in chain)
        brief = tg.brief(T, budget=200)
        assert brief.tokens <= 200 and "Task: Make tests/test_api.py pass." in brief.text
        reminder = tg.remind(T, "pytest  tests/test_api.py", before_turn=2)
        assert reminder.rule == "repeated_failure" and reminder.cites == [1]
        assert tg.remind(T, "pytest tests/test_api.py").reminder is None  # passed at turn 3
        counted = tg.retrieve("How many times did the agent run pytest?", trajectory=T)
        assert counted.counts["code_result"]["count"] == 2
        found = tg.retrieve("AssertionError", mode="keyword")
        assert found.counts["keyword_hits"] > 0
        rows = tg.run_query("identifier_timeline", {"identifier": "config.yaml", "trajectory": T})
        assert rows and {r["turn"] for r in rows} >= {0, 2}
        assert "why_chain" in tg.query_names()
        db = tenant_settings.neo4j.database
        assert tg.digest(T) == digest.trajectory_digest(driver, db, tenant, T)
        assert tg.digest() == digest.graph_digest(driver, db, tenant)
        with pytest.raises(ConfigError, match="exactly one"):
            tg.delete()
        with pytest.raises(ConfigError, match="exactly one"):
            tg.delete(trajectory=T, everything=True)
        done = tg.delete(trajectory=T)
        assert done.trajectories == [T] and done.nodes > 0
        assert tg.trajectories() == []


def test_the_tenant_is_a_per_call_argument(tenant_settings: Settings) -> None:
    tenant = tenant_settings.tenant
    other = dataclasses.replace(tenant_settings, tenant=f"{tenant}-other")
    with TrajGraph.from_settings(other) as tg:
        assert tg.trajectories() == []
        assert [t["id"] for t in tg.trajectories(tenant=tenant)] == [T]
        assert tg.why(T, turn=1, tenant=tenant)
        assert tg.brief(T, tenant=tenant).trajectory == T
        assert tg.run_query("trajectories", {"trajectory": None}, tenant=tenant)
        # $tenant given in params counts when no tenant argument is.
        assert tg.run_query("trajectories", {"trajectory": None, "tenant": tenant})
        items = tg.retrieve("AssertionError", mode="keyword", tenant=tenant).items
        assert {e.trajectory_id for e in items} == {T}
        assert tg.retrieve("AssertionError", mode="keyword").items == []
        # The other tenant's trajectory is not found, whatever the call.
        for call in (
            lambda: tg.trajectory(T),
            lambda: tg.why(T, turn=1),
            lambda: tg.brief(T),
            lambda: tg.remind(T, "ls"),
            lambda: tg.retrieve("why did it fail?", trajectory=T),
            lambda: tg.digest(T),
            lambda: tg.delete(trajectory=T),
        ):
            with pytest.raises(NotFoundError, match="no trajectory 'client-retries'") as e:
                call()
            assert (e.value.kind, e.value.name, e.value.tenant) == ("trajectory", T, other.tenant)
        with pytest.raises(NotFoundError, match="no query 'nope'") as q:
            tg.run_query("nope")
        assert (q.value.kind, q.value.name) == ("query", "nope")
        with pytest.raises(NotFoundError, match="no trajectory from source"):
            tg.delete(source="/nowhere.jsonl")


def test_one_client_serves_many_threads(tenant_settings: Settings) -> None:
    questions = ["Why did the test fail?", "How many times did the agent run pytest?"] * 4
    with TrajGraph.from_settings(tenant_settings) as tg:

        def answer(q: str) -> tuple[Any, ...]:
            r = tg.retrieve(q, trajectory=T)  # all of it but the code's run time
            return r.route, r.context, [e.uid for e in r.items], r.counts.get("code_result")

        alone = [answer(q) for q in questions]
        chain = tg.why(T, turn=3)
        with ThreadPoolExecutor(max_workers=8) as pool:
            together = list(pool.map(answer, questions))
            chains = list(pool.map(lambda _: tg.why(T, turn=3), range(8)))
    assert together == alone
    assert chains == [chain] * 8


def test_lifecycle_and_a_caller_owned_driver(
    tenant_settings: Settings, driver: neo4j.Driver, monkeypatch: pytest.MonkeyPatch
) -> None:
    tg = TrajGraph.from_settings(tenant_settings, timeouts=Timeouts(query_s=5.0, library_s=5.0))
    assert tg.trajectories()
    tg.close()
    tg.close()  # idempotent
    with pytest.raises(Exception, match="closed"):
        tg.driver.verify_connectivity()  # it owned its driver
    # Wrapping a driver the caller keeps: close() leaves it open.
    with TrajGraph(
        driver, database=tenant_settings.neo4j.database, tenant=tenant_settings.tenant
    ) as mine:
        assert [t["id"] for t in mine.trajectories()] == [T]
    driver.verify_connectivity()
    # The notebook line: settings from the environment (this test's Neo4j, no LLM).
    monkeypatch.delenv("TRAJGRAPH_LLM_MODEL", raising=False)
    monkeypatch.setenv("TRAJGRAPH_TENANT", tenant_settings.tenant)
    with TrajGraph.from_settings() as tg2:
        print(tg2.why(T, turn=1))
        assert tg2.tenant == tenant_settings.tenant and tg2.why(T, turn=1)
