"""``ExactDeduplicationWorkflow``: NeMo Curator 1.4's exact deduplication on CPU Dask.

The same constructor and ``run(initial_tasks=None, executor=None)`` as NeMo's
``nemo_curator.stages.deduplication.exact.workflow.ExactDeduplicationWorkflow``, and the same
outputs: ``<output_path>/ExactDuplicateIds/part.<i>.parquet`` (the ids of the documents to
remove: every document whose (normalised) text has the MD5 of a document with a smaller id)
and ``<output_path>/exact_id_generator.json`` (NeMo's id-generator JSON, for
``TextDuplicatesRemovalWorkflow(id_generator_path=...)``). Where NeMo runs a GPU shuffle on Ray
actors, this runs two phases on a ``DaskExecutor``'s cluster (the embedded one, an address or
SLURM):

1. hash (:mod:`.phases` with :class:`~.exact_ids.ExactHash`): a curator_dask pipeline that
   reads each file group and writes its MD5s to the cache, resumable through
   ``checkpoint_path``; ids are given after it, deterministically (``.phases``);
2. duplicates (:func:`~.exact_ids.write_duplicate_ids`): dask.dataframe's P2P shuffle by hash,
   the smallest id of each hash kept, committed with a marker.

Beyond NeMo: ``perform_removal=True`` (NeMo 1.4 raises ``NotImplementedError``) also writes
the deduplicated corpus to ``<output_path>/deduplicated/``; ``checkpoint_path`` and
``cache_path``. See docs/deduplication.md ("Exact deduplication").
"""

from __future__ import annotations

import logging
import posixpath
import time
import warnings
from typing import Any, Literal

from curator_dask.dedup.admission import check_workers_reach, hold_executor
from curator_dask.dedup.cache_lock import CacheLock
from curator_dask.dedup.exact_ids import (
    DUPLICATE_IDS_DIR,
    HASH_FIELDS,
    DuplicateIdsPlan,
    ExactHash,
    check_unique_ids,
    groups_fingerprint,
    ids_key,
    write_duplicate_ids,
)
from curator_dask.dedup.phases import (
    ID_COLUMN,
    check_initial_tasks,
    phase1_partition,
    quiet_shuffle_notices,
    said_once,
)
from curator_dask.dedup.progress import PhaseReporter, job_reporter
from curator_dask.dedup.result import WorkflowBase, WorkflowRunResult, new_result
from curator_dask.ids.generator import CURATOR_DEDUP_ID_STR
from curator_dask.resumability.input_check import MODES as VERIFY_MODES  # the pipeline's

logger = logging.getLogger(__name__)

ID_GENERATOR_OUTPUT_FILENAME = "exact_id_generator.json"  # NeMo's name
DEDUPLICATED_DIR = "deduplicated"
# NeMo's GPU settings and their defaults: accepted, not used on CPU
_GPU_ONLY = {"rmm_pool_size": "auto", "spill_memory_limit": "auto", "use_async_memory": True,
             "env_vars": None, "identification_batchsize": 1}


class ExactDeduplicationWorkflow(WorkflowBase):
    """Finds the documents whose text (normalised with ``normalize_text=True``) equals an
    earlier one's and writes their ids, NeMo Curator's way, on CPU Dask.

    The parameters are NeMo Curator 1.4's, plus ``checkpoint_path`` (a killed run resumes:
    completed file groups are not hashed again, a committed duplicates phase is not redone,
    and the ids equal a clean run's) and ``cache_path`` (where the hashes go; default
    ``<checkpoint_path>/exact_cache``, else a temporary folder under ``output_path`` removed at
    the end), and ``verify_inputs`` (with a checkpoint: input files changed since the run that
    hashed them are hashed again; ``"fingerprint"``, ``"content"`` or ``"off"``), and
    ``partition`` (row ranges of the files in phase 1, as the readers' ``partition=``: a big
    file is several tasks; ``input_blocksize`` is then unused). NeMo's GPU
    settings (``rmm_pool_size``, ``spill_memory_limit``, ``use_async_memory``, ``env_vars``)
    and ``identification_batchsize`` are accepted and ignored, with one warning when set.

    Example:
        >>> wf = ExactDeduplicationWorkflow(output_path="out", input_path="data/",
        ...                                 input_filetype="jsonl", normalize_text=True)
        >>> wf.id_column
        '_curator_dedup_id'
        >>> # result = wf.run(executor=DaskExecutor()); result.metadata["num_duplicates"]
    """

    _reporter: PhaseReporter  # where the phases of the run in progress report (set by run)

    def __init__(  # noqa: PLR0913 (NeMo's parameters)
        self,
        output_path: str,
        input_path: str | list[str] | None = None,
        input_filetype: Literal["jsonl", "parquet"] = "parquet",
        input_blocksize: str | int = "2GiB",
        identification_batchsize: int = 1,
        input_file_extensions: list[str] | None = None,
        read_kwargs: dict[str, Any] | None = None,
        write_kwargs: dict[str, Any] | None = None,
        assign_id: bool = True,
        id_field: str | None = None,
        text_field: str = "text",
        normalize_text: bool = False,
        perform_removal: bool = False,
        total_nparts: int | None = None,
        rmm_pool_size: int | Literal["auto"] | None = "auto",
        spill_memory_limit: int | Literal["auto"] | None = "auto",
        env_vars: dict[str, Any] | None = None,
        use_async_memory: bool = True,
        *,
        checkpoint_path: str | None = None,
        cache_path: str | None = None,
        verify_inputs: str = "fingerprint",
        partition: dict[str, Any] | None = None,
    ) -> None:
        self.output_path = output_path
        self.input_path = input_path
        self.input_filetype = input_filetype
        self.input_blocksize = input_blocksize
        self.identification_batchsize = identification_batchsize
        self.input_file_extensions = input_file_extensions
        self.read_kwargs = read_kwargs
        self.write_kwargs = write_kwargs
        self.assign_id = assign_id
        self.id_field = id_field
        self.text_field = text_field
        self.normalize_text = normalize_text
        self.perform_removal = perform_removal
        self.total_nparts = total_nparts
        self.rmm_pool_size = rmm_pool_size
        self.spill_memory_limit = spill_memory_limit
        self.env_vars = env_vars
        self.use_async_memory = use_async_memory
        self.checkpoint_path = checkpoint_path
        self.cache_path = cache_path
        self.verify_inputs = verify_inputs
        self.partition = phase1_partition(partition)
        self._validate_inputs()

    @property
    def id_column(self) -> str:
        """The id column of ``ExactDuplicateIds`` (NeMo's: ``id_field``, else
        ``_curator_dedup_id``); pass it as ``duplicate_id_field`` to the removal workflow."""
        return self.id_field if self.id_field is not None else CURATOR_DEDUP_ID_STR

    def _validate_inputs(self) -> None:
        if self.input_filetype not in ("jsonl", "parquet"):
            msg = f"input_filetype must be 'jsonl' or 'parquet', got {self.input_filetype!r}"
            raise ValueError(msg)
        if not self.assign_id and self.id_field is None:
            msg = ("id_field must be provided if assign_id is False: name the column that "
                   "holds the corpus's own ids")
            raise ValueError(msg)
        if self.assign_id and self.id_field is not None:
            msg = (f"id_field must be None if assign_id is True (got {self.id_field!r}): "
                   "assign_id=False uses the corpus's own ids from id_field")
            raise ValueError(msg)
        if self.verify_inputs not in VERIFY_MODES:
            msg = (f"verify_inputs must be one of {', '.join(VERIFY_MODES)} (got "
                   f"{self.verify_inputs!r})")
            raise ValueError(msg)
        if self.total_nparts is not None and int(self.total_nparts) < 1:
            logger.warning("total_nparts=%s is below 1; writing 1 part (NeMo's rule)",
                           self.total_nparts)
        ignored = [f"{name}={getattr(self, name)!r}" for name, default in _GPU_ONLY.items()
                   if getattr(self, name) != default]
        if ignored:
            warnings.warn(f"ExactDeduplicationWorkflow on CPU Dask ignores NeMo's GPU settings "
                          f"{', '.join(ignored)} (the hash phase reads one file group per task, "
                          "the P2P shuffle spills to disk)", UserWarning, stacklevel=3)

    def _validate_initial_tasks(self, initial_tasks: list[Any] | None) -> None:
        if initial_tasks is not None and not isinstance(initial_tasks, (list, tuple)):
            msg = (f"initial_tasks must be a list of FileGroupTask, got "
                   f"{type(initial_tasks).__name__}; the executor goes by keyword: "
                   "run(executor=...) (NeMo's order is run(initial_tasks, executor))")
            raise TypeError(msg)
        check_initial_tasks(initial_tasks, self.input_path)

    def run(self, initial_tasks: list[Any] | None = None,
            executor: Any = None, *, work_dir: str | None = None,
            job_id: str | None = None) -> WorkflowRunResult:
        """Run both phases (and the removal with ``perform_removal=True``) on ``executor``
        (default: a ``DaskExecutor`` on an embedded cluster), all on one cluster.

        Each phase shows its progress (``dedup/progress.py``). With ``work_dir=`` or
        ``job_id=`` (beyond NeMo) the run is a job in ``<work_dir>/<job_id>/`` (default
        ``work_dir``: config ``jobs.work-dir``), as ``Pipeline.run``'s: its event log gets the
        phase events and ``python -m curator_dask status JOB`` shows the phases.

        Returns:
            NeMo's ``WorkflowRunResult`` named ``"exact_deduplication"``: metadata
            ``num_duplicates``, ``id_generator_path`` (``None`` with ``assign_id=False``),
            ``total_time``, ``identification_time`` (both phases), ``hash_time``,
            ``duplicates_time`` (and ``removal_time``, ``num_duplicates_removed``,
            ``deduplicated_path`` after a removal); pipeline tasks ``input_filegroups`` and
            ``identification`` (one ``FileGroupTask`` per part, NeMo's metadata).
        """
        self._validate_initial_tasks(initial_tasks)
        initial_tasks = _own_file_groups(initial_tasks)
        executor = _dask_executor(executor)
        parameters = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        with hold_executor(executor, "exact_deduplication"), job_reporter(
                "exact deduplication", parameters, executor, work_dir=work_dir, job_id=job_id,
                checkpoint_path=self.checkpoint_path) as self._reporter:
            return self._run(executor, initial_tasks)

    def _run(self, executor: Any, initial_tasks: list[Any] | None) -> WorkflowRunResult:
        from curator_dask.ids.generator import id_generator_exists

        if self.assign_id and id_generator_exists():
            msg = ("An existing id generator was found. Save it with "
                   "curator_dask.dedup.write_id_generator_to_disk (if needed) and remove it with "
                   "curator_dask.dedup.kill_id_generator_actor before running the exact "
                   "deduplication workflow.")
            raise RuntimeError(msg)
        result = new_result("exact_deduplication")
        cache, temporary = self._cache()
        start = time.time()
        try:
            with executor.kept_open() as client, quiet_shuffle_notices(), said_once():
                check_workers_reach(client, {
                    "output_path": self._output, "cache_path": cache,
                    "input_path": self.input_path}, {
                    "cache_path": self._write_storage(), "output_path": self._write_storage(),
                    "input_path": self._read_storage()})
                with CacheLock(cache, self._write_storage(), "exact_deduplication"):
                    self._run_phases(executor, client, initial_tasks, cache, result)
        finally:
            if temporary:
                _remove(cache, self._write_storage())
        result.add_metadata("total_time", time.time() - start)
        logger.info("Exact deduplication pipeline completed in %.2f seconds",
                    result.get_metadata("total_time"))
        return result

    def _run_phases(self, executor: Any, client: Any, initial_tasks: list[Any] | None,
                    cache: str, result: WorkflowRunResult) -> None:
        from curator_dask.dedup.phases import Phase1Result, SignatureSpec, run_phase1
        from curator_dask.tasks import FileGroupTask

        t0 = time.time()
        spec = SignatureSpec("exact", ExactHash(self.text_field, bool(self.normalize_text)),
                             text_field=self.text_field)
        if initial_tasks == []:  # nothing to read (a pipeline given no tasks reads from nothing)
            phase1 = Phase1Result([], self._read_storage(), own_ids=not self.assign_id)
        else:
            with self._reporter.phase("hash", "documents") as progress:
                progress.start()  # the engine's bars show the pipeline's sources meanwhile
                phase1 = run_phase1(
                    executor, spec, input_path=self.input_path,
                    input_filetype=self.input_filetype, input_blocksize=self.input_blocksize,
                    input_file_extensions=self._extensions(), read_kwargs=self.read_kwargs,
                    id_field=self.id_field, assign_id=self.assign_id,
                    out_dir=posixpath.join(cache, "hashes"),
                    checkpoint_path=self.checkpoint_path, initial_tasks=initial_tasks,
                    verify_inputs=self.verify_inputs, partition=self.partition)
                progress.advance(phase1.num_documents, say=False)
        hash_time = time.time() - t0
        logger.info("exact dedup: hashed %d documents in %d file groups in %.2f s",
                    phase1.num_documents, len(phase1.groups), hash_time)
        if initial_tasks is None:
            result.add_pipeline_tasks("input_filegroups", [
                FileGroupTask(dataset_name="exact_deduplication", data=list(g.files))
                for g in phase1.groups])
        t1 = time.time()
        duplicates, key = self._duplicates(client, phase1, cache)
        duplicates_time = time.time() - t1
        result.add_pipeline_tasks("identification", [
            FileGroupTask(dataset_name=f"exact_deduplication_{DUPLICATE_IDS_DIR}",
                          data=[p["path"]],
                          _metadata={k: p[k] for k in ("partition_index", "num_groups",
                                                       "num_removal_ids")})
            for p in duplicates.parts])
        if duplicates.num_duplicates == 0:
            logger.info("No exact duplicates found in the dataset.")
        id_generator_path = None
        if self.assign_id:
            id_generator_path = self._join(self._output, ID_GENERATOR_OUTPUT_FILENAME)
            phase1.id_generator().to_disk(id_generator_path,
                                          storage_options=self._write_storage() or None)
            logger.info("Id generator written to %s", id_generator_path)
        result.extend_metadata({
            "hash_time": hash_time, "duplicates_time": duplicates_time,
            "identification_time": hash_time + duplicates_time,
            "num_duplicates": duplicates.num_duplicates, "id_generator_path": id_generator_path})
        if self.perform_removal:
            self._remove_duplicates(executor, client, initial_tasks, id_generator_path, result,
                                    key, phase1.num_documents)

    def _duplicates(self, client: Any, phase1: Any, cache: str) -> tuple[Any, str]:
        """Phase 2's result, and the key of the ids it wrote (the removal's upstream)."""
        groups = phase1.groups
        nparts = (max(1, len(groups) // 3) if self.total_nparts is None
                  else max(1, int(self.total_nparts)))
        plan = DuplicateIdsPlan(
            out_dir=self._join(self._output, DUPLICATE_IDS_DIR), id_name=self.id_column,
            nparts=nparts, storage_options=self._write_storage(),
            write_kwargs=dict(self.write_kwargs or {}),
            marker=(None if self.checkpoint_path is None
                    else posixpath.join(cache, "ExactDuplicateIds.committed.json")),
            rows=phase1.num_documents)
        fingerprint = {"groups": groups_fingerprint(groups), "text_field": self.text_field,
                       "normalize_text": bool(self.normalize_text), "assign_id": self.assign_id}
        if groups:
            frame = phase1.frame(columns=list(HASH_FIELDS))
        else:  # initial_tasks=[]: no documents, and the parts are written empty
            import dask.dataframe as dd
            import pandas as pd

            frame = dd.from_pandas(pd.DataFrame({
                ID_COLUMN: pd.Series([], dtype="int64"),
                **{f: pd.Series([], dtype="int64") for f in HASH_FIELDS}}), npartitions=1)
        if not self.assign_id and groups:
            check_unique_ids(client, frame, self.id_column, nparts)
        with self._reporter.phase("duplicate_ids", "documents",
                                  total=phase1.num_documents) as progress:
            written = write_duplicate_ids(client, frame, plan, fingerprint, progress)
        return written, ids_key(plan, fingerprint)

    def _remove_duplicates(self, executor: Any, client: Any, initial_tasks: list[Any] | None,
                           id_generator_path: str | None, result: WorkflowRunResult,
                           ids: str, num_documents: int) -> None:
        from curator_dask.dedup.removal import TextDuplicatesRemovalWorkflow
        from curator_dask.dedup.removal_step import RemovalStep, removal_key, removal_params

        t0 = time.time()
        deduplicated = self._join(self._output, DEDUPLICATED_DIR)
        params = removal_params(
            input_path=self.input_path, input_filetype=self.input_filetype,
            input_blocksize=self.input_blocksize, extensions=self._extensions(),
            initial_tasks=initial_tasks, output=deduplicated, write_kwargs=self.write_kwargs)
        step = RemovalStep(output=deduplicated, storage_options=self._write_storage(),
                           checkpoint=(None if self.checkpoint_path is None
                                       else _absolute(str(self.checkpoint_path))),
                           key=removal_key(ids, params), num_documents=num_documents)
        if initial_tasks == []:
            step.empty_output()
            result.extend_metadata({"removal_time": 0.0, "deduplicated_path": deduplicated,
                                    "num_duplicates_removed": 0})
            return
        removal = TextDuplicatesRemovalWorkflow(
            input_path=None if initial_tasks is not None else self.input_path,
            ids_to_remove_path=self._join(self._output, DUPLICATE_IDS_DIR),
            output_path=deduplicated, input_filetype=self.input_filetype,
            id_field=self.id_column, input_blocksize=self.input_blocksize,
            input_file_extensions=self._extensions(), input_kwargs=self.read_kwargs,
            duplicate_id_field=self.id_column,
            duplicate_id_read_kwargs=_storage_kwargs(self._write_storage()),
            id_generator_path=id_generator_path,
            id_generator_storage_options=self._write_storage() or None,
            output_filetype=self.input_filetype, output_kwargs=self.write_kwargs,
            # the generated ids were not in the input: the corpus keeps its own columns
            drop_id_field=self.assign_id, checkpoint_path=step.pipeline_checkpoint)
        with self._reporter.phase("removal", "documents", total=num_documents) as progress:
            progress.start()  # the pipeline's bars show its sources meanwhile
            counts, removed = step.run(client, removal, executor, initial_tasks)
            if counts["skipped"]:
                progress.skip()
            else:
                progress.advance(num_documents, say=False)
        if counts["skipped"]:
            logger.info("exact dedup: the removal to %s was committed by an earlier run; "
                        "not redone", deduplicated)
        result.add_pipeline_tasks(
            "removal", [] if removed is None else removed.pipeline_tasks.get("removal"))
        result.extend_metadata({
            "removal_time": time.time() - t0, "deduplicated_path": deduplicated,
            "num_duplicates_removed": counts["num_duplicates_removed"]})

    def _extensions(self) -> list[str]:
        if self.input_file_extensions:
            return list(self.input_file_extensions)
        return [".jsonl", ".json"] if self.input_filetype == "jsonl" else [".parquet"]

    def _read_storage(self) -> dict[str, Any]:
        return dict((self.read_kwargs or {}).get("storage_options") or {})

    def _write_storage(self) -> dict[str, Any]:
        return dict((self.write_kwargs or {}).get("storage_options") or self._read_storage())

    def _cache(self) -> tuple[str, bool]:
        """Where the hashes go, and whether to remove it at the end: ``cache_path``, else under
        the checkpoint (kept for a resume), else a fresh folder next to the outputs (removed):
        the workers write there, and every worker can reach ``output_path``, not always the
        driver's temporary folder."""
        if self.cache_path is not None:
            return _absolute(str(self.cache_path)), False
        if self.checkpoint_path is not None:
            return posixpath.join(_absolute(str(self.checkpoint_path)), "exact_cache"), False
        import uuid

        return self._join(self._output, f".exact_cache-{uuid.uuid4().hex[:12]}"), True

    @property
    def _output(self) -> str:
        return _absolute(str(self.output_path))

    @staticmethod
    def _join(root: str, name: str) -> str:
        return posixpath.join(str(root).rstrip("/"), name)


def _dask_executor(executor: Any) -> Any:
    from curator_dask.backends.dask import DaskExecutor

    if executor is None:
        return DaskExecutor()
    if not isinstance(executor, DaskExecutor):
        msg = (f"ExactDeduplicationWorkflow runs on curator_dask's DaskExecutor, got "
               f"{type(executor).__name__}; pass executor=curator_dask.DaskExecutor(...) (NeMo's "
               "Ray executors run NeMo's own GPU workflow)")
        raise TypeError(msg)
    return executor


def _absolute(path: str) -> str:
    """A local path made absolute on the driver (workers, e.g. SLURM jobs, may start in another
    directory); a URL as it is."""
    import os

    return path if "://" in path else os.path.abspath(path)


def _own_file_groups(tasks: list[Any] | None) -> list[Any] | None:
    """Given file groups (NeMo's or curator_dask's) as curator_dask's, each naming its files in
    ``source_files`` as ``FilePartitioningStage``'s do (the hash phase records them)."""
    if tasks is None:
        return None
    from curator_dask.tasks import FileGroupTask

    return [FileGroupTask(dataset_name=t.dataset_name, data=list(t.data),
                          _metadata={"source_files": list(t.data), **(t._metadata or {})})
            for t in tasks]


def _storage_kwargs(storage: dict[str, Any]) -> dict[str, Any] | None:
    return {"storage_options": storage} if storage else None


def _remove(path: str, storage: dict[str, Any]) -> None:
    import fsspec

    fs, root = fsspec.core.url_to_fs(path, **storage)
    if fs.exists(root):
        fs.rm(root, recursive=True)


__all__ = ["DEDUPLICATED_DIR", "ID_GENERATOR_OUTPUT_FILENAME", "ExactDeduplicationWorkflow"]
