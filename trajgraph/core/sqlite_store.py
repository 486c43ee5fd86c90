"""Values by key in one SQLite file: the on-disk half of the LLM and embedding caches.

SQLite because it is in the standard library, is safe across the threads and processes of a
local Beam run (WAL, busy timeout) and is one file a user can inspect or delete. A subclass
names its table and value column and says how a value becomes a column value and back.

A store has a size cap (``max_bytes``; TRAJGRAPH_LLM_CACHE_MAX_MB and
TRAJGRAPH_EMBED_CACHE_MAX_MB): once its rows take more, the least recently used ones are
deleted until they take 90 % of it. "Used" is written or read, a read counting only once a
day per entry, so that a run that hits the cache does not turn every read into a write.
SQLite re-uses the freed pages; the file itself does not shrink (VACUUM would rewrite it).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from trajgraph.core.errors import ConfigError

V = TypeVar("V")
BATCH = 500  # SQLite caps the bound parameters of one statement
TOUCH_AFTER_S = 86_400.0  # a hit marks its entry used again once it is a day old
EVICT_TO = 0.9  # of the cap, after an eviction: room for a few more writes before the next
MB = 1024 * 1024


class SqliteStore(Generic[V]):
    """``get_many``/``put_many`` by key; thread-safe, shared by processes (WAL)."""

    table: ClassVar[str]
    column: ClassVar[str]
    column_type: ClassVar[str]  # BLOB or TEXT
    what: ClassVar[str]  # for errors: "the LLM cache"
    setting: ClassVar[str]  # its environment variable: "TRAJGRAPH_LLM_CACHE"

    def __init__(self, path: Path, *, max_bytes: int | None = None) -> None:
        self.path = path
        self.max_bytes = max_bytes  # None: no cap
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
            # `created` is when the entry was last used: eviction takes the oldest first.
            self._db.execute(
                f"CREATE INDEX IF NOT EXISTS {self.table}_created ON {self.table} (created)"
            )
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
            if found and self.max_bytes is not None:
                self._touch(list(found))
        return found

    def _touch(self, keys: list[str]) -> None:
        """Mark ``keys`` used now, where they were last marked over a day ago (few writes)."""
        now = time.time()
        try:
            for i in range(0, len(keys), BATCH):
                chunk = keys[i : i + BATCH]
                marks = ",".join("?" * len(chunk))
                self._db.execute(
                    f"UPDATE {self.table} SET created = ? WHERE key IN ({marks}) AND created < ?",
                    [now, *chunk, now - TOUCH_AFTER_S],
                )
        except sqlite3.Error:
            pass  # busy or read-only: the entries only look older than they are

    def used_bytes(self) -> int:
        """Bytes of the file's pages in use (freed pages, which SQLite re-uses, left out)."""
        with self._lock:
            return self._used_bytes()

    def _used_bytes(self) -> int:
        pages = self._db.execute("PRAGMA page_count").fetchone()[0]
        free = self._db.execute("PRAGMA freelist_count").fetchone()[0]
        size = self._db.execute("PRAGMA page_size").fetchone()[0]
        return int((pages - free) * size)

    def _evict(self) -> None:
        """Delete the least recently used rows until they take EVICT_TO of the cap (inside
        the caller's transaction)."""
        if self.max_bytes is None:
            return
        used = self._used_bytes()
        if used <= self.max_bytes:
            return
        rows = int(self._db.execute(f"SELECT count(*) FROM {self.table}").fetchone()[0])
        if not rows:
            return
        per_row = used / rows
        drop = min(rows, int((used - self.max_bytes * EVICT_TO) / per_row) + 1)
        self._db.execute(
            f"DELETE FROM {self.table} WHERE key IN "
            f"(SELECT key FROM {self.table} ORDER BY created LIMIT ?)",
            (drop,),
        )

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
                self._evict()
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
