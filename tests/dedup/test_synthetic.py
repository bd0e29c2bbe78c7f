"""The planted near-duplicate corpus: determinism, the planted similarities, files, scoring."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from curator_dask.dedup.synthetic import (
    PlantedCorpus,
    planted_corpus,
    shingle_hashes,
    shingle_jaccard,
)


@pytest.fixture(scope="module")
def corpus() -> PlantedCorpus:
    return planted_corpus(400, seed=3, words=(150, 400))


def reference_jaccard(a: str, b: str, width: int = 24) -> float:
    """Jaccard of the shingle sets as plain Python sets of substrings (no hashing)."""
    sa = {a[i:i + width] for i in range(len(a) - width + 1)}
    sb = {b[i:i + width] for i in range(len(b) - width + 1)}
    return len(sa & sb) / len(sa | sb)


def test_same_seed_same_corpus_other_seed_other_corpus():
    a = planted_corpus(120, seed=7, words=(50, 120))
    b = planted_corpus(120, seed=7, words=(50, 120))
    c = planted_corpus(120, seed=8, words=(50, 120))
    assert a.texts == b.texts
    np.testing.assert_array_equal(a.cluster, b.cluster)
    np.testing.assert_array_equal(a.cluster_pairs, b.cluster_pairs)
    np.testing.assert_array_equal(a.far_pairs, b.far_pairs)
    np.testing.assert_array_equal(a.cluster_jaccard, b.cluster_jaccard)
    assert a.texts != c.texts


def test_structure_follows_the_parameters(corpus):
    sizes = corpus.cluster_sizes
    assert sizes.min() >= 2 and sizes.max() <= 5
    assert int(sizes.sum()) == round(0.2 * 400)  # cluster_fraction of the documents
    assert len(corpus.far_pairs) == round(0.05 * 400) // 2
    assert (corpus.cluster[corpus.far_pairs] == -1).all()
    assert len(corpus.cluster_pairs) == int((sizes * (sizes - 1) // 2).sum())
    assert (corpus.cluster[corpus.cluster_pairs[:, 0]]
            == corpus.cluster[corpus.cluster_pairs[:, 1]]).all()
    assert corpus.expected_removals == int(sizes.sum()) - len(sizes)
    lengths = np.array([len(t.split(" ")) for t in corpus.texts])
    assert lengths.min() >= 150 and lengths.max() <= 400
    # documents are shuffled: the members of a cluster are not one block of indices
    first = corpus.cluster_pairs[corpus.cluster[corpus.cluster_pairs[:, 0]] == 0]
    assert np.abs(np.diff(np.unique(first))).max() > 1


def test_planted_similarities_are_in_their_ranges(corpus):
    # every pair of a cluster (copy-copy, the least similar, and copy-original) is above 0.8
    assert corpus.cluster_jaccard.min() > 0.8
    assert 0.88 <= float(np.median(corpus.cluster_jaccard)) <= 0.96
    # far pairs: around far_similarity, far below any dedup threshold
    assert corpus.far_jaccard.max() < 0.55
    assert 0.33 <= float(corpus.far_jaccard.mean()) <= 0.47
    # unrelated documents share (almost) no shingles
    unrelated = np.flatnonzero(corpus.cluster == -1)[:40]
    values = [shingle_jaccard(corpus.texts[a], corpus.texts[b])
              for a, b in zip(unrelated[::2], unrelated[1::2], strict=True)]
    assert max(values) < 0.05


def test_stored_jaccards_equal_a_plain_set_computation(corpus):
    for (a, b), stored in list(zip(corpus.cluster_pairs, corpus.cluster_jaccard, strict=True))[:8]:
        assert stored == pytest.approx(reference_jaccard(corpus.texts[a], corpus.texts[b]))
    for (a, b), stored in zip(corpus.far_pairs, corpus.far_jaccard, strict=True):
        assert stored == pytest.approx(reference_jaccard(corpus.texts[a], corpus.texts[b]))


def test_similarity_parameter_moves_the_clusters():
    low = planted_corpus(200, seed=1, words=(200, 300), similarity=0.7, far_similarity=0.3)
    # copy-copy pairs near 0.7, copy-original pairs above them, nothing near the default's 0.9
    assert 0.62 <= float(low.cluster_jaccard.min()) < 0.75
    assert float(low.cluster_jaccard.max()) < 0.88
    assert float(low.far_jaccard.mean()) == pytest.approx(0.3, abs=0.05)


@pytest.mark.parametrize(("n_docs", "size"), [(41, (2, 2)), (40, (3, 3)), (57, (2, 5))])
def test_every_cluster_size_is_in_the_range(n_docs, size):
    planted = planted_corpus(n_docs, seed=5, words=(20, 30), cluster_fraction=1.0,
                             far_pair_fraction=0.0, cluster_size=size)
    sizes = planted.cluster_sizes
    assert sizes.min() >= size[0] and sizes.max() <= size[1]
    assert n_docs - int(sizes.sum()) < size[0]  # only a remainder too small for a cluster


def test_similarity_one_plants_exact_copies():
    exact = planted_corpus(100, seed=4, words=(30, 60), similarity=1.0)
    for c in range(exact.n_clusters):
        members = {exact.texts[d] for d in np.flatnonzero(exact.cluster == c)}
        assert len(members) == 1
    assert len(set(exact.texts)) == 100 - exact.expected_removals
    assert (exact.cluster_jaccard == 1.0).all()


def test_shingle_hashes_are_distinct_shingles():
    text = "abcdefghijklmnopqrstuvwxyz" * 3  # 78 characters, period 26
    assert shingle_hashes(text).size == 26
    assert shingle_hashes("short").size == 1
    assert shingle_jaccard("same text here, long enough!", "same text here, long enough!") == 1.0


def hand_made() -> PlantedCorpus:
    """Clusters {0, 1, 2} and {3, 4}; 5 and 6 a far pair; 7 unrelated."""
    cluster = np.array([0, 0, 0, 1, 1, -1, -1, -1])
    pairs = np.array([[0, 1], [0, 2], [1, 2], [3, 4]])
    return PlantedCorpus(texts=[f"doc {i}" for i in range(8)], cluster=cluster,
                         cluster_pairs=pairs, cluster_jaccard=np.full(4, 0.9),
                         far_pairs=np.array([[5, 6]]), far_jaccard=np.array([0.4]))


@pytest.mark.parametrize(("removed", "precision", "recall", "extra"), [
    ([], 1.0, 0.0, {}),
    ([1, 2, 4], 1.0, 1.0, {"correct": 3}),
    ([0, 3], 1.0, 2 / 3, {}),
    ([0, 1, 2], 2 / 3, 2 / 3, {"clusters_emptied": 1, "correct": 2}),
    ([2, 4, 5], 2 / 3, 2 / 3, {"unrelated_removed": 1, "far_pairs_hit": 1}),
    ([1, 1, 7], 1 / 2, 1 / 3, {"removed": 2, "unrelated_removed": 1, "far_pairs_hit": 0}),
])
def test_score_on_hand_made_removals(removed, precision, recall, extra):
    score = hand_made().score(removed)
    assert score.precision == pytest.approx(precision)
    assert score.recall == pytest.approx(recall)
    assert score.expected == 3
    for name, value in extra.items():
        assert getattr(score, name) == value


def test_score_refuses_indices_outside_the_corpus():
    with pytest.raises(ValueError, match="index 8 is outside this corpus of 8 documents"):
        hand_made().score([1, 8])


def test_write_jsonl_and_parquet_round_trip(tmp_path):
    corpus = planted_corpus(50, seed=2, words=(20, 40))
    jsonl = corpus.write_jsonl(str(tmp_path / "j"), n_files=3)
    parquet = corpus.write_parquet(str(tmp_path / "p"), n_files=4)
    assert [p.rsplit("/", 1)[1] for p in jsonl] == [f"part-0000{i}.jsonl" for i in range(3)]
    assert len(parquet) == 4
    rows = []
    for path in jsonl:
        with open(path) as f:
            rows += [json.loads(line) for line in f]
    assert [r["id"] for r in rows] == list(range(50))
    assert [r["text"] for r in rows] == corpus.texts
    frame = pd.concat([pd.read_parquet(p) for p in parquet], ignore_index=True)
    assert frame["id"].tolist() == list(range(50))
    assert frame["text"].tolist() == corpus.texts
    assert not list(tmp_path.rglob("*.tmp"))
    with pytest.raises(ValueError, match="n_files=0 must be between 1 and the 50 documents"):
        corpus.write_jsonl(str(tmp_path / "x"), n_files=0)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"cluster_size": (1, 3)}, "cluster_size=\\(1, 3\\)"),
    ({"similarity": 0.3, "far_similarity": 0.4},
     "far_similarity \\(0.4\\) < similarity \\(0.3\\) <= 1"),
    ({"cluster_fraction": 0.9, "far_pair_fraction": 0.2}, "add up to at most 1"),
    ({"vocabulary": ["one word", "two"]}, "without whitespace"),
])
def test_bad_parameters_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        planted_corpus(10, **kwargs)
