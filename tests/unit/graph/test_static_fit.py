"""The static table's fit to MiniLM's sentence vectors (graph/static_fit.py), on a small
synthetic vocabulary: no model run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trajgraph.graph import static_embedder as se
from trajgraph.graph import static_fit as sf
from trajgraph.graph.wordpiece import WordPiece

VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "error",
    "file",
    "not",
    "found",
    "test",
    "run",
    "pass",
    "fail",
    "import",
    "module",
    "##s",
    "##ed",
    ":",
    ".",
    "(",
    ")",
    "unused",
]


def _problem(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    t0 = rng.standard_normal((40, 6)).astype(np.float32)
    cols = np.array([3, 5, 8, 9, 12, 20, 21, 30])
    x = rng.random((5, len(cols))) * (rng.random((5, len(cols))) < 0.6)
    y = rng.standard_normal((5, 6))
    return t0, cols, x, y


def test_the_fit_lowers_the_loss_and_keeps_unseen_rows() -> None:
    t0, cols, x, y = _problem()
    t = sf.fit(t0, cols, x, y, ridge=0.5)
    assert t.shape == t0.shape and t.dtype == t0.dtype
    assert sf.loss(t, cols, x, y) < 0.5 * sf.loss(t0, cols, x, y)
    assert sf.mean_cosine(t, cols, x, y) > sf.mean_cosine(t0, cols, x, y)
    unseen = np.setdiff1d(np.arange(len(t0)), cols)
    assert np.array_equal(t[unseen], t0[unseen])  # bit for bit: no chunk holds them
    # A column no chunk weights (all zeros in x) keeps its row too.
    x[:, 0] = 0.0
    assert np.allclose(sf.fit(t0, cols, x, y, ridge=0.5)[cols[0]], t0[cols[0]])


def test_the_ridge_is_the_pull_towards_the_old_table() -> None:
    t0, cols, x, y = _problem(1)
    moved = [float(np.linalg.norm(sf.fit(t0, cols, x, y, ridge=r) - t0)) for r in (0.01, 1, 1e4)]
    assert moved[0] > moved[1] > moved[2] and moved[2] < 1e-2
    # Fewer chunks than pieces and almost no pull: the chunks are matched almost exactly.
    assert sf.loss(sf.fit(t0, cols, x, y, ridge=1e-6), cols, x, y) < 1e-6


def test_the_fit_is_the_ridge_solution() -> None:
    """The n × n form equals the normal equations (Xᵀ X + λ I) T = Xᵀ Y + λ T0."""
    t0, cols, x, y = _problem(2)
    lam = 0.7 * float(np.mean(np.sum(x * x, axis=1)))
    sub = t0[cols].astype(np.float64)
    direct = np.linalg.solve(x.T @ x + lam * np.eye(len(cols)), x.T @ y + lam * sub)
    assert np.allclose(sf.fit(t0, cols, x, y, ridge=0.7)[cols], direct, atol=1e-5)
    assert np.array_equal(sf.fit(t0, cols, x, y, 0.7), sf.fit(t0, cols, x, y, 0.7))


def test_the_map_moves_every_row_by_one_linear_map() -> None:
    """A known rotation of the space is recovered from the chunks alone, and applied to the
    rows no chunk holds as well."""
    rng = np.random.default_rng(8)
    t0 = rng.standard_normal((60, 4)).astype(np.float32)
    cols = np.arange(10, 40)
    x = rng.random((25, len(cols)))
    rotation = np.linalg.qr(rng.standard_normal((4, 4)))[0]
    y = x @ t0[cols].astype(np.float64) @ rotation
    mapped = sf.table_map(t0, cols, x, y, ridge=1e-9)
    assert np.allclose(mapped, t0 @ rotation, atol=1e-4)  # rows 0-9 and 40-59 too
    assert sf.loss(mapped, cols, x, y) < 1e-6 < sf.loss(t0, cols, x, y)
    pulled = sf.table_map(t0, cols, x, y, ridge=10.0)
    assert sf.loss(mapped, cols, x, y) < sf.loss(pulled, cols, x, y)
    assert np.array_equal(pulled, sf.table_map(t0, cols, x, y, ridge=10.0))


def test_piece_weights_pool_as_the_embedder_does() -> None:
    tok = WordPiece(VOCAB)
    special = np.array([se.is_special(t) for t in VOCAB])
    texts = ["error: file not found", "tests passed tests passed tests", "résumé ???"]
    cols, x = sf.piece_weights(texts, tok, special)
    assert not special[cols].any()  # [UNK] and the like never move
    table = np.random.default_rng(4).standard_normal((len(VOCAB), 4))
    for i, text in enumerate(texts):
        ids, counts = np.unique(tok.ids(text), return_counts=True)
        keep = ~special[ids]
        expected = (1.0 + np.log(counts[keep])) @ table[ids[keep]]
        assert np.allclose(x[i] @ table[cols], expected)
    assert x[1, list(cols).index(VOCAB.index("test"))] == pytest.approx(1 + np.log(3))


def test_targets_are_rotated_centred_and_as_long_as_the_prediction() -> None:
    rng = np.random.default_rng(5)
    sentences = rng.standard_normal((7, 10)) + 3.0
    components = np.linalg.qr(rng.standard_normal((10, 4)))[0]
    predicted = rng.standard_normal((7, 4)) * 5.0
    y = sf.project(sentences, components, predicted)
    assert np.allclose(np.linalg.norm(y, axis=1), np.linalg.norm(predicted, axis=1))
    direction = (sentences - sentences.mean(axis=0)) @ components
    cos = (
        np.sum(y * direction, axis=1)
        / np.linalg.norm(direction, axis=1)
        / np.linalg.norm(y, axis=1)
    )
    assert np.allclose(cos, 1.0)


def test_the_corpus_is_deterministic_bounded_and_real_text(tmp_path: Path) -> None:
    files = []
    for n in range(3):
        f = tmp_path / f"m{n}.py"
        f.write_text(
            "\n".join(f"def run_{n}_{i}(): raise ValueError('file not found')" for i in range(50))
        )
        files.append(f)
    (tmp_path / "empty.py").write_text("\n\n")
    files.append(tmp_path / "empty.py")
    tok = WordPiece(VOCAB)
    a = sf.corpus(files, tok, 30, seed=1)
    assert a == sf.corpus(files, tok, 30, seed=1) and len(a) == 30
    assert a != sf.corpus(files, tok, 30, seed=2)
    assert a[:10] == sf.corpus(files, tok, 10, seed=1)  # a smaller corpus is a prefix
    assert all(3 <= len(tok.ids(c)) <= 2 * sf.CHUNK_PIECES[1] for c in a)
    assert sf.corpus([tmp_path / "empty.py"], tok, 5) == []  # bounded: no endless loop


def test_the_standard_library_corpus_is_sorted_and_without_site_packages() -> None:
    files = sf.corpus_files()
    assert len(files) > 500 and files == sorted(files, key=lambda p: p.as_posix())
    assert not [f for f in files if "site-packages" in f.parts]


def test_derive_fits_the_piece_table_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The set-up path: piece vectors → table → fit, with stand-ins for the model runs."""
    rng = np.random.default_rng(6)
    vocab = VOCAB
    keep = [i for i, t in enumerate(vocab) if not se.is_special(t)]
    raw = rng.standard_normal((len(keep), 384))
    monkeypatch.setattr(se, "piece_vectors", lambda _f, say=None: (raw, keep, vocab))
    seen: list[np.ndarray] = []

    def stand_in_fit(table: np.ndarray, components: np.ndarray, _folder: Path, **_kw: object):
        seen.append(components)
        return table * 2.0

    monkeypatch.setattr(sf, "fit_table", stand_in_fit)
    plain = se.derive(Path("."), 8, fitted=False)
    fitted = se.derive(Path("."), 8, fitted=True)
    assert np.allclose(plain, se.post_process(raw, keep, len(vocab), 8))
    assert np.allclose(fitted, 2.0 * plain) and seen[0].shape == (384, 8)


def test_the_fitted_table_is_another_file_and_another_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TRAJGRAPH_STATIC_FIT chooses the table; the two never share a cache file or a name, so
    a graph made with one refuses the other until `trajgraph reembed`."""
    from trajgraph.core.errors import ConfigError
    from trajgraph.core.settings import load
    from trajgraph.graph.embedders import embedder_name

    digest = se.model_hash(se.model_dir(), tmp_path)
    assert se.table_path(tmp_path, digest, 16, True) != se.table_path(tmp_path, digest, 16, False)
    fitted_name, plain_name = se.static_name(digest, 16, True), se.static_name(digest, 16, False)
    assert fitted_name != plain_name and f":{se.FITTED_RECIPE}-16:" in fitted_name
    asked: list[bool] = []

    def stand_in(_folder: Path, dim: int, *, fitted: bool, say: object = None) -> np.ndarray:
        asked.append(fitted)
        return np.random.default_rng(7).standard_normal((30522, dim)).astype(np.float32)

    monkeypatch.setattr(se, "derive", stand_in)
    _, _, name = se.load_or_derive(tmp_path, 16, fitted=True)
    assert asked == [True] and name == fitted_name
    assert se.table_path(tmp_path, digest, 16, True).exists()
    on = load({"TRAJGRAPH_STATIC_FIT": "on", "TRAJGRAPH_STATIC_TABLES": str(tmp_path)})
    off = load({"TRAJGRAPH_STATIC_FIT": "off", "TRAJGRAPH_STATIC_TABLES": str(tmp_path)})
    assert on.embedder.static_fit and not off.embedder.static_fit
    assert load({}).embedder.static_fit is se.FIT_BY_DEFAULT
    assert embedder_name(on.embedder).startswith(f"static:all-MiniLM-L6-v2:{se.FITTED_RECIPE}-")
    with pytest.raises(ConfigError, match="TRAJGRAPH_STATIC_FIT must be on or off"):
        load({"TRAJGRAPH_STATIC_FIT": "maybe"})
