"""Phase 1 of the deduplication workflows: read the corpus, compute a per-partition signature,
write one Parquet file per file group; then give every document a deterministic id.

Phase 1 is an ordinary curator_dask ``Pipeline`` run (``FilePartitioningStage`` → reader →
:class:`SignatureWriterStage`), so ``checkpoint_path=`` skips the file groups an earlier run
completed, through the same completion plugin and LMDB files as any run. Each group's file is
``<out_dir>/<registry key>.parquet`` (the key of NeMo's id generator: ``uuid5`` of the group's
paths), written atomically, and records the group's paths and row count in its schema metadata.

Ids are given after phase 1, on the driver: the groups are registered with an
:class:`~curator_dask.ids.generator.IdGeneratorBase` in plan order (the order of the
groups' paths), and row ``i`` of a group gets ``first_id + i``. NeMo's workflows register each
group when a worker reads it, so their ids depend on which worker finished first; these do
not, so a clean run, a resumed run and a rerun agree, and NeMo's
``TextDuplicatesRemovalWorkflow(id_generator_path=...)`` reading the corpus again with the same
partitioning assigns the same ids. See docs/deduplication.md.
"""

from __future__ import annotations

import contextlib
import json
import logging
import posixpath
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from curator_dask.stages.base import ProcessingStage
from curator_dask.tasks import DocumentBatch, EmptyTask, FileGroupTask
from curator_dask.utils import private_api
from curator_dask.utils.atomic import write_atomic

if TYPE_CHECKING:
    from curator_dask.stages.text.io.reader.base import BaseReaderStage

logger = logging.getLogger(__name__)

ID_COLUMN = "_curator_dedup_id"
_META_KEY = b"curator_dask.dedup"


@dataclass(frozen=True)
class SignatureSpec:
    """What phase 1 computes for each partition.

    ``compute`` takes the partition's text column (and the id column when the corpus brings its
    own ids) as a pandas DataFrame (a pyarrow Table when ``compute.accepts_arrow`` is true,
    which saves converting the texts) and returns the signature columns for the same rows in the
    same order (a pandas DataFrame or a pyarrow Table). It must be picklable (it travels to the
    workers) and should be a dataclass instance, so that its parameters are part of the
    checkpoint's fingerprint: a resume with other parameters is refused, not mixed.
    """

    name: str
    compute: Callable[[pd.DataFrame], Any]
    text_field: str = "text"


@dataclass
class SignatureWriterStage(ProcessingStage[DocumentBatch, FileGroupTask]):
    """Computes ``spec.compute`` on one partition and writes it to ``<out_dir>/<key>.parquet``."""

    spec: SignatureSpec | None = None
    out_dir: str = ""
    id_field: str | None = None
    storage_options: dict[str, Any] = field(default_factory=dict)
    name: str = "signatures"

    def process(self, task: DocumentBatch) -> FileGroupTask:
        assert self.spec is not None
        files = list((task._metadata or {}).get("source_files") or [])
        if not files:
            msg = (f"{self.name}: the batch of task {task.task_id} does not name its source "
                   "files; phase 1 reads whole files with FilePartitioningStage")
            raise ValueError(msg)
        table = as_table(task.data)
        columns = [self.spec.text_field] + ([self.id_field] if self.id_field else [])
        missing = [c for c in columns if c not in table.column_names]
        if missing and table.num_rows == 0:  # an empty file: no columns, no documents
            table = pa.table({c: pa.array([], pa.string()) for c in columns})
            missing = []
        if missing:
            msg = (f"{self.name}: the files {files[:3]} have no column {missing[0]!r} "
                   f"(columns: {table.column_names}); set text_field= / id_field= to one of "
                   "them")
            raise ValueError(msg)
        frame = table.select(columns)
        if not getattr(self.spec.compute, "accepts_arrow", False):
            frame = frame.to_pandas()
        out = as_table(self.spec.compute(frame))
        if out.num_rows != table.num_rows:
            msg = (f"{self.name}: the signature of {files[:3]} has {out.num_rows} rows for "
                   f"{table.num_rows} documents")
            raise ValueError(msg)
        if self.id_field:
            out = out.append_column(ID_COLUMN, table.column(self.id_field))
        key = group_key(files)
        # "written" tells this file from one an earlier run wrote for the same files (a
        # checkpointed rerun reprocesses a changed input): later phases key on it
        meta = {_META_KEY: json.dumps({"files": files, "rows": table.num_rows,
                                       "written": uuid.uuid4().hex}).encode()}
        out = out.replace_schema_metadata({**(out.schema.metadata or {}), **meta})
        fs, root = fsspec.core.url_to_fs(self.out_dir, **self.storage_options)
        path = posixpath.join(root, f"{key}.parquet")
        write_atomic(fs, path, lambda f: pq.write_table(out, f))
        return FileGroupTask(dataset_name=task.dataset_name, data=[path],
                             _metadata={**(task._metadata or {}), "num_rows": table.num_rows})


def as_table(data: pa.Table | pd.DataFrame) -> pa.Table:
    """A batch's data (or a signature) as a pyarrow Table, without the pandas index."""
    return data if isinstance(data, pa.Table) else pa.Table.from_pandas(data,
                                                                        preserve_index=False)


def group_key(files: list[str]) -> str:
    """NeMo's id generator key of a file group (its ``hash_files``: ``uuid5`` of the paths
    joined by ``;``).

    Example:
        >>> group_key(["/data/a.jsonl"])
        '64532fd2-bf04-55ac-a4f0-6f50fb616607'
    """
    return str(uuid.uuid5(uuid.NAMESPACE_URL, ";".join(files)))


@dataclass(frozen=True)
class GroupInfo:
    """One file group of phase 1: its paths, its rows, its signature file, its first id, and
    which writing of the signature file this is (``version``)."""

    files: tuple[str, ...]
    rows: int
    path: str
    first_id: int = 0
    version: str = ""


@dataclass
class Phase1Result:
    """The file groups phase 1 wrote, in plan order, with their first ids."""

    groups: list[GroupInfo]
    storage_options: dict[str, Any]
    own_ids: bool = False

    @property
    def num_documents(self) -> int:
        return sum(g.rows for g in self.groups)

    def id_generator(self) -> Any:
        """An id generator with every group registered in plan order (NeMo's JSON with
        ``to_disk``)."""
        from curator_dask.ids.generator import IdGeneratorBase

        generator = IdGeneratorBase()
        for g in self.groups:
            generator.register_batch(list(g.files), g.rows)
        return generator

    def frame(self, columns: list[str] | None = None) -> Any:
        """A dask DataFrame, one partition per group: ``_curator_dedup_id`` (int64) and the
        signature columns (or ``columns`` of them)."""
        import dask.dataframe as dd

        if not self.groups:
            msg = "phase 1 found no documents: the input has no files with rows"
            raise ValueError(msg)
        load = _GroupLoader(self.storage_options, self.own_ids, columns)
        meta = load(GroupInfo((), 0, self.groups[0].path, 0)).iloc[:0]
        return dd.from_map(load, self.groups, meta=meta, enforce_metadata=False)


@dataclass(frozen=True)
class _GroupLoader:
    storage_options: dict[str, Any]
    own_ids: bool
    columns: list[str] | None

    def __call__(self, group: GroupInfo) -> pd.DataFrame:
        with fsspec.open(group.path, "rb", **self.storage_options) as f:
            table = pq.read_table(f, columns=self._columns())
        if group.rows == 0 and table.num_rows:  # the meta: no rows
            table = table.slice(0, 0)
        if not self.own_ids:
            import numpy as np

            ids = np.arange(group.first_id, group.first_id + table.num_rows, dtype="int64")
            table = table.append_column(ID_COLUMN, pa.array(ids))
        frame = table.to_pandas()
        return frame[[ID_COLUMN] + [c for c in frame.columns if c != ID_COLUMN]]

    def _columns(self) -> list[str] | None:
        if self.columns is None:
            return None
        return list(self.columns) + ([ID_COLUMN] if self.own_ids else [])


def check_initial_tasks(initial_tasks: list[Any] | None, input_path: Any) -> None:
    """NeMo's checks of a workflow's ``run(initial_tasks=...)``: file groups only, and
    ``input_path`` when there are none (a warning when both are given)."""
    if initial_tasks is not None:
        bad = [t for t in initial_tasks if type(t).__name__ != "FileGroupTask"]
        if bad:
            msg = ("All input tasks to the pipeline must be of type FileGroupTask pointing "
                   f"to the dataset to be deduplicated; got {type(bad[0]).__name__}")
            raise ValueError(msg)
        if input_path is not None:
            logger.warning("Ignoring input_path as initial_tasks are provided.")
    elif input_path is None:
        msg = ("input_path to the dataset must be provided if initial_tasks are not "
               "provided manually.")
        raise ValueError(msg)


def plan_groups(partitioning: Any) -> list[list[str]]:
    """The file groups ``partitioning`` (a ``FilePartitioningStage``) makes, in its order."""
    return [list(t.data) for t in partitioning.process(EmptyTask())]


def run_phase1(executor: Any, spec: SignatureSpec, *, input_path: str | list[str] | None,
               input_filetype: str, input_blocksize: Any, input_file_extensions: Any,
               read_kwargs: dict[str, Any] | None, id_field: str | None, assign_id: bool,
               out_dir: str, checkpoint_path: str | None,
               initial_tasks: list[Any] | None = None,
               out_storage_options: dict[str, Any] | None = None,
               verify_inputs: str = "fingerprint") -> Phase1Result:
    """Run phase 1 on ``executor`` and return its groups with deterministic first ids.

    Without a checkpoint, ``out_dir`` is emptied first; with one, the files of completed groups
    are kept and only the others are computed, except those whose input files changed since
    (``verify_inputs``: ``"fingerprint"``, size and mtime or ETag; ``"content"``, a sha256;
    ``"off"``, never checked; the pipeline's ``verify_inputs``). ``out_storage_options`` are
    the fsspec options of ``out_dir`` (default: those of ``read_kwargs``).
    """
    from curator_dask.pipeline import Pipeline
    from curator_dask.stages.file_partitioning import FilePartitioningStage

    read_kwargs = dict(read_kwargs or {})
    storage = dict(read_kwargs.get("storage_options") or {})
    out_storage = dict(storage if out_storage_options is None else out_storage_options)
    if input_filetype not in ("jsonl", "parquet"):
        msg = f"input_filetype must be 'jsonl' or 'parquet', got {input_filetype!r}"
        raise ValueError(msg)
    if not assign_id and not id_field:
        msg = "assign_id=False needs id_field= (the column that holds the corpus's own ids)"
        raise ValueError(msg)
    if input_path is None and initial_tasks is None:
        msg = "phase 1 needs input_path or initial_tasks (the file groups to read): give one"
        raise ValueError(msg)
    own_id = None if assign_id else id_field
    extensions = input_file_extensions or ([".jsonl", ".json"] if input_filetype == "jsonl"
                                           else [".parquet"])
    # unused with initial_tasks, where input_path may be None
    partitioning = FilePartitioningStage(file_paths=[] if input_path is None else input_path,
                                         blocksize=input_blocksize,
                                         file_extensions=list(extensions),
                                         storage_options=storage or None)
    if initial_tasks is not None:  # the writer finds a group's paths in its metadata
        initial_tasks = [_with_source_files(t) for t in initial_tasks]
    planned = ([list(t.data) for t in initial_tasks] if initial_tasks is not None
               else plan_groups(partitioning))
    out_fs, out_root = fsspec.core.url_to_fs(out_dir, **out_storage)
    if checkpoint_path is None and out_fs.exists(out_root):
        out_fs.rm(out_root, recursive=True)
    out_fs.makedirs(out_root, exist_ok=True)
    reader = phase1_reader(input_filetype, spec.text_field, own_id, read_kwargs)
    writer = SignatureWriterStage(spec=spec, out_dir=out_dir, id_field=own_id,
                                  storage_options=out_storage, name=f"{spec.name}_signatures")
    stages: list[ProcessingStage] = [*([] if initial_tasks is not None else [partitioning]),
                                     reader, writer]
    pipeline = Pipeline(name=f"{spec.name}_phase1", stages=stages)
    ckpt = None if checkpoint_path is None else posixpath.join(str(checkpoint_path), spec.name)
    pipeline.run(executor, initial_tasks=initial_tasks, checkpoint_path=ckpt,
                 verify_inputs=None if ckpt is None else verify_inputs,
                 on_input_change=None if ckpt is None else "reprocess")
    groups, first = [], 0
    for files in sorted(planned):
        path = posixpath.join(out_root, f"{group_key(files)}.parquet")
        rows, version = _rows_of(out_fs, path, files, ckpt)
        groups.append(GroupInfo(tuple(files), rows, out_fs.unstrip_protocol(path)
                                if _remote(out_dir) else path, first, version))
        first += rows
    return Phase1Result(groups, out_storage, own_ids=own_id is not None)


def _with_source_files(task: Any) -> Any:
    meta = dict(getattr(task, "_metadata", None) or {})
    if meta.get("source_files"):
        return task
    import copy

    task = copy.copy(task)
    task._metadata = {**meta, "source_files": list(task.data)}
    return task


def _remote(path: str) -> bool:
    return "://" in str(path) and not str(path).startswith("file://")


def _rows_of(fs: Any, path: str, files: list[str], ckpt: str | None) -> tuple[int, str]:
    """The rows of a group's signature file, and which writing of it this is."""
    try:
        with fs.open(path, "rb") as f:
            meta = pq.read_schema(f).metadata or {}
    except FileNotFoundError:
        hint = (f"; the checkpoint {ckpt} records it as complete but its file is gone: run "
                "with a fresh checkpoint path") if ckpt else ""
        msg = f"phase 1 wrote no signature file for the files {files[:3]} ({path}){hint}"
        raise FileNotFoundError(msg) from None
    recorded = json.loads(meta[_META_KEY])
    return int(recorded["rows"]), str(recorded.get("written", ""))


def phase1_reader(filetype: str, text_field: str, id_field: str | None,
            read_kwargs: dict[str, Any]) -> BaseReaderStage:
    fields = [text_field] + ([id_field] if id_field else [])
    if filetype == "jsonl":
        from curator_dask.stages.text.io.reader.jsonl import JsonlReaderStage

        return JsonlReaderStage(fields=fields, read_kwargs=read_kwargs, allow_empty=True)
    from curator_dask.stages.text.io.reader.parquet import ParquetReaderStage

    return ParquetReaderStage(fields=fields, read_kwargs=read_kwargs, allow_empty=True)


class _SaidOnce(logging.Filter):
    """Lets each distinct message through once."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if text in self.seen:
            return False
        self.seen.add(text)
        return True


@contextlib.contextmanager
def said_once(logger_name: str = "curator_dask.stages.file_partitioning") -> Iterator[None]:
    """A workflow plans the same file groups several times (phase 1's plan, its pipeline, the
    removal's pipeline), and each plan warns of a group over ``input_blocksize``: within the
    block, each distinct message of ``logger_name`` is shown once."""
    log = logging.getLogger(logger_name)
    once = _SaidOnce()
    log.addFilter(once)
    try:
        yield
    finally:
        log.removeFilter(once)


@contextlib.contextmanager
def quiet_shuffle_notices() -> Iterator[None]:
    """distributed's P2P plugin logs two WARNING lines per shuffle ("initialized by task",
    "deactivated"); in an embedded cluster its scheduler is this process, so a workflow's
    shuffles would fill the terminal with them. Raised to ERROR for the run, then restored."""
    log = logging.getLogger(private_api.SHUFFLE_SCHEDULER_LOGGER)
    level = log.level
    log.setLevel(max(level, logging.ERROR))
    try:
        yield
    finally:
        log.setLevel(level)


__all__ = ["ID_COLUMN", "GroupInfo", "Phase1Result", "SignatureSpec", "SignatureWriterStage",
           "as_table", "check_initial_tasks", "group_key", "phase1_reader", "quiet_shuffle_notices",
           "run_phase1", "said_once"]
