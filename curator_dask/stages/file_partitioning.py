"""``FilePartitioningStage``: finds input files and groups them into source tasks.

See docs/design/contract.md §2 (whole files) and §2.6 (row ranges, ``partition=``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from dask.utils import parse_bytes

from curator_dask.partitions.spec import PartitionSpec, refuse_with_file_grouping
from curator_dask.stages.base import ProcessingStage
from curator_dask.stages.resources import Resources
from curator_dask.tasks import EmptyTask, FileGroupTask, RowRangeTask
from curator_dask.utils.files import (
    NoInputFilesError,
    PackedPaths,
    check_paths_exist,
    gather_file_records,
    infer_dataset_name,
    iter_file_records,
)

logger = logging.getLogger(__name__)

_DEFAULT_BLOCKSIZE = "512MB"


class PlannedTasks(Iterator[FileGroupTask]):
    """The tasks of planned partitions, made one at a time by ``make()`` (a generator
    function); :meth:`again` makes them anew from the first without touching this iterator:
    a checkpointed run compares every file group with its partition record before the first
    is sent, and then pulls them as its window frees (docs/pipeline-model.md "Lazy sources").

    Example:
        >>> tasks = PlannedTasks(lambda: iter(["a", "b"]))
        >>> next(tasks), list(tasks.again()), list(tasks)
        ('a', ['a', 'b'], ['b'])
    """

    def __init__(self, make: Callable[[], Iterator[Any]]) -> None:
        self._make = make
        self._tasks = make()

    def __next__(self) -> Any:
        return next(self._tasks)

    def again(self) -> Iterator[Any]:
        """The same tasks, made anew from the first."""
        return self._make()

    def close(self) -> None:
        closing = getattr(self._tasks, "close", None)
        if callable(closing):
            closing()


@dataclass
class FilePartitioningStage(ProcessingStage[EmptyTask, FileGroupTask]):
    """Lists files under ``file_paths`` (fsspec) and emits one ``FileGroupTask`` per partition.

    Partitions hold one file each by default, ``files_per_partition`` files, or files packed
    greedily (by size) up to ``blocksize`` bytes.

    Every entry of ``file_paths`` must name at least one file with one of the
    ``file_extensions``: a path that does not exist, a glob that matches nothing or a directory
    without such files raises ``NoInputFilesError`` (a ``FileNotFoundError``) naming the entry
    (docs/design/contract.md §2.3). ``allow_no_files=True`` skips such entries and accepts an
    empty input (no tasks, a warning), as NeMo Curator always does. An existing path is taken
    literally, even with glob characters such as ``[`` in its name.

    ``partition=`` splits files into row ranges instead (one ``RowRangeTask`` each):
    ``{"mode": "manual", "num_of_partitions": N}`` or ``{"mode": "auto", "target_size_mb":
    256, "size": 10000, "max_size_mb": 256, "max_rows": 50000}``; not together with
    ``files_per_partition`` or ``blocksize``. In a checkpointed run the partitions and their
    content hashes are recorded in the checkpoint, and a later run rebuilds and verifies them
    (docs/partitions-inside-files.md).

    Example:
        >>> stage = FilePartitioningStage(file_paths="data/in/", files_per_partition=2)
        >>> stage.name
        'file_partitioning'
        >>> FilePartitioningStage("data/in/", partition={"mode": "auto"}).partition["max_rows"]
        50000
    """

    file_paths: str | list[str] = ""
    files_per_partition: int | None = None
    blocksize: int | str | None = None
    file_extensions: list[str] | None = None
    storage_options: dict | None = None
    limit: int | None = None
    name: str = "file_partitioning"
    allow_no_files: bool = False
    partition: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.files_per_partition is not None and self.blocksize is not None:
            msg = (
                "Both 'files_per_partition' and 'blocksize' were specified, but only one is "
                "allowed"
            )
            raise ValueError(msg)
        spec = PartitionSpec.coerce(self.partition)
        refuse_with_file_grouping(spec, self.files_per_partition, self.blocksize)
        self.partition = spec.to_dict() if spec is not None else None  # canonical: the record
        self._planned: Any = None
        if self.file_extensions is None:
            self.file_extensions = [".jsonl", ".json", ".parquet"]
        if self.storage_options is None:
            self.storage_options = {}
        self._blocksize = parse_bytes(
            self.blocksize if self.blocksize is not None else _DEFAULT_BLOCKSIZE
        )
        if self._blocksize > parse_bytes(_DEFAULT_BLOCKSIZE):
            logger.warning(
                "Blocksize is greater than 512 MB, which is not recommended: %s", self.blocksize
            )
        self.resources = Resources(cpus=0.5)

    def num_workers(self) -> int:
        return 1

    def inputs(self) -> tuple[list[str], list[str]]:
        return [], []

    def outputs(self) -> tuple[list[str], list[str]]:
        return [], []

    def check_inputs_exist(self) -> None:
        """Refuse an entry of ``file_paths`` that names nothing (``NoInputFilesError``), with
        one metadata request per entry; nothing when ``allow_no_files``. A job asks this
        before it is made (``Pipeline.run``); the listing itself comes with the run."""
        if not self.allow_no_files and isinstance(self.file_paths, (str, list)):
            check_paths_exist(self.file_paths, self.storage_options)

    def _records(self) -> list[tuple[str, int]]:
        return gather_file_records(
            self.file_paths,
            extensions=self.file_extensions,
            storage_options=self.storage_options,
            sort_by_size=self.blocksize is not None,
            require_files=not self.allow_no_files,
        )

    def use_partition_record(self, checkpoint_url: str | None, storage_options: dict | None = None,
                             *, strict: bool = False) -> None:
        """Settle this run's row-range partitions against the checkpoint's record, before the
        head runs: rebuilt from the record and verified, or planned, hashed and recorded
        (``partitions/resume.py``; ``strict``: a job's resume). Without a checkpoint nothing
        happens and ``process`` plans without hashing. Raises ``PartitionRecordError`` or
        ``PartitionContentChangedError`` before anything is processed."""
        self._planned = None
        if checkpoint_url is None:
            return
        from curator_dask.partitions.resume import settle

        records = self._records() if self.partition is not None else []
        self._planned = settle(self, records, checkpoint_url, storage_options, strict=strict)

    def process(self, task: EmptyTask) -> list[FileGroupTask]:
        return list(self.process_iter(task))

    def process_iter(self, _: EmptyTask) -> Iterator[FileGroupTask]:
        """The partitions, planned now (files listed, sizes read, a missing input raised at
        once), their tasks made one at a time as the run pulls them (the engine prefers this
        to :meth:`process`: the driver then never holds every source task,
        docs/pipeline-model.md "Lazy sources"). The iterator's ``again()`` makes the same
        tasks anew, for the partition check of a checkpointed run."""
        planned, self._planned = self._planned, None  # once: the stage travels to the workers
        if planned is not None:
            return self._row_range_tasks(planned)
        spec = PartitionSpec.coerce(self.partition)  # None: whole files
        if spec is None and not self.files_per_partition and self.blocksize is None:
            return self._single_file_tasks()
        records = self._records()
        if not records:
            logger.warning("No files found under %s", self.file_paths)
            return iter(())
        if spec is not None:
            from curator_dask.partitions.plan import plan_partitions

            return self._row_range_tasks(plan_partitions(records, spec, self.storage_options))
        if self.files_per_partition:
            partitions = self._partition_by_count([path for path, _ in records],
                                                  self.files_per_partition)
        elif self.blocksize:
            partitions = self._partition_by_size(records, self._blocksize)
        else:  # blocksize=0: one file each, in size order
            partitions = [[path] for path, _ in records]
        sizes = dict(records)
        self._warn_oversized(any(size < 0 for _, size in records),
                             ((group, sum(sizes[path] for path in group)) for group in partitions))
        return self._file_group_tasks(partitions.__getitem__, len(partitions),
                                      infer_dataset_name(records[0][0]))

    def _single_file_tasks(self) -> Iterator[FileGroupTask]:
        """One file per partition in path order (the default): the listing streamed into
        packed paths, so
        the driver holds ~20 bytes a file, not a tuple, a string and a list each."""
        unknown, over = False, []  # as _warn_oversized takes them

        def listed() -> Iterator[str]:
            nonlocal unknown
            for path, size in iter_file_records(
                    self.file_paths, extensions=self.file_extensions,
                    storage_options=self.storage_options, require_files=not self.allow_no_files):
                unknown = unknown or size < 0
                if size > self._blocksize:
                    over.append(([path], size))
                yield path

        paths = PackedPaths(listed())
        if not paths:
            logger.warning("No files found under %s", self.file_paths)
            return iter(())
        self._warn_oversized(unknown, over)
        return self._file_group_tasks(lambda i: [paths[i]], len(paths),
                                      infer_dataset_name(paths[0]))

    def _file_group_tasks(self, group: Callable[[int], list[str]], total: int,
                          dataset_name: str) -> PlannedTasks:
        """A ``FileGroupTask`` for each of the ``total`` partitions (``group(i)``: its files),
        up to ``limit``, made as they are pulled."""
        def make() -> Iterator[FileGroupTask]:
            for i in range(total)[:self.limit]:
                files = group(i)
                metadata = {"partition_index": i, "total_partitions": total,
                            "source_files": files}
                yield FileGroupTask(dataset_name=dataset_name, data=files, _metadata=metadata,
                                    reader_config={})
        return PlannedTasks(make)

    def _row_range_tasks(self, plan: Any) -> Iterator[FileGroupTask]:
        """One ``RowRangeTask`` per partition (a compressed file's: a ``FileGroupTask``)."""
        if not plan.partitions:
            logger.warning("No rows in the files under %s", self.file_paths)
        dataset_name = self._get_dataset_name([f.path for f in plan.files])
        return PlannedTasks(lambda: self._row_range_iter(plan, dataset_name))

    def _row_range_iter(self, plan: Any, dataset_name: str) -> Iterator[FileGroupTask]:
        total = len(plan.partitions)
        for i, part in enumerate(plan.partitions[:self.limit]):
            if part.whole_file:
                group = part.paths
                metadata = {"partition_index": i, "total_partitions": total,
                            "source_files": group}
                yield FileGroupTask(dataset_name=dataset_name, data=group, _metadata=metadata,
                                    reader_config={})
            else:
                yield RowRangeTask.of([p.to_dict() for p in part.pieces],
                                      dataset_name=dataset_name, index=i, total=total)

    def _warn_oversized(self, unknown: bool, groups: Iterable[tuple[list[str], int]]) -> None:
        """A warning for each of ``groups`` (files, bytes) over ``blocksize``, unless some
        file's size is ``unknown``."""
        if unknown:
            return  # unknown sizes: nothing to check
        for group, total in groups:
            if total > self._blocksize:
                logger.warning(
                    "File group task has exceeded the storage limit per partition: %s "
                    "(%d bytes > %d)", group, total, self._blocksize,
                )

    @staticmethod
    def _partition_by_count(files: list, n: int) -> list[list]:
        return [files[i : i + n] for i in range(0, len(files), n)]

    @staticmethod
    def _partition_by_size(records: list[tuple[str, int]], max_bytes: int) -> list[list[str]]:
        partitions: list[list[str]] = []
        current: list[str] = []
        current_size = 0
        for path, size in sorted(records, key=lambda r: r[1]):
            if current_size + size > max_bytes:
                if current:
                    partitions.append(current)
                current, current_size = [], 0
            current.append(path)
            current_size += size
        if current:
            partitions.append(current)
        return partitions

    @staticmethod
    def _get_dataset_name(files: list[str]) -> str:
        return infer_dataset_name(files[0]) if files else "dataset"


__all__ = ["FilePartitioningStage", "NoInputFilesError", "PlannedTasks"]
