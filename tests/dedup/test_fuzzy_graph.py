"""The LSH, edge, component and Jaccard steps of the fuzzy workflow as plain functions on real
Parquet files (curator_dask/dedup/fuzzy/lsh.py, components.py, jaccard.py); no cluster."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from curator_dask.dedup.fuzzy.components import (
    GROUP_FIELD,
    components_task,
    connected_components,
    identify_task,
)
from curator_dask.dedup.fuzzy.jaccard import pair_jaccard
from curator_dask.dedup.fuzzy.lsh import (
    BUCKET_FIELD,
    EDGE_X,
    EDGE_Y,
    BucketWriter,
    band_buckets,
    band_iterations,
    bucket_edges,
)
from curator_dask.dedup.fuzzy.minhash import minhash_signatures
from curator_dask.dedup.synthetic import shingle_jaccard
from tests.dedup.test_fuzzy_minhash import true_jaccard

ID = "_curator_dedup_id"


def test_band_iterations_are_nemos():
    assert band_iterations(20, 5) == [(0, 5), (5, 10), (10, 15), (15, 20)]
    assert band_iterations(3, 3) == [(0, 3)]


def test_documents_share_a_bucket_exactly_when_a_band_agrees():
    rng = np.random.default_rng(0)
    sig = rng.integers(0, 2**32, size=(50, 12), dtype=np.uint64).astype(np.uint32)
    sig[1] = sig[0]
    sig[2, :3] = sig[0, :3]  # band 0 (rows 0-2) equal to document 0's, the rest differ
    buckets = band_buckets(sig, (0, 4), 3, seed=9)
    assert buckets.shape == (50, 4) and buckets.dtype == np.int64
    assert (buckets[1] == buckets[0]).all()
    assert buckets[2, 0] == buckets[0, 0] and (buckets[2, 1:] != buckets[0, 1:]).all()
    # no bucket is shared between two bands, nor between unrelated documents
    others = np.delete(buckets, [1, 2], axis=0)
    assert len(np.unique(others)) == others.size
    # a later iteration numbers its bands on: band 3 alone gives band 3's column
    assert np.array_equal(band_buckets(sig, (3, 4), 3, seed=9)[:, 0], buckets[:, 3])


def test_buckets_of_two_or_more_become_star_edges(tmp_path):
    frame = pd.DataFrame({ID: np.array([7, 3, 9, 3, 5, 11, 2], dtype=np.int64),
                          BUCKET_FIELD: np.array([1, 1, 1, 2, 2, 3, 4], dtype=np.int64)})
    stats = BucketWriter(str(tmp_path / "lsh"))(frame, partition_info={"number": 3})
    path = tmp_path / "lsh" / "part.3.parquet"
    assert stats["buckets"].tolist() == [2] and stats["rows"].tolist() == [5]
    table = pq.read_table(path)
    assert table.schema.field(ID).type == pa.list_(pa.int64())  # NeMo's LSHStage column
    assert table.column(ID).to_pylist() == [[3, 7, 9], [3, 5]]
    assert bucket_edges(str(path), str(tmp_path / "edges.parquet")) == 3
    edges = pq.read_table(tmp_path / "edges.parquet").to_pandas()
    assert list(edges.columns) == [EDGE_X, EDGE_Y]  # NeMo's BucketsToEdgesStage columns
    assert sorted(map(tuple, edges.to_numpy().tolist())) == [(3, 5), (3, 7), (3, 9)]


def test_components_keep_the_smallest_id_of_each_group(tmp_path):
    vertices, groups = connected_components(np.array([10, 4, 4, 8, 30]),
                                            np.array([12, 10, 12, 9, 31]))
    assert vertices.tolist() == [4, 8, 9, 10, 12, 30, 31]
    assert groups.tolist() == [4, 8, 8, 4, 4, 30, 30]
    # ids far apart (a corpus's own) take the sorting path: the same components
    far = np.array([10, 4, 4, 8, 30]) * 10**12 - 7, np.array([12, 10, 12, 9, 31]) * 10**12 - 7
    vertices_far, groups_far = connected_components(*far)
    assert vertices_far.tolist() == [v * 10**12 - 7 for v in vertices.tolist()]
    assert groups_far.tolist() == [g * 10**12 - 7 for g in groups.tolist()]
    edges = tmp_path / "e.parquet"
    pq.write_table(pa.table({EDGE_X: pa.array([10, 4, 8, 30], pa.int64()),
                             EDGE_Y: pa.array([12, 10, 9, 31], pa.int64()),
                             "jaccard": pa.array([0.9, 0.95, 0.5, 0.81], pa.float32())}),
                   edges)
    counts = components_task([str(edges)], str(tmp_path / "cc"))
    assert counts == {"num_edges": 4, "num_vertices": 7, "num_groups": 3}
    cc = pq.read_table(tmp_path / "cc" / "part.0.parquet")
    assert cc.column_names == [ID, GROUP_FIELD]
    out = identify_task(str(tmp_path / "cc"), str(tmp_path / "ids"))
    ids = pq.read_table(tmp_path / "ids" / "part.0.parquet")
    assert ids.schema.field(ID).type == pa.int64()
    assert ids.column(ID).to_pylist() == [9, 10, 12, 31] and out["num_removal_ids"] == 4
    # with the Jaccard check only verified edges count: 8-9 (0.5) is cut
    components_task([str(edges)], str(tmp_path / "cc2"), threshold=0.8)
    identify_task(str(tmp_path / "cc2"), str(tmp_path / "ids2"))
    assert pq.read_table(tmp_path / "ids2").column(ID).to_pylist() == [10, 12, 31]


def test_no_edges_give_one_empty_ids_file(tmp_path):
    components_task([], str(tmp_path / "cc"))
    assert identify_task(str(tmp_path / "cc"), str(tmp_path / "ids"))["num_removal_ids"] == 0
    table = pq.read_table(tmp_path / "ids" / "part.0.parquet")
    assert table.num_rows == 0 and table.schema.field(ID).type == pa.int64()


def test_pair_jaccard_is_the_true_shingle_jaccard():
    rng = random.Random(4)
    words = [f"word{i}" for i in range(500)]
    left, right = [], []
    for rate in (0.0, 0.05, 0.2, 0.6, 1.0):
        for _ in range(3):
            doc = [rng.choice(words) for _ in range(rng.randint(20, 300))]
            other = [w if rng.random() > rate else rng.choice(words) for w in doc]
            left.append(" ".join(doc))
            right.append(" ".join(other))
    left += ["tiny", "", "naïve café ünïcode text, long enough for shingles"]
    right += ["tiny", "", "naïve café ünïcode text, long enough for shingles!"]
    got = pair_jaccard(left, right, char_ngrams=24)
    want = [true_jaccard(a, b, 24) for a, b in zip(left, right, strict=True)]
    np.testing.assert_allclose(got, want, atol=1e-9)
    ascii_pairs = [(a, b) for a, b in zip(left, right, strict=True) if a.isascii() and a]
    # the planted corpus measures on bytes; on ASCII text that is the same set
    np.testing.assert_allclose(pair_jaccard(*zip(*ascii_pairs, strict=True)),
                               [shingle_jaccard(a, b) for a, b in ascii_pairs], atol=1e-9)


def test_minhash_candidates_follow_the_s_curve():
    """Pairs at Jaccard s collide in some band with probability 1 - (1 - s^r)^b: at 20 x 13,
    0.9997 for s = 0.92 and 1e-4 for s = 0.4 (docs/deduplication.md has the table)."""
    rng = random.Random(8)
    vocab = [f"v{i}" for i in range(5000)]
    found: dict[bool, list[bool]] = {True: [], False: []}
    for rate in (0.003, 0.5):
        for _ in range(20):
            doc = [rng.choice(vocab) for _ in range(300)]
            other = [w if rng.random() > rate else rng.choice(vocab) for w in doc]
            a, b = " ".join(doc), " ".join(other)
            sim = true_jaccard(a, b, 24)
            if 0.4 < sim < 0.92:
                continue
            buckets = band_buckets(minhash_signatures([a, b]), (0, 20), 13, seed=42)
            found[sim >= 0.92].append(bool((buckets[0] == buckets[1]).any()))
    assert len(found[True]) >= 10 and len(found[False]) >= 10
    assert all(found[True]) and not any(found[False])
