"""Data-Juicer's deduplicators as convergence points on Dask, keeping exactly the rows that
Data-Juicer's default executor keeps.

Data-Juicer's ``Deduplicator.run`` maps the dataset with the operator's ``compute_hash`` (a
per-sample operator, called through its fault-tolerance wrapper on batches of one row) and then
lets ``process`` decide over the whole dataset. Here the first half runs per partition on the
workers with Data-Juicer's own ``compute_hash`` (so tokenisation, hash functions, permutations
and bands are its code), and the decision runs across partitions with Dask's P2P shuffle; the
driver holds futures only. Every row gets a global position ``partition << 32 | row``, so the
smallest position of a group is the first row in dataset order. What Data-Juicer 1.6.1 keeps:

- ``document_deduplicator``: the first row of each MD5 hash (a set filled in dataset order);
  its ``__dj__hash`` column stays.
- ``document_minhash_deduplicator``: rows sharing a band bucket are joined in a union-find whose
  union makes the smaller root the parent, so a component's root is its smallest index and
  only the roots are kept: the first row of each connected component of the bucket graph. Its
  ``__dj__minhash`` column is removed, except when the dataset has at most one row (``process``
  returns it untouched then).
- ``document_simhash_deduplicator``: ``simhash.find_all`` over the distinct hash values gives
  every pair of distinct values within ``hamming_distance`` bits (one table per choice of
  ``num_blocks - hamming_distance`` of the ``num_blocks`` bit blocks, the chosen blocks as the
  prefix; candidates compared bit by bit), a breadth-first search groups the values, and the
  first row of each group (or of each value outside any pair) is kept. Reproduced with the same
  blocks as shuffle keys and the same comparison; ``__dj__simhash`` stays.

Data-Juicer's Ray variants are mapped to these (:func:`equivalent_entry`): their backend and
parallelism parameters change how Ray runs, not which rows are duplicates. One difference is
inherent to ``ray_document_deduplicator``: it gives an empty text the hash ``"EMPTY"``, not
the MD5 of ``""``, so there an empty text and a whitespace-only one are two groups, here (as in
``document_deduplicator``) one. Ray's own choice of the kept row depends on task timing; here it
is the default executor's, the first row.
"""

from __future__ import annotations

import inspect
import itertools
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa

from curator_dask.data_juicer.ops import built_op, op_name
from curator_dask.errors import CuratorDaskError

if TYPE_CHECKING:
    import dask.dataframe as dd
    import distributed

HASH_COLUMN, MINHASH_COLUMN, SIMHASH_COLUMN = "__dj__hash", "__dj__minhash", "__dj__simhash"
_ROW_BITS = 32
_ROW_MASK = (1 << _ROW_BITS) - 1
_PAIR_BLOCK = 2048  # rows compared at once in a SimHash bucket: bounds the pairwise matrix

EXACT, MINHASH, SIMHASH = "document_deduplicator", "document_minhash_deduplicator", \
    "document_simhash_deduplicator"
# A Ray variant -> the default-executor operator of the same semantics, and the parameters that
# only steer Ray (actors, Redis, batch sizes, memory reservations) and are dropped.
_RAY_VARIANTS: dict[str, tuple[str, frozenset[str]]] = {
    "ray_document_deduplicator": (EXACT, frozenset({"backend", "redis_address",
                                                    "dedup_set_num"})),
    "ray_bts_minhash_deduplicator": (MINHASH, frozenset({
        "union_find_parallel_num", "union_threshold", "max_pending_edge_buffer_task",
        "num_edge_buffer_task_returns", "max_pending_filter_tasks", "num_filter_task_returns",
        "merge_batch_size", "minhash_batch_size", "memory_per_sample", "actor_memory",
        "task_memory"})),
    "ray_bts_minhash_cpp_deduplicator": (MINHASH, frozenset({
        "union_find_parallel_num", "union_threshold", "max_pending_edge_buffer_task",
        "num_edge_buffer_task_returns", "max_pending_filter_tasks", "num_filter_task_returns",
        "merge_batch_size"})),
}
_RAY_BACKENDS = ("ray_actor", "redis")

DEDUP_OPS: frozenset[str] = frozenset({EXACT, MINHASH, SIMHASH, *_RAY_VARIANTS})
# Each operator's hash column as compute_hash writes it (for a partition with no row to show it)
_HASH_FIELDS = {EXACT: (HASH_COLUMN, pa.string()), MINHASH: (MINHASH_COLUMN,
                                                               pa.list_(pa.binary())),
                SIMHASH: (SIMHASH_COLUMN, pa.string())}


class DeduplicatorParamError(ValueError, CuratorDaskError):
    """A deduplicator's parameter has no equivalent on Dask, or a value Data-Juicer refuses."""


def equivalent_entry(op_cfg: dict[str, Any]) -> dict[str, Any]:
    """The default-executor entry with the semantics of ``op_cfg`` (``{name: params}``): a Ray
    variant's name and parameters translated, any other entry returned unchanged.

    Raises:
        DeduplicatorParamError: a parameter of the Ray variant that the default-executor
            operator lacks and that is not one of Ray's own execution settings, or an unknown
            ``backend``.

    Example:
        >>> equivalent_entry({"ray_document_deduplicator": {"backend": "redis",
        ...                                                 "lowercase": True}})
        {'document_deduplicator': {'lowercase': True}}
    """
    name = op_name(op_cfg)
    if name not in _RAY_VARIANTS:
        return op_cfg
    target, ray_only = _RAY_VARIANTS[name]
    params = dict(op_cfg[name] or {})
    backend = params.get("backend", _RAY_BACKENDS[0])
    if name == "ray_document_deduplicator" and backend not in _RAY_BACKENDS:
        msg = (f"{name}: backend {backend!r} is not one of Data-Juicer's {_RAY_BACKENDS}; "
               "drop it (on Dask the backend does not matter)")
        raise DeduplicatorParamError(msg)
    unmapped = sorted(set(params) & (_own_params(name) - _own_params(target) - ray_only))
    if unmapped:
        msg = (f"{name}: parameter {unmapped[0]!r} has no equivalent in {target}, which runs "
               f"it on Dask; remove it from the recipe")
        raise DeduplicatorParamError(msg)
    return {target: {k: v for k, v in params.items() if k not in ray_only}}


def _own_params(name: str) -> set[str]:
    """The parameters a Data-Juicer operator class declares itself (not the base ``OP``'s)."""
    from data_juicer.ops import OPERATORS

    cls = OPERATORS.modules[name]
    return {p.name for p in inspect.signature(cls.__init__).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"}


def run_deduplicator(client: distributed.Client, op_cfg: dict[str, Any],
                     parts: list[distributed.Future]) -> list[distributed.Future]:
    """Deduplicate the partitions ``parts`` (futures of ``pyarrow.Table``, in dataset order)
    with the deduplicator ``op_cfg`` as Data-Juicer's default executor does.

    Returns futures of the partitions (same count and order) holding the rows Data-Juicer
    keeps, with the columns its ``process`` leaves. The shuffles run before this returns.

    Example:
        >>> # kept = run_deduplicator(client, {"document_deduplicator": {}}, parts)
    """
    op_cfg, name = _checked(op_cfg)
    if not parts:
        return []
    hashed = [client.submit(hash_partition, op_cfg, p, pure=False) for p in parts]
    keys = [_delayed_keys(partition_keys, h, i, name) for i, h in enumerate(hashed)]
    routed = _routed(client, op_cfg, name, keys)
    total = client.submit(_total_rows, hashed, pure=False) if name == MINHASH else None
    drop = MINHASH_COLUMN if name == MINHASH else None
    return [client.submit(keep_rows, h, r, drop, total, pure=False)
            for h, r in zip(hashed, routed, strict=True)]


def run_deduplicator_files(client: distributed.Client, op_cfg: dict[str, Any],
                           sources: list[str], hashed: list[str], outputs: list[str]
                           ) -> list[int]:
    """:func:`run_deduplicator` over Parquet files, for partitions that do not all fit in
    the cluster's memory: partition ``i`` is read from ``sources[i]``, written with its hash
    column to ``hashed[i]``, and its kept rows to ``outputs[i]`` (each file whole or absent:
    written under a temporary name, then renamed). A task holds one partition; what crosses
    the shuffle is each row's position and hash. Returns the rows kept per partition."""
    import distributed

    op_cfg, name = _checked(op_cfg)
    if not sources:
        return []
    done = client.map(_hash_file, [op_cfg] * len(sources), sources, hashed, pure=False)
    keys = [_delayed_keys(_file_keys, path, i, name, after=d)
            for i, (path, d) in enumerate(zip(hashed, done, strict=True))]
    routed = _routed(client, op_cfg, name, keys)
    total = sum(client.gather(done)) if name == MINHASH else None
    drop = MINHASH_COLUMN if name == MINHASH else None
    kept = client.map(_keep_file, hashed, routed, outputs, drop_column=drop, total_rows=total,
                      pure=False)
    distributed.wait(kept)
    return [int(n) for n in client.gather(kept)]


def _checked(op_cfg: dict[str, Any]) -> tuple[dict[str, Any], str]:
    op_cfg = equivalent_entry(op_cfg)
    name = op_name(op_cfg)
    if name not in DEDUP_OPS:
        msg = f"{name} is not a deduplicator run on Dask; the ones run are {sorted(DEDUP_OPS)}"
        raise DeduplicatorParamError(msg)
    return op_cfg, name


def _delayed_keys(fn: Any, source: Any, index: int, name: str, after: Any = None) -> Any:
    import dask

    if after is None:
        return dask.delayed(fn)(source, index, name)
    return dask.delayed(_after)(after, fn, source, index, name)


def _after(_done: Any, fn: Any, *args: Any) -> Any:
    return fn(*args)


def _routed(client: distributed.Client, op_cfg: dict[str, Any], name: str, keys: list[Any]
            ) -> list[distributed.Future]:
    """The decision across partitions on the cluster: each partition's dropped positions."""
    import dask.dataframe as dd
    import distributed

    from curator_dask.dedup.phases import quiet_shuffle_notices

    meta = partition_keys(pa.table({}), 0, name)
    frame = dd.from_delayed(keys, meta=meta, verify_meta=False)
    nparts = len(keys)
    if name == EXACT:
        dropped = _exact_dropped(frame, nparts)
    elif name == MINHASH:
        dropped = _minhash_dropped(frame, nparts)
    else:
        dropped = _simhash_dropped(frame, nparts, _simhash_masks(op_cfg))
    with quiet_shuffle_notices():
        routed = client.compute(_by_partition(dropped, nparts).to_delayed())
        distributed.wait(routed)
    return list(routed)


def _write_atomically(table: pa.Table, path: str) -> None:
    import os

    import pyarrow.parquet as pq

    tmp = f"{path}.tmp-{os.getpid()}"
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def _hash_file(op_cfg: dict[str, Any], source: str, target: str) -> int:
    import pyarrow.parquet as pq

    table = hash_partition(op_cfg, pq.read_table(source))
    _write_atomically(table, target)
    return int(table.num_rows)


def _file_keys(path: str, index: int, name: str) -> pd.DataFrame:
    import pyarrow.parquet as pq

    column = _HASH_FIELDS[name if name in _HASH_FIELDS else EXACT][0]
    return partition_keys(pq.read_table(path, columns=[column]), index, name)


def _keep_file(source: str, dropped: pd.DataFrame, target: str, drop_column: str | None,
               total_rows: int | None) -> int:
    import pyarrow.parquet as pq

    table = keep_rows(pq.read_table(source), dropped, drop_column, total_rows)
    _write_atomically(table, target)
    return int(table.num_rows)


def hash_partition(op_cfg: dict[str, Any], table: pa.Table) -> pa.Table:
    """``table`` with the operator's hash column, computed by its own ``compute_hash`` called as
    Data-Juicer's ``NestedDataset.map`` calls it: wrapped for nested access, a batch of one
    row (a row its wrapper drops under ``skip_op_error`` is dropped here too)."""
    from data_juicer.core.data.dj_dataset import wrap_func_with_nested_access

    compute = wrap_func_with_nested_access(built_op(op_cfg).compute_hash)
    kept: list[int] = []
    added: dict[str, list[Any]] = {}
    for i, row in enumerate(table.to_pylist()):
        out = compute({k: [v] for k, v in row.items()})
        if not next(iter(out.values()), []):
            continue  # the wrapper's empty batch: compute_hash failed, skip_op_error
        kept.append(i)
        for key, values in out.items():
            if key not in row:
                added.setdefault(key, []).append(values[0])
    result = table if len(kept) == table.num_rows else table.take(pa.array(kept, pa.int64()))
    for key, values in added.items():
        if len(values) == len(kept):
            result = result.append_column(key, pa.array(values))
    column, kind = _HASH_FIELDS[op_name(op_cfg)]
    if column not in result.column_names:  # no row to learn it from: same schema as the others
        result = result.append_column(column, pa.array([], kind))
    return result


def partition_keys(table: pa.Table, index: int, name: str) -> pd.DataFrame:
    """Partition ``index``'s decision keys: each row's global position ``pos`` and hash (MD5
    ``h``; SimHash ``h`` as uint64; MinHash one ``bucket`` row per band: band and bytes)."""
    pos = (np.int64(index) << _ROW_BITS) + np.arange(table.num_rows, dtype=np.int64)
    if name == EXACT:
        column = table[HASH_COLUMN].to_pylist() if table.num_rows else []
        return pd.DataFrame({"pos": pos, "h": pd.Series(column, dtype=object)})
    if name == SIMHASH:
        column = table[SIMHASH_COLUMN].to_pylist() if table.num_rows else []
        return pd.DataFrame({"pos": pos, "h": np.array([int(v) for v in column], np.uint64)})
    bands = table[MINHASH_COLUMN].to_pylist() if table.num_rows else []
    widths = [len(b) for b in bands]
    return pd.DataFrame({
        "pos": np.repeat(pos, widths),
        "bucket": pd.Series([f"{band}:{value.hex()}" for row in bands
                             for band, value in enumerate(row)], dtype=object)})


def _exact_dropped(frame: dd.DataFrame, nparts: int) -> dd.DataFrame:
    """Every row after the first of its hash."""
    shuffled = frame.shuffle(on="h", npartitions=nparts, shuffle_method="p2p")
    return shuffled.map_partitions(_not_first, "h", meta=_POS_META)


def _not_first(df: pd.DataFrame, key: str) -> pd.DataFrame:
    first = df.groupby(key, sort=False)["pos"].transform("min")
    return df.loc[df["pos"] != first, ["pos"]]


def _minhash_dropped(frame: dd.DataFrame, nparts: int) -> dd.DataFrame:
    """Every row that is not the first of its connected component of shared band buckets."""
    shuffled = frame.shuffle(on="bucket", npartitions=nparts, shuffle_method="p2p")
    edges = shuffled.map_partitions(_edges_to_first, meta=_EDGE_META)
    return _not_component_first(edges)


def _edges_to_first(df: pd.DataFrame) -> pd.DataFrame:
    """An edge from each member of a bucket to its first member (Data-Juicer's
    ``union(x, min(cluster))``: the components are those of these edges)."""
    first = df.groupby("bucket", sort=False)["pos"].transform("min")
    linked = df["pos"] != first
    return pd.DataFrame({"x": df["pos"][linked].to_numpy(np.int64),
                         "y": first[linked].to_numpy(np.int64)})


def _not_component_first(edges: dd.DataFrame) -> dd.DataFrame:
    """The vertices of ``edges`` that are not the smallest of their connected component,
    found in one task over the edges (only rows with a duplicate have one)."""
    import dask
    import dask.dataframe as dd

    found = dask.delayed(_component_dropped)(edges.to_delayed())
    return dd.from_delayed([found], meta=_POS_META, verify_meta=False)


def _component_dropped(parts: list[pd.DataFrame]) -> pd.DataFrame:
    from curator_dask.dedup.fuzzy.components import connected_components

    edges = pd.concat(parts, ignore_index=True) if parts else _EDGE_META
    vertices, smallest = connected_components(edges["x"].to_numpy(np.int64),
                                              edges["y"].to_numpy(np.int64))
    return pd.DataFrame({"pos": vertices[vertices != smallest]})


def _simhash_masks(op_cfg: dict[str, Any]) -> tuple[tuple[int, ...], int]:
    """The search masks of ``simhash.find_all`` (64 bits cut into ``num_blocks`` blocks at
    ``i * 64 // num_blocks``; one mask per choice of ``num_blocks - hamming_distance``
    blocks) and the distance, with the library's own limits."""
    params = op_cfg[SIMHASH] or {}
    blocks = int(params.get("num_blocks", 6))
    distance = int(params.get("hamming_distance", 4))
    if blocks > 64 or blocks <= distance:
        msg = (f"{SIMHASH}: num_blocks {blocks} must be at most 64 and greater than "
               f"hamming_distance {distance} (simhash.find_all refuses it); raise num_blocks")
        raise DeduplicatorParamError(msg)
    block_masks = [sum(1 << bit for bit in range(i * 64 // blocks, (i + 1) * 64 // blocks))
                   for i in range(blocks)]
    masks = tuple(sum(chosen) for chosen in
                  itertools.combinations(block_masks, blocks - distance))
    return masks, distance


def _simhash_dropped(frame: dd.DataFrame, nparts: int,
                     masks_distance: tuple[tuple[int, ...], int]) -> dd.DataFrame:
    """Rows after the first of their hash value, and first rows of values that are not the
    first of their group of values within ``distance`` bits."""
    import dask.dataframe as dd

    masks, distance = masks_distance
    by_value = frame.shuffle(on="h", npartitions=nparts, shuffle_method="p2p")
    marked = by_value.map_partitions(_mark_first, meta=_MARKED_META)
    repeats = marked[~marked["first"]][["pos"]]
    values = marked[marked["first"]][["pos", "h"]]
    keyed = values.map_partitions(_block_keys, masks, meta=_KEYED_META)
    buckets = keyed.shuffle(on=["c", "k"], npartitions=nparts, shuffle_method="p2p")
    edges = buckets.map_partitions(_near_pairs, distance, meta=_EDGE_META)
    return dd.concat([repeats, _not_component_first(edges)])


def _mark_first(df: pd.DataFrame) -> pd.DataFrame:
    first = df.groupby("h", sort=False)["pos"].transform("min")
    return df.assign(first=df["pos"] == first)


def _block_keys(df: pd.DataFrame, masks: tuple[int, ...]) -> pd.DataFrame:
    """One row per value and ``find_all`` table: the table ``c`` and the value's bits under
    its search mask ``k``."""
    h = df["h"].to_numpy(np.uint64)
    n = len(h)
    k = np.concatenate([h & np.uint64(m) for m in masks]) if n else np.zeros(0, np.uint64)
    return pd.DataFrame({"c": np.repeat(np.arange(len(masks), dtype=np.int64), n),
                         "k": k, "pos": np.tile(df["pos"].to_numpy(np.int64), len(masks)),
                         "h": np.tile(h, len(masks))})


def _near_pairs(df: pd.DataFrame, distance: int) -> pd.DataFrame:
    """The pairs of one bucket's values that differ in at most ``distance`` bits, as
    ``find_all`` compares every pair sharing a prefix."""
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    for _, group in df.groupby(["c", "k"], sort=False):
        if len(group) < 2:
            continue
        h, pos = group["h"].to_numpy(np.uint64), group["pos"].to_numpy(np.int64)
        for start in range(0, len(h), _PAIR_BLOCK):
            block = h[start:start + _PAIR_BLOCK]
            near = np.bitwise_count(block[:, None] ^ h[None, :]) <= distance
            a, b = np.nonzero(near)
            a += start
            upper = a < b
            xs.append(pos[a[upper]])
            ys.append(pos[b[upper]])
    if not xs:
        return _EDGE_META
    return pd.DataFrame({"x": np.concatenate(xs), "y": np.concatenate(ys)})


def _by_partition(dropped: dd.DataFrame, nparts: int) -> dd.DataFrame:
    """``dropped`` moved (P2P) so that its partition ``i`` holds the positions of partition
    ``i``: the partition number as index, one division per partition."""
    with_part = dropped.assign(part=dropped["pos"] // (1 << _ROW_BITS))
    return with_part.set_index("part", divisions=list(range(nparts + 1)),
                               shuffle_method="p2p")


def _total_rows(tables: list[pa.Table]) -> int:
    return sum(t.num_rows for t in tables)


def keep_rows(table: pa.Table, dropped: pd.DataFrame, drop_column: str | None,
              total_rows: int | None) -> pa.Table:
    """``table`` without the rows at the positions ``dropped``, and without ``drop_column``
    where Data-Juicer's ``process`` removes it (a dataset of more than one row)."""
    if len(dropped):
        rows = dropped["pos"].to_numpy(np.int64) & _ROW_MASK
        mask = np.ones(table.num_rows, dtype=bool)
        mask[rows] = False
        table = table.filter(pa.array(mask))
    if drop_column and total_rows is not None and total_rows > 1 \
            and drop_column in table.column_names:
        table = table.drop_columns([drop_column])
    return table


_POS_META = pd.DataFrame({"pos": np.zeros(0, np.int64)})
_EDGE_META = pd.DataFrame({"x": np.zeros(0, np.int64), "y": np.zeros(0, np.int64)})
_MARKED_META = pd.DataFrame({"pos": np.zeros(0, np.int64), "h": np.zeros(0, np.uint64),
                             "first": np.zeros(0, bool)})
_KEYED_META = pd.DataFrame({"c": np.zeros(0, np.int64), "k": np.zeros(0, np.uint64),
                            "pos": np.zeros(0, np.int64), "h": np.zeros(0, np.uint64)})
