"""Writers (``from curator_dask.stages.text.io.writer import JsonlWriter, ParquetWriter``)."""

from curator_dask.stages.text.io.writer.base import BaseWriter
from curator_dask.stages.text.io.writer.jsonl import JsonlWriter
from curator_dask.stages.text.io.writer.parquet import ParquetWriter

__all__ = ["BaseWriter", "JsonlWriter", "ParquetWriter"]
