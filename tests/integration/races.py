"""A write and a delete racing, made to happen every time: the delete's transaction held
open until the writes wait for its locks, then committed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import neo4j

# Transactions of this database waiting for a lock another one holds.
BLOCKED = "SHOW TRANSACTIONS YIELD status WHERE status STARTS WITH 'Blocked' RETURN count(*) AS n"


def while_held(
    driver: neo4j.Driver,
    db: str,
    held: list[tuple[str, dict[str, Any]]],
    *jobs: Callable[[], object],
) -> list[BaseException]:
    """Run ``held`` in a transaction, start ``jobs`` on threads, wait until each waits for a
    lock that transaction holds, commit; the exceptions the jobs raised. The race of writes
    and a delete, made to happen every time."""
    errors: list[BaseException] = []

    def run(job: Callable[[], object]) -> None:
        try:
            job()
        except BaseException as e:  # the test reports it
            errors.append(e)

    with driver.session(database=db) as session:
        tx = session.begin_transaction()
        for statement, params in held:
            tx.run(statement, params).consume()
        threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
        for thread in threads:
            thread.start()
        blocked = 0
        for _ in range(300):
            blocked = driver.execute_query(BLOCKED, database_=db).records[0]["n"]
            if blocked >= len(jobs) or not all(t.is_alive() for t in threads):
                break
            time.sleep(0.05)
        tx.commit()
    for thread in threads:
        thread.join(timeout=120)
    assert blocked == len(jobs), f"{blocked} jobs waited for the held locks (raised: {errors})"
    return errors
