"""The why-chain over the demo trajectory, and the CLI around it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.ingesting import Ingest
from trajgraph.core.errors import ConfigError, NotFoundError
from trajgraph.demo import DEMO_ID, WHY_TURN, write_sample
from trajgraph.queries.why.chain import render_text, why_chain


@pytest.fixture
def demo_ingested(ingested: Ingest, tenant: str, tmp_path: Path) -> str:
    assert ingested(write_sample(tmp_path), tenant=tenant).summary.ingested == 1
    return tenant


@pytest.fixture
def demo_why(
    driver: Any, neo4j_settings: Any, demo_ingested: str
) -> Callable[[int], list[dict[str, Any]]]:
    """The why-chain of the demo's passing run, at a depth."""

    def chain(depth: int) -> list[dict[str, Any]]:
        return why_chain(
            driver,
            database=neo4j_settings.neo4j.database,
            tenant=demo_ingested,
            trajectory=DEMO_ID,
            turn=WHY_TURN,
            depth=depth,
        )

    return chain


def test_why_chain_of_the_passing_run_reaches_back_to_the_fix_and_the_error(
    demo_why: Callable[[int], list[dict[str, Any]]],
) -> None:
    chain = demo_why(6)
    turns = [row["turn"] for row in chain]
    assert turns == sorted(turns)
    assert WHY_TURN in turns
    assert 3 in turns  # the sed -i fix of src/calc.py
    assert any(row["kind"] == "state" for row in chain)
    text = render_text(chain, trajectory=DEMO_ID, target=f"turn {WHY_TURN}", depth=6)
    assert "src/calc.py" in text


def test_depth_one_is_a_subset_of_depth_six(
    demo_why: Callable[[int], list[dict[str, Any]]],
) -> None:
    def uids(depth: int) -> set[str]:
        return {r["uid"] for r in demo_why(depth)}

    assert uids(1) < uids(6)


def test_unknown_trajectory_and_bad_depth_are_clear_errors(
    driver: Any, neo4j_settings: Any, demo_ingested: str
) -> None:
    db = neo4j_settings.neo4j.database
    with pytest.raises(NotFoundError, match="no trajectory"):
        why_chain(driver, database=db, tenant=demo_ingested, trajectory="nope", turn=1)
    with pytest.raises(ConfigError, match="depth"):
        why_chain(driver, database=db, tenant=demo_ingested, trajectory=DEMO_ID, turn=1, depth=99)
    other_tenant = why_chain  # a trajectory of another tenant is invisible
    with pytest.raises(NotFoundError, match="no trajectory"):
        other_tenant(
            driver, database=db, tenant=demo_ingested + "-other", trajectory=DEMO_ID, turn=1
        )
