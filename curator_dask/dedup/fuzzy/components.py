"""Connected components of the candidate graph and the ids to remove.

The components are computed in one Dask task on a worker, with
``scipy.sparse.csgraph.connected_components`` over the edges' vertices only, renumbered through
a table of the ids (they are 0..N-1) rather than a sort. Memory grows with the number of edges,
not with the corpus: about 85 bytes per edge by the arrays held (the int64 pairs, their int32
renumbering, the CSR matrix scipy builds), so about 0.85 GB for 10 million edges. A corpus of a
million documents gives far fewer: each duplicate document has about one edge per band
iteration (edges are made unique per iteration), so 20 % near-duplicates at NeMo's defaults
give under a million edges; the bound is 20 per document (one per band), 20 million edges, 1.7
GB. A duplicate group's id is its smallest document id, and the ids to remove are all the
others: deterministic, the smallest id is kept (NeMo keeps an arbitrary one). When no worker
has the memory (:func:`components_plan`), :func:`components_out_of_core` gives the same groups
with a union-find whose parents live in a memory-mapped file. Written as NeMo's
``ConnectedComponentsStage/part.0.parquet`` (``_curator_dedup_id``, ``_duplicate_group_id``)
and ``FuzzyDuplicateIds/part.<i>.parquet`` (``_curator_dedup_id``, sorted).
"""

from __future__ import annotations

import logging
import posixpath
from typing import Any, TypedDict

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from curator_dask.dedup.fuzzy.lsh import EDGE_X, EDGE_Y
from curator_dask.dedup.phases import ID_COLUMN
from curator_dask.utils.atomic import write_atomic

GROUP_FIELD = "_duplicate_group_id"
CC_DIR, DUPLICATE_IDS_DIR = "ConnectedComponentsStage", "FuzzyDuplicateIds"
JACCARD_FIELD = "jaccard"
_IDS_PER_FILE = 10_000_000
# Peak bytes of the arrays of connected_components, measured with tracemalloc over random
# graphs of 10^5 to 4x10^6 edges on 10^6 to 1.6x10^7 ids (tests/dedup/test_spill.py checks
# the bound): renumbering through the id table holds 11 B per id and the int32 pairs, the
# graph and its labels 36 B per edge and 20 B per vertex; renumbering by sorting (ids that
# are not 0..N-1) holds 100 B per edge. read_edges's int64 pairs, 16 B per edge, stay held.
_READ_PER_EDGE, _TABLE_PER_ID, _TABLE_PER_EDGE = 16, 11, 8
_GRAPH_PER_EDGE, _GRAPH_PER_VERTEX, _SORT_PER_EDGE = 36, 20, 100


def connected_components(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The vertices of the edges ``x[i] - y[i]`` (sorted) and each one's group: the smallest
    vertex of its connected component.

    Example:
        >>> v, g = connected_components(np.array([5, 9, 2]), np.array([7, 7, 3]))
        >>> v.tolist(), g.tolist()
        ([2, 3, 5, 7, 9], [2, 2, 5, 5, 5])
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components as scipy_components

    m = len(x)
    if m == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    top = int(max(x.max(), y.max()))
    if min(x.min(), y.min()) >= 0 and uses_id_table(top, m):
        # the workflow's ids are 0..N-1: renumber through a table of N int32, no sort
        present = np.zeros(top + 1, dtype=bool)
        present[x] = True
        present[y] = True
        vertices = np.flatnonzero(present)
        number = np.cumsum(present, dtype=np.int32) - 1
        del present
        row, col = number[x], number[y]
        del number
    else:  # sparse or negative ids (a corpus's own): renumber by sorting
        vertices, inverse = np.unique(np.concatenate([x, y]), return_inverse=True)
        row, col = inverse[:m], inverse[m:]
    n = len(vertices)
    graph = coo_matrix((np.ones(m, dtype=np.int8), (row, col)), shape=(n, n)).tocsr()
    del row, col
    _, labels = scipy_components(graph, directed=False)
    # vertices are sorted, so a label's first vertex is its component's smallest
    _, first = np.unique(labels, return_index=True)
    smallest = np.empty(labels.max() + 1, dtype=np.int64)
    smallest[labels[first]] = vertices[first]
    return vertices.astype(np.int64), smallest[labels]


def uses_id_table(top: int, num_edges: int) -> bool:
    """Whether :func:`connected_components` renumbers through a table of ``top + 1`` ids
    (the workflow's ids 0..N-1) rather than by sorting."""
    return top < max(1 << 26, 8 * num_edges)


def components_memory(num_edges: int, num_ids: int) -> int:
    """Bytes of arrays :func:`components_task` holds at its peak for ``num_edges`` edges
    between ids 0..``num_ids``-1 (an upper bound: the vertices are taken as ``min(2 x edges,
    ids)``), the interpreter and its libraries not counted.

    Example:
        >>> components_memory(1_000_000, 10_000_000) // 2**20  # 1 M edges, 10 M documents
        127
    """
    m = int(num_edges)
    if m == 0:
        return 0
    vertices = min(2 * m, num_ids) if num_ids > 0 else 2 * m
    if num_ids > 0 and uses_id_table(num_ids - 1, m):
        peak = max(_TABLE_PER_ID * num_ids + _TABLE_PER_EDGE * m,
                   _GRAPH_PER_EDGE * m + _GRAPH_PER_VERTEX * vertices)
    else:
        peak = _SORT_PER_EDGE * m + _GRAPH_PER_VERTEX * vertices
    return _READ_PER_EDGE * m + peak


def components_plan(num_edges: int, num_ids: int, workers: dict[str, Any]
                    ) -> tuple[str | None, int, str]:
    """Where the components task runs, and the line that says so before it starts:
    ``(worker address or None, logging level, line)``. ``workers`` is
    ``client.scheduler_info()["workers"]``; the task goes to the worker with the most memory
    left before its nanny ends it (95 % of its ``memory_limit``, less what it holds now);
    a worker without a limit has the host's available memory.

    Example:
        >>> w = {"tcp://a": {"memory_limit": 2**30, "metrics": {"memory": 2**28}}}
        >>> where, level, line = components_plan(1000, 5000, w)
        >>> where, level == logging.INFO, line.split(":")[0]
        ('tcp://a', True, 'connected components')
    """
    import psutil

    need = components_memory(num_edges, num_ids)
    room: dict[str, tuple[int, int]] = {}
    for address, info in workers.items():
        limit = int(info.get("memory_limit") or 0)
        used = int((info.get("metrics") or {}).get("memory") or 0)
        room[address] = ((int(0.95 * limit) - used, limit) if limit
                         else (int(psutil.virtual_memory().available), 0))
    head = (f"connected components: {num_edges:,} edges among {num_ids:,} document ids need "
            f"about {_size(need)} of arrays in one task")
    if not room:
        return None, logging.INFO, f"{head}; it runs on the first worker that joins"
    where = max(room, key=lambda a: room[a][0])
    free, limit = room[where]
    has = (f"{_size(max(free, 0))} free of its {_size(limit)} memory limit" if limit
           else f"no memory limit ({_size(free)} available on its host)")
    if need <= free:
        return where, logging.INFO, f"{head}; the roomiest worker has {has}: it runs there"
    return where, logging.WARNING, (
        f"{head}, more than the roomiest worker has ({has}): it runs there out of core "
        f"instead (a union-find over the edges a batch at a time, its {_size(8 * num_ids)} "
        "of parents in a file of the worker's local directory), slower; give each worker "
        "more memory (DaskExecutor(cluster_kwargs={'memory_limit': ...})) to keep it in "
        "memory")


def _size(n: int) -> str:
    return f"{n / 2**30:,.2f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


def unique_sorted(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` by sorting: numpy 2's default hash-table path is over ten times
    slower on arrays of millions of hashes (measured here).

    Example:
        >>> unique_sorted(np.array([3, 1, 3, 2])).tolist()
        [1, 2, 3]
    """
    out = np.sort(values)
    return out[np.r_[True, out[1:] != out[:-1]]] if out.size else out


def read_edges(paths: list[str], storage_options: dict[str, Any] | None = None,
               threshold: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The edges of every file in ``paths``; with ``threshold``, only those whose ``jaccard``
    column is at least that (the verified edges of the Jaccard check)."""
    opts = storage_options or {}
    sizes = []
    for path in paths:
        with fsspec.open(path, "rb", **opts) as f:
            sizes.append(pq.read_metadata(f).num_rows)
    # filled in place: one copy of the edges in memory, not the files' plus a concatenation
    x, y = np.empty(sum(sizes), dtype=np.int64), np.empty(sum(sizes), dtype=np.int64)
    filled = 0
    for part_x, part_y in _edge_batches(paths, storage_options, threshold, 1 << 20):
        x[filled:filled + len(part_x)] = part_x
        y[filled:filled + len(part_y)] = part_y
        filled += len(part_x)
    return x[:filled], y[:filled]


def components_task(edge_paths: list[str], cc_dir: str,
                    storage_options: dict[str, Any] | None = None,
                    threshold: float | None = None, *, num_ids: int = 0,
                    out_of_core: bool = False) -> dict[str, int]:
    """Read the edges, compute the components, write ``<cc_dir>/part.0.parquet``. Runs as one
    Dask task on a worker (the driver holds no edges). Returns counts. ``out_of_core`` (when
    no worker has the memory, :func:`components_plan`): :func:`components_out_of_core` over
    the ``num_ids`` ids, its files in the worker's local directory."""
    if out_of_core:
        return components_out_of_core(edge_paths, cc_dir, num_ids, _scratch(),
                                      storage_options, threshold)
    x, y = read_edges(edge_paths, storage_options, threshold)
    vertices, groups = connected_components(x, y)
    table = pa.table({ID_COLUMN: pa.array(vertices, pa.int64()),
                      GROUP_FIELD: pa.array(groups, pa.int64())})
    _write(table, cc_dir, "part.0.parquet", storage_options)
    return {"num_edges": len(x), "num_vertices": len(vertices),
            "num_groups": int(np.count_nonzero(vertices == groups))}


def components_out_of_core(edge_paths: list[str], cc_dir: str, num_ids: int, scratch: str,
                            storage_options: dict[str, Any] | None = None,
                            threshold: float | None = None,
                            batch_rows: int = 1 << 20) -> dict[str, int]:
    """:func:`components_task` when no worker has the memory for it: a union-find whose
    parents live in a file under ``scratch`` (``num_ids`` int64, memory-mapped: the page
    cache holds what fits, the disk the rest), fed the edges ``batch_rows`` at a time, and the
    vertices and groups written a batch at a time. Each union hooks the larger root under the
    smaller, so every root is its component's smallest id: the groups equal
    :func:`connected_components`'.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> pq.write_table(pa.table({EDGE_X: [5, 9, 2], EDGE_Y: [7, 7, 3]}), d + "/e.parquet")
        >>> components_out_of_core([d + "/e.parquet"], d + "/cc", 10, d)["num_groups"]
        2
        >>> t = pq.read_table(d + "/cc/part.0.parquet")
        >>> t.column(ID_COLUMN).to_pylist(), t.column(GROUP_FIELD).to_pylist()
        ([2, 3, 5, 7, 9], [2, 2, 5, 5, 5])
    """
    import os
    import shutil
    import tempfile

    work = tempfile.mkdtemp(prefix="components-", dir=scratch)
    try:
        n = max(int(num_ids), 1)
        parent = np.memmap(os.path.join(work, "parent"), dtype=np.int64, mode="w+", shape=(n,))
        present = np.memmap(os.path.join(work, "present"), dtype=bool, mode="w+", shape=(n,))
        for start in range(0, n, batch_rows):
            parent[start:start + batch_rows] = np.arange(start, min(n, start + batch_rows))
        edges = 0
        for x, y in _edge_batches(edge_paths, storage_options, threshold, batch_rows):
            if len(x) and max(int(x.max()), int(y.max())) >= n:
                msg = (f"connected components: an edge names id {max(x.max(), y.max())}, "
                       f"beyond the {n:,} document ids of phase 1")
                raise ValueError(msg)
            present[x] = True
            present[y] = True
            edges += len(x)
            while len(x):
                rx, ry = _roots(parent, x), _roots(parent, y)
                apart = rx != ry
                x, y, rx, ry = x[apart], y[apart], rx[apart], ry[apart]
                np.minimum.at(parent, np.maximum(rx, ry), np.minimum(rx, ry))
        vertices = groups = 0
        fs, root = fsspec.core.url_to_fs(cc_dir, **(storage_options or {}))
        fs.makedirs(root, exist_ok=True)
        schema = pa.schema([(ID_COLUMN, pa.int64()), (GROUP_FIELD, pa.int64())])

        def write(f: Any) -> None:
            nonlocal vertices, groups
            with pq.ParquetWriter(f, schema) as out:
                for start in range(0, n, batch_rows):
                    ids = np.flatnonzero(present[start:start + batch_rows]) + start
                    if not len(ids):
                        continue
                    labels = _roots(parent, ids)
                    vertices += len(ids)
                    groups += int(np.count_nonzero(ids == labels))
                    out.write_table(pa.table({ID_COLUMN: pa.array(ids, pa.int64()),
                                              GROUP_FIELD: pa.array(labels, pa.int64())},
                                             schema=schema))

        write_atomic(fs, posixpath.join(root, "part.0.parquet"), write)
        return {"num_edges": edges, "num_vertices": vertices, "num_groups": groups}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _roots(parent: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The root of each of ``ids``, by following the parents (each is at most its child)."""
    roots = np.asarray(parent[ids])
    while True:
        up = np.asarray(parent[roots])
        if np.array_equal(up, roots):
            return roots
        roots = up


def _edge_batches(paths: list[str], storage_options: dict[str, Any] | None,
                  threshold: float | None, batch_rows: int) -> Any:
    """The edges of ``paths``, ``batch_rows`` at a time (kept as :func:`read_edges` keeps
    them)."""
    columns = [EDGE_X, EDGE_Y] + ([JACCARD_FIELD] if threshold is not None else [])
    for path in paths:
        with fsspec.open(path, "rb", **(storage_options or {})) as f:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=batch_rows,
                                                        columns=columns):
                x = batch.column(EDGE_X).to_numpy()
                y = batch.column(EDGE_Y).to_numpy()
                if threshold is not None:
                    keep = batch.column(JACCARD_FIELD).to_numpy() >= threshold
                    x, y = x[keep], y[keep]
                yield x.astype(np.int64, copy=False), y.astype(np.int64, copy=False)


class IdsWritten(TypedDict):
    """What :func:`identify_task` wrote: the ids to remove, in how many files of which sizes,
    and the number of groups."""

    num_removal_ids: int
    num_files: int
    part_sizes: list[int]
    num_groups: int


def identify_task(cc_dir: str, ids_dir: str, cc_storage_options: dict[str, Any] | None = None,
                  ids_storage_options: dict[str, Any] | None = None) -> IdsWritten:
    """The ids to remove (every member of a group but its smallest id), sorted, to
    ``<ids_dir>/part.<i>.parquet`` (at least one file, possibly empty). Returns counts."""
    with fsspec.open(posixpath.join(cc_dir, "part.0.parquet"), "rb",
                     **(cc_storage_options or {})) as f:
        table = pq.read_table(f)
    vertices = table.column(ID_COLUMN).to_numpy()
    groups = table.column(GROUP_FIELD).to_numpy()
    removal = np.sort(vertices[vertices != groups])
    parts = np.array_split(removal, max(1, -(-len(removal) // _IDS_PER_FILE)))
    for i, chunk in enumerate(parts):
        _write(pa.table({ID_COLUMN: pa.array(chunk, pa.int64())}), ids_dir,
               f"part.{i}.parquet", ids_storage_options)
    return {"num_removal_ids": len(removal), "num_files": len(parts),
            "part_sizes": [len(p) for p in parts],
            "num_groups": int(np.count_nonzero(vertices == groups))}


def _scratch() -> str:
    """The worker's local directory (where the P2P shuffle spills too), else the temp dir."""
    import tempfile

    try:
        from distributed import get_worker

        return str(get_worker().local_directory)
    except (ImportError, ValueError):
        return tempfile.gettempdir()


def _write(table: pa.Table, directory: str, name: str,
           storage_options: dict[str, Any] | None) -> None:
    fs, root = fsspec.core.url_to_fs(directory, **(storage_options or {}))
    fs.makedirs(root, exist_ok=True)
    write_atomic(fs, posixpath.join(root, name), lambda f: pq.write_table(table, f))


__all__ = ["CC_DIR", "DUPLICATE_IDS_DIR", "GROUP_FIELD", "JACCARD_FIELD", "IdsWritten",
           "components_memory", "components_out_of_core", "components_plan", "components_task",
           "connected_components",
           "identify_task", "read_edges", "unique_sorted", "uses_id_table"]
