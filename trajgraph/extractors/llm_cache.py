"""A content-addressed cache of LLM window extractions in one SQLite file.

Keyed by (model, prompt version, window text): a re-ingest of unchanged input makes no LLM
call, a changed window or a new prompt version misses (the file: trajgraph/core/sqlite_store.py).
A runner with workers on several machines needs a shared path or accepts one cache per machine.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from trajgraph.core.sqlite_store import SqliteStore


def cache_key(model: str, prompt_version: str, window_text: str) -> str:
    h = hashlib.sha256()
    for part in (model, prompt_version, window_text):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x1f")
    return h.hexdigest()


class ExtractionCache(SqliteStore[Any]):
    """JSON values by key in one SQLite file."""

    table = "extractions"
    column = "value"
    column_type = "TEXT"
    what = "the LLM cache"
    setting = "TRAJGRAPH_LLM_CACHE"

    def encode(self, value: Any) -> str:
        return json.dumps(value, ensure_ascii=False)

    def decode(self, stored: str) -> Any:
        try:
            return json.loads(stored)
        except (TypeError, ValueError, RecursionError):  # RecursionError: nested too deep
            return None  # a damaged entry is a miss: the window is asked again and replaced
