"""``ParquetReader``: Parquet files to pyarrow Tables, Arrow-native.

See docs/design/contract.md §6.1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from curator_dask.stages.text.io.reader.base import BaseReader, BaseReaderStage

_ALLOWED_KWARGS = {"storage_options", "filters", "columns", "engine", "dtype_backend"}


@dataclass
class ParquetReaderStage(BaseReaderStage):
    """Reads Parquet files with ``pyarrow.parquet.read_table``, one call per file."""

    name: str = "parquet_reader"

    def __post_init__(self) -> None:
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
                msg = f"Could not read Parquet file {path} (columns={columns}): {exc}"
                raise pa.ArrowInvalid(msg) from exc
            tables.append(table)
        if not tables:
            return pa.table({c: [] for c in columns or []})
        return pa.concat_tables(tables, promote_options="permissive")


@dataclass
class ParquetReader(BaseReader):
    """Reads Parquet files into ``DocumentBatch``es.

    Example:
        >>> [s.name for s in ParquetReader(file_paths="data/").decompose()]
        ['file_partitioning', 'parquet_reader']
    """

    name: str = "parquet_reader"

    format_name = "Parquet"

    def default_extensions(self) -> list[str]:
        return [".parquet"]

    def reader_stage(self) -> ParquetReaderStage:
        return ParquetReaderStage(
            fields=self.fields, read_kwargs=dict(self.read_kwargs or {}),
            allow_empty=self.allow_empty,
        )
