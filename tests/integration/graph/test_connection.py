"""The drivers trajgraph opens (graph/connection.open_driver), against the real Neo4j."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from trajgraph.core.settings import Settings
from trajgraph.graph.connection import open_driver


def test_reading_a_property_some_graphs_lack_logs_nothing(
    driver: Any, neo4j_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """Optional turn fields (reward, thought, ...) are absent from many graphs; a notebook
    using the client must not get a driver warning for every query that reads one."""
    neo = neo4j_settings.neo4j
    ours = open_driver(neo)
    try:
        with caplog.at_level(logging.INFO, logger="neo4j.notifications"):
            _, summary, _ = ours.execute_query(
                "MATCH (t:Turn) RETURN t.a_field_no_graph_has AS v LIMIT 1",
                database_=neo.database,
            )
        assert [r.name for r in caplog.records if r.name.startswith("neo4j")] == []
        assert not any(
            "a_field_no_graph_has" in (n.get("description") or "")
            for n in (summary.notifications or [])
        )
    finally:
        ours.close()
    # The server does note it to a driver that did not opt out: the test can fail.
    _, plain, _ = driver.execute_query(
        "MATCH (t:Turn) RETURN t.a_field_no_graph_has AS v LIMIT 1", database_=neo.database
    )
    assert any(
        "a_field_no_graph_has" in (n.get("description") or "") for n in plain.notifications or []
    )
