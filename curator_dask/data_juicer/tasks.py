"""The worker side of a recipe run: the tasks ``DataJuicerDaskExecutor`` submits.

Module level, so they travel to the workers by reference. A partition travels between tasks
as a file, never as a table the driver or the cluster keeps: its input pieces, a checkpoint,
or a stage file of the job's work folder. So a worker holds the partitions it is running,
whatever the size of the corpus. Each task returns counts only (a few numbers an operator).
"""

from __future__ import annotations

import gc
import os
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from curator_dask.data_juicer import io as dj_io
from curator_dask.data_juicer.ops import built_op, rows_of, run_per_row

Source = tuple[str, Any]  # ("pieces", [(path, start, end), ...]) or ("file", parquet path)


def count_file(path: str, text_keys: list[str]) -> tuple[int, int]:
    table = dj_io.read_file(path, text_keys)
    return table.num_rows, table.nbytes


def load(source: Source, text_keys: list[str]) -> pa.Table:
    kind, value = source
    if kind == "file":
        import pyarrow.parquet as pq

        return pq.read_table(value)
    tables = [dj_io.read_file(path, text_keys).slice(start, end - start)
              for path, start, end in value]
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="default")


def partition_hashes(source: Source, text_keys: list[str]) -> dict[str, Any]:
    from curator_dask.data_juicer.job_folder import table_hashes

    return dict(table_hashes(load(source, text_keys)))


def write_file(table: pa.Table, path: str) -> None:
    import pyarrow.parquet as pq

    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    pq.write_table(table, tmp)
    os.replace(tmp, path)  # a checkpoint or stage file is whole or absent


@dataclass(frozen=True)
class ExportSpec:
    """Where a partition's rows go at the end: its part file (and stats part)."""

    path: str
    stats_path: str
    suffix: str
    keep_stats: bool
    keep_hashes: bool


@dataclass
class SegmentResult:
    """What a segment task sends back: counts only (a few numbers an operator)."""

    counts: list[tuple[int, int, int, float]]
    rows: int
    exported: tuple[int, int, int, bool] | None = None  # rows, bytes, arrow bytes, has stats


def run_segment(source: Source, text_keys: list[str], entries: list[tuple[int, dict[str, Any]]],
                 checkpoints: dict[int, str], fast: bool, out: str | None,
                 export: ExportSpec | None) -> SegmentResult:
    """Consecutive Mappers and Filters over one partition in one task: the columns go from
    one operator to the next without materialising, and become a table again where a
    checkpoint is asked for and at the end, written to ``out`` (a later stage reads it) or
    exported as the partition's part of the result.

    The cyclic garbage collector stays off while the operators run: their per-word lists are
    freed by reference counting, and each full collection would otherwise walk every object
    of the worker (its Dask state, Data-Juicer's modules) again: on the benchmark's corpus the
    operators took 94 s with it off, 119 s in the run before (bench_data_juicer.py). What the
    worker held before is frozen first."""
    table = load(source, text_keys)
    cols, json_cols = dj_io.columns_of(table)
    gc.freeze()
    gc.disable()
    try:
        return run_ops(table, cols, json_cols, entries, checkpoints, fast, out, export)
    finally:
        gc.enable()


def run_ops(table: pa.Table, cols: dict[str, list[Any]], json_cols: set[str],
             entries: list[tuple[int, dict[str, Any]]], checkpoints: dict[int, str],
             fast: bool, out: str | None, export: ExportSpec | None) -> SegmentResult:
    from curator_dask.data_juicer.fast_ops import fast_equivalent

    counts = []
    for index, entry in entries:
        op = built_op(entry)
        equivalent = fast_equivalent(op) if fast else None
        before = rows_of(cols)
        start = time.perf_counter()
        cols = run_per_row(op, cols, equivalent, json_cols)
        counts.append((index, before, rows_of(cols), time.perf_counter() - start))
        if index in checkpoints:
            write_file(dj_io.table_of(cols, json_cols), checkpoints[index])
    if entries:
        table = dj_io.table_of(cols, json_cols)
    if out is not None and out not in checkpoints.values():
        write_file(table, out)
    exported = export_part(table, export) if export is not None else None
    return SegmentResult(counts, table.num_rows, exported)


def export_part(table: pa.Table, spec: ExportSpec) -> tuple[int, int, int, bool]:
    stats = [c for c in (dj_io.STATS, dj_io.META) if c in table.column_names]
    if stats:
        dj_io.write_part(table.select(stats), spec.stats_path, "jsonl")
    result = dj_io.export_columns(table, spec.keep_stats, spec.keep_hashes)
    return (result.num_rows, dj_io.write_part(result, spec.path, spec.suffix), result.nbytes,
            bool(stats))


def export_file(source: Source, text_keys: list[str], spec: ExportSpec
                 ) -> SegmentResult:
    table = load(source, text_keys)
    return SegmentResult([], table.num_rows, export_part(table, spec))
