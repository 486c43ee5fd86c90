"""Values by key in one SQLite file: the on-disk half of the LLM and embedding caches.

SQLite because it is in the standard library, is safe across the threads and processes of a
local Beam run (WAL, busy timeout) and is one file a user can inspect or delete. A subclass
names its table and value column and says how a value becomes a column value and back.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from trajgraph.errors import ConfigError

V = TypeVar("V")
BATCH = 500  # SQLite caps the bound parameters of one statement


class SqliteStore(Generic[V]):
    """``get_many``/``put_many`` by key; thread-safe, shared by processes (WAL)."""

    table: ClassVar[str]
    column: ClassVar[str]
    column_type: ClassVar[str]  # BLOB or TEXT
    what: ClassVar[str]  # for errors: "the LLM cache"
    setting: ClassVar[str]  # its environment variable: "TRAJGRAPH_LLM_CACHE"

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                str(path), timeout=30, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                f"CREATE TABLE IF NOT EXISTS {self.table} (key TEXT PRIMARY KEY,"
                f" {self.column} {self.column_type} NOT NULL, created REAL NOT NULL)"
            )
            # A table of that name with other columns: another program's file, or an old one.
            self._db.execute(f"SELECT key, {self.column}, created FROM {self.table} LIMIT 0")
        except (OSError, sqlite3.Error) as e:
            raise ConfigError(f"cannot open {self.what} {path}: {e}") from e
        self._lock = threading.Lock()

    def _failed(self, e: sqlite3.Error) -> ConfigError:
        # A file damaged (or made read-only) after it was opened: say which, and what to do.
        return ConfigError(
            f"{self.what} {self.path} failed: {e} (delete the file to start an empty one, "
            f"or set {self.setting}=off)"
        )

    def encode(self, value: V) -> bytes | str:
        raise NotImplementedError

    def decode(self, stored: Any) -> V:  # what encode stored: bytes for BLOB, str for TEXT
        raise NotImplementedError

    def get_many(self, keys: Iterable[str]) -> dict[str, V]:
        wanted = list(dict.fromkeys(keys))
        found: dict[str, V] = {}
        with self._lock:
            for i in range(0, len(wanted), BATCH):
                chunk = wanted[i : i + BATCH]
                marks = ",".join("?" * len(chunk))
                try:
                    rows = self._db.execute(
                        f"SELECT key, {self.column} FROM {self.table} WHERE key IN ({marks})",
                        chunk,
                    ).fetchall()
                except sqlite3.Error as e:
                    raise self._failed(e) from e
                found.update((k, self.decode(v)) for k, v in rows)
        return found

    def put_many(self, items: dict[str, V]) -> None:
        if not items:
            return
        now = time.time()
        rows = [(k, self.encode(v), now) for k, v in items.items()]
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                raise self._failed(e) from e
            try:
                self._db.executemany(
                    f"INSERT OR REPLACE INTO {self.table} (key, {self.column}, created)"
                    " VALUES (?, ?, ?)",
                    rows,
                )
                self._db.execute("COMMIT")
            except BaseException as e:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                if isinstance(e, sqlite3.Error):
                    raise self._failed(e) from e
                raise

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute(f"SELECT count(*) FROM {self.table}").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
