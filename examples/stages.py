"""Example stages for the demo pipelines (importable as ``stages`` from examples/)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pyarrow.compute as pc

from curator_dask.stages.base import ProcessingStage
from curator_dask.tasks import DocumentBatch


@dataclass
class KeepLongDocuments(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Keep documents whose ``text`` is longer than ``min_chars`` characters (Arrow-native)."""

    min_chars: int = 50
    name: str = "keep_long_documents"

    def inputs(self) -> tuple[list[str], list[str]]:
        return ["data"], ["text"]

    def process(self, task: DocumentBatch) -> DocumentBatch | None:
        table = task.to_pyarrow()
        kept = table.filter(pc.greater(pc.utf8_length(table["text"]), self.min_chars))
        if kept.num_rows == 0:
            return None
        return DocumentBatch(dataset_name=task.dataset_name, data=kept,
                             _metadata=task._metadata, _stage_perf=task._stage_perf)


@dataclass
class SlowPassThrough(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Sleep ``seconds`` per partition, so an interrupted run is easy to observe."""

    seconds: float = 0.5
    name: str = "slow_pass_through"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        time.sleep(self.seconds)
        return task
