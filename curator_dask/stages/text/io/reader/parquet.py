"""``ParquetReader``: Parquet files to pyarrow Tables, Arrow-native.

Parquet does not guarantee that a ``string`` column holds UTF-8 and Arrow's reader does not
check (except for dictionary columns), so every string column, also inside lists, structs and
maps, is validated per chunk after the read; only an invalid chunk is searched for its bad rows.
See docs/design/contract.md §6.1.
"""

from __future__ import annotations

import codecs
import logging
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curator_dask.stages.text.io.reader.base import BaseReader, BaseReaderStage
from curator_dask.stages.text.io.reader.jsonl import InvalidUtf8Error

logger = logging.getLogger(__name__)

_ALLOWED_KWARGS = {"storage_options", "filters", "columns", "engine", "dtype_backend"}
_INVALID_UTF8 = ("error", "replace", "skip")
_NO_ROWS = np.zeros(0, dtype=np.int64)
# Bytes decoded per call while locating bad rows: bounds the temporary str of a large chunk.
_DECODE_WINDOW = 16 << 20


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _holds_strings(t: pa.DataType) -> bool:
    """Whether ``t`` is a string type or has one inside (list, struct, map, dictionary)."""
    if _is_string(t):
        return True
    if pa.types.is_dictionary(t):
        return _holds_strings(t.value_type)
    return any(_holds_strings(t.field(i).type) for i in range(t.num_fields))


def _binary_twin(t: pa.DataType) -> pa.DataType:
    """``t`` with every string type swapped for its binary one (casting to it checks nothing)."""
    if _is_string(t):
        return {pa.string(): pa.binary(), pa.large_string(): pa.large_binary()}.get(
            t, pa.binary_view())
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_binary_twin(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(t.key_field.with_type(_binary_twin(t.key_type)),
                       t.item_field.with_type(_binary_twin(t.item_type)), t.keys_sorted)
    if pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(_binary_twin(t.value_type)), t.list_size)
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_binary_twin(t.value_type)))
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_binary_twin(t.value_type)))
    return t


def _bad_string_rows(arr: pa.Array) -> np.ndarray:
    """The rows of a string array whose value is not UTF-8, found in one pass over its bytes.

    Each value gets a newline after it: no UTF-8 sequence spans a newline byte, so the decoder
    starts every value afresh (a value ending in a cut sequence cannot borrow the next value's
    bytes) and an error's byte offset names its row. One Python step per bad row, not per row.
    """
    if not len(arr):
        return _NO_ROWS
    if pa.types.is_string_view(arr.type):
        binary = arr.view(pa.binary_view()).cast(pa.large_binary())
    else:
        binary = arr.view(_binary_twin(arr.type))
    joined = pc.binary_join_element_wise(binary, pa.scalar(b"", binary.type),
                                         pa.scalar(b"\n", binary.type))
    width = np.int64 if pa.types.is_large_binary(joined.type) else np.int32
    offsets = np.frombuffer(joined.buffers()[1], dtype=width)
    offsets = offsets[joined.offset:joined.offset + len(joined) + 1].astype(np.int64)
    data = joined.buffers()[2]
    if data is None or len(offsets) < 2:
        return _NO_ROWS
    view = memoryview(data)
    pos, end = int(offsets[0]), int(offsets[-1])
    bad: list[int] = []
    while pos < end:
        stop = int(offsets[np.searchsorted(offsets, min(pos + _DECODE_WINDOW, end))])
        try:
            codecs.utf_8_decode(view[pos:stop], "strict", True)
            pos = stop
        except UnicodeDecodeError as exc:
            row = int(np.searchsorted(offsets, pos + exc.start, side="right")) - 1
            bad.append(row)
            pos = int(offsets[row + 1])
    return np.asarray(bad, dtype=np.int64)


def _bad_rows(arr: pa.Array) -> np.ndarray:
    """The sorted rows of ``arr`` holding a string that is not UTF-8, at any depth.

    Nested values are searched in their child arrays and mapped back to their rows; a null
    row does not count (its hidden bytes are never read).
    """
    t = arr.type
    if _is_string(t):
        return _bad_string_rows(arr)
    if pa.types.is_map(t):
        entries = pa.struct([t.key_field, t.item_field])
        arr = arr.view(pa.list_(pa.field("entries", entries, nullable=False)))
        t = arr.type
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        offsets = arr.offsets.to_numpy().astype(np.int64)
        child = arr.values.slice(offsets[0], offsets[-1] - offsets[0])
        rows = np.searchsorted(offsets, _bad_rows(child) + offsets[0], side="right") - 1
    elif pa.types.is_fixed_size_list(t):
        child = arr.values.slice(arr.offset * t.list_size, len(arr) * t.list_size)
        rows = _bad_rows(child) // t.list_size
    elif pa.types.is_struct(t):
        # flatten() gives the fields of this slice, null where the struct is null
        found = [_bad_rows(c) for c in arr.flatten() if _holds_strings(c.type)]
        rows = np.concatenate(found) if found else _NO_ROWS
    else:
        return _bad_rows_one_by_one(arr)
    rows = np.unique(rows)
    if arr.null_count and len(rows):
        rows = rows[~arr.is_null().to_numpy(zero_copy_only=False)[rows]]
    return rows


def _bad_rows_one_by_one(arr: pa.Array) -> np.ndarray:
    """Types Parquet does not produce (unions, list views; dictionaries are checked by
    Arrow's reader): each row converted on its own, only in a chunk that failed validation."""
    bad = []
    for row in range(len(arr)):
        try:
            arr[row].as_py()
        except UnicodeDecodeError:
            bad.append(row)
    return np.asarray(bad, dtype=np.int64)


def _decode_replacing(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, list):
        return [_decode_replacing(v) for v in value]
    if isinstance(value, tuple):  # a map entry
        return tuple(_decode_replacing(v) for v in value)
    if isinstance(value, dict):
        return {k: _decode_replacing(v) for k, v in value.items()}
    return value


def _wide(arr: pa.Array) -> pa.Array:
    """A ``string_view`` array as ``large_string``, its bytes unchecked."""
    return arr.view(pa.binary_view()).cast(pa.large_binary()).view(pa.large_string())


def _without_rows(table: pa.Table, rows: np.ndarray) -> pa.Table:
    keep = np.ones(table.num_rows, dtype=bool)
    keep[rows] = False
    views = [i for i, f in enumerate(table.schema) if pa.types.is_string_view(f.type)]
    for i in views:  # Arrow has no filter for views
        wide = pa.chunked_array([_wide(c) for c in table.column(i).chunks], pa.large_string())
        table = table.set_column(i, table.field(i).with_type(pa.large_string()), wide)
    kept = table.filter(pa.array(keep))
    for i in views:
        kept = kept.set_column(i, table.field(i).with_type(pa.string_view()),
                               kept.column(i).cast(pa.string_view()))
    return kept


def _replaced(arr: pa.Array, rows: np.ndarray) -> pa.Array:
    """``arr`` with the values of ``rows`` decoded as ``bytes.decode(errors="replace")``."""
    if pa.types.is_string_view(arr.type):  # Arrow has no take for views
        return _replaced(_wide(arr), rows).cast(pa.string_view())
    raw = arr.cast(_binary_twin(arr.type))
    fixed = pa.array([_decode_replacing(raw[int(r)].as_py()) for r in rows], type=arr.type)
    index = np.arange(len(arr), dtype=np.int64)
    index[rows] = len(arr) + np.arange(len(rows), dtype=np.int64)
    return pa.concat_arrays([arr, fixed]).take(pa.array(index))


def _repaired(column: pa.ChunkedArray, per_chunk: list[np.ndarray]) -> pa.ChunkedArray:
    chunks = [_replaced(chunk, rows) if len(rows) else chunk
              for chunk, rows in zip(column.chunks, per_chunk, strict=True)]
    return pa.chunked_array(chunks, type=column.type)


def _column_bad_rows(column: pa.ChunkedArray) -> list[np.ndarray]:
    """Per chunk, the bad rows (positions in the chunk); a chunk that validates costs no more."""
    found = []
    for chunk in column.chunks:
        try:
            chunk.validate(full=True)
            found.append(_NO_ROWS)
        except pa.ArrowInvalid:
            found.append(_bad_rows(chunk))
    return found


@dataclass
class ParquetReaderStage(BaseReaderStage):
    """Reads Parquet files with ``pyarrow.parquet.read_table``, one call per file.

    ``invalid_utf8`` says what a row gets whose string value is not valid UTF-8 (Arrow's
    Parquet reader lets its bytes through to the output), in a ``string`` column or in a
    string inside a list, struct or map column; binary columns are not checked (a dictionary
    column with such bytes is refused by Arrow's reader: ``InvalidUtf8Error`` in any mode).
    ``"error"`` (default) raises ``InvalidUtf8Error`` naming the file, the column and the row
    (counted from 0 among the rows read, after ``filters``); ``"replace"`` replaces each bad
    byte sequence with U+FFFD, as ``bytes.decode(errors="replace")`` does; ``"skip"`` drops
    the row. Replaced and skipped rows are counted in the batch's stage record
    (``_stage_perf[-1].custom_metrics["invalid_utf8_rows_replaced"]`` or
    ``["invalid_utf8_rows_skipped"]``) and in a warning naming the file; skipped rows are not
    in the stage's ``items_out``. Valid files cost one validation per chunk of their string
    columns (docs/design/contract.md §6.1).

    Example:
        >>> ParquetReaderStage(fields=["text"], invalid_utf8="skip").invalid_utf8
        'skip'
    """

    name: str = "parquet_reader"
    invalid_utf8: str = "error"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.invalid_utf8 not in _INVALID_UTF8:
            msg = f"invalid_utf8 must be one of {_INVALID_UTF8}, got {self.invalid_utf8!r}"
            raise ValueError(msg)
        unknown = sorted(set(self.read_kwargs) - _ALLOWED_KWARGS)
        if unknown:
            msg = (
                f"Unsupported read_kwargs for ParquetReader: {unknown}. "
                f"Allowed: {sorted(_ALLOWED_KWARGS)}"
            )
            raise TypeError(msg)
        engine = self.read_kwargs.get("engine", "pyarrow")
        if engine != "pyarrow":
            msg = f"ParquetReader reads with pyarrow only, got engine={engine!r}"
            raise ValueError(msg)

    def read_files(self, paths: list[str]) -> Any:
        columns = self.fields if self.fields is not None else self.read_kwargs.get("columns")
        filters = self.read_kwargs.get("filters")
        opts = self.read_kwargs.get("storage_options") or {}
        tables = []
        for path in paths:
            fs, fs_path = fsspec.core.url_to_fs(path, **opts)
            try:
                table = pq.read_table(fs_path, columns=columns, filters=filters, filesystem=fs)
            except pa.ArrowInvalid as exc:
                if "UTF8" in str(exc):  # a dictionary column: Arrow checks those itself
                    msg = (f"Invalid UTF-8 in {path}: Arrow's reader refuses the file ({exc}), "
                           "which happens for a dictionary-encoded string column (a pandas "
                           "category); invalid_utf8 cannot repair those: leave the column out "
                           "with fields=[...]")
                    raise InvalidUtf8Error(msg) from exc
                msg = f"Could not read Parquet file {path} (columns={columns}): {exc}"
                raise pa.ArrowInvalid(msg) from exc
            tables.append(self._checked_utf8(path, table))
        if not tables:
            return pa.table({c: [] for c in columns or []})
        return pa.concat_tables(tables, promote_options="permissive")

    def read_pieces(self, pieces: list[dict[str, Any]]) -> Any:
        """Each piece's rows: the row groups that hold them, sliced (``filters`` after)."""
        from curator_dask.partitions.parquet import read_rows

        columns = self.fields if self.fields is not None else self.read_kwargs.get("columns")
        filters = self.read_kwargs.get("filters")
        opts = self.read_kwargs.get("storage_options") or {}
        tables = []
        for piece in pieces:
            fs, fs_path = fsspec.core.url_to_fs(piece["path"], **opts)
            table = read_rows(fs, fs_path, piece["start_row"], piece["end_row"], columns)
            if filters is not None:
                table = table.filter(pq.filters_to_expression(filters))
            where = f"{piece['path']} (rows {piece['start_row']}-{piece['end_row']})"
            tables.append(self._checked_utf8(where, table))
        return pa.concat_tables(tables, promote_options="permissive")

    def _checked_utf8(self, path: str, table: pa.Table) -> pa.Table:
        """``table`` if its strings are UTF-8; else raise, or the table with the bad rows
        replaced or dropped, as ``invalid_utf8`` says, counting them."""
        bad: dict[int, list[np.ndarray]] = {}  # by column index: names may repeat
        for i, column in enumerate(table.columns):
            if _holds_strings(column.type):
                per_chunk = _column_bad_rows(column)
                if any(len(rows) for rows in per_chunk):
                    bad[i] = per_chunk
        if not bad:
            return table
        in_file = {}
        for i, per_chunk in bad.items():
            starts = np.cumsum([0] + [len(c) for c in table.column(i).chunks])[:-1]
            in_file[i] = np.concatenate(
                [rows + start for rows, start in zip(per_chunk, starts, strict=True)])
        first = min(in_file, key=lambda i: (in_file[i][0], i))
        name, row = table.field(first).name, int(in_file[first][0])
        rows = np.unique(np.concatenate(list(in_file.values())))
        if self.invalid_utf8 == "error":
            names = [table.field(i).name for i in sorted(bad)]
            more = (f" ({len(rows)} rows in all, in columns {names})"
                    if len(rows) > 1 or len(names) > 1 else "")
            msg = (f"Invalid UTF-8 in {path}, column {name!r}, row {row} (counted from 0)"
                   f"{more}; pass invalid_utf8='replace' (U+FFFD) or 'skip' to the Parquet "
                   "reader to read it")
            raise InvalidUtf8Error(msg)
        try:
            if self.invalid_utf8 == "replace":
                for i, per_chunk in bad.items():
                    table = table.set_column(i, table.field(i), _repaired(table.column(i),
                                                                          per_chunk))
            else:
                table = _without_rows(table, rows)
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            types = sorted({str(table.field(i).type) for i in bad})
            other = "skip" if self.invalid_utf8 == "replace" else "replace"
            msg = (f"Invalid UTF-8 in {path}, column {name!r}: invalid_utf8="
                   f"{self.invalid_utf8!r} cannot handle columns of type {types} ({exc}); "
                   f"pass invalid_utf8={other!r}, or leave the column out with fields=[...]")
            raise InvalidUtf8Error(msg) from exc
        done = "replaced" if self.invalid_utf8 == "replace" else "skipped"
        self._log_metric(f"invalid_utf8_rows_{done}", len(rows))
        logger.warning("%s: %d row(s) with invalid UTF-8 %s (first: column %r, row %d)",
                       path, len(rows), done, name, row)
        return table


@dataclass
class ParquetReader(BaseReader):
    """Reads Parquet files into ``DocumentBatch``es.

    ``invalid_utf8`` (``"error"``, ``"replace"`` or ``"skip"``) goes to ``ParquetReaderStage``,
    which says what each does with a string that is not UTF-8 and how rows are counted.

    Example:
        >>> [s.name for s in ParquetReader(file_paths="data/").decompose()]
        ['file_partitioning', 'parquet_reader']
    """

    name: str = "parquet_reader"
    invalid_utf8: str = "error"

    format_name = "Parquet"

    def default_extensions(self) -> list[str]:
        return [".parquet"]

    def reader_stage(self) -> ParquetReaderStage:
        return ParquetReaderStage(
            fields=self.fields, read_kwargs=dict(self.read_kwargs or {}),
            allow_empty=self.allow_empty, invalid_utf8=self.invalid_utf8,
            _generate_ids=self._generate_ids, _assign_ids=self._assign_ids,
        )
