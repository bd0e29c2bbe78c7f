"""``JsonlWriter``: one JSON Lines file per batch, committed atomically."""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

from curator_dask.stages.text.io.writer.base import BaseWriter
from curator_dask.tasks import DocumentBatch


@dataclass
class JsonlWriter(BaseWriter):
    """Writes JSONL with pandas ``to_json(lines=True, orient="records", force_ascii=False)``.

    Example:
        >>> writer = JsonlWriter(path="memory://doc-out/jsonl")
        >>> writer.name, writer.get_file_extension()
        ('jsonl_writer', 'jsonl')
    """

    file_extension: str = "jsonl"
    name: str = "jsonl_writer"

    def write_data(self, task: DocumentBatch, f: BinaryIO) -> None:
        df = task.to_pandas()
        if self.fields is not None:
            df = df[self.fields]
        kwargs = {"lines": True, "orient": "records", "force_ascii": False, **self.write_kwargs}
        kwargs.pop("storage_options", None)
        df.to_json(f, **kwargs)
