"""Readers (``from curator_dask.stages.text.io.reader import JsonlReader, ParquetReader``)."""

from curator_dask.stages.text.io.reader.jsonl import (
    JsonlReader,
    JsonlReaderStage,
    MalformedJsonError,
)
from curator_dask.stages.text.io.reader.parquet import ParquetReader, ParquetReaderStage

__all__ = [
    "JsonlReader",
    "JsonlReaderStage",
    "MalformedJsonError",
    "ParquetReader",
    "ParquetReaderStage",
]
