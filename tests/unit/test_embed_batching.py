"""Length-bucketed batches for the local model (graph/embedders.py)."""

from __future__ import annotations

import numpy as np

from trajgraph.graph.embedders import BUCKET_SLACK, LocalEmbedder, length_buckets


def test_buckets_hold_near_equal_lengths_and_every_index_once() -> None:
    lengths = [120, 3, 118, 40, 41, 3, 500, 119, 42, 4, 121, 39]
    buckets = length_buckets(lengths, size=3)
    flat = [i for b in buckets for i in b]
    assert sorted(flat) == list(range(len(lengths)))  # nothing lost, nothing twice
    assert all(1 <= len(b) <= 3 for b in buckets)
    for b in buckets:
        shortest, longest = min(lengths[i] for i in b), max(lengths[i] for i in b)
        assert longest <= shortest * (1 + BUCKET_SLACK) + 2
    assert [6] in buckets  # the outlier is alone, not padding a whole batch to 500
    assert length_buckets([], size=4) == []
    assert length_buckets([7, 7, 7, 7, 7], size=2) == [[0, 1], [2, 3], [4]]


def test_local_batches_give_the_vectors_of_one_text_per_call() -> None:
    e = LocalEmbedder()
    texts = [
        "FAILED tests/test_api.py::test_retry - AssertionError: expected 5 retries, got 3",
        "ls",
        "cat config.yaml",
        "retries=5\ntimeout=10",
        "FAILED tests/test_app.py::test_other - ValueError: bad value 7, wanted 8 or more",
        "",
    ]
    together = np.array(e.embed(texts))
    alone = np.array([e.embed([t])[0] for t in texts])
    assert together.shape == (6, 384)
    assert np.allclose(together, alone, atol=1e-4)
