"""``ParquetWriter``: one Parquet file per batch, committed atomically."""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from curator_dask.stages.text.io.writer.base import BaseWriter
from curator_dask.tasks import DocumentBatch


@dataclass
class ParquetWriter(BaseWriter):
    """Writes Parquet with ``pyarrow.parquet.write_table`` (pandas input is converted).

    ``write_kwargs`` go to ``write_table`` (``compression``, ``row_group_size``, ...);
    ``index=True`` keeps a pandas index.

    Example:
        >>> ParquetWriter(path="memory://doc-out/pq").get_file_extension()
        'parquet'
    """

    file_extension: str = "parquet"
    name: str = "parquet_writer"

    def __post_init__(self) -> None:
        super().__post_init__()
        if "partition_cols" in self.write_kwargs:
            msg = "ParquetWriter writes one file per batch; partition_cols is not supported"
            raise NotImplementedError(msg)

    def write_data(self, task: DocumentBatch, f: BinaryIO) -> None:
        kwargs = dict(self.write_kwargs)
        for key in ("storage_options", "engine"):
            kwargs.pop(key, None)
        index = kwargs.pop("index", None)
        if isinstance(task.data, pa.Table):
            table = task.data
        else:
            table = pa.Table.from_pandas(task.data, preserve_index=bool(index))
        if self.fields is not None:
            table = table.select(self.fields)
        pq.write_table(table, f, **kwargs)
