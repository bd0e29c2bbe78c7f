"""LSH on Dask: band buckets through the P2P shuffle, then buckets to edges.

A band is ``minhashes_per_band`` consecutive signature values; its bucket id is one 64-bit hash
of them and of the band's number (so two bands never share a bucket). For each iteration of
``bands_per_iteration`` bands (NeMo's loop, which bounds the shuffle's size), every document
gives one ``(id, bucket)`` row per band; ``dask.dataframe``'s P2P shuffle (``shuffle_method=
"p2p"``: it spills to local disk, so a corpus larger than the workers' memory still goes
through) brings each bucket to one partition, where buckets of two or more documents are
written as NeMo's ``LSHStage/band_<a>-band_<b>/part.<i>.parquet``: ``_bucket_id`` and the
sorted ``_curator_dedup_id`` list. Buckets to edges links each bucket's members to its
smallest id (a star; NeMo 1.4 links consecutive members, which gives the same components).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

import fsspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from curator_dask.dedup.fuzzy.minhash import MINHASH_FIELD, fmix64, signature_matrix, splitmix64
from curator_dask.dedup.phases import ID_COLUMN, GroupInfo
from curator_dask.dedup.progress import compute_partitions, rows_of
from curator_dask.utils.atomic import write_atomic

BUCKET_FIELD = "_bucket_id"
EDGE_X, EDGE_Y = f"{ID_COLUMN}_x", f"{ID_COLUMN}_y"
LSH_DIR, EDGES_DIR = "LSHStage", "BucketsToEdgesStage"
_BAND_SALT = 0x6C73685F62616E64  # "lsh_band": keeps band seeds apart from the minhash stream


def band_iterations(num_bands: int, bands_per_iteration: int) -> list[tuple[int, int]]:
    """NeMo's band ranges ``[start, stop)`` of each shuffle iteration.

    Example:
        >>> band_iterations(20, 8)
        [(0, 8), (8, 16), (16, 20)]
    """
    return [(s, min(s + bands_per_iteration, num_bands))
            for s in range(0, num_bands, bands_per_iteration)]


def band_buckets(sig: np.ndarray, band_range: tuple[int, int], minhashes_per_band: int,
                 seed: int) -> np.ndarray:
    """The bucket id (int64) of each document (row of ``sig``) in each band of
    ``band_range``: shape ``(rows, bands)``.

    Example:
        >>> sig = np.array([[1, 2, 3, 4], [1, 2, 9, 9]], dtype=np.uint32)
        >>> b = band_buckets(sig, (0, 2), 2, seed=0)
        >>> bool(b[0, 0] == b[1, 0]), bool(b[0, 1] == b[1, 1]), bool(b[0, 0] == b[0, 1])
        (True, False, False)
    """
    start, stop = band_range
    out = np.empty((sig.shape[0], stop - start), dtype=np.uint64)
    seeds = splitmix64(np.uint64((seed ^ _BAND_SALT) & ((1 << 64) - 1))
                       + np.arange(start, stop, dtype=np.uint64) * np.uint64(0x9E37))
    for j, band in enumerate(range(start, stop)):
        x = np.full(sig.shape[0], seeds[j], dtype=np.uint64)
        for col in range(band * minhashes_per_band, (band + 1) * minhashes_per_band):
            x ^= sig[:, col].astype(np.uint64)
            fmix64(x)
        out[:, j] = x
    return out.view(np.int64)


@dataclass(frozen=True)
class BandRows:
    """``dd.from_map`` function: one phase-1 group's signatures as ``(id, bucket)`` rows for the
    bands of one iteration.

    Example:
        >>> BandRows(num_hashes=260, minhashes_per_band=13, band_range=(0, 5), seed=42)(
        ...     GroupInfo(files=(), rows=0, path="unused")).columns.tolist()
        ['_curator_dedup_id', '_bucket_id']
    """

    num_hashes: int
    minhashes_per_band: int
    band_range: tuple[int, int]
    seed: int
    storage_options: dict[str, Any] = field(default_factory=dict)

    def __call__(self, group: GroupInfo) -> pd.DataFrame:
        if group.rows == 0:
            return _band_frame(np.zeros(0, np.int64), np.zeros((0, 0), np.int64))
        with fsspec.open(group.path, "rb", **self.storage_options) as f:
            column = pq.read_table(f, columns=[MINHASH_FIELD]).column(MINHASH_FIELD)
        sig = signature_matrix(column, self.num_hashes)
        ids = np.arange(group.first_id, group.first_id + sig.shape[0], dtype=np.int64)
        return _band_frame(ids, band_buckets(sig, self.band_range, self.minhashes_per_band,
                                             self.seed))


def _band_frame(ids: np.ndarray, buckets: np.ndarray) -> pd.DataFrame:
    # band-major, like NeMo's melt: all documents of the first band, then the next
    return pd.DataFrame({ID_COLUMN: np.tile(ids, buckets.shape[1]),
                         BUCKET_FIELD: buckets.T.reshape(-1)})


@dataclass(frozen=True)
class BucketWriter:
    """``map_partitions`` function after the shuffle: the partition's buckets of two or more
    documents to ``<out_dir>/part.<i>.parquet``; returns one row of counts.

    Example:
        >>> rows = pd.DataFrame({ID_COLUMN: [4, 2, 9], BUCKET_FIELD: [7, 7, 8]})
        >>> BucketWriter("memory://doc-lsh")(rows, {"number": 0})[["buckets", "rows"]].values
        array([[1, 2]])
    """

    out_dir: str
    storage_options: dict[str, Any] = field(default_factory=dict)

    def __call__(self, df: pd.DataFrame, partition_info: dict | None = None) -> pd.DataFrame:
        number = int((partition_info or {}).get("number", 0))
        buckets = df[BUCKET_FIELD].to_numpy(np.int64)
        ids = df[ID_COLUMN].to_numpy(np.int64)
        order = np.lexsort((ids, buckets))
        buckets, ids = buckets[order], ids[order]
        starts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]]) if len(ids) else (
            np.zeros(0, np.int64))
        sizes = np.diff(np.r_[starts, len(ids)])
        keep = np.repeat(sizes > 1, sizes)
        kept_sizes = sizes[sizes > 1]
        offsets = np.zeros(len(kept_sizes) + 1, dtype=np.int64)
        np.cumsum(kept_sizes, out=offsets[1:])
        table = pa.table({
            BUCKET_FIELD: pa.array(buckets[keep][offsets[:-1]], pa.int64()),
            ID_COLUMN: _list_array(offsets, ids[keep]),
        })
        path = _write(table, self.out_dir, f"part.{number}.parquet", self.storage_options)
        return pd.DataFrame({"path": [path], "buckets": [len(kept_sizes)],
                             "rows": [int(kept_sizes.sum())], "input_rows": [len(df)]})


def shuffle_buckets(client: Any, groups: list[GroupInfo], out_dir: str, *, num_hashes: int,
                    minhashes_per_band: int, band_range: tuple[int, int], seed: int,
                    npartitions: int | None, storage_options: dict[str, Any],
                    progress: Any = None) -> pd.DataFrame:
    """One LSH iteration on ``client``: band rows of every group, the P2P shuffle on the
    bucket id, bucket files under ``out_dir``. Returns the counts per output partition; each
    partition written advances ``progress`` (``dedup/progress.py``) by its band rows."""
    import dask.dataframe as dd

    loader = BandRows(num_hashes, minhashes_per_band, band_range, seed, storage_options)
    meta = _band_frame(np.zeros(0, np.int64), np.zeros((0, 1), np.int64))
    frame = dd.from_map(loader, groups, meta=meta, enforce_metadata=False,
                        label=f"lsh-bands-{band_range[0]}-{band_range[1]}")
    nparts = npartitions or max(1, len(groups))
    shuffled = frame.shuffle(on=BUCKET_FIELD, npartitions=nparts, shuffle_method="p2p")
    stats_meta = pd.DataFrame({"path": pd.Series([], dtype=object),
                               "buckets": pd.Series([], dtype="int64"),
                               "rows": pd.Series([], dtype="int64"),
                               "input_rows": pd.Series([], dtype="int64")})
    written = shuffled.map_partitions(BucketWriter(out_dir, storage_options), meta=stats_meta)
    return compute_partitions(client, written, progress, rows_of("input_rows"))


def bucket_edges(bucket_path: str, out_path: str,
                 storage_options: dict[str, Any] | None = None) -> int:
    """Buckets to edges for one bucket file: each member linked to its bucket's smallest id;
    a pair repeated in several buckets of the file is written once. Returns the edge count."""
    opts = storage_options or {}
    with fsspec.open(bucket_path, "rb", **opts) as f:
        lists = pq.read_table(f, columns=[ID_COLUMN]).column(ID_COLUMN).combine_chunks()
    lists = lists.cast(pa.large_list(pa.int64()))
    offsets = lists.offsets.to_numpy()
    ids = lists.flatten().to_numpy()
    sizes = np.diff(offsets)
    anchors = np.repeat(ids[offsets[:-1]], sizes)
    member = np.ones(len(ids), dtype=bool)
    member[offsets[:-1][sizes > 0]] = False  # the anchor itself is no edge
    pairs = np.unique(np.stack([anchors[member], ids[member]], axis=1), axis=0) if len(
        ids) else np.zeros((0, 2), np.int64)
    table = pa.table({EDGE_X: pa.array(pairs[:, 0], pa.int64()),
                      EDGE_Y: pa.array(pairs[:, 1], pa.int64())})
    directory, name = posixpath.split(out_path)
    _write(table, directory, name, opts)
    return len(pairs)


def _list_array(offsets: np.ndarray, values: np.ndarray) -> pa.Array:
    # NeMo's type (list<int64>); a large list only past 2**31 ids in one partition
    if offsets[-1] < 2**31:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)),
                                        pa.array(values, pa.int64()))
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values, pa.int64()))


def _write(table: pa.Table, directory: str, name: str, storage_options: dict[str, Any]) -> str:
    fs, root = fsspec.core.url_to_fs(directory, **storage_options)
    fs.makedirs(root, exist_ok=True)
    path = posixpath.join(root, name)
    write_atomic(fs, path, lambda f: pq.write_table(table, f))
    return path if isinstance(fs, LocalFileSystem) else fs.unstrip_protocol(path)


__all__ = ["BUCKET_FIELD", "EDGES_DIR", "EDGE_X", "EDGE_Y", "LSH_DIR", "BandRows",
           "BucketWriter", "band_buckets", "band_iterations", "bucket_edges",
           "shuffle_buckets"]
