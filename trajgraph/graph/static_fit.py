"""Fitting the static table to MiniLM's sentence vectors (tokenlearn-style), at set-up.

The piece-by-piece table (graph/static_embedder.py) knows each word piece alone; a text's
static vector is then a weighted sum of pieces that never saw each other. This module
corrects the table with whole texts: a bounded, deterministic corpus of text that ships with
Python itself (the standard library's source: code, comments, docstrings, error messages),
each chunk embedded once by MiniLM, and the table moved, as little as it can, so that the
static pooling of each chunk (the embedder's own: distinct pieces weighted 1 + ln count)
points where MiniLM's sentence vector points.

Two steps. First one linear map W of the table's whole space (``T0 W``, ridge regression of
the chunks' pooled vectors onto their targets): the chunks hold about a sixth of the
vocabulary, and a map moves every piece consistently, where fitting rows alone moved the
pieces the chunks hold and left a text mixing moved and unmoved rows. Then the rows the
chunks hold, each by ridge regression towards where the map put it, T0 below:
``min ||X T - Y||² + λ ||T - T0||²``, with X the chunks' piece weights and Y the targets. Its
exact solution is ``T = T0 + Xᵀ (X Xᵀ + λ I)⁻¹ (Y - X T0)``: an n × n system for n chunks
(a few thousand), not a vocabulary-sized one, solved with one Cholesky factorisation. A
piece no chunk holds has a zero column in X and keeps T0's row.
"""

from __future__ import annotations

import sysconfig
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from trajgraph.graph.wordpiece import WordPiece

CORPUS_CHUNKS = 4500
# Chunk lengths in word pieces, drawn uniformly: questions are short, turns up to MiniLM's 128.
CHUNK_PIECES = (8, 96)
CORPUS_SEED = 34
# λ relative to the mean of diag(X Xᵀ): how far a row may move from its starting value.
RIDGE = 10.0
# λ of the whole-space map, relative to the mean eigenvalue of Pᵀ P (P = X T0).
MAP_RIDGE = 0.01


def corpus_files() -> list[Path]:
    """The standard library's ``.py`` files, sorted: the same on every machine with this
    Python version (site-packages differ by what is installed, so they are left out)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [
        p
        for p in root.rglob("*.py")
        if "site-packages" not in p.parts and "dist-packages" not in p.parts
    ]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def corpus(
    files: Sequence[Path], tokenizer: WordPiece, n: int = CORPUS_CHUNKS, seed: int = CORPUS_SEED
) -> list[str]:
    """``n`` chunks of consecutive non-blank lines, each starting at a random line of a
    random file and ending once it holds its drawn number of pieces: deterministic for given
    files and seed."""
    rng = np.random.default_rng(seed)
    lines_of: dict[int, list[str]] = {}
    out: list[str] = []
    attempts = 0
    while len(out) < n and attempts < 20 * n and files:
        attempts += 1
        f = int(rng.integers(len(files)))
        want = int(rng.integers(CHUNK_PIECES[0], CHUNK_PIECES[1] + 1))
        if f not in lines_of:
            try:
                text = files[f].read_text(encoding="utf-8", errors="replace")
            except OSError:
                text = ""
            lines_of[f] = [ln.strip() for ln in text.splitlines() if ln.strip()]
        lines = lines_of[f]
        if not lines:
            continue
        start = int(rng.integers(len(lines)))
        chunk: list[str] = []
        pieces = 0
        for line in lines[start:]:
            got = len(tokenizer.ids(line))
            if chunk and pieces + got > want:
                break
            chunk.append(line)
            pieces += got
            if pieces >= want:
                break
        # A line longer than the window is cut to it: MiniLM would cut it at 128 anyway.
        text = " ".join(chunk)
        if pieces > CHUNK_PIECES[1]:
            text = " ".join(text.split()[: CHUNK_PIECES[1] // 2])
        if len(tokenizer.ids(text)) >= 3:
            out.append(text)
    return out


def targets(
    texts: Sequence[str],
    folder: Path,
    *,
    batch: int = 32,
    say: Callable[[str], None] = lambda _m: None,
) -> np.ndarray:
    """MiniLM's unit sentence vectors of ``texts`` (n × 384), batched by length."""
    from trajgraph.graph.static_embedder import candding_module

    model = candding_module().TextEmbedding(str(folder), normalize=True, max_length=128)
    order = sorted(range(len(texts)), key=lambda i: (len(texts[i]), i))
    out = np.zeros((len(texts), 384), dtype=np.float32)
    for n, start in enumerate(range(0, len(order), batch)):
        idx = order[start : start + batch]
        out[idx] = np.asarray(model.embed([texts[i] for i in idx], batch_size=batch))
        if n % 25 == 0:
            say(f"static embedder fit: {start + len(idx)} of {len(texts)} chunks through MiniLM")
    return out


def piece_weights(
    texts: Sequence[str], tokenizer: WordPiece, special: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The chunks' pooling weights as the embedder uses them, as a dense matrix over the
    pieces any chunk holds: (columns' piece ids, n × columns weights). Special pieces
    ([UNK] ...) are left out: their rows stay zero."""
    per_text = []
    for text in texts:
        ids, counts = np.unique(np.asarray(tokenizer.ids(text), dtype=np.intp), return_counts=True)
        keep = ~special[ids]
        per_text.append((ids[keep], 1.0 + np.log(counts[keep])))
    cols = np.unique(np.concatenate([ids for ids, _ in per_text] or [np.zeros(0, np.intp)]))
    where = {int(c): j for j, c in enumerate(cols)}
    x = np.zeros((len(texts), len(cols)), dtype=np.float64)
    for i, (ids, w) in enumerate(per_text):
        x[i, [where[int(c)] for c in ids]] = w
    return cols, x


def project(sentences: np.ndarray, components: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """Targets in the table's space: the sentence vectors centred on their own mean (what
    every text shares says nothing about which text is which, as for the pieces), rotated
    onto the table's principal components, and each scaled to the length the static pooling
    already gives its chunk, so the fit turns vectors rather than rescales the table."""
    y = (sentences - sentences.mean(axis=0)) @ components
    y /= np.maximum(np.linalg.norm(y, axis=1, keepdims=True), 1e-12)
    return y * np.linalg.norm(predicted, axis=1, keepdims=True)


def fit(
    t0: np.ndarray, cols: np.ndarray, x: np.ndarray, y: np.ndarray, ridge: float = RIDGE
) -> np.ndarray:
    """``T0 + Xᵀ (X Xᵀ + λ I)⁻¹ (Y - X T0)`` on the pieces of ``cols``; other rows are T0's.
    λ = ``ridge`` × the mean of diag(X Xᵀ), so the same ``ridge`` means the same pull
    towards T0 whatever the chunks' lengths."""
    base = t0.astype(np.float64)
    sub = base[cols]
    gram = x @ x.T
    lam = ridge * float(np.mean(np.diag(gram))) if len(gram) else ridge
    gram[np.diag_indices_from(gram)] += lam
    residual = y - x @ sub
    chol = np.linalg.cholesky(gram)
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, residual))
    out = base.copy()
    out[cols] = sub + x.T @ alpha
    return out.astype(t0.dtype)


def fit_table(
    table: np.ndarray,
    components: np.ndarray,
    folder: Path,
    *,
    n: int = CORPUS_CHUNKS,
    say: Callable[[str], None] = lambda _m: None,
) -> np.ndarray:
    """The piece-by-piece ``table`` fitted on ``n`` standard-library chunks (MiniLM in
    ``folder`` gives the targets, ``components`` rotate them into the table's space)."""
    from trajgraph.graph.static_embedder import is_special

    tokenizer = WordPiece.from_file(folder / "vocab.txt")
    texts = corpus(corpus_files(), tokenizer, n)
    sentences = targets(texts, folder, say=say)
    special = np.array([is_special(t) for t in tokenizer.vocab])
    cols, x = piece_weights(texts, tokenizer, special)
    y = project(sentences, components, x @ table[cols].astype(np.float64))
    mapped = table_map(table, cols, x, y)
    # The map moves every row; the rows the chunks hold are then corrected one by one.
    y = project(sentences, components, x @ mapped[cols].astype(np.float64))
    fitted = fit(mapped, cols, x, y)
    say(
        f"static embedder fit: {len(texts)} chunks, {len(cols)} pieces corrected, mean cosine "
        f"to MiniLM {mean_cosine(table, cols, x, y):.3f} -> {mean_cosine(fitted, cols, x, y):.3f}"
    )
    return fitted


def table_map(
    t0: np.ndarray, cols: np.ndarray, x: np.ndarray, y: np.ndarray, ridge: float = MAP_RIDGE
) -> np.ndarray:
    """``T0 W`` with W (dim × dim) the ridge solution of min ||X T0 W - Y||² + λ ||W||²: one
    linear map of the whole space, so the pieces no chunk holds (most of the vocabulary)
    move with the ones it does, and the rows stay one consistent table."""
    p = x @ t0[cols].astype(np.float64)
    gram = p.T @ p
    lam = ridge * float(np.trace(gram)) / max(len(gram), 1)
    w = np.linalg.solve(gram + lam * np.eye(len(gram)), p.T @ y)
    return (t0.astype(np.float64) @ w).astype(t0.dtype)


def loss(t: np.ndarray, cols: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    return float(np.sum((x @ t[cols].astype(np.float64) - y) ** 2))


def mean_cosine(t: np.ndarray, cols: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    p = x @ t[cols].astype(np.float64)
    num = np.sum(p * y, axis=1)
    den = np.linalg.norm(p, axis=1) * np.linalg.norm(y, axis=1)
    return float(np.mean(num / np.maximum(den, 1e-12)))
