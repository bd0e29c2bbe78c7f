"""Parquet files as rows: row groups from the footer, row ranges read, canonical digests.

Planning reads metadata only (the footer: rows and sizes per row group). A range is read as
its covering row groups (``ParquetFile.read_row_groups``), then sliced. A range's digest is the
sha256 of an Arrow IPC stream of its rows in fixed batches of :data:`DIGEST_BATCH_ROWS`, so it
depends on the rows and their order, not on how the file's row groups cut them.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DIGEST_BATCH_ROWS = 65_536
ALGORITHM = f"sha256:arrow-ipc-{DIGEST_BATCH_ROWS}"


@dataclass(frozen=True)
class Footer:
    """Rows per row group, and bytes per row uncompressed (about its size in memory) and on
    disk (compressed), from the footer."""

    row_groups: tuple[int, ...]
    memory_bytes_per_row: float | None
    disk_bytes_per_row: float | None

    @property
    def rows(self) -> int:
        return sum(self.row_groups)


def _open(fs: Any, path: str) -> pq.ParquetFile:
    return pq.ParquetFile(fs.open(path, "rb"))


def read_footer(fs: Any, path: str) -> Footer:
    """The footer of ``path``; no data is read."""
    meta = _open(fs, path).metadata
    groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
    rows = sum(g.num_rows for g in groups)
    memory = sum(g.total_byte_size for g in groups)
    disk = sum(g.column(c).total_compressed_size for g in groups for c in range(g.num_columns))
    return Footer(tuple(g.num_rows for g in groups), memory / rows if rows and memory else None,
                  disk / rows if rows and disk else None)


def split_row_groups(row_groups: Sequence[int], rows: int) -> list[tuple[int, int]]:
    """Row ranges of at most ``rows`` rows on row-group boundaries; a row group of more than
    ``rows`` rows is cut into nearly equal ranges of its own.

    Example:
        >>> split_row_groups([100, 100, 100, 1000, 50], 250)
        [(0, 200), (200, 300), (300, 550), (550, 800), (800, 1050), (1050, 1300), (1300, 1350)]
    """
    ranges: list[tuple[int, int]] = []
    start = open_at = 0
    held = 0  # rows of the range being packed, from open_at
    for n in row_groups:
        if n > rows:
            if held:
                ranges.append((open_at, open_at + held))
            parts = math.ceil(n / rows)
            cuts = [start + (i * n) // parts for i in range(parts + 1)]
            ranges.extend(zip(cuts[:-1], cuts[1:], strict=True))
            held = 0
        elif held + n > rows:
            ranges.append((open_at, open_at + held))
            open_at, held = start, n
        else:
            if not held:
                open_at = start
            held += n
        start += n
    if held:
        ranges.append((open_at, open_at + held))
    return ranges


def read_rows(fs: Any, path: str, start: int, end: int,
              columns: list[str] | None = None) -> pa.Table:
    """Rows ``[start, end)`` of ``path``: the row groups that hold them, then a slice."""
    pf = _open(fs, path)
    sizes = [pf.metadata.row_group(i).num_rows for i in range(pf.metadata.num_row_groups)]
    firsts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    if end > firsts[-1] or start < 0 or start > end:
        msg = f"{path}: rows {start}-{end} are not in the file, which has {firsts[-1]} rows"
        raise IndexError(msg)
    if start == end:
        return pf.schema_arrow.empty_table() if columns is None else pf.schema_arrow.empty_table(
        ).select(columns)
    first = int(np.searchsorted(firsts, start, side="right")) - 1
    last = int(np.searchsorted(firsts, end - 1, side="right")) - 1
    table = pf.read_row_groups(list(range(first, last + 1)), columns=columns)
    return table.slice(start - int(firsts[first]), end - start)


class _Digesting:
    """A write-only file object that hashes what it is given (an IPC stream's sink)."""

    closed = False

    def __init__(self, digest: Any) -> None:
        self.digest = digest

    def write(self, data: Any) -> int:
        self.digest.update(data)
        return len(memoryview(data))

    def flush(self) -> None:
        """Nothing is buffered."""


def _decoded(table: pa.Table) -> pa.Table:
    """``table`` with dictionary columns as their values: a row group's dictionary is how the
    file was written, not what it holds."""
    for i, f in enumerate(table.schema):
        if pa.types.is_dictionary(f.type):
            table = table.set_column(i, f.with_type(f.type.value_type),
                                     table.column(i).cast(f.type.value_type))
    return table


def digest_ranges(fs: Any, ranges: Sequence[tuple[str, int, int]]) -> str:
    """sha256 over the IPC streams of ``(path, start_row, end_row)`` ranges, in order: each
    range's rows in batches of :data:`DIGEST_BATCH_ROWS`, each batch copied into fresh
    buffers (a slice of a row group would otherwise carry its offsets into the stream)."""
    digest = hashlib.sha256()
    for path, start, end in ranges:
        table = _decoded(read_rows(fs, path, start, end))
        empty = table.schema.empty_table()
        with pa.ipc.new_stream(_Digesting(digest), table.schema) as writer:
            for offset in range(0, table.num_rows, DIGEST_BATCH_ROWS):
                batch = table.slice(offset, DIGEST_BATCH_ROWS)
                writer.write_table(pa.concat_tables([batch, empty]).combine_chunks())
    return digest.hexdigest()
