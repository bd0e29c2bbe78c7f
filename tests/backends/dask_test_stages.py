"""Stages used by the executor tests (importable by worker processes)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import pyarrow as pa

from curator_dask.stages.base import ProcessingStage
from curator_dask.stages.resources import Resources
from curator_dask.tasks import DocumentBatch, FailedTask


def _append(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")


@dataclass
class SplitIntoRows(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Fan-out: one output batch per row; drops source_files like NeMo's test stage."""

    name: str = "split_into_rows"

    def process(self, task: DocumentBatch) -> list[DocumentBatch]:
        table = task.to_pyarrow()
        meta = {k: v for k, v in task._metadata.items() if k != "source_files"}
        return [
            DocumentBatch(dataset_name=task.dataset_name, data=table.slice(i, 1),
                          _metadata=dict(meta), _stage_perf=list(task._stage_perf))
            for i in range(table.num_rows)
        ]


@dataclass
class DropShort(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Filter: None for batches whose first text is shorter than min_chars."""

    min_chars: int = 50
    name: str = "drop_short"

    def process(self, task: DocumentBatch) -> DocumentBatch | None:
        text = task.to_pyarrow()["text"][0].as_py()
        return task if len(text) >= self.min_chars else None


@dataclass
class DropShortRows(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Row filter: keeps the rows whose text has at least min_chars characters (None when no
    row is left)."""

    min_chars: int = 50
    name: str = "drop_short_rows"

    def process(self, task: DocumentBatch) -> DocumentBatch | None:
        table = task.to_pyarrow()
        keep = pa.array([len(t) >= self.min_chars for t in table["text"].to_pylist()])
        kept = table.filter(keep)
        if kept.num_rows == 0:
            return None
        return DocumentBatch(dataset_name=task.dataset_name, data=kept,
                             _metadata=task._metadata, _stage_perf=task._stage_perf)


@dataclass
class AddLength(ProcessingStage[DocumentBatch, DocumentBatch]):
    column: str = "length"
    name: str = "add_length"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        table = task.to_pyarrow()
        lengths = pa.array([len(t) for t in table["text"].to_pylist()], pa.int64())
        return DocumentBatch(dataset_name=task.dataset_name,
                             data=table.append_column(self.column, lengths),
                             _metadata=task._metadata, _stage_perf=task._stage_perf)


@dataclass
class BatchRecorder(ProcessingStage[DocumentBatch, DocumentBatch]):
    """A batch stage (N:N) that records the size of every batch it receives."""

    log: str = ""
    batch_size: int | None = 3
    name: str = "batch_recorder"

    def process_batch(self, tasks: list[DocumentBatch]) -> list[DocumentBatch]:
        _append(self.log, str(len(tasks)))
        return list(tasks)


@dataclass
class StageWithSetup(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Writes a file in setup_on_node, reads it in setup, logs every lifecycle call."""

    log_dir: str = ""
    name: str = "stage_with_setup"

    def setup_on_node(self, node_info=None, worker_metadata=None) -> None:
        _append(os.path.join(self.log_dir, "calls.log"), f"setup_on_node {os.getpid()}")
        with open(os.path.join(self.log_dir, f"node-{node_info.node_id}.txt"), "w") as f:
            f.write("ready")

    def setup(self, worker_metadata=None) -> None:
        import socket

        with open(os.path.join(self.log_dir, f"node-{socket.gethostname()}.txt")) as f:
            self._node_state = f.read()
        _append(os.path.join(self.log_dir, "calls.log"), f"setup {os.getpid()}")

    def teardown(self) -> None:
        _append(os.path.join(self.log_dir, "calls.log"), f"teardown {os.getpid()}")

    def process(self, task: DocumentBatch) -> DocumentBatch:
        if self._node_state != "ready":
            raise RuntimeError("setup did not see setup_on_node's file")
        _append(os.path.join(self.log_dir, "calls.log"), f"process {os.getpid()}")
        return task


@dataclass
class FailOn(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Raises for the partition whose first id equals ``bad_id``."""

    bad_id: str = ""
    name: str = "fail_on"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        if task.to_pyarrow()["id"][0].as_py() == self.bad_id:
            raise ValueError(f"boom on {self.bad_id}")
        return task


@dataclass
class FailSoft(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Returns FailedTask() for the partition whose first id equals ``bad_id``."""

    bad_id: str = ""
    name: str = "fail_soft"

    def process(self, task: DocumentBatch):
        if task.to_pyarrow()["id"][0].as_py() == self.bad_id:
            return FailedTask()
        return task


@dataclass
class NeedsGpu(ProcessingStage[DocumentBatch, DocumentBatch]):
    name: str = "needs_gpu"

    def __post_init__(self) -> None:
        self.resources = Resources(gpus=1)

    def process(self, task: DocumentBatch) -> DocumentBatch:
        return task


@dataclass
class Interval(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Records (start, end) of each call, to check how many chains run at once."""

    log: str = ""
    seconds: float = 0.2
    name: str = "interval"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        start = time.time()
        time.sleep(self.seconds)
        _append(self.log, f"{start} {time.time()}")
        return task


@dataclass
class StampPid(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Adds the process id that ran it as a column (where does a stage run?)."""

    name: str = "stamp_pid"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        table = task.to_pyarrow()
        table = table.append_column("pid", pa.array([os.getpid()] * table.num_rows))
        return DocumentBatch(dataset_name=task.dataset_name, data=table,
                             _metadata=dict(task._metadata), _stage_perf=list(task._stage_perf))


@dataclass
class StampPidOnGpu(StampPid):
    """``StampPid`` that asks for a GPU (no test worker has one)."""

    name: str = "stamp_pid_gpu"

    def __post_init__(self) -> None:
        self.resources = Resources(gpus=1.0)


@dataclass
class PassFiles(ProcessingStage):
    """A source stage over initial ``FileGroupTask``s that passes them on (content ids)."""

    name: str = "pass_files"

    def process(self, task):
        return task


@dataclass
class WaitFor(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Holds each batch until ``path`` exists (a test's signal to let the run finish); with
    ``marker``, first appends the batch's task id there (the test sees what is in flight)."""

    path: str = ""
    marker: str = ""
    name: str = "wait_for"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        if self.marker:
            _append(self.marker, task.task_id)
        while not os.path.exists(self.path):
            time.sleep(0.02)
        return task
