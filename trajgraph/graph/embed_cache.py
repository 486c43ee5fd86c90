"""Embed each distinct text once: a content-hash cache of vectors, in memory and on disk.

Identical turn and state texts are common (a game's board, a web page, a test log shown again
and again): ``CachedEmbedder`` embeds a distinct text once per run (an in-memory LRU) and once
ever (one SQLite file next to the LLM cache, keyed by the embedder's name and the SHA-256 of
the text, so two models never share an entry). Vectors are kept as float32, which is what
Neo4j's vector properties store, so a vector read from the cache is the one a fresh
embedding would have written.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from trajgraph.core.settings import EmbedderSettings, cache_max_bytes
from trajgraph.core.sqlite_store import SqliteStore
from trajgraph.graph.embedders import Embedder

MEMORY_ENTRIES = 20_000  # about 20-30 MiB of vectors at 256-384 dimensions


def text_key(embedder: str, text: str) -> str:
    h = hashlib.sha256(embedder.encode("utf-8", "surrogatepass"))
    h.update(b"\x1f")
    h.update(text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


class VectorCache(SqliteStore[np.ndarray]):
    """float32 vectors by key in one SQLite file."""

    table = "vectors"
    column = "vector"
    column_type = "BLOB"
    what = "the embedding cache"
    setting = "TRAJGRAPH_EMBED_CACHE"

    def encode(self, value: np.ndarray) -> bytes:
        return np.asarray(value, dtype=np.float32).tobytes()

    def decode(self, stored: bytes) -> np.ndarray:
        if not isinstance(stored, bytes) or len(stored) % 4:
            return np.empty(0, dtype=np.float32)  # not a vector: a miss (see usable)
        return np.frombuffer(stored, dtype=np.float32)


class CachedEmbedder:
    """An embedder that asks its inner embedder only for texts it has not seen.

    ``hits_memory``, ``hits_disk`` and ``misses`` count texts (a repeated text in one call
    is a memory hit). ``disk`` None keeps the in-memory part only.
    """

    def __init__(
        self,
        inner: Embedder,
        disk: VectorCache | None,
        memory_entries: int = MEMORY_ENTRIES,
        space: str | None = None,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        # What a vector is keyed by besides its text: the embedder's name, and more where the
        # name leaves out something that changes the vectors (cached_embedder).
        self._space = space or inner.name
        self._disk = disk
        self._memory: OrderedDict[str, np.ndarray] = OrderedDict()
        self._limit = memory_entries
        self._lock = threading.Lock()
        self.hits_memory = 0
        self.hits_disk = 0
        self.misses = 0

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [v.tolist() for v in self.embed_vectors(texts)]

    def embed_vectors(self, texts: Sequence[str]) -> list[np.ndarray]:
        if not texts:
            return []
        keys = [text_key(self._space, t) for t in texts]
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for k in keys:
                v = self._memory.get(k)
                if v is not None:
                    self._memory.move_to_end(k)
                    found[k] = v
        wanted = {k: t for k, t in zip(keys, texts, strict=True) if k not in found}
        from_disk = self._disk.get_many(wanted) if self._disk is not None and wanted else {}
        # A damaged entry, or one of another size, is embedded again (and replaced), never
        # written to the graph.
        from_disk = {k: v for k, v in from_disk.items() if self._usable(v)}
        found.update(from_disk)
        todo = [(k, t) for k, t in wanted.items() if k not in from_disk]
        fresh: dict[str, np.ndarray] = {}
        if todo:
            vectors = self.inner.embed([t for _, t in todo])
            fresh = {
                k: np.asarray(v, dtype=np.float32) for (k, _), v in zip(todo, vectors, strict=True)
            }
            found.update(fresh)
            if self._disk is not None:
                self._disk.put_many(fresh)
        with self._lock:
            self.misses += len(fresh)
            self.hits_disk += len(from_disk)
            self.hits_memory += len(keys) - len(fresh) - len(from_disk)
            for k in (*from_disk, *fresh):
                self._memory[k] = found[k]
            while len(self._memory) > self._limit:
                self._memory.popitem(last=False)
        return [found[k] for k in keys]

    def _usable(self, v: np.ndarray) -> bool:
        dim = self.inner.dim  # 0: a remote model's size not learnt yet
        return v.size > 0 and (not dim or v.size == dim) and bool(np.isfinite(v).all())

    def drain_stats(self) -> dict[str, int]:
        with self._lock:
            out = {
                "embed_cache_hits_memory": self.hits_memory,
                "embed_cache_hits_disk": self.hits_disk,
                "embedded_texts": self.misses,
            }
            self.hits_memory = self.hits_disk = self.misses = 0
        return out

    def close(self) -> None:
        self.inner.close()
        if self._disk is not None:
            self._disk.close()


# Worth a disk lookup: a model run (local) or a request (openai). The static and hash
# embedders compute a vector faster than SQLite finds one, so they only dedupe in memory.
DISK_CACHED_KINDS = ("local", "openai")


def cached_embedder(inner: Embedder, settings: EmbedderSettings) -> CachedEmbedder | Embedder:
    """``inner`` behind the cache the settings ask for: none when the cache is off."""
    if settings.cache_path is None:
        return inner
    disk = (
        VectorCache(settings.cache_path, max_bytes=cache_max_bytes(settings.cache_max_mb))
        if settings.kind in DISK_CACHED_KINDS
        else None
    )
    # An OpenAI model's name does not say the `dimensions` it was asked for: the key does.
    openai_dim = settings.kind == "openai" and settings.dim
    space = f"{inner.name}|dimensions={settings.dim}" if openai_dim else None
    return CachedEmbedder(inner, disk, space=space)
