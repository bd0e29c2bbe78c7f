"""Shared reader logic: composite decomposition and the per-partition read stage.

See docs/design/contract.md §6.1.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, ClassVar

import fsspec
import numpy as np
import pyarrow as pa

from curator_dask.partitions.spec import PartitionSpec, refuse_with_file_grouping
from curator_dask.stages.base import CompositeStage, ProcessingStage
from curator_dask.stages.file_partitioning import FilePartitioningStage
from curator_dask.tasks import DocumentBatch, FileGroupTask
from curator_dask.utils.storage_options import default_storage_options

logger = logging.getLogger(__name__)


@dataclass
class BaseReaderStage(ProcessingStage[FileGroupTask, DocumentBatch]):
    """Reads the files of one ``FileGroupTask`` into one ``DocumentBatch`` (a pyarrow Table).

    ``_generate_ids=True`` adds NeMo's ``_curator_dedup_id`` column from the run's id generator
    (a contiguous range per partition, registered for its files); ``_assign_ids=True`` adds the
    range registered before (``curator_dask.ids.generator``, docs/deduplication.md).
    """

    fields: list[str] | None = None
    read_kwargs: dict[str, Any] = field(default_factory=dict)
    allow_empty: bool = False
    name: str = "reader"
    _generate_ids: bool = False
    _assign_ids: bool = False

    def __post_init__(self) -> None:
        refuse_both_id_options(self)

    def inputs(self) -> tuple[list[str], list[str]]:
        return [], []

    def outputs(self) -> tuple[list[str], list[str]]:
        return ["data"], list(self.fields or []) + id_column(self)

    def read_files(self, paths: list[str]) -> Any:
        raise NotImplementedError

    def read_pieces(self, pieces: list[dict[str, Any]]) -> Any:
        """The rows of a ``RowRangeTask``'s pieces (each ``path``, ``start_row``, ``end_row``,
        and for JSONL ``start_byte``/``end_byte``), read as ranges only."""
        raise NotImplementedError

    def process(self, task: FileGroupTask) -> DocumentBatch:
        config = getattr(task, "reader_config", None)
        pieces = config.get("pieces") if isinstance(config, dict) else None
        data = self.read_pieces(pieces) if pieces else self.read_files(task.data)
        # a row range of blank lines holds no document: no error, unlike an empty file
        if (data is None or len(data) == 0) and not self.allow_empty and not pieces:
            raise ValueError(self._no_data_message(task))
        # The same metadata dict flows on, so source_files reaches the writer (NeMo behaviour).
        batch = DocumentBatch(dataset_name=task.dataset_name, data=data, _metadata=task._metadata)
        if self._generate_ids or self._assign_ids:
            add_ids(batch, task, generate=self._generate_ids)
        return batch

    def _no_data_message(self, task: FileGroupTask) -> str:
        """Why ``task`` gave no rows, naming the stage, its files and the task
        (docs/design/contract.md §6.1)."""
        paths = list(task.data)
        shown = ", ".join(paths[:5]) + (f" (+{len(paths) - 5} more)" if len(paths) > 5 else "")
        sizes = [self._size(p) for p in paths]
        if paths and all(size == 0 for size in sizes):
            why = "the file is empty" if len(paths) == 1 else "the files are empty"
        else:
            why = "it holds no rows" if len(paths) == 1 else "they hold no rows"
        return (f"{self.name}: no data read from {shown or 'no files'} (task {task.task_id}): "
                f"{why}; pass allow_empty=True to the reader (YAML: allow_empty: true) to "
                "accept partitions without rows")

    def _size(self, path: str) -> int | None:
        opts = (self.read_kwargs or {}).get("storage_options") or {}
        try:
            fs, fs_path = fsspec.core.url_to_fs(path, **opts)
            return fs.size(fs_path)
        except Exception:  # noqa: BLE001 (only refines an error message)
            return None


@dataclass
class BaseReader(CompositeStage[Any, DocumentBatch]):
    """A reader composite: ``FilePartitioningStage`` followed by a format's reader stage.

    ``allow_empty=True``: a partition whose files hold no rows gives an empty batch instead of
    a ``ValueError`` (NeMo Curator's option). ``allow_no_files=True``: a path that names no
    file (missing, a glob matching nothing, a directory without such files) is skipped instead
    of raising ``NoInputFilesError``; see ``FilePartitioningStage``.

    ``read_kwargs={"storage_options": {...}}``: fsspec options for remote ``file_paths``
    (``s3://``, ``gs://``, ...). Without them a remote reader takes config
    ``io.storage-options`` (``run --storage-option``) when it is made; see
    docs/object-stores.md.

    ``partition=``: row ranges inside files instead of whole files
    (``{"mode": "manual", "num_of_partitions": N}`` or ``{"mode": "auto", ...}``; see
    ``FilePartitioningStage`` and docs/partitions-inside-files.md); each range is read alone.
    """

    file_paths: str | list[str] = ""
    files_per_partition: int | None = None
    blocksize: int | str | None = None
    fields: list[str] | None = None
    read_kwargs: dict[str, Any] | None = None
    file_extensions: list[str] | None = None
    task_type: str = "document"
    allow_empty: bool = False
    name: str = "reader"
    allow_no_files: bool = False
    partition: dict[str, Any] | None = None
    _generate_ids: bool = False
    _assign_ids: bool = False

    def __post_init__(self) -> None:
        refuse_both_id_options(self)
        if self.task_type != "document":
            msg = f"task_type={self.task_type!r} is not supported; only 'document' is"
            raise NotImplementedError(msg)
        spec = PartitionSpec.coerce(self.partition)
        refuse_with_file_grouping(spec, self.files_per_partition, self.blocksize)
        self.partition = spec.to_dict() if spec is not None else None
        if self.read_kwargs is None:
            self.read_kwargs = {}
        if isinstance(self.read_kwargs, dict) and self.read_kwargs.get("storage_options") is None:
            # Resolved here, on the driver: the workers get the stage, not the driver's config.
            default = default_storage_options(self.file_paths, None)
            if default is not None:
                self.read_kwargs = {**self.read_kwargs, "storage_options": default}

    def reader_stage(self) -> BaseReaderStage:
        raise NotImplementedError

    def default_extensions(self) -> list[str]:
        raise NotImplementedError

    format_name: ClassVar[str] = "files"

    def decompose(self) -> list[ProcessingStage]:
        partitioning = FilePartitioningStage(
            file_paths=self.file_paths,
            files_per_partition=self.files_per_partition,
            blocksize=self.blocksize,
            file_extensions=self.file_extensions or self.default_extensions(),
            storage_options=(self.read_kwargs or {}).get("storage_options"),
            allow_no_files=self.allow_no_files,
            partition=self.partition,
        )
        return [partitioning, self.reader_stage()]

    def get_description(self) -> str:
        parts = [f"Read {self.format_name} files from {self.file_paths}"]
        if self.files_per_partition:
            parts.append(f"with {self.files_per_partition} files per partition")
        elif self.blocksize:
            parts.append(f"with target blocksize {self.blocksize}")
        elif self.partition:
            parts.append(f"in row-range partitions {self.partition}")
        if self.fields:
            parts.append(f"reading columns: {self.fields}")
        return ", ".join(parts)


def refuse_both_id_options(reader: Any) -> None:
    if reader._generate_ids and reader._assign_ids:
        msg = "Cannot generate and assign IDs at the same time"  # NeMo's message
        raise ValueError(msg)


def id_column(reader: Any) -> list[str]:
    from curator_dask.ids.generator import CURATOR_DEDUP_ID_STR

    return [CURATOR_DEDUP_ID_STR] if reader._generate_ids or reader._assign_ids else []


def add_ids(batch: DocumentBatch, task: FileGroupTask, *, generate: bool) -> None:
    """NeMo's id column from the run's id generator: registered for the task's files
    (``generate``) or looked up; a row-range partition is keyed by its deterministic id, as
    NeMo keys a task that is not a file group."""
    from curator_dask.ids import generator as ids

    pieces = (getattr(task, "reader_config", None) or {}).get("pieces")
    key = task.get_deterministic_id() if pieces else list(task.data)
    if ids.CURATOR_DEDUP_ID_STR in batch.columns:
        logger.warning("Column %s already exists in %s, not %s IDs", ids.CURATOR_DEDUP_ID_STR,
                       key, "generating new" if generate else "re-assigning")
        return
    count = batch.num_items
    if generate:
        first = ids.register_batch(key, count)
        values = np.arange(first, first + count, dtype=np.int64)
    else:
        values = _assigned(key, pieces)
        if len(values) != count:
            msg = (f"the id generator holds {len(values)} ids for {key} but the partition "
                   f"has {count} rows: its files changed since the ids were generated; "
                   "generate them again (_generate_ids=True)")
            raise ValueError(msg)
    if isinstance(batch.data, pa.Table):
        batch.data = batch.data.append_column(ids.CURATOR_DEDUP_ID_STR, pa.array(values))
    else:
        batch.data[ids.CURATOR_DEDUP_ID_STR] = values


def _assigned(key: str | list[str], pieces: Any) -> np.ndarray:
    """The registered ids of a partition: its group's range, or, for files grouped otherwise
    than when the ids were registered, each file's own range in the group's order (the ranges
    need not follow each other, as NeMo's reader needs)."""
    from curator_dask.ids import generator as ids

    try:
        first, last = ids.get_batch_range(key, None)
    except ids.UnknownBatchError as unknown:
        if pieces or isinstance(key, str) or len(key) < 2:
            raise
        try:
            spans = [ids.get_batch_range([path], None) for path in key]
        except ids.UnknownBatchError:
            raise unknown from None
        return np.concatenate([np.arange(a, b + 1, dtype=np.int64) for a, b in spans])
    return np.arange(first, last + 1, dtype=np.int64)
