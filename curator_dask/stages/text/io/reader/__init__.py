"""Readers (``from curator_dask.stages.text.io.reader import JsonlReader, ParquetReader``)."""

from curator_dask.stages.text.io.reader.jsonl import (
    InvalidUtf8Error,
    JsonlReader,
    JsonlReaderStage,
    MalformedJsonError,
)
from curator_dask.stages.text.io.reader.parquet import ParquetReader, ParquetReaderStage

__all__ = [
    "InvalidUtf8Error",
    "JsonlReader",
    "JsonlReaderStage",
    "MalformedJsonError",
    "ParquetReader",
    "ParquetReaderStage",
]
