"""How long the write path retries a lost Neo4j is the user's to set
(TRAJGRAPH_NEO4J_WRITE_RETRY_S); the read path keeps its own short retry."""

from __future__ import annotations

from typing import Any

import neo4j
import pytest

from trajgraph.core.errors import ConfigError
from trajgraph.core.settings import DEFAULT_WRITE_RETRY_S, load
from trajgraph.graph.connection import READ_TIMEOUTS, open_driver


def test_the_write_retry_is_read_from_the_environment() -> None:
    assert load({}).neo4j.write_retry_s == DEFAULT_WRITE_RETRY_S
    assert load({"TRAJGRAPH_NEO4J_WRITE_RETRY_S": "120"}).neo4j.write_retry_s == 120.0
    with pytest.raises(ConfigError, match="TRAJGRAPH_NEO4J_WRITE_RETRY_S"):
        load({"TRAJGRAPH_NEO4J_WRITE_RETRY_S": "-1"})
    with pytest.raises(ConfigError, match="TRAJGRAPH_NEO4J_WRITE_RETRY_S"):
        load({"TRAJGRAPH_NEO4J_WRITE_RETRY_S": "soon"})


def test_writers_retry_as_set_and_readers_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    given: list[dict[str, Any]] = []

    class Driver:
        def close(self) -> None:
            return None

    def driver(_uri: str, **kw: Any) -> Driver:
        given.append(kw)
        return Driver()

    monkeypatch.setattr(neo4j.GraphDatabase, "driver", driver)
    neo = load({"TRAJGRAPH_NEO4J_WRITE_RETRY_S": "7.5"}).neo4j
    open_driver(neo, verify=False)
    open_driver(neo, verify=False, timeouts=READ_TIMEOUTS)
    assert [kw["max_transaction_retry_time"] for kw in given] == [7.5, READ_TIMEOUTS.retry_s]
