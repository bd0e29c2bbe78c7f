"""Stages for the tests of the worker processes curator_dask starts (importable by workers):
one whose output depends on the worker's string-hash seed, one that records which process ran
it."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pyarrow as pa

from curator_dask.stages.base import ProcessingStage
from curator_dask.tasks import DocumentBatch


@dataclass
class HashOfText(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Adds ``hash(text)`` and the first word of ``set(text.split())``: both change with the
    ``PYTHONHASHSEED`` of the process that runs the stage (the second as NeMo's
    ``RepeatingTopNGramsFilter`` does, by iterating a set of strings)."""

    name: str = "hash_of_text"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        table = task.to_pyarrow()
        texts = table["text"].to_pylist()
        table = table.append_column("text_hash", pa.array([hash(t) for t in texts], pa.int64()))
        table = table.append_column(
            "first_of_set", pa.array([next(iter(set(t.split())), "") for t in texts]))
        return DocumentBatch(dataset_name=task.dataset_name, data=table,
                             _metadata=dict(task._metadata), _stage_perf=list(task._stage_perf))


@dataclass
class RecordProcess(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Appends ``"<pid> <parent pid>"`` of the worker process to ``path`` for every batch, and
    passes the batch on unchanged."""

    path: str = ""
    name: str = "record_process"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()} {os.getppid()}\n")
        return task
