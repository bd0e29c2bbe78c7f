"""Removal of duplicates by id, on curator_dask's own model (no NeMo Curator needed).

``TextDuplicatesRemovalStage`` and ``TextDuplicatesRemovalWorkflow`` have NeMo Curator 1.4's
fields and behaviour (``nemo_curator.stages.text.deduplication.removal`` and
``removal_workflow``): read the corpus (with ``id_generator_path``, the reader assigns the ids
the identification run registered: ``_assign_ids``), drop the rows whose id is in the
``ids_to_remove_path`` Parquet files (read per batch, only the ids in the batch's id range),
write what is left. The workflow returns ``WorkflowRunResult("text_duplicates_removal")`` with
NeMo's metadata keys ``total_time`` and ``num_duplicates_removed``.

Beyond NeMo: ``checkpoint_path=`` makes the run resumable like any curator_dask pipeline.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd

from curator_dask.dedup.result import WorkflowBase, WorkflowRunResult, new_result
from curator_dask.ids.generator import CURATOR_DEDUP_ID_STR
from curator_dask.stages.base import ProcessingStage
from curator_dask.tasks import DocumentBatch

logger = logging.getLogger(__name__)

_EXTENSIONS = {"parquet": [".parquet"], "jsonl": [".jsonl", ".json"]}  # NeMo's defaults


@dataclass
class TextDuplicatesRemovalStage(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Drops the rows whose ``id_field`` is among the ids in ``ids_to_remove_path``.

    Only the ids between the batch's smallest and largest id are read (a Parquet filter on
    ``duplicate_id_field``); the batch's metadata gets ``num_removed`` (the number of those
    ids, NeMo's count). ``drop_id_field=True`` drops the id column from the output.

    Example:
        >>> stage = TextDuplicatesRemovalStage(ids_to_remove_path="out/ExactDuplicateIds")
        >>> stage.name, stage.id_field, stage.duplicate_id_field
        ('DuplicatesRemovalStage', '_curator_dedup_id', 'id')
    """

    ids_to_remove_path: str
    id_field: str = CURATOR_DEDUP_ID_STR
    duplicate_id_field: str = "id"
    read_kwargs: dict[str, Any] | None = None
    drop_id_field: bool = False
    name: str = "DuplicatesRemovalStage"

    def __post_init__(self) -> None:
        if not self.ids_to_remove_path:
            msg = ("TextDuplicatesRemovalStage needs ids_to_remove_path: the folder (or file) "
                   "of Parquet ids a deduplication workflow wrote, e.g. "
                   "<output_path>/ExactDuplicateIds")
            raise ValueError(msg)
        self.name = "DuplicatesRemovalStage"  # NeMo's name, whatever was passed
        self.read_kwargs = dict(self.read_kwargs) if self.read_kwargs else {}

    def inputs(self) -> tuple[list[str], list[str]]:
        return ["data"], [self.id_field]

    def outputs(self) -> tuple[list[str], list[str]]:
        return ["data"], []

    def process(self, task: DocumentBatch) -> DocumentBatch:
        df = task.to_pandas()
        if df.empty and self.id_field not in df.columns:  # an empty file: nothing to remove
            return DocumentBatch(dataset_name=task.dataset_name, data=df,
                                 _metadata={**task._metadata, "num_removed": 0},
                                 _stage_perf=task._stage_perf)
        if self.id_field not in df.columns:
            msg = (f"{self.name}: the batch has no column {self.id_field!r} (columns: "
                   f"{list(df.columns)}); read the corpus with the ids (id_generator_path= "
                   "for _curator_dedup_id) or name its id column in id_field")
            raise ValueError(msg)
        t0 = time.perf_counter()
        ids = df[self.id_field]
        low, high = (ids.min(), ids.max()) if len(ids) else (None, None)
        t1 = time.perf_counter()
        removal_ids = set() if low is None else self._ids_between(low, high)
        t2 = time.perf_counter()
        df = df[~df[self.id_field].isin(removal_ids)]
        if self.drop_id_field:
            df = df.drop(columns=[self.id_field])
        self._log_metric("input_df_min_max_time", t1 - t0)
        self._log_metric("read_dupes_time", t2 - t1)
        self._log_metric("id_removal_time", time.perf_counter() - t2)
        return DocumentBatch(dataset_name=task.dataset_name, data=df,
                             _metadata={**task._metadata, "num_removed": len(removal_ids)},
                             _stage_perf=task._stage_perf)

    def _ids_between(self, low: Any, high: Any) -> set[Any]:
        """The ids to remove in ``[low, high]`` (the files' rows outside are not read)."""
        field = self.duplicate_id_field
        removal = pd.read_parquet(self.ids_to_remove_path, columns=[field],
                                  filters=[(field, ">=", low), (field, "<=", high)],
                                  **(self.read_kwargs or {}))  # {} from __post_init__ on
        return set(removal[field].tolist())


@dataclass
class TextDuplicatesRemovalWorkflow(WorkflowBase):
    """Writes ``input_path``'s corpus without the documents whose ids are listed in
    ``ids_to_remove_path``: NeMo Curator 1.4's workflow, on curator_dask's stages.

    With ``id_generator_path`` (the ``*_id_generator.json`` of the identification run) the
    reader assigns each partition the ids registered for its files, so the input must be read
    with the same partitioning (``input_blocksize`` / ``input_files_per_partition``) as there.

    Example:
        >>> wf = TextDuplicatesRemovalWorkflow(input_path="in/", output_path="dedup/",
        ...     ids_to_remove_path="out/ExactDuplicateIds", input_filetype="jsonl",
        ...     id_generator_path="out/exact_id_generator.json")
        >>> [type(s).__name__ for s in wf._generate_stages()]
        ['FilePartitioningStage', 'JsonlReaderStage', 'TextDuplicatesRemovalStage', 'ParquetWriter']
    """

    input_path: str | list[str] | None  # NeMo's: str | None; FilePartitioningStage takes a list
    ids_to_remove_path: str
    output_path: str
    input_filetype: Literal["parquet", "jsonl"] = "parquet"
    input_fields: list[str] | None = None
    id_field: str | None = CURATOR_DEDUP_ID_STR
    input_files_per_partition: int | None = None
    input_blocksize: str | int | None = None  # NeMo's: str | None; bytes as an int work too
    input_file_extensions: list[str] | None = None
    input_task_limit: int | None = None
    input_kwargs: dict[str, Any] | None = None
    duplicate_id_field: str = "id"
    duplicate_id_read_kwargs: dict[str, Any] | None = None
    id_generator_path: str | None = None
    id_generator_storage_options: dict[str, Any] | None = None
    output_file_extension: str | None = None
    output_filetype: Literal["parquet", "jsonl"] = "parquet"
    output_kwargs: dict[str, Any] | None = None
    output_fields: list[str] | None = None
    output_mode: Literal["ignore", "overwrite", "append", "error"] | None = None
    drop_id_field: bool = False
    checkpoint_path: str | None = None  # beyond NeMo: a resumable removal

    def __post_init__(self) -> None:
        if self.id_generator_path is None and self.id_field == CURATOR_DEDUP_ID_STR:
            logger.warning("Using %s as id_field for removal stage, even though we are not "
                           "using id generator.", CURATOR_DEDUP_ID_STR)
        if self.drop_id_field and self.output_fields and self.id_field in self.output_fields:
            msg = f"Cannot drop id_field {self.id_field!r} when it is included in output_fields."
            raise ValueError(msg)

    def _generate_stages(self, initial_tasks: list[Any] | None = None) -> list[ProcessingStage]:
        for kind, value in (("input", self.input_filetype), ("output", self.output_filetype)):
            if value not in _EXTENSIONS:
                msg = f"Invalid {kind} filetype: {value!r} (choose 'parquet' or 'jsonl')"
                raise ValueError(msg)
        if self.id_field is None:  # NeMo's type allows it; every batch would fail on it
            msg = (f"id_field=None: the removal needs the corpus's id column; pass its name, "
                   f"or {CURATOR_DEDUP_ID_STR!r} with id_generator_path")
            raise ValueError(msg)
        stages: list[ProcessingStage] = []
        if initial_tasks is None:
            if self.input_path is None:
                msg = "input_path is required when initial_tasks is None"
                raise ValueError(msg)
            from curator_dask.stages.file_partitioning import FilePartitioningStage

            stages.append(FilePartitioningStage(
                file_paths=self.input_path, files_per_partition=self.input_files_per_partition,
                blocksize=self.input_blocksize,
                file_extensions=self.input_file_extensions or _EXTENSIONS[self.input_filetype],
                storage_options=(self.input_kwargs or {}).get("storage_options"),
                limit=self.input_task_limit))
        else:
            logger.warning("Initial tasks provided, ignoring %s", ["input_path",
                           "input_files_per_partition", "input_blocksize",
                           "input_file_extensions"])
        stages.append(self._reader())
        stages.append(TextDuplicatesRemovalStage(
            ids_to_remove_path=self.ids_to_remove_path, id_field=self.id_field,
            duplicate_id_field=self.duplicate_id_field,
            read_kwargs=self.duplicate_id_read_kwargs, drop_id_field=self.drop_id_field))
        stages.append(self._writer())
        return stages

    def _reader(self) -> ProcessingStage:
        from curator_dask.stages.text.io.reader.jsonl import JsonlReaderStage
        from curator_dask.stages.text.io.reader.parquet import ParquetReaderStage

        stage = JsonlReaderStage if self.input_filetype == "jsonl" else ParquetReaderStage
        # allow_empty: a file an earlier removal emptied is a group without documents (NeMo's
        # reader fails on it)
        return stage(fields=self.input_fields, read_kwargs=dict(self.input_kwargs or {}),
                     allow_empty=True, _generate_ids=False,
                     _assign_ids=self.id_generator_path is not None)

    def _writer(self) -> ProcessingStage:
        from curator_dask.stages.text.io.writer import JsonlWriter, ParquetWriter

        writer = JsonlWriter if self.output_filetype == "jsonl" else ParquetWriter
        extra: dict[str, Any] = {}
        if self.output_file_extension:
            extra["file_extension"] = self.output_file_extension
        if self.output_mode:
            extra["mode"] = self.output_mode
        return writer(path=self.output_path, write_kwargs=self.output_kwargs or {},
                      fields=self.output_fields, **extra)

    def run(self, executor: Any = None,
            initial_tasks: list[Any] | None = None) -> WorkflowRunResult:
        """Run the removal (``executor=None``: a ``DaskExecutor`` on an embedded cluster)."""
        from curator_dask.pipeline import Pipeline

        pipeline = Pipeline(name="text_duplicates_removal_workflow",
                            description="Text duplicates removal workflow",
                            stages=self._generate_stages(initial_tasks))
        result = new_result("text_duplicates_removal")
        limit = self.input_task_limit
        if limit is not None and initial_tasks is not None and len(initial_tasks) > limit:
            logger.warning("Initial tasks provided (%d) is greater than input_task_limit (%d), "
                           "truncating to %d", len(initial_tasks), limit, limit)
            initial_tasks = initial_tasks[:limit]
        if executor is None:
            from curator_dask.backends.dask import DaskExecutor

            executor = DaskExecutor()
        start = time.time()
        if self.id_generator_path is None:
            outputs = self._run_pipeline(pipeline, executor, initial_tasks)
        else:
            from curator_dask.ids import generator as ids

            ids.create_id_generator_actor(self.id_generator_path,
                                          storage_options=self.id_generator_storage_options)
            try:
                outputs = self._run_pipeline(pipeline, executor, initial_tasks)
            finally:
                ids.kill_id_generator_actor()
        result.add_pipeline_tasks("removal", list(outputs))
        result.add_metadata("total_time", time.time() - start)
        result.add_metadata("num_duplicates_removed", self._count_removed(outputs))
        return result

    def _run_pipeline(self, pipeline: Any, executor: Any, initial_tasks: Any) -> Any:
        return pipeline.run(executor, initial_tasks=initial_tasks,
                            checkpoint_path=self.checkpoint_path)

    @staticmethod
    def _count_removed(outputs: Any) -> int:
        """NeMo's count (``num_removed`` summed over the output tasks); when the executor
        keeps no outputs (``keep_outputs=False``), the rows the removal stage dropped."""
        if list(outputs) or not getattr(outputs, "num_outputs", 0):
            return sum((getattr(t, "_metadata", None) or {}).get("num_removed", 0)
                       for t in outputs)
        counts = dict(getattr(outputs, "stage_counts", None) or [])
        count = counts.get("DuplicatesRemovalStage")
        return int(count.rows_dropped) if count is not None else 0
