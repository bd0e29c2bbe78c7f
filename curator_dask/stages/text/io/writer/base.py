"""Shared writer logic: output modes, deterministic names, atomic commit.

See docs/design/contract.md §6.2.
"""

from __future__ import annotations

import logging
import os
import tempfile
import uuid
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import fsspec
from fsspec.implementations.local import LocalFileSystem

from curator_dask import lineage
from curator_dask.errors import OutputFolderError, OverwriteWithCheckpointError
from curator_dask.stages.base import ProcessingStage
from curator_dask.tasks import DocumentBatch, FileGroupTask
from curator_dask.utils.atomic import remove_stale_temp_files, write_atomic
from curator_dask.utils.files import is_remote_url
from curator_dask.utils.storage_options import default_storage_options

logger = logging.getLogger(__name__)

MODES = ("append", "error", "ignore", "overwrite")


def overwrite_refused(writer: Any, checkpoint_path: str,
                      lost: str = "") -> OverwriteWithCheckpointError:
    """The refusal of ``mode="overwrite"`` with a checkpoint, worded alike for curator_dask's
    writers and NeMo Curator's (``curator_dask/nemo/checks.py``): the writer, the mode, the
    checkpoint and the fixes, on one line. ``lost`` says what is already gone when the folder
    was emptied before the run (NeMo's writers empty it when they are built).

    Example:
        >>> class W: name, path = "jsonl_writer", "/out"
        >>> print(overwrite_refused(W(), "/ckpt"))  # doctest: +ELLIPSIS
        W 'jsonl_writer': mode='overwrite' cannot be combined with checkpoint_path='/ckpt': ...
    """
    lead = (f"{type(writer).__name__} {writer.name!r}: mode='overwrite' cannot be combined with "
            f"checkpoint_path={checkpoint_path!r}")
    fresh = f"a fresh checkpoint path (or delete {checkpoint_path})"
    if lost:
        msg = (f"{lead}: {lost}. To rebuild them, run with {fresh} and the writer built with "
               "mode='ignore' (outputs are replaced file by file, so later resumes lose nothing)")
    else:
        msg = (f"{lead}: it empties {writer.path} on every run, and a resumed run skips the "
               "sources the checkpoint records as complete, so their outputs would be lost. "
               "Use mode='ignore' (outputs are replaced file by file); to rebuild every "
               f"output, mode='ignore' with {fresh}")
    return OverwriteWithCheckpointError(msg)


def make_writable_folder(fs: fsspec.AbstractFileSystem, path: str, *, shown: str) -> None:
    """Make the folder ``path`` (file-system form) and, on a local file system, check that a
    file can be created in it (a read-only mount, missing permissions); ``shown`` leads the
    message of the ``OutputFolderError`` raised otherwise.

    Example:
        >>> root = tempfile.mkdtemp()
        >>> make_writable_folder(fsspec.filesystem("file"), f"{root}/out", shown="out")
        >>> os.path.isdir(f"{root}/out")
        True
    """
    try:
        fs.makedirs(path, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise OutputFolderError(f"{shown} is a file, not a folder (or lies under one); give "
                                "a folder path") from None
    except OSError as exc:
        raise OutputFolderError(f"{shown} cannot be made: {exc.strerror or exc}; give a "
                                "folder this user can write to") from None
    if not isinstance(fs, LocalFileSystem):
        return  # object stores have no folders to check; their errors name the object
    try:
        fd, probe = tempfile.mkstemp(dir=path, prefix=".curator-dask-probe-")
    except OSError as exc:
        raise OutputFolderError(f"{shown} is not writable ({exc.strerror or exc}); give a "
                                "folder this user can write to") from None
    os.close(fd)
    os.unlink(probe)


@dataclass
class BaseWriter(ProcessingStage[DocumentBatch, FileGroupTask]):
    """Writes each ``DocumentBatch`` to one file under ``path`` and returns its path.

    The file name is ``get_deterministic_hash(source_files, input task_id)`` plus the
    extension, so a replayed source rewrites the same file; the write is atomic (temp file and
    rename, or a single upload), so a crash never leaves a partial file under a final name.

    ``fsync`` (default: config ``curator-dask.io.fsync``, off) also flushes each file and its
    directory to disk before the rename, for durability across power loss; the rename alone
    already protects against a crashed or killed process.

    ``mode``: ``ignore`` (default: write into the directory, replacing same-named files),
    ``error`` (refuse an existing directory), ``overwrite`` (empty the directory when the
    pipeline starts; refused together with a ``checkpoint_path``).

    ``write_kwargs={"storage_options": {...}}``: fsspec options for a remote ``path``
    (``s3://``, ``gs://``, ...). Without them a remote writer takes config
    ``io.storage-options`` (``run --storage-option``) when it is made; see
    docs/object-stores.md.
    """

    path: str = ""
    file_extension: str = ""
    write_kwargs: dict[str, Any] = field(default_factory=dict)
    fields: list[str] | None = None
    mode: str = "ignore"
    append_mode_implemented: bool = False
    fsync: bool | None = None
    name: str = "writer"

    def __post_init__(self) -> None:
        if not self.path:
            msg = f"{type(self).__name__} needs an output path, e.g. path='./output'"
            raise ValueError(msg)
        if isinstance(self.write_kwargs, dict) and self.write_kwargs.get("storage_options") is None:
            # Resolved here, on the driver: the workers get the stage, not the driver's config.
            default = default_storage_options(self.path, None)
            if default is not None:
                self.write_kwargs = {**self.write_kwargs, "storage_options": default}
        self.storage_options = dict(self.write_kwargs.get("storage_options") or {})
        self.fs, self._fs_path = fsspec.core.url_to_fs(self.path, **self.storage_options)
        self.mode = str(self.mode).strip().lower()
        if self.mode not in MODES:
            msg = f"Invalid mode: {self.mode!r}. Allowed: {list(MODES)}"
            raise ValueError(msg)
        if self.mode == "append" and not self.append_mode_implemented:
            msg = "append mode is not implemented yet"
            raise NotImplementedError(msg)
        if self.mode == "error" and self.fs.exists(self._fs_path):
            msg = f"Output directory {self.path} already exists"
            raise FileExistsError(msg)
        if isinstance(self.fs, LocalFileSystem) and self.fs.isfile(self._fs_path):
            raise OutputFolderError(f"{self.name}: output path {self.path} is a file, not a "
                                    "folder; give a folder path (one file is written per "
                                    "partition into it)")
        # the folder is made by prepare_output, once the run found its inputs: a run refused
        # before it starts (a misspelled input path) leaves no empty output folder behind
        if self.fsync is None:
            from curator_dask import config

            self.fsync = bool(config.get("io.fsync"))

    def prepare_output(self, *, checkpoint_path: str | None = None) -> None:
        """Driver-side, once before the run, after the inputs were found: apply
        ``mode="overwrite"``, make the folder and check that this process can write into it
        (``OutputFolderError`` naming it, before any cluster starts, rather than a worker's
        error naming a hidden temp file).

        The directory is emptied here rather than when the stage is built, so that a pipeline
        refused for another reason has deleted nothing.
        """
        if isinstance(self.fs, LocalFileSystem):
            removed = remove_stale_temp_files(self._fs_path)
            if removed:
                logger.info("%s: removed %d temp files of killed writers in %s", self.name,
                            len(removed), self.path)
        if self.mode == "overwrite":
            if checkpoint_path is not None:
                raise overwrite_refused(self, checkpoint_path)
            if self.fs.exists(self._fs_path):
                self.fs.rm(self._fs_path, recursive=True)
        make_writable_folder(self.fs, self._fs_path, shown=f"{self.name}: output folder "
                             f"{self.path}")

    def get_file_extension(self) -> str:
        return self.file_extension

    def inputs(self) -> tuple[list[str], list[str]]:
        return ["data"], list(self.fields or [])

    def outputs(self) -> tuple[list[str], list[str]]:
        return ["data"], []

    def write_data(self, task: DocumentBatch, f: BinaryIO) -> None:
        raise NotImplementedError

    def output_path(self, task: DocumentBatch) -> str:
        """The final path (file-system form) of the file for ``task``."""
        basename = lineage.output_basename(task._metadata.get("source_files"), task.task_id)
        if basename is None:
            logger.warning(
                "Task %r has no source_files and no deterministic lineage id; using a random "
                "file name, which a replay will not overwrite",
                task.task_id,
            )
            basename = uuid.uuid4().hex
        directory = self._fs_path.rstrip(self.fs.sep)
        return self.fs.sep.join([directory, f"{basename}.{self.get_file_extension()}"])

    def process(self, task: DocumentBatch) -> FileGroupTask:
        file_path = self.output_path(task)
        write_atomic(self.fs, file_path, lambda f: self.write_data(task, f),
                     fsync=bool(self.fsync))  # None before setup: no fsync
        shown = self.fs.unstrip_protocol(file_path) if is_remote_url(self.path) else file_path
        return FileGroupTask(
            dataset_name=task.dataset_name,
            data=[shown],
            _metadata={**task._metadata, "format": self.get_file_extension()},
            _stage_perf=task._stage_perf,
        )
