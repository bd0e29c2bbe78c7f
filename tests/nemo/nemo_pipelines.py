"""NeMo Curator pipelines, stages and a reference executor for the NeMo tests.

The reference is NeMo Curator's own semantics without Ray: every stage through NeMo's
``BaseStageAdapter`` (ids, sentinels, performance records), in this process, stage by stage,
as NeMo's Ray executors call it on their actors.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from nemo_curator.backends.base import BaseExecutor, BaseStageAdapter
from nemo_curator.pipeline import Pipeline
from nemo_curator.stages.base import ProcessingStage
from nemo_curator.stages.text.filters import ScoreFilter
from nemo_curator.stages.text.filters.heuristic import WordCountFilter
from nemo_curator.stages.text.io.reader import JsonlReader
from nemo_curator.stages.text.io.writer import JsonlWriter
from nemo_curator.stages.text.modifiers import Modify, UrlRemover
from nemo_curator.stages.text.modules import AddId
from nemo_curator.tasks import DocumentBatch, EmptyTask, FailedTask, Task

WORDS = ["data", "curation", "pipeline", "shard", "token", "parquet", "filter", "minhash",
         "worker", "stage", "document", "language", "corpus", "bucket", "dedup", "array",
         "resume", "sink", "column", "table"]


def write_input(directory: str | Path, files: int = 6, docs: int = 30) -> Path:
    """Deterministic JSONL files: some documents short (filtered), some with URLs."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        with open(directory / f"part-{f:03d}.jsonl", "w", encoding="utf-8") as out:
            for d in range(docs):
                n = 3 + (f * 7 + d * 5) % 17  # 3..19 words: some below min_words
                words = [WORDS[(f + d + i * 3) % len(WORDS)] for i in range(n)]
                if d % 4 == 0:
                    words.insert(n // 2, f"https://example.org/{f}/{d}?q=1")
                out.write(json.dumps({"id": f"{f}-{d}", "text": " ".join(words)}) + "\n")
    return directory


def curation_pipeline(input_dir: str | Path, output_dir: str | Path, *, add_id: bool = True,
                      min_words: int = 6, files_per_partition: int = 2,
                      extra: list | None = None) -> Pipeline:
    """NeMo's JsonlReader → ScoreFilter(WordCountFilter) → Modify(UrlRemover) → [AddId] →
    [extra stages] → JsonlWriter."""
    p = Pipeline(name="nemo-curation")
    p.add_stage(JsonlReader(file_paths=str(input_dir), files_per_partition=files_per_partition))
    p.add_stage(ScoreFilter(WordCountFilter(min_words=min_words), text_field="text"))
    p.add_stage(Modify(UrlRemover(), input_fields="text"))
    if add_id:
        p.add_stage(AddId(id_field="doc_id"))
    for stage in extra or []:
        p.add_stage(stage)
    p.add_stage(JsonlWriter(path=str(output_dir)))
    return p


class InProcessExecutor(BaseExecutor):
    """NeMo's ``BaseStageAdapter`` for every stage, in this process (the reference)."""

    def execute(self, stages, initial_tasks=None):
        tasks = list(initial_tasks or [EmptyTask()])
        for stage in stages:
            adapter = BaseStageAdapter(stage)
            adapter.setup_on_node()
            adapter.setup()
            size = stage.batch_size or 1
            out = []
            for i in range(0, len(tasks), size):
                out.extend(adapter.process_batch(tasks[i:i + size]))
            adapter.teardown()
            tasks = out
        return tasks


def files_of(directory: str | Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(Path(directory).iterdir())}


class DataStage(ProcessingStage[DocumentBatch, DocumentBatch]):
    """A stage over document batches that declares no particular columns (abstract)."""

    def inputs(self):
        return ["data"], []

    def outputs(self):
        return ["data"], []


@dataclass
class LifecycleRecorder(DataStage):
    """Passes batches through and appends each lifecycle call, with the time, to
    ``<log_dir>/<pid>.log``."""

    log_dir: str = ""
    name: str = "lifecycle_recorder"

    def _note(self, what: str) -> None:
        with open(os.path.join(self.log_dir, f"{os.getpid()}.log"), "a") as f:
            f.write(f"{time.time_ns()} {what}\n")

    def setup_on_node(self, node_info=None, worker_metadata=None) -> None:
        self._note(f"setup_on_node {type(node_info).__module__}")

    def setup(self, worker_metadata=None) -> None:
        self._note(f"setup {type(worker_metadata).__module__}")

    def teardown(self) -> None:
        self._note("teardown")

    def process(self, task: DocumentBatch) -> DocumentBatch:
        self._note("process")
        return task


@dataclass
class CountRows(DataStage):
    """Logs a custom metric (rows seen) with NeMo's ``_log_metrics``, and a loguru line."""

    name: str = "count_rows"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        from loguru import logger

        self._log_metrics({"rows_seen": float(task.num_items)})
        logger.info("count_rows saw {} rows of {}", task.num_items, task.task_id)
        return task


# -- the integration pipeline of NeMo Curator's backend tests, with a file call counter --------
@dataclass
class AddLength(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Adds ``len(text)`` as ``column``; overrides ``process_batch``; counts its calls in a
    file (one line per call) and logs two custom metrics per call."""

    column: str = "doc_length_1"
    counter_file: str = ""
    name: str = "add_length"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        raise NotImplementedError

    def process_batch(self, tasks: list[DocumentBatch]) -> list[DocumentBatch]:
        start = time.perf_counter()
        with open(self.counter_file, "a") as f:
            f.write(f"{self.name}_{self.column}\n")
        counted = time.perf_counter() - start
        out = []
        for task in tasks:
            df = task.to_pandas().copy()
            df[self.column] = df["text"].apply(len)
            out.append(DocumentBatch(dataset_name=task.dataset_name, data=df,
                                     _metadata=task._metadata, _stage_perf=task._stage_perf))
        self._log_metrics({"counter_increment_s": counted + 1e-9,
                           "compute_len_s": time.perf_counter() - start})
        return out

    def inputs(self):
        return ["data"], ["text"]

    def outputs(self):
        return ["data"], ["text", self.column]


@dataclass
class SplitIntoRows(DataStage):
    """Fan-out: one single-row batch per row (``source_files`` dropped from the metadata)."""

    name: str = "split_into_rows"

    def process(self, task: DocumentBatch) -> list[DocumentBatch]:
        import pandas as pd

        start = time.perf_counter()
        metadata = {k: v for k, v in task._metadata.items() if k != "source_files"}
        rows = [DocumentBatch(dataset_name=task.dataset_name,
                              data=pd.DataFrame([row.to_dict()]), _metadata=dict(metadata),
                              _stage_perf=task._stage_perf.copy())
                for _, row in task.to_pandas().iterrows()]
        self._log_metric("split_into_rows_time_s", time.perf_counter() - start + 1e-9)
        return rows


@dataclass
class StageWithSetup(ProcessingStage[DocumentBatch, DocumentBatch]):
    """``setup_on_node`` writes the node id to a file that ``setup`` must find."""

    temp_file: str = ""
    name: str = "stage_with_setup"

    def setup_on_node(self, node_info=None, worker_metadata=None) -> None:
        with open(self.temp_file, "w") as f:
            f.write(f"{node_info.node_id},random_str")

    def setup(self, worker_metadata=None) -> None:
        with open(self.temp_file) as f:
            self.node_id, self.random_str = f.read().split(",")

    def process(self, task: DocumentBatch) -> DocumentBatch:
        df = task.to_pandas().copy()
        df["node_id"] = self.node_id
        df["random_string"] = self.random_str
        return DocumentBatch(dataset_name=task.dataset_name, data=df, _metadata=task._metadata,
                             _stage_perf=task._stage_perf)

    def inputs(self):
        return ["data"], []

    def outputs(self):
        return ["data"], ["node_id", "random_string"]


def write_integration_input(directory: Path, num_files: int = 15, total: int = 100) -> None:
    """``test_data_<i>.jsonl``: ``total // num_files`` documents each, the rest in the last."""
    directory.mkdir(parents=True, exist_ok=True)
    per_file = total // num_files
    doc = 0
    for i in range(num_files):
        count = per_file if i < num_files - 1 else total - per_file * (num_files - 1)
        with open(directory / f"test_data_{i}.jsonl", "w") as f:
            for _ in range(count):
                f.write(json.dumps({"id": f"doc_{doc}", "text": f"Test document {doc}"}) + "\n")
                doc += 1


def integration_pipeline(input_dir: Path, output_dir: Path, counter_file: Path) -> Pipeline:
    output_dir.mkdir(parents=True, exist_ok=True)
    p = Pipeline(name="integration_test_pipeline",
                 description="Integration test pipeline for backend comparison")
    p.add_stage(JsonlReader(file_paths=str(input_dir), files_per_partition=2))
    p.add_stage(AddLength(column="doc_length_1", counter_file=str(counter_file)))
    p.add_stage(SplitIntoRows())
    p.add_stage(AddLength(column="doc_length_2", counter_file=str(counter_file)))
    p.add_stage(StageWithSetup(temp_file=str(input_dir / "temp_file.txt")))
    p.add_stage(JsonlWriter(path=str(output_dir)))
    return p


# -- the tiny model of NeMo Curator's resumability e2e tests ------------------------------------
@dataclass
class IntTask(Task[int]):
    data: int = 0

    @property
    def num_items(self) -> int:
        return 1

    def validate(self) -> bool:
        return True


@dataclass
class IntSource(ProcessingStage[Task, IntTask]):
    """Emits ``IntTask(0..n-1)`` from the empty task (ids ``0_<i>``, source ids ``<i>``)."""

    n: int = 3
    name: str = "source"
    is_source_stage: bool = True

    def process(self, task: Task) -> list[IntTask]:
        return [IntTask(dataset_name="d", data=i) for i in range(self.n)]

    def inputs(self):
        return [], []

    def outputs(self):
        return [], []


@dataclass
class IntSink(ProcessingStage[IntTask, IntTask]):
    """Returns the task, or a ``FailedTask`` for the values in ``fail``."""

    fail: tuple[int, ...] = ()
    name: str = "sink"
    is_sink_stage: bool = True

    def process(self, task: IntTask) -> IntTask | FailedTask:
        return FailedTask() if task.data in self.fail else task

    def inputs(self):
        return [], []

    def outputs(self):
        return [], []


def int_pipeline(n: int = 3, fail: tuple[int, ...] = ()) -> Pipeline:
    return (Pipeline(name="resumability_e2e").add_stage(IntSource(n=n))
            .add_stage(IntSink(fail=fail)))


def nemo_completed(checkpoint: str | Path) -> set[str]:
    """The completed sources of a checkpoint as NeMo Curator reads them: its own
    ``ResumabilityActor`` class (without Ray), which loads every writer file at start."""
    from nemo_curator.utils.resumability_actor import ResumabilityActor

    actor_class = ResumabilityActor.__ray_metadata__.modified_class
    reader = actor_class(str(checkpoint), writer_id="test-reader")  # makes an empty file
    try:
        return set(reader._load_completed())
    finally:
        reader.close()
        Path(reader._path).unlink()
