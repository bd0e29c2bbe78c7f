"""Read-only look at a checkpoint: writer files, their counts, and which inputs are complete."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import fsspec

from curator_dask.resumability.completed_set import CompletedSet
from curator_dask.resumability.layout import METADATA_DIRNAME
from curator_dask.resumability.safe_read import is_damage
from curator_dask.resumability.store import read_writer_files, writer_file_sizes
from curator_dask.utils.files import is_remote_url


@dataclass
class WriterFile:
    """One ``*.mdb``: its completed count, or why it could not be read; ``damaged`` when its
    content is at fault (its sources run again; docs/design/contract.md §4.3)."""

    path: str
    size: int
    completed: int | None = None
    error: str | None = None
    damaged: bool = False


@dataclass
class PartitionStatus:
    source_id: str
    files: list[str]
    complete: bool


@dataclass
class CheckpointReport:
    """What ``python -m curator_dask checkpoint inspect`` prints.

    Example:
        >>> import tempfile
        >>> inspect_checkpoint(tempfile.mkdtemp()).completed
        []
    """

    checkpoint: str
    metadata_dir: str
    writers: list[WriterFile] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)
    partitions: list[PartitionStatus] | None = None

    @property
    def damaged(self) -> list[str]:
        """The writer files whose content is damaged."""
        return [w.path for w in self.writers if w.damaged]

    def to_dict(self) -> dict:
        return {**asdict(self), "damaged": self.damaged}


def inspect_checkpoint(checkpoint: str, storage_options: dict | None = None) -> CheckpointReport:
    """Read every writer file of ``checkpoint`` (never writes), each in a child process so a
    damaged one cannot kill this one; unreadable and damaged files are reported."""
    fs, root = fsspec.core.url_to_fs(checkpoint, **(storage_options or {}))
    meta = fs.sep.join([root.rstrip(fs.sep), METADATA_DIRNAME])
    remote = is_remote_url(checkpoint)
    shown = (lambda p: fs.unstrip_protocol(p)) if remote else (lambda p: p)
    report = CheckpointReport(checkpoint=checkpoint, metadata_dir=shown(meta))
    sizes = writer_file_sizes(fs, meta)
    paths = list(sizes)
    parts = []
    for path, (shown_path, ids, exc) in zip(
        paths, read_writer_files(fs, paths, remote=remote), strict=True
    ):
        if ids is None and not fs.exists(path):
            continue  # removed since it was listed: an empty file its run dropped at close
        writer = WriterFile(path=shown_path, size=sizes[path])
        if ids is None:
            writer.error = f"{type(exc).__name__}: {exc}"
            # exc is never None here (no ids come with an error): named for the type checker
            writer.damaged = exc is not None and is_damage(exc, sizes[path])
        else:
            writer.completed = len(ids)
            parts.append(ids)
        report.writers.append(writer)
    report.completed = sorted(CompletedSet.union_all(parts))
    return report


def map_partitions(
    report: CheckpointReport,
    file_paths: str | list[str],
    *,
    files_per_partition: int | None = None,
    blocksize: str | None = None,
    file_extensions: list[str] | None = None,
    storage_options: dict | None = None,
) -> list[PartitionStatus]:
    """Partition the input as a pipeline would and mark each partition complete or pending.

    The partitioning options must match the pipeline's, since source ids hash file groups.
    """
    from curator_dask.stages.file_partitioning import FilePartitioningStage
    from curator_dask.tasks import EmptyTask

    stage = FilePartitioningStage(
        file_paths=file_paths, files_per_partition=files_per_partition, blocksize=blocksize,
        file_extensions=file_extensions, storage_options=storage_options,
    )
    done = set(report.completed)
    statuses = []
    for task in stage.process(EmptyTask()):
        sid = task.get_deterministic_id()
        statuses.append(PartitionStatus(source_id=sid, files=list(task.data), complete=sid in done))
    report.partitions = statuses
    return statuses
