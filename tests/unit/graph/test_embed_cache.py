"""Embed each distinct text once (graph/embed_cache.py): in one call, in one run, across runs."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from trajgraph.core.errors import ConfigError
from trajgraph.core.settings import EmbedderSettings, load
from trajgraph.graph.embed_cache import CachedEmbedder, VectorCache, cached_embedder, text_key
from trajgraph.graph.embedders import HashEmbedder


class Counting:
    """An embedder that records every text it is asked for."""

    def __init__(self, name: str = "counting-16") -> None:
        self.name = name
        self.dim = 16
        self.asked: list[str] = []
        self._inner = HashEmbedder(16)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.asked.extend(texts)
        return self._inner.embed(texts)

    def close(self) -> None:
        return None


def test_repeated_texts_are_embedded_once_per_run(tmp_path: Path) -> None:
    inner = Counting()
    e = CachedEmbedder(inner, VectorCache(tmp_path / "c.sqlite3"))
    first = e.embed(["board A", "board B", "board A", "board A"])
    assert inner.asked == ["board A", "board B"]  # the repeats inside one call share a vector
    assert first[0] == first[2] == first[3] and first[0] != first[1]
    second = e.embed(["board B", "board C"])
    assert inner.asked == ["board A", "board B", "board C"]
    assert second[0] == first[1]
    assert e.drain_stats() == {
        "embed_cache_hits_memory": 3,
        "embed_cache_hits_disk": 0,
        "embedded_texts": 3,
    }
    assert e.drain_stats()["embedded_texts"] == 0  # drained


def test_the_disk_cache_serves_a_later_run_and_keys_by_embedder(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    fresh = CachedEmbedder(Counting(), VectorCache(path))
    vectors = fresh.embed(["exit code: 1", "exit code: 0"])
    fresh.close()

    inner = Counting()
    later = CachedEmbedder(inner, VectorCache(path))  # a new process: empty memory
    assert later.embed(["exit code: 0", "exit code: 1"]) == vectors[::-1]
    assert inner.asked == []
    assert later.drain_stats()["embed_cache_hits_disk"] == 2

    other = Counting(name="another-model")  # same texts, another embedder: never shared
    CachedEmbedder(other, VectorCache(path)).embed(["exit code: 0"])
    assert other.asked == ["exit code: 0"]
    assert len(VectorCache(path)) == 3
    assert text_key("a", "b") != text_key("ab", "") != text_key("b", "a")


def test_a_cached_vector_is_the_float32_vector_neo4j_would_store(tmp_path: Path) -> None:
    inner = Counting()
    e = CachedEmbedder(inner, VectorCache(tmp_path / "c.sqlite3"))
    v = e.embed(["some text"])[0]
    assert v == np.asarray(inner._inner.embed(["some text"])[0], dtype=np.float32).tolist()


def test_the_memory_part_is_bounded(tmp_path: Path) -> None:
    inner = Counting()
    e = CachedEmbedder(inner, None, memory_entries=2)
    e.embed(["a", "b", "c"])  # "a" falls out of memory, and there is no disk
    e.embed(["c", "a"])
    assert inner.asked == ["a", "b", "c", "a"]


def test_which_embedders_get_which_cache(tmp_path: Path) -> None:
    off = load({"TRAJGRAPH_EMBED_CACHE": "off"}).embedder
    assert off.cache_path is None
    inner = Counting()
    assert cached_embedder(inner, off) is inner  # off means no cache at all
    default = load({}).embedder
    assert default.cache_path is not None and default.cache_path.name == "embed-cache.sqlite3"
    assert default.static_dir.name == "static-embedder"
    local = EmbedderSettings(kind="local", cache_path=tmp_path / "c.sqlite3")
    wrapped = cached_embedder(inner, local)
    assert isinstance(wrapped, CachedEmbedder) and wrapped._disk is not None
    # A static or hash vector costs less than a SQLite lookup: memory only, no file.
    static = EmbedderSettings(kind="static", cache_path=tmp_path / "s.sqlite3")
    cheap = cached_embedder(inner, static)
    assert isinstance(cheap, CachedEmbedder) and cheap._disk is None
    assert not (tmp_path / "s.sqlite3").exists()
    custom = load({"TRAJGRAPH_EMBED_CACHE": str(tmp_path / "x.sqlite3")}).embedder
    assert custom.cache_path == tmp_path / "x.sqlite3"


def test_a_damaged_or_wrong_size_cached_vector_is_embedded_again_never_returned(
    tmp_path: Path,
) -> None:
    """Found by a hostile test: a cached blob of another length went into the graph as the
    model's vector (100 numbers stamped as a 384-dimension model's), and one that is not a
    float32 array crashed the run."""
    path = tmp_path / "c.sqlite3"
    inner = Counting()
    planted = {
        "short": np.ones(7, dtype=np.float32).tobytes(),
        "nan": np.full(16, np.nan, dtype=np.float32).tobytes(),
        "odd": b"abc",
        "text": "not a blob",
        "empty": b"",
    }
    db = sqlite3.connect(path)
    VectorCache(path).close()  # the table
    db.executemany(
        "INSERT INTO vectors (key, vector, created) VALUES (?, ?, 0)",
        [(text_key(inner.name, t), blob) for t, blob in planted.items()],
    )
    db.commit()
    db.close()
    e = CachedEmbedder(inner, VectorCache(path))
    got = e.embed(list(planted))
    assert got == inner._inner.embed(list(planted))  # each embedded afresh
    assert sorted(inner.asked) == sorted(planted)
    again = Counting()
    assert CachedEmbedder(again, VectorCache(path)).embed(list(planted)) == got
    assert again.asked == []  # and the damaged entries were replaced


def test_openai_vectors_of_other_requested_dimensions_do_not_share_entries(
    tmp_path: Path,
) -> None:
    """The name (openai:model) does not say `dimensions`; the cache key must."""
    inner = Counting(name="openai:text-embedding-3-small")
    settings = EmbedderSettings(kind="openai", dim=16, cache_path=tmp_path / "c.sqlite3")
    first = cached_embedder(inner, settings)
    first.embed(["exit code: 1"])
    first.close()
    other = Counting(name="openai:text-embedding-3-small")
    bigger = dataclasses.replace(settings, dim=32)
    cached_embedder(other, bigger).embed(["exit code: 1"])
    assert other.asked == ["exit code: 1"]
    same = Counting(name="openai:text-embedding-3-small")
    cached_embedder(same, settings).embed(["exit code: 1"])
    assert same.asked == []


def test_a_cache_file_of_another_schema_or_damaged_later_is_a_clear_error(
    tmp_path: Path,
) -> None:
    other = tmp_path / "other.sqlite3"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE vectors (k TEXT, v BLOB)")
    db.commit()
    db.close()
    with pytest.raises(ConfigError, match="cannot open the embedding cache"):
        VectorCache(other)
    cache = VectorCache(tmp_path / "c.sqlite3")
    cache._db.execute("DROP TABLE vectors")  # what a damaged page or another writer leaves
    with pytest.raises(ConfigError, match="delete the file"):
        cache.get_many(["k"])
    with pytest.raises(ConfigError, match="delete the file"):
        cache.put_many({"k": np.ones(4, dtype=np.float32)})
