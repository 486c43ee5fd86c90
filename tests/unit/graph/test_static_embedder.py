"""The static embedder (graph/static_embedder.py) and its tokenizer (graph/wordpiece.py).

The table is derived once per machine (deploy/dev.sh setup does it; otherwise the first test
that needs it, about half a minute) and then loaded from the cache folder.
"""

from __future__ import annotations

import logging
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from trajgraph.core.errors import ConfigError
from trajgraph.core.settings import EmbedderSettings, load
from trajgraph.graph import static_embedder as se
from trajgraph.graph.embedders import embedder_name, get_embedder
from trajgraph.graph.wordpiece import WordPiece


@pytest.fixture(scope="module")
def tokenizer() -> WordPiece:
    return WordPiece.from_file(se.model_dir() / "vocab.txt")


@pytest.fixture(scope="module")
def static() -> se.StaticEmbedder:
    return se.StaticEmbedder(load().embedder.static_dir)


def _pieces(tok: WordPiece, text: str) -> list[str]:
    return [tok.vocab[i] for i in tok.ids(text)]


def test_wordpiece_splits_like_bert_uncased(tokenizer: WordPiece) -> None:
    assert _pieces(tokenizer, "unaffable") == ["una", "##ffa", "##ble"]
    assert _pieces(tokenizer, "Hello, World!") == ["hello", ",", "world", "!"]
    assert _pieces(tokenizer, "naïve Café") == ["naive", "cafe"]  # accents stripped
    assert _pieces(tokenizer, "snake_case $HOME") == ["snake", "_", "case", "$", "home"]
    assert _pieces(tokenizer, "日本") == ["日", "本"]  # CJK characters stand alone
    assert _pieces(tokenizer, "\x1b[0m") == ["[", "0", "##m"]  # terminal escapes dropped
    assert _pieces(tokenizer, "a" * 101) == ["[UNK]"]  # BERT's word length limit
    assert tokenizer.ids("") == [] and tokenizer.ids(" \n\t ") == []


def test_wordpiece_counts_match_the_model_tokenizer(tokenizer: WordPiece) -> None:
    """The same pieces as the model's own tokenizer (candding counts them, plus CLS/SEP)."""
    import candding

    model = candding.TextEmbedding(str(se.model_dir()), max_length=512)
    texts = [
        "FAILED tests/test_api.py::test_retry - AssertionError: expected 5 retries, got 3",
        "{'board': [[0, 0, 2], [4, 0, 0]], 'highest_tile': 4}",
        "SELECT o.customer_id, SUM(o.total) FROM orders o GROUP BY 1;",
        "Ünïcödé façade — “quotes” and … ellipsis; 中文字符 and emoji 😀",
        "\x1b[31mred\x1b[0m a\x0bb\x00c tab\there",
        "https://example.com/a/b?x=1&y=2#frag ~/.cache/trajgraph",
        "x" * 150 + " tail",
    ]
    want = [n - 2 for n in model.token_count(texts)]
    assert [len(tokenizer.ids(t)) for t in texts] == want


def test_static_embedder_is_deterministic_normalized_and_ranks_by_meaning(
    static: se.StaticEmbedder,
) -> None:
    texts = [
        "why did the unit test fail",
        "FAILED tests/test_app.py - AssertionError: expected 3 got 4",
        "the weather in Paris is sunny",
        "",
    ]
    a = static.embed(texts)
    b = se.StaticEmbedder(load().embedder.static_dir).embed(texts)
    assert a == b  # another instance, the same table: the same vectors
    assert len(a) == 4 and all(len(v) == se.DEFAULT_DIM == static.dim for v in a)
    for v in a:
        assert math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-5)
    assert a[3][-1] == 1.0  # an empty text still gets a valid unit vector, a neutral one
    q, near, far = (np.array(v) for v in a[:3])
    assert q @ near > q @ far
    assert static.embed([]) == []


def test_repeated_pieces_count_sublinearly(static: se.StaticEmbedder, tokenizer: WordPiece) -> None:
    """A piece said n times weighs 1 + ln n: a log's ===== rule or a repeated progress line
    does not outweigh the words around it."""
    table, _ = static._load()
    error, failed = tokenizer.ids("error failed")  # one piece each
    want = (1 + math.log(4)) * table[error] + table[failed]
    got = np.array(static.embed(["error error failed error error"])[0])
    assert np.allclose(got, want / np.linalg.norm(want), atol=1e-5)
    words = "pytest tests/test_blueprints.py failed: a blueprint with an empty name"
    rule = "=" * 200
    v = np.array(static.embed([words, f"{rule}\n{words}\n{rule}", rule]))
    # Counted once each, the 400 '=' pieces would make the ruled text a copy of the rule.
    assert v[1] @ v[0] > 0.8 > v[1] @ v[2]


def test_static_is_the_default_and_names_model_recipe_and_size(static: se.StaticEmbedder) -> None:
    assert EmbedderSettings().kind == "static" == load({}).embedder.kind
    name = embedder_name(EmbedderSettings())
    assert name == static.name == get_embedder(load({}).embedder).name
    assert name.startswith(f"static:all-MiniLM-L6-v2:{se.RECIPE}-{se.DEFAULT_DIM}:")
    small = load({"TRAJGRAPH_EMBEDDER": "static", "TRAJGRAPH_EMBED_DIM": "128"}).embedder
    assert embedder_name(small).startswith(f"static:all-MiniLM-L6-v2:{se.RECIPE}-128:")


def test_post_process_centres_rotates_and_weights_by_rank() -> None:
    rng = np.random.default_rng(3)
    raw = rng.standard_normal((50, 12)) + 5.0  # a large shared component
    # One direction at vocabulary positions 2 (frequent) and 51 (rare), three times as long.
    raw[49] = 3.0 * raw[0]
    keep = list(range(2, 52))
    table = se.post_process(raw, keep, 52, 6)
    assert table.shape == (52, 6) and table.dtype == np.float32
    assert not table[:2].any()  # pieces not kept ([PAD], [unusedN] ...) are zero rows
    # The same input in another row order gives the same rows (signs fixed, not arbitrary).
    perm = rng.permutation(50)
    again = se.post_process(raw[perm], [keep[i] for i in perm], 52, 6)
    assert np.allclose(again, table, atol=1e-5)
    assert abs(float(table[2:].mean())) < 0.1  # centred: the shared component is gone
    # Lengths do not count, frequency does: early (frequent) pieces are weighted down by SIF.
    sif = _sif(52)
    assert sif[2] < sif[51]
    assert np.allclose(table[2] / sif[2], table[51] / sif[51], atol=1e-5)
    assert np.linalg.norm(table[2]) < np.linalg.norm(table[51])


def _sif(n: int) -> np.ndarray:
    p = 1.0 / np.arange(2, n + 2)
    p /= p.sum()
    return np.asarray(se.SIF_COEFFICIENT / (se.SIF_COEFFICIENT + p))


def test_a_cached_table_is_loaded_not_derived(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    digest = se.model_hash(se.model_dir(), tmp_path)
    assert (tmp_path / "model-hashes.json").exists()  # remembered for the next process
    table = np.random.default_rng(1).standard_normal((30522, 16)).astype(np.float32)
    np.save(se.table_path(tmp_path, digest, 16), table)

    def no_derivation(*_a: object, **_k: object) -> np.ndarray:
        raise AssertionError("derived although a table was cached")

    monkeypatch.setattr(se, "derive", no_derivation)
    loaded, tokenizer, name = se.load_or_derive(tmp_path, 16)
    assert np.array_equal(loaded, table)
    assert name == se.static_name(digest, 16) and len(tokenizer.vocab) == 30522
    # The key holds the model's hash, the recipe and the size: another size is another file.
    assert se.table_path(tmp_path, digest, 32) != se.table_path(tmp_path, digest, 16)
    assert digest[:16] in se.table_path(tmp_path, digest, 16).name


def test_a_broken_table_is_a_clear_error(tmp_path: Path) -> None:
    digest = se.model_hash(se.model_dir(), tmp_path)
    np.save(se.table_path(tmp_path, digest, 16), np.zeros((10, 8), dtype=np.float32))
    with pytest.raises(ConfigError, match="delete it"):
        se.load_or_derive(tmp_path, 16)
    with pytest.raises(ConfigError, match="8 to 384"):
        se.derive(se.model_dir(), 500)


def test_an_unwritable_table_folder_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigError, match="TRAJGRAPH_STATIC_TABLES"):
        se.load_or_derive(blocker / "tables", 16)


def _damaged(table: object, path: Path) -> None:
    if isinstance(table, bytes):
        path.write_bytes(table)
    elif isinstance(table, dict):
        np.savez(path.with_suffix(""), **table)
        path.with_suffix(".npz").rename(path)
    else:
        np.save(path, np.asarray(table))


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(b"", id="empty-file"),
        pytest.param({"table": np.ones((30522, 16), dtype=np.float32)}, id="npz"),
        pytest.param(np.ones((1000, 16), dtype=np.float32), id="too-few-rows"),
        pytest.param(np.full((30522, 16), np.nan, dtype=np.float32), id="nan"),
        pytest.param(np.full((30522, 16), np.inf, dtype=np.float32), id="inf"),
        pytest.param(np.zeros((30522, 16), dtype=np.float32), id="zeros"),
        pytest.param(np.ones((30522, 16), dtype=np.complex64), id="complex"),
    ],
)
def test_a_damaged_cached_table_is_a_clear_error_never_wrong_vectors(
    tmp_path: Path, damage: object
) -> None:
    """Found by a hostile test: these loaded (wrong vectors, NaN the graph refuses) or failed
    with EOFError, IndexError or AttributeError instead of saying what to do."""
    digest = se.model_hash(se.model_dir(), tmp_path)
    _damaged(damage, se.table_path(tmp_path, digest, 16))
    with pytest.raises(ConfigError, match="delete it to derive it again"):
        se.load_or_derive(tmp_path, 16)


def test_missing_model_files_are_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(se, "model_dir", lambda: tmp_path / "model")
    with pytest.raises(ConfigError, match="reinstall"):
        se.StaticEmbedder(tmp_path / "tables")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's overflow, then the error
def test_a_table_whose_sums_overflow_is_an_error_not_nan_vectors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    digest = se.model_hash(se.model_dir(), tmp_path)
    np.save(se.table_path(tmp_path, digest, 16), np.full((30522, 16), 3e38, dtype=np.float32))
    monkeypatch.setattr(se.StaticEmbedder, "_loaded", {})
    e = se.StaticEmbedder(tmp_path, 16)
    with pytest.raises(ConfigError, match="not finite"):
        e.embed(["error error failed"])


def _stand_in_derivation(
    _folder: Path, dim: int, *, fitted: bool = False, say: Callable[[str], None] = lambda _m: None
) -> np.ndarray:
    for n in range(0, 30522, 5120):  # as the real one reports its batches
        say(f"static embedder: {n} of 30522 vocabulary pieces")
    return np.random.default_rng(2).standard_normal((30522, dim)).astype(np.float32)


def test_a_first_use_says_so_in_two_info_lines_not_warnings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Deriving the table on first use is normal operation: a user sees that it happens and
    how long it took, never a warning."""
    monkeypatch.setattr(se, "derive", _stand_in_derivation)
    caplog.set_level(logging.DEBUG, logger=se.__name__)
    se.load_or_derive(tmp_path, 16)
    ours = [r for r in caplog.records if r.name == se.__name__]
    assert [r.levelno for r in ours if r.levelno >= logging.INFO] == [logging.INFO] * 2
    assert "first use" in ours[0].getMessage() and "derived in" in ours[-1].getMessage()
    assert sum(r.levelno == logging.DEBUG for r in ours) == 6  # the batches: detail only
    caplog.clear()
    se.load_or_derive(tmp_path, 16)  # later uses load it silently
    assert not [r for r in caplog.records if r.name == se.__name__]


def test_the_cli_shows_a_first_use_as_two_info_lines(tmp_path: Path) -> None:
    """Under the CLI's logging (WARNING for everything else) the two lines are printed, and
    no line of it is a WARNING."""
    script = f"""
import numpy as np
from trajgraph import cli
from trajgraph.graph import static_embedder as se
from tests.unit.graph.test_static_embedder import _stand_in_derivation
cli._configure_logging()
se.derive = _stand_in_derivation
se.load_or_derive(__import__("pathlib").Path({str(tmp_path)!r}), 16)
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[3],
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 2, lines
    assert all(line.startswith("INFO trajgraph.graph.static_embedder: ") for line in lines)
    assert "WARNING" not in done.stderr
