"""Phase 1 of the deduplication workflows: read the corpus, compute a per-partition signature,
write one Parquet file per file group; then give every document a deterministic id.

Phase 1 is an ordinary curator_dask ``Pipeline`` run (``FilePartitioningStage`` → reader →
:class:`SignatureWriterStage`), so ``checkpoint_path=`` skips the file groups an earlier run
completed, through the same completion plugin and LMDB files as any run. Each group's file is
``<out_dir>/<registry key>.parquet`` (the key of NeMo's id generator: ``uuid5`` of the group's
paths; a row-range partition's deterministic id with ``partition=``), written atomically, and
records the group's paths, its row count and each file's (piece's) rows in its schema
metadata.

Ids are given after phase 1, on the driver: the groups are registered with an
:class:`~curator_dask.ids.generator.IdGeneratorBase` in plan order (the order the partitioning
makes them: files by size with ``blocksize``, in listing order otherwise, row ranges in listing
order; ``initial_tasks`` in the order of their paths, whatever order they come in), and
row ``i`` of a group gets ``first_id + i``; each file also gets its own entry, its
range inside its group (:meth:`~curator_dask.ids.generator.IdGeneratorBase.record_file_range`).
NeMo's workflows register each group when a worker reads it, so their ids depend on which
worker finished first; these do not, so a clean run, a resumed run and a rerun agree. A
removal (NeMo's ``TextDuplicatesRemovalWorkflow(id_generator_path=...)`` or curator_dask's)
finds the ids of any grouping of the files: the same groups, single files, or consecutive
files of the same partitioning at another block size or count (their ranges follow each
other); curator_dask's reader also any other grouping, file by file. See
docs/deduplication.md ("Removal with another grouping").
"""

from __future__ import annotations

import contextlib
import json
import logging
import posixpath
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from curator_dask.lineage import row_range_id
from curator_dask.stages.base import ProcessingStage
from curator_dask.stages.text.io.reader.base import BaseReaderStage
from curator_dask.stages.text.io.reader.jsonl import JsonlReaderStage
from curator_dask.stages.text.io.reader.parquet import ParquetReaderStage
from curator_dask.tasks import DocumentBatch, EmptyTask, FileGroupTask
from curator_dask.utils import private_api
from curator_dask.utils.atomic import write_atomic

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
        meta_in = task._metadata or {}
        files = list(meta_in.get("source_files") or [])
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
        ranges = [tuple(r) for r in meta_in.get("row_ranges") or []]
        key = row_range_id(ranges) if ranges else group_key(files)
        # "written" tells this file from one an earlier run wrote for the same files (a
        # checkpointed rerun reprocesses a changed input): later phases key on it; "unit_rows"
        # are the rows of each file (row range) of the group, for the files' own id ranges
        meta = {_META_KEY: json.dumps({"files": files, "rows": table.num_rows,
                                       "unit_rows": meta_in.get("unit_rows"),
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
    which writing of the signature file this is (``version``); for a row-range partition its
    pieces (``ranges``: path, start row, end row); the rows of each file or piece
    (``unit_rows``, empty when a signature file of an earlier version does not say)."""

    files: tuple[str, ...]
    rows: int
    path: str
    first_id: int = 0
    version: str = ""
    ranges: tuple[tuple[str, int, int], ...] = ()
    unit_rows: tuple[int, ...] = ()

    @property
    def key(self) -> str:
        """The group's key in the id generator (and its signature file's name)."""
        return row_range_id(self.ranges) if self.ranges else group_key(list(self.files))

    def file_ranges(self) -> Iterator[tuple[str, int, int]]:
        """``(path, first id, rows)`` of each file or piece of the group, in order."""
        paths = [r[0] for r in self.ranges] if self.ranges else list(self.files)
        if len(self.unit_rows) != len(paths):
            if len(paths) == 1:
                yield paths[0], self.first_id, self.rows
            return
        first = self.first_id
        for path, rows in zip(paths, self.unit_rows, strict=True):
            yield path, first, rows
            first += rows


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
            generator.register_key(g.key, g.rows)
        # each file's own range, so that removal may group the files otherwise (another
        # blocksize, whole files after row ranges): the plan order makes them consecutive
        spans: dict[str, list[int]] = {}
        for g in self.groups:
            for path, first, rows in g.file_ranges():
                span = spans.get(path)
                if span is None:
                    spans[path] = [first, first + rows - 1]
                elif span[1] + 1 == first:
                    span[1] = first + rows - 1
                else:  # not consecutive (not expected in plan order): no entry for the file
                    span[0] = -1
        for path, (first, last) in spans.items():
            if first >= 0:
                generator.record_file_range(path, first, last)
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


def phase1_partition(partition: Any) -> dict[str, Any] | None:
    """A workflow's ``partition=`` checked when it is made (the readers' values), canonical.

    Example:
        >>> phase1_partition({"mode": "manual", "num_of_partitions": 4})
        {'mode': 'manual', 'num_of_partitions': 4}
    """
    from curator_dask.partitions.spec import PartitionSpec

    spec = PartitionSpec.coerce(partition)
    return None if spec is None else spec.to_dict()


def planned_group(task: Any) -> tuple[tuple[str, ...], tuple[tuple[str, int, int], ...]]:
    """A phase-1 task's paths and, for a row-range partition, its pieces."""
    pieces = (getattr(task, "reader_config", None) or {}).get("pieces") or []
    return (tuple(task.data),
            tuple((str(p["path"]), int(p["start_row"]), int(p["end_row"])) for p in pieces))


def _unit_order(group: tuple[tuple[str, ...], tuple[tuple[str, int, int], ...]]) -> list[Any]:
    files, ranges = group
    return [(r[0], r[1]) for r in ranges] if ranges else [(f, 0) for f in files]


def run_phase1(executor: Any, spec: SignatureSpec, *, input_path: str | list[str] | None,
               input_filetype: str, input_blocksize: Any, input_file_extensions: Any,
               read_kwargs: dict[str, Any] | None, id_field: str | None, assign_id: bool,
               out_dir: str, checkpoint_path: str | None,
               initial_tasks: list[Any] | None = None,
               out_storage_options: dict[str, Any] | None = None,
               verify_inputs: str = "fingerprint",
               partition: dict[str, Any] | None = None) -> Phase1Result:
    """Run phase 1 on ``executor`` and return its groups with deterministic first ids.

    Without a checkpoint, ``out_dir`` is emptied first; with one, the files of completed groups
    are kept and only the others are computed, except those whose input files changed since
    (``verify_inputs``: ``"fingerprint"``, size and mtime or ETag; ``"content"``, a sha256;
    ``"off"``, never checked; the pipeline's ``verify_inputs``). ``out_storage_options`` are
    the fsspec options of ``out_dir`` (default: those of ``read_kwargs``). ``partition``
    (``{"mode": "manual", "num_of_partitions": N}`` or ``{"mode": "auto", ...}``, as the
    readers take it) reads row ranges of the files instead of whole files, so a big file is
    several tasks; ``input_blocksize`` is then unused.
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
                                         blocksize=None if partition else input_blocksize,
                                         file_extensions=list(extensions),
                                         storage_options=storage or None,
                                         partition=partition)
    if initial_tasks is not None:  # the writer finds a group's paths in its metadata
        initial_tasks = [_with_source_files(t) for t in initial_tasks]
    if initial_tasks is not None:  # a list in any order: ids in the order of the paths
        planned = sorted((planned_group(t) for t in initial_tasks), key=_unit_order)
    else:  # the partitioning's own order (by size with a blocksize), which removal repeats
        planned = [planned_group(t) for t in partitioning.process(EmptyTask())]
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
    for files, ranges in planned:
        key = GroupInfo(files, 0, "", ranges=ranges).key
        path = posixpath.join(out_root, f"{key}.parquet")
        rows, version, unit_rows = _rows_of(out_fs, path, list(files), ckpt)
        groups.append(GroupInfo(files, rows, out_fs.unstrip_protocol(path)
                                if _remote(out_dir) else path, first, version, ranges,
                                unit_rows))
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


def _rows_of(fs: Any, path: str, files: list[str],
             ckpt: str | None) -> tuple[int, str, tuple[int, ...]]:
    """The rows of a group's signature file, which writing of it this is, and the rows of
    each of its files (pieces)."""
    try:
        with fs.open(path, "rb") as f:
            meta = pq.read_schema(f).metadata or {}
    except FileNotFoundError:
        hint = (f"; the checkpoint {ckpt} records it as complete but its file is gone: run "
                "with a fresh checkpoint path") if ckpt else ""
        msg = f"phase 1 wrote no signature file for the files {files[:3]} ({path}){hint}"
        raise FileNotFoundError(msg) from None
    recorded = json.loads(meta[_META_KEY])
    unit_rows = tuple(int(n) for n in recorded.get("unit_rows") or ())
    return int(recorded["rows"]), str(recorded.get("written", "")), unit_rows


class _UnitRows:
    """Phase 1's readers: each file (row range) of a group is read on its own and its rows go
    into the batch's metadata (``unit_rows``), from which each file gets its own id range;
    the batch is the same as the reader's."""

    def process(self, task: FileGroupTask) -> DocumentBatch:
        read = super().process  # type: ignore[misc]  # the reader this class is mixed into
        units = _units_of(task)
        if len(units) <= 1:
            batch: DocumentBatch = read(task)
            rows = [batch.num_items]
        else:
            parts = [read(unit) for unit in units]
            rows = [p.num_items for p in parts]
            batch = DocumentBatch(dataset_name=task.dataset_name,
                                  data=_concatenated([p.data for p in parts]),
                                  _metadata=task._metadata)
        batch._metadata = {**(batch._metadata or {}), "unit_rows": rows}
        return batch


def _units_of(task: FileGroupTask) -> list[FileGroupTask]:
    """One task per file (row-range piece) of ``task``."""
    from curator_dask.tasks.row_range import RowRangeTask

    pieces = (getattr(task, "reader_config", None) or {}).get("pieces") or []
    if pieces:
        return [RowRangeTask.of([p], dataset_name=task.dataset_name) for p in pieces]
    return [FileGroupTask(dataset_name=task.dataset_name, data=[path],
                          _metadata=task._metadata) for path in task.data]


def _concatenated(parts: list[Any]) -> Any:
    """The batches' data in order, as the reader concatenates its files' (an empty file
    brings no columns)."""
    if all(isinstance(p, pa.Table) for p in parts):
        kept = [p for p in parts if p.num_columns] or parts[:1]
        return pa.concat_tables(kept, promote_options="default")
    frames = [p if isinstance(p, pd.DataFrame) else p.to_pandas() for p in parts]
    return pd.concat(frames, ignore_index=True)


class Phase1JsonlReader(_UnitRows, JsonlReaderStage):
    """:class:`JsonlReaderStage` that records the rows of each file of the group."""


class Phase1ParquetReader(_UnitRows, ParquetReaderStage):
    """:class:`ParquetReaderStage` that records the rows of each file of the group."""


def phase1_reader(filetype: str, text_field: str, id_field: str | None,
            read_kwargs: dict[str, Any]) -> BaseReaderStage:
    """The reader of phase 1 (its batches' metadata also hold ``unit_rows``)."""
    fields = [text_field] + ([id_field] if id_field else [])
    if filetype == "jsonl":
        return Phase1JsonlReader(fields=fields, read_kwargs=read_kwargs, allow_empty=True)
    return Phase1ParquetReader(fields=fields, read_kwargs=read_kwargs, allow_empty=True)


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
