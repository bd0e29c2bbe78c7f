"""Data-Juicer's deduplicators on Dask keep exactly the rows Data-Juicer's default executor keeps.

Each case runs the deduplicator with :func:`run_deduplicator` on a real cluster over 1, 3 and
5 partitions and compares the rows, every column and their order, with Data-Juicer's own
``op.run(NestedDataset.from_list(rows))`` on all rows at once (the default executor's path).
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from data_juicer.core.data import NestedDataset
from data_juicer.ops import load_ops

from curator_dask.data_juicer.dedup import (
    DEDUP_OPS,
    MINHASH_COLUMN,
    DeduplicatorParamError,
    equivalent_entry,
    run_deduplicator,
)

_WORDS = [f"{a}{b}" for a in ("ka", "lo", "mi", "nu", "pe", "ro", "si", "tu", "va", "ze")
          for b in ("ban", "cor", "dim", "fel", "gor", "hup", "jin", "kol", "lem", "mur",
                    "nob", "pix", "qua", "rux", "sol")]


def _doc(rng: random.Random, n: int = 60) -> list[str]:
    return [rng.choice(_WORDS) for _ in range(n)]


def _mutate(words: list[str], rng: random.Random, changes: int) -> list[str]:
    out = list(words)
    for i in rng.sample(range(len(out)), changes):
        out[i] = rng.choice(_WORDS) + "x"
    return out


def _corpus() -> list[dict]:
    """About 60 rows: unique documents, and placed among them exact duplicates across
    partitions, a near-duplicate met before the first exact copy of its twin, a chain of
    near-duplicates (A~B~C, A and C far apart) spanning partitions, case and punctuation
    variants, empty and whitespace-only texts."""
    rng = random.Random(11)
    texts = [" ".join(_doc(rng, rng.randint(20, 70))) for _ in range(60)]
    d = _doc(rng)
    a = _doc(rng)
    b = _mutate(a, rng, 2)
    c = _mutate(b, rng, 2)
    e = " ".join(_doc(rng))
    placed = {
        2: " ".join(_mutate(d, rng, 1)),  # near-duplicate of D, before any D
        31: " ".join(d), 56: " ".join(d),  # D and its exact copy, later partitions
        5: " ".join(a), 26: " ".join(b), 51: " ".join(c),
        10: e, 45: e, 47: e.upper(), 48: e.replace(" ", ", ", 3) + "!!",
        12: "", 40: "", 41: "   ",
        17: " ".join(_mutate(d, rng, 3)), 58: " ".join(_mutate(a, rng, 1)),
        20: "Short text.", 21: "short text", 22: "Short, text!",
    }
    for i, text in placed.items():
        texts[i] = text
    return [{"text": t, "id": i, "meta": {"n": i % 4}} for i, t in enumerate(texts)]


ROWS = _corpus()

CASES = [
    {"document_deduplicator": {}},
    {"document_deduplicator": {"lowercase": True}},
    {"document_deduplicator": {"lowercase": True, "ignore_non_character": True}},
    {"document_minhash_deduplicator": {}},
    {"document_minhash_deduplicator": {"tokenization": "character", "window_size": 8,
                                       "jaccard_threshold": 0.5}},
    {"document_minhash_deduplicator": {"window_size": 3, "jaccard_threshold": 0.6,
                                       "num_permutations": 64}},
    {"document_minhash_deduplicator": {"tokenization": "punctuation", "window_size": 2,
                                       "num_bands": 8, "num_rows_per_band": 4,
                                       "num_permutations": 32, "lowercase": False}},
    {"document_simhash_deduplicator": {}},
    {"document_simhash_deduplicator": {"window_size": 3, "num_blocks": 8,
                                       "hamming_distance": 6}},
    {"document_simhash_deduplicator": {"tokenization": "character", "window_size": 4,
                                       "num_blocks": 5, "hamming_distance": 3}},
    {"ray_document_deduplicator": {"backend": "ray_actor", "dedup_set_num": 4,
                                   "lowercase": True}},
    {"ray_bts_minhash_deduplicator": {"union_find_parallel_num": 3, "jaccard_threshold": 0.6,
                                      "window_size": 4, "merge_batch_size": 10}},
]
_REFERENCE: dict[str, list[dict]] = {}


def _dj_default(op_cfg: dict) -> list[dict]:
    """Data-Juicer's default executor's rows: its operator run on the whole dataset."""
    key = repr(op_cfg)
    if key not in _REFERENCE:
        op = load_ops([equivalent_entry(op_cfg)])[0]
        _REFERENCE[key] = op.run(NestedDataset.from_list(ROWS)).to_list()
    return _REFERENCE[key]


def _split(rows: list[dict], n: int) -> list[pa.Table]:
    bounds = [round(i * len(rows) / n) for i in range(n + 1)]
    return [pa.Table.from_pylist(rows[bounds[i]:bounds[i + 1]]) for i in range(n)]


def _on_dask(client, op_cfg: dict, n: int) -> list[pa.Table]:
    parts = [client.scatter(t) for t in _split(ROWS, n)]
    return [f.result() for f in run_deduplicator(client, op_cfg, parts)]


@pytest.mark.parametrize("nparts", [1, 3, 5])
@pytest.mark.parametrize("op_cfg", CASES, ids=lambda c: f"{next(iter(c))}-{c[next(iter(c))]}")
def test_kept_rows_equal_data_juicer_default(executor, op_cfg, nparts):
    client = executor.start()
    expected = _dj_default(op_cfg)
    tables = _on_dask(client, op_cfg, nparts)
    assert len(tables) == nparts
    got = pa.concat_tables(tables).to_pylist()
    assert [r["id"] for r in got] == [r["id"] for r in expected]
    assert got == expected
    assert len(expected) < len(ROWS)  # the case removes something


def test_cases_cover_the_placed_situations(executor):
    """The corpus exercises what it claims: a near-duplicate kept over a later exact pair,
    and a chain whose ends are not in one bucket but in one component."""
    kept = {r["id"] for r in _dj_default(CASES[5])}
    assert 2 in kept and 31 not in kept and 56 not in kept
    assert 5 in kept and 26 not in kept and 51 not in kept
    op = load_ops([CASES[5]])[0]
    ends = op.run(NestedDataset.from_list([ROWS[5], ROWS[51]])).to_list()
    assert [r["id"] for r in ends] == [5, 51]


def test_minhash_column_kept_for_a_single_row(executor):
    client = executor.start()
    rows = ROWS[:1]
    parts = [client.scatter(pa.Table.from_pylist(rows)), client.scatter(pa.Table.from_pylist(
        ROWS[:0], schema=pa.Table.from_pylist(rows).schema))]
    tables = [f.result() for f in
              run_deduplicator(client, {"document_minhash_deduplicator": {}}, parts)]
    op = load_ops([{"document_minhash_deduplicator": {}}])[0]
    expected = op.run(NestedDataset.from_list(rows)).to_list()
    assert MINHASH_COLUMN in tables[0].column_names
    assert pa.concat_tables(tables).to_pylist() == expected


def test_ray_variants_are_mapped():
    assert equivalent_entry({"ray_document_deduplicator": {
        "backend": "redis", "redis_address": "redis://x:1", "ignore_non_character": True}}) \
        == {"document_deduplicator": {"ignore_non_character": True}}
    assert equivalent_entry({"ray_bts_minhash_cpp_deduplicator": {
        "union_threshold": 9, "tokenization": "character", "text_key": "body"}}) \
        == {"document_minhash_deduplicator": {"tokenization": "character", "text_key": "body"}}
    same = {"document_simhash_deduplicator": {"num_blocks": 7}}
    assert equivalent_entry(same) is same
    assert {"ray_document_deduplicator", "ray_bts_minhash_deduplicator",
            "document_deduplicator", "document_minhash_deduplicator",
            "document_simhash_deduplicator"} <= DEDUP_OPS


def test_unknown_ray_backend_is_refused():
    with pytest.raises(DeduplicatorParamError, match="backend 'ray_magic'"):
        equivalent_entry({"ray_document_deduplicator": {"backend": "ray_magic"}})


def test_simhash_blocks_not_above_distance_are_refused(executor):
    client = executor.start()
    parts = [client.scatter(t) for t in _split(ROWS, 2)]
    with pytest.raises(DeduplicatorParamError, match="num_blocks 4"):
        run_deduplicator(client, {"document_simhash_deduplicator": {
            "num_blocks": 4, "hamming_distance": 4}}, parts)


@pytest.mark.parametrize(("blocks", "distance"), [(6, 4), (8, 6), (5, 3), (3, 1), (10, 2)])
def test_simhash_pairs_equal_simhash_find_all(blocks, distance):
    """The block tables and the bit comparison find exactly the pairs of ``simhash.find_all``
    (the library Data-Juicer calls), on values built to sit around the distance."""
    import numpy as np
    import pandas as pd
    import simhash

    from curator_dask.data_juicer.dedup import _block_keys, _near_pairs, _simhash_masks

    rng = np.random.default_rng(blocks * 10 + distance)
    values = set()
    for base in rng.integers(0, 2**63, size=150, dtype=np.uint64):
        values.add(int(base))
        for flips in range(1, distance + 3):
            bits = rng.choice(64, size=flips, replace=False)
            values.add(int(base) ^ sum(1 << int(b) for b in bits))
    values = sorted(values)
    frame = pd.DataFrame({"pos": np.arange(len(values), dtype=np.int64),
                          "h": np.array(values, dtype=np.uint64)})
    masks = _simhash_masks({"document_simhash_deduplicator": {
        "num_blocks": blocks, "hamming_distance": distance}})
    edges = _near_pairs(_block_keys(frame, masks[0]), masks[1])
    pairs = zip(edges["x"], edges["y"], strict=True)
    ours = {tuple(sorted((values[x], values[y]))) for x, y in pairs}
    theirs = {tuple(sorted(p)) for p in simhash.find_all(np.uint64(values), blocks, distance)}
    assert ours == theirs
    assert theirs  # the values do have near pairs
