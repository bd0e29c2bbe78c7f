"""The Jaccard check of candidate pairs (NeMo 0.x's ``false_positive_check``), on Dask.

LSH finds pairs whose MinHash bands agree; some are less similar than the threshold the bands
were chosen for. With the check, every distinct candidate edge gets the true Jaccard
similarity of its two documents' ``char_ngrams``-character shingle sets, and the connected
components are built from the edges at or above ``jaccard_threshold`` only, so a document is
removed only when verified edges link it to the document kept.

The texts come from the corpus again, read with phase 1's reader and the same ids (a group's
first id plus the row's index), and only for the documents of some edge (the candidate ids,
handed to each group's task as its own slice). Both ends of every edge are joined to their
texts with ``dask.dataframe`` merges on the P2P shuffle, and each output partition computes its
pairs' similarities vectorised: each side's shingle hashes (the rolling hash of
:mod:`.minhash`) tagged with the pair's number in the high bits, made unique per pair with
one sort, and the intersection counted with one ``np.searchsorted`` of one side into the
other. Results: ``JaccardSimilarityStage/part.<i>.parquet`` (``_curator_dedup_id_x``,
``_curator_dedup_id_y``, ``jaccard``) under ``cache_path``.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

import fsspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curator_dask.dedup.fuzzy.components import JACCARD_FIELD, unique_sorted
from curator_dask.dedup.fuzzy.lsh import EDGE_X, EDGE_Y, _write
from curator_dask.dedup.fuzzy.minhash import as_text_array, hash_parameters, window_hash_batches
from curator_dask.dedup.phases import ID_COLUMN, GroupInfo
from curator_dask.dedup.progress import compute_partitions, rows_of

JACCARD_DIR = "JaccardSimilarityStage"
_PAIR_BITS = 16  # pairs per vectorised batch: 2**16; the shingle hash keeps 48 bits
_BATCH_TEXT_BYTES = 8 << 20


def pair_jaccard(texts_x: Any, texts_y: Any, char_ngrams: int = 24, seed: int = 42
                 ) -> np.ndarray:
    """The Jaccard similarity of the shingle sets of ``texts_x[i]`` and ``texts_y[i]``.

    Example:
        >>> pair_jaccard(["abcdef", "abcdef"], ["abcdeg", "abcdef"], char_ngrams=3).tolist()
        [0.6, 1.0]
    """
    ax, ay = as_text_array(texts_x), as_text_array(texts_y)
    if len(ax) != len(ay):
        msg = f"pair_jaccard: {len(ax)} left texts for {len(ay)} right texts"
        raise ValueError(msg)
    out = np.empty(len(ax), dtype=np.float64)
    sizes = pc.binary_length(pc.fill_null(ax.cast(pa.large_string()), "")).to_numpy(
        zero_copy_only=False)
    ends = np.cumsum(sizes)
    start = 0
    while start < len(ax):
        # whole pairs up to ~_BATCH_TEXT_BYTES of left text and at most 2**_PAIR_BITS of them
        done = int(ends[start - 1]) if start else 0
        stop = int(np.searchsorted(ends, done + _BATCH_TEXT_BYTES, side="right"))
        stop = min(max(stop, start + 1), start + (1 << _PAIR_BITS), len(ax))
        kx = _tagged_shingles(ax[start:stop], char_ngrams, seed)
        ky = _tagged_shingles(ay[start:stop], char_ngrams, seed)
        out[start:stop] = _jaccard_of_tagged(kx, ky, stop - start)
        start = stop
    return out


def _tagged_shingles(texts: pa.Array, char_ngrams: int, seed: int) -> np.ndarray:
    """Sorted distinct ``(pair << 48) | (hash >> 16)`` keys of the texts' shingles."""
    params = hash_parameters(seed, 1, True)
    keys = []
    for d0, _d1, h, first in window_hash_batches(texts, char_ngrams, params):
        counts = np.diff(np.append(first, len(h)))
        pair = np.repeat(np.arange(d0, d0 + len(first), dtype=np.uint64), counts)
        keys.append((pair << np.uint64(64 - _PAIR_BITS)) | (h >> np.uint64(_PAIR_BITS)))
    return unique_sorted(np.concatenate(keys)) if keys else np.zeros(0, np.uint64)


def _jaccard_of_tagged(kx: np.ndarray, ky: np.ndarray, n: int) -> np.ndarray:
    shift = np.uint64(64 - _PAIR_BITS)
    at = np.searchsorted(kx, ky)
    found = np.zeros(len(ky), dtype=bool)
    inside = at < len(kx)
    found[inside] = kx[at[inside]] == ky[inside]
    inter = np.bincount((ky[found] >> shift).astype(np.int64), minlength=n)
    nx = np.bincount((kx >> shift).astype(np.int64), minlength=n)
    ny = np.bincount((ky >> shift).astype(np.int64), minlength=n)
    union = nx + ny - inter
    return np.divide(inter, union, out=np.ones(n), where=union > 0)


def _edge_file(path: str, storage_options: dict[str, Any]) -> pd.DataFrame:
    with fsspec.open(path, "rb", **storage_options) as f:
        return pq.read_table(f, columns=[EDGE_X, EDGE_Y]).to_pandas()


def _edge_ids(path: str, storage_options: dict[str, Any]) -> tuple[np.ndarray, int]:
    """The distinct ids of a file's edges, and its edges (the pairs the check will count)."""
    edges = _edge_file(path, storage_options)
    return unique_sorted(np.concatenate([edges[EDGE_X].to_numpy(),
                                         edges[EDGE_Y].to_numpy()])), len(edges)


@dataclass(frozen=True)
class CandidateTexts:
    """``dd.from_map`` function: the texts of one group's candidate documents, read as phase 1
    read them (same reader, same row order), with their ids.

    Example:
        >>> # dd.from_map(CandidateTexts("jsonl", "text"), groups, ids_of_each_group)
    """

    filetype: str
    text_field: str
    read_kwargs: dict[str, Any] = field(default_factory=dict)
    normalize_text: bool = False

    def __call__(self, group: GroupInfo, ids: np.ndarray) -> pd.DataFrame:
        from curator_dask.dedup.phases import as_table, phase1_reader

        if len(ids) == 0:
            return _text_frame(np.zeros(0, np.int64), [])
        table = as_table(phase1_reader(self.filetype, self.text_field, None,
                                       self.read_kwargs).read_files(list(group.files)))
        if table.num_rows != group.rows:
            msg = (f"the files {list(group.files)[:3]} now hold {table.num_rows} rows, phase 1 "
                   f"read {group.rows}: the input changed during the run; run again")
            raise ValueError(msg)
        texts = table.column(self.text_field).take(pa.array(ids - group.first_id))
        series = texts.to_pandas()
        if self.normalize_text:
            from curator_dask.dedup.text import normalize_text

            series = normalize_text(series)
        return _text_frame(ids, series)


def _text_frame(ids: np.ndarray, texts: Any) -> pd.DataFrame:
    return pd.DataFrame({ID_COLUMN: np.asarray(ids, dtype=np.int64),
                         "text": pd.Series(list(texts) if not isinstance(texts, pd.Series)
                                           else texts.to_numpy(), dtype=object)})


@dataclass(frozen=True)
class JaccardWriter:
    """``map_partitions`` function after the joins: the partition's pairs' similarities to
    ``<out_dir>/part.<i>.parquet``; returns one row of counts.

    Example:
        >>> pairs = pd.DataFrame({EDGE_X: [1], EDGE_Y: [2], "text_x": ["abcdef"],
        ...                       "text_y": ["abcdeg"]})
        >>> JaccardWriter("memory://doc-jaccard", 3, 42, 0.5)(pairs).values.tolist()
        [[1, 1, 1]]
    """

    out_dir: str
    char_ngrams: int
    seed: int
    threshold: float
    storage_options: dict[str, Any] = field(default_factory=dict)

    def __call__(self, df: pd.DataFrame, partition_info: dict | None = None) -> pd.DataFrame:
        number = int((partition_info or {}).get("number", 0))
        candidates = len(df)  # the edge rows, repeats included: what the progress counts
        df = df.drop_duplicates([EDGE_X, EDGE_Y])
        sims = pair_jaccard(df["text_x"], df["text_y"], self.char_ngrams, self.seed)
        table = pa.table({EDGE_X: pa.array(df[EDGE_X].to_numpy(), pa.int64()),
                          EDGE_Y: pa.array(df[EDGE_Y].to_numpy(), pa.int64()),
                          JACCARD_FIELD: pa.array(sims.astype(np.float32))})
        _write(table, self.out_dir, f"part.{number}.parquet", self.storage_options)
        return pd.DataFrame({"pairs": [len(df)],
                             "verified": [int((sims >= self.threshold).sum())],
                             "candidates": [candidates]})


def check_candidates(client: Any, groups: list[GroupInfo], edge_paths: list[str],
                     out_dir: str, *, filetype: str, text_field: str,
                     read_kwargs: dict[str, Any], normalize_text: bool, char_ngrams: int,
                     seed: int, threshold: float, npartitions: int | None,
                     storage_options: dict[str, Any], progress: Any = None) -> dict[str, int]:
    """The Jaccard check on ``client``: the similarity of every distinct candidate edge of
    ``edge_paths``, written under ``out_dir``. Returns the counts. ``progress``
    (``dedup/progress.py``) counts the edge rows checked, of all the files' edge rows."""
    import dask.dataframe as dd

    found = client.gather(client.map(_edge_ids, edge_paths, storage_options=storage_options))
    ids = unique_sorted(np.concatenate([np.zeros(0, np.int64)] + [f[0] for f in found]))
    if progress is not None:
        progress.start(sum(f[1] for f in found))
    firsts = np.array([g.first_id for g in groups] + [np.iinfo(np.int64).max])
    cuts = np.searchsorted(ids, firsts)
    slices = [ids[cuts[i]:cuts[i + 1]] for i in range(len(groups))]
    texts = dd.from_map(CandidateTexts(filetype, text_field, dict(read_kwargs), normalize_text),
                        groups, slices, meta=_text_frame(np.zeros(0, np.int64), []),
                        enforce_metadata=False, label="jaccard-texts")
    edges = dd.from_map(_edge_file, edge_paths, storage_options=storage_options,
                        meta=pd.DataFrame({EDGE_X: pd.Series([], dtype="int64"),
                                           EDGE_Y: pd.Series([], dtype="int64")}),
                        enforce_metadata=False, label="jaccard-edges")
    nparts = npartitions or max(1, len(edge_paths))
    pairs = edges.merge(texts.rename(columns={ID_COLUMN: EDGE_X, "text": "text_x"}),
                        on=EDGE_X, shuffle_method="p2p", npartitions=nparts)
    pairs = pairs.merge(texts.rename(columns={ID_COLUMN: EDGE_Y, "text": "text_y"}),
                        on=EDGE_Y, shuffle_method="p2p", npartitions=nparts)
    meta = pd.DataFrame({"pairs": pd.Series([], dtype="int64"),
                         "verified": pd.Series([], dtype="int64"),
                         "candidates": pd.Series([], dtype="int64")})
    written = pairs.map_partitions(
        JaccardWriter(out_dir, char_ngrams, seed, threshold, storage_options), meta=meta)
    counts = compute_partitions(client, written, progress, rows_of("candidates"))
    return {"candidate_documents": len(ids), "pairs": int(counts["pairs"].sum()),
            "verified": int(counts["verified"].sum()), "files": len(counts)}


def jaccard_paths(out_dir: str, storage_options: dict[str, Any]) -> list[str]:
    """The result files of a finished check, in order."""
    fs, root = fsspec.core.url_to_fs(out_dir, **storage_options)
    names = sorted(p for p in fs.ls(root, detail=False) if p.endswith(".parquet"))
    return [p if "://" not in out_dir else fs.unstrip_protocol(p)
            for p in (posixpath.join(root, posixpath.basename(n)) for n in names)]


__all__ = ["JACCARD_DIR", "CandidateTexts", "JaccardWriter", "check_candidates",
           "jaccard_paths", "pair_jaccard"]
