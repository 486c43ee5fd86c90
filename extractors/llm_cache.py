"""A content-addressed cache of LLM window extractions in one SQLite file.

Keyed by (model, prompt version, window text): a re-ingest of unchanged input makes no LLM
call, a changed window or a new prompt version misses. SQLite because it is in the standard
library, is safe across the threads and processes of a local Beam run (WAL, busy timeout),
and is one file a user can inspect or delete. A runner with workers on several machines needs
a shared path or accepts one cache per machine.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trajgraph.errors import ConfigError


def cache_key(model: str, prompt_version: str, window_text: str) -> str:
    h = hashlib.sha256()
    for part in (model, prompt_version, window_text):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x1f")
    return h.hexdigest()


class ExtractionCache:
    """``get_many``/``put_many`` of JSON values by key; thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                str(path), timeout=30, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS extractions ("
                " key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL NOT NULL)"
            )
        except (OSError, sqlite3.Error) as e:
            raise ConfigError(f"cannot open the LLM cache {path}: {e}") from e
        self._lock = threading.Lock()

    def get_many(self, keys: Iterable[str]) -> dict[str, Any]:
        wanted = list(dict.fromkeys(keys))
        found: dict[str, Any] = {}
        with self._lock:
            for i in range(0, len(wanted), 500):  # SQLite caps bound parameters per statement
                chunk = wanted[i : i + 500]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT key, value FROM extractions WHERE key IN ({marks})", chunk
                ).fetchall()
                found.update((k, json.loads(v)) for k, v in rows)
        return found

    def put_many(self, items: dict[str, Any]) -> None:
        if not items:
            return
        now = time.time()
        rows = [(k, json.dumps(v, ensure_ascii=False), now) for k, v in items.items()]
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(
                    "INSERT OR REPLACE INTO extractions (key, value, created) VALUES (?, ?, ?)",
                    rows,
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM extractions").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
