"""``RowRangeTask``: a source partition that is a range of rows inside one or more files.

See docs/design/contract.md §2.6 and docs/partitions-inside-files.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from curator_dask.lineage import row_range_id
from curator_dask.tasks.file_group import FileGroupTask


@dataclass(repr=False)
class RowRangeTask(FileGroupTask):
    """The rows ``[start_row, end_row)`` of each of its files, read by the readers alone.

    ``data`` are the files (the *pieces'* paths, in order) and ``reader_config["pieces"]``
    the pieces: ``{"path", "start_row", "end_row"}`` plus, for JSONL, the byte range
    ``"start_byte"``/``"end_byte"`` of those lines. A piece of a JSONL file counts lines (a
    blank line is a line that holds no document, as in a whole-file read); of a Parquet file,
    rows. The deterministic id hashes the pieces' paths and row ranges only
    (:func:`~curator_dask.lineage.row_range_id`), so it stays when other files come or go.

    Example:
        >>> task = RowRangeTask.of([{"path": "/in/a.jsonl", "start_row": 0, "end_row": 5000,
        ...                          "start_byte": 0, "end_byte": 612_000}], dataset_name="in")
        >>> task.get_deterministic_id(), task.data, task.num_rows
        ('36a0903baa23', ['/in/a.jsonl'], 5000)
    """

    @classmethod
    def of(cls, pieces: list[dict[str, Any]], *, dataset_name: str, index: int = 0,
           total: int = 1) -> RowRangeTask:
        """The task of ``pieces`` (partition ``index`` of ``total``); its ``_metadata`` holds
        ``source_files`` (the writers name outputs from them and the task id) and
        ``row_ranges``."""
        paths = [p["path"] for p in pieces]
        metadata = {"partition_index": index, "total_partitions": total, "source_files": paths,
                    "row_ranges": [[p["path"], p["start_row"], p["end_row"]] for p in pieces]}
        return cls(dataset_name=dataset_name, data=paths, _metadata=metadata,
                   reader_config={"pieces": [dict(p) for p in pieces]})

    @property
    def pieces(self) -> list[dict[str, Any]]:
        return list(self.reader_config.get("pieces") or [])

    @property
    def num_rows(self) -> int:
        """Rows (JSONL: lines) in all pieces."""
        return sum(p["end_row"] - p["start_row"] for p in self.pieces)

    def get_deterministic_id(self) -> str:
        return row_range_id((p["path"], p["start_row"], p["end_row"]) for p in self.pieces)
