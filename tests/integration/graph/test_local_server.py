"""A second, throw-away local server: own port, data dir and run dir; jars shared with the main one.

Exercises the whole life cycle on a fresh data dir, including setting the initial password.
"""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

import neo4j
import pytest
from neo4j.exceptions import AuthError, ClientError

from trajgraph.core.errors import ServerError
from trajgraph.core.settings import Settings
from trajgraph.graph import local_server as ls


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(180)
def test_second_server_life_cycle(neo4j_settings: Settings, tmp_path: Path) -> None:
    neo = neo4j_settings.neo4j
    local = replace(
        neo4j_settings.local,
        bolt_port=_free_port(),
        data_dir=tmp_path / "data",
        run_dir=tmp_path / "run",
        heap="256m",
        pagecache="32m",
    )
    try:
        st = ls.start(neo, local, log=print)
        assert st.running and st.pid is not None
        assert st.bolt_uri == f"bolt://127.0.0.1:{local.bolt_port}"
        assert st.data_dir == tmp_path / "data"
        assert st.log_path.is_file()
        assert (tmp_path / "run" / "conf" / "neo4j.conf").is_file()

        with neo4j.GraphDatabase.driver(st.bolt_uri, auth=(neo.user, neo.password)) as drv:
            records, _, _ = drv.execute_query("RETURN 1 AS one", database_=neo.database)
            assert records[0]["one"] == 1
            # Its own files are out of LOAD CSV's reach (the conf it was started with).
            with pytest.raises(ClientError, match="allow_csv_import_from_file_urls"):
                drv.execute_query(
                    "LOAD CSV FROM 'file:///conf/neo4j.conf' AS line RETURN line LIMIT 1",
                    database_=neo.database,
                )
        with (
            neo4j.GraphDatabase.driver(st.bolt_uri, auth=(neo.user, neo.password + "-x")) as bad,
            pytest.raises(AuthError),
        ):
            bad.verify_connectivity()

        # Starting again finds it running and returns at once with the same process.
        assert ls.start(neo, local, log=print).pid == st.pid
        # Another run dir on the same port: the port is taken by a server it does not manage.
        with pytest.raises(ServerError, match="already taken by a Bolt server"):
            ls.start(neo, replace(local, run_dir=tmp_path / "run2"), log=print)
    finally:
        stopped = ls.stop(local, timeout=30)
    assert stopped
    after = ls.status(neo, local)
    assert not after.running and after.pid is None
    assert not (tmp_path / "run" / "neo4j.pid").exists()
    assert ls.stop(local) is False
