"""``JsonlWriter``: one JSON Lines file per batch, committed atomically."""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

import pyarrow as pa

from curator_dask.stages.text.io.writer.base import BaseWriter
from curator_dask.tasks import DocumentBatch
from curator_dask.utils.jsonl import encode_jsonl

_PANDAS_DEFAULTS = {"lines": True, "orient": "records", "force_ascii": False}


@dataclass
class JsonlWriter(BaseWriter):
    """Writes JSONL: ``{"col": value, ...}`` per row, UTF-8, one file per batch.

    Arrow tables of string, integer and bool columns are encoded with Arrow kernels; anything
    else (other types, pandas input, extra ``write_kwargs``) goes through pandas
    ``to_json(lines=True, orient="records", force_ascii=False, **write_kwargs)`` as in NeMo
    Curator. Both give the same JSON values.

    Example:
        >>> writer = JsonlWriter(path="memory://doc-out/jsonl")
        >>> writer.name, writer.get_file_extension()
        ('jsonl_writer', 'jsonl')
    """

    file_extension: str = "jsonl"
    name: str = "jsonl_writer"

    def write_data(self, task: DocumentBatch, f: BinaryIO) -> None:
        kwargs = {k: v for k, v in self.write_kwargs.items() if k != "storage_options"}
        if isinstance(task.data, pa.Table) and all(
            _PANDAS_DEFAULTS.get(k, object()) == v for k, v in kwargs.items()
        ):
            table = task.data if self.fields is None else task.data.select(self.fields)
            buffers = encode_jsonl(table)
            if buffers is not None:
                for buf in buffers:
                    f.write(memoryview(buf))
                return
        df = task.to_pandas()
        if self.fields is not None:
            df = df[self.fields]
        df.to_json(f, **{**_PANDAS_DEFAULTS, **kwargs})
