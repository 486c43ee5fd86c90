"""The on-disk caches (LLM extractions, embeddings) have a size cap: beyond it the least
recently used entries are deleted (trajgraph/core/sqlite_store.py), and the cap is a setting."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trajgraph.core import sqlite_store
from trajgraph.core.errors import ConfigError
from trajgraph.core.settings import DEFAULT_CACHE_MAX_MB, cache_max_bytes, load
from trajgraph.extractors.llm_cache import ExtractionCache
from trajgraph.graph.embed_cache import VectorCache

CAP = 256 * 1024


def _vectors(prefix: str, n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(len(prefix) + n)
    return {f"{prefix}{i}": rng.random(384, dtype=np.float32) for i in range(n)}


def test_a_capped_cache_stays_under_its_cap_and_keeps_the_newest(tmp_path: Path) -> None:
    cache = VectorCache(tmp_path / "c.sqlite3", max_bytes=CAP)
    batches = [_vectors(f"b{n}-", 100) for n in range(10)]  # 10 x 100 x 1.5 KiB = 1.5 MiB
    for batch in batches:
        cache.put_many(batch)
        assert cache.used_bytes() <= CAP + 200 * 1024  # at most one batch over, until evicted
    assert cache.used_bytes() <= CAP
    assert 0 < len(cache) < 1000
    newest = cache.get_many(batches[-1])
    assert set(newest) == set(batches[-1])
    assert np.array_equal(newest["b9-0"], batches[-1]["b9-0"])
    assert cache.get_many(batches[0]) == {}  # the oldest went first


def test_a_hit_keeps_an_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_store, "TOUCH_AFTER_S", 0.0)  # every hit marks its entry used
    cache = ExtractionCache(tmp_path / "llm.sqlite3", max_bytes=CAP)
    first = {f"a{i}": {"states": ["x" * 900]} for i in range(50)}
    cache.put_many(first)
    for n in range(12):
        assert set(cache.get_many(first)) == set(first)  # read between writes: kept
        cache.put_many({f"b{n}-{i}": {"states": ["y" * 900]} for i in range(50)})
    assert set(cache.get_many(first)) == set(first)
    assert cache.get_many([f"b0-{i}" for i in range(50)]) == {}  # written, never read: gone
    assert cache.used_bytes() <= CAP


def test_no_cap_keeps_everything(tmp_path: Path) -> None:
    cache = VectorCache(tmp_path / "c.sqlite3")
    for n in range(3):
        cache.put_many(_vectors(f"b{n}-", 100))
    assert len(cache) == 300


def test_the_caps_are_settings() -> None:
    s = load({})
    assert s.llm.cache_max_mb == s.embedder.cache_max_mb == DEFAULT_CACHE_MAX_MB
    s = load({"TRAJGRAPH_LLM_CACHE_MAX_MB": "64", "TRAJGRAPH_EMBED_CACHE_MAX_MB": "0"})
    assert cache_max_bytes(s.llm.cache_max_mb) == 64 * 1024 * 1024
    assert cache_max_bytes(s.embedder.cache_max_mb) is None
    with pytest.raises(ConfigError, match="TRAJGRAPH_EMBED_CACHE_MAX_MB"):
        load({"TRAJGRAPH_EMBED_CACHE_MAX_MB": "-1"})
