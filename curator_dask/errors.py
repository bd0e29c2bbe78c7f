"""Exceptions raised by curator_dask with a message that says what to do, and their common base.

Every exception class of the package derives from :class:`CuratorDaskError` and, first, from
the built-in exception it has always been (``class StageError(RuntimeError, CuratorDaskError)``,
one order everywhere): ``except CuratorDaskError`` catches any of them in one line, and code
that catches ``RuntimeError``, ``ValueError``, ``FileNotFoundError``, ``KeyError`` or
``lmdb.Error`` keeps working. Each class stays in the module that raises it (its import path
is public); this table lists them all. Every one survives pickling (errors raised on a worker
are re-raised on the driver).

| exception | defined in | built-in base | raised when |
|---|---|---|---|
| `StageError` | `curator_dask.errors` | `RuntimeError` | a stage raised while processing a task: names the stage, the partition's input files and the exception, then the original traceback |
| `WorkerFailedError` | `curator_dask.errors` | `RuntimeError` | the workers could not finish a partition: they died `allowed-failures` + 1 times running it, or no worker able to run it was left |
| `WorkerMemoryError` | `curator_dask.errors` | `RuntimeError` | a `WorkerFailedError` (its subclass) caused by worker memory: restarted past the `terminate` threshold, or every worker paused |
| `ResourceUnavailableError` | `curator_dask.errors` | `RuntimeError` | no worker of the cluster offers the Dask resources (`{"GPU": 1}`) a stage needs; before anything runs |
| `RunStopped` | `curator_dask.errors` | `RuntimeError` | the run was asked to stop (stop-request file, SIGUSR1/SIGTERM, `DaskExecutor.request_stop`) and drained |
| `SchedulerLostError` | `curator_dask.errors` | `RuntimeError` | the run lost its Dask scheduler for longer than the grace period |
| `WorkerJobsFailedError` | `curator_dask.errors` | `RuntimeError` | `slurm.max-failed-job-starts` SLURM worker jobs in a row ended before their worker joined |
| `PartitioningChangedError` | `curator_dask.errors` | `ValueError` | the source stage groups files unlike the runs that completed sources in the checkpoint; before anything runs |
| `OverwriteWithCheckpointError` | `curator_dask.errors` | `ValueError` | a writer with `mode="overwrite"` in a run with a `checkpoint_path`; before anything runs |
| `OutputFolderError` | `curator_dask.errors` | `ValueError` | a writer's output path is a file, or a folder this process cannot make or write into; before any cluster starts |
| `CommittedRecordError` | `curator_dask.errors` | `ValueError` | a committed record (`utils/records.py`) is of another kind, of a newer version, or unreadable where its policy is to refuse; it is kept |
| `PartitionRecordError` | `curator_dask.errors` | `ValueError` | a `CommittedRecordError` (its subclass): the checkpoint's partition record (`partitioning.json`, `partitioning_info.json`) is refused: missing, unreadable, newer, or made with other parameters |
| `PartitionContentChangedError` | `curator_dask.errors` | `ValueError` | a `PartitionRecordError` (its subclass): the input of a recorded row-range partition changed |
| `NoInputFilesError` | `curator_dask.utils.files` | `FileNotFoundError` | an entry of `file_paths` names no file to read (missing path, empty glob, no file with the extensions) |
| `MalformedJsonError` | `curator_dask.stages.text.io.reader.jsonl` | `ValueError` | a JSONL line is not valid JSON: names the file and the line |
| `InvalidUtf8Error` | `curator_dask.stages.text.io.reader.jsonl` | `ValueError` | a `MalformedJsonError` (its subclass): JSONL or Parquet text that is not valid UTF-8 |
| `UnknownClusterKindError` | `curator_dask.backends.dask.cluster_kinds` | `ValueError` | `DaskExecutor(cluster=...)` names no kind of the registry (or `address`/`client`, which their own arguments choose): names the kinds and the closest |
| `CheckpointError` | `curator_dask.resumability.client` | `RuntimeError` | the completion plugin failed: completions after the failure may not be recorded |
| `InputChangedError` | `curator_dask.resumability.input_check` | `ValueError` | inputs of completed sources changed, with `on_input_change="error"` |
| `ReaderCrashedError` | `curator_dask.resumability.safe_read` | `lmdb.Error` | reading a checkpoint's LMDB file killed the reader process: the file is damaged |
| `CheckpointUnusable` | `curator_dask.resumability.stage_checkpoints.store` | `Exception` | a stage checkpoint cannot be loaded; caught on the worker, which logs it and falls back to an earlier boundary |
| `UnknownBatchError` | `curator_dask.ids.generator` | `KeyError` | `get_batch_range` for a file group that was never registered |
| `IdGeneratorMissingError` | `curator_dask.ids.run` | `RuntimeError` | a run's stages generate or assign ids, but no id generator exists in the driver |
| `ExecutorBusyError` | `curator_dask.dedup.admission` | `RuntimeError` | a deduplication workflow was started on a `DaskExecutor` that runs another one; before any step |
| `CacheInUseError` | `curator_dask.dedup.cache_lock` | `RuntimeError` | another run (its host and pid named) holds the deduplication cache's lock; before any step |
| `NonUniqueIdsError` | `curator_dask.dedup.exact_ids` | `ValueError` | the corpus's own ids (`assign_id=False`) name several documents: names an id and its count |
| `RecipeError` | `curator_dask.data_juicer.recipe` | `ValueError` | a Data-Juicer recipe cannot run: unknown operator (with the closest names), misspelled or mistyped parameter, dataset-level operator other than a deduplicator, GPU operator without a GPU, missing resource, `dataset_path` with no file; before any cluster starts |
| `PartitionChangedError` | `curator_dask.data_juicer.executor` | `ValueError` | `--resume` of a recipe job whose input rows changed inside a partition with a checkpoint: names the partition and its rows; before any operator runs, checkpoints kept |
| `DeduplicatorParamError` | `curator_dask.data_juicer.dedup` | `ValueError` | a Data-Juicer deduplicator's parameter has no equivalent on Dask (a Ray variant's), or a value Data-Juicer refuses (`backend`, SimHash `num_blocks`) |
| `RayOnlyStageError` | `curator_dask.nemo.checks` | `ValueError` | a NeMo Curator stage that needs a Ray cluster was given to `DaskExecutor` |
| `ResumeMismatchError` | `curator_dask.jobs.job` | `ValueError` | a job resumed with another configuration or other inputs; names each change |
| `JobNotFoundError` | `curator_dask.jobs.index` | `FileNotFoundError` | no job of that id in the work dir or the job index (CLI exit code 2) |
| `AmbiguousJobError` | `curator_dask.jobs.index` | `ValueError` | the job index has that job id in several folders |
| `StopError` | `curator_dask.jobs.control` | `RuntimeError` | the job cannot be stopped as asked (unknown, finished, another host's process) |
| `RequestRefused` | `curator_dask.slurm.partition` | `ValueError` | the resource request cannot run in the SLURM partition: names the limit and the option |
| `SlurmQueryError` | `curator_dask.slurm.partition` | `RuntimeError` | `sinfo` or `scontrol` is missing, times out or fails |
| `SbatchError` | `curator_dask.slurm.sbatch` | `RuntimeError` | `sbatch` failed: the command, exit code, stdout and stderr |
| `UsageError` | `curator_dask.cli.common` | `Exception` | a problem with the command line (CLI exit code 2) |
| `PipelineDefinitionError` | `curator_dask.cli.targets` | `ValueError` | the pipeline file or reference is invalid: names the field (CLI exit code 2) |

Not in the family, on purpose:

- A run ended by Ctrl+C raises a ``KeyboardInterrupt`` (:func:`run_interrupted`), like
  Python's own interrupt: it must pass ``except Exception`` and ``except CuratorDaskError``.
- :class:`PartialRunWarning` (a ``RuntimeWarning``) is a warning, not an error: a run that
  issues it raises nothing (the other sources succeeded), and it becomes an exception only
  under ``warnings.filterwarnings("error", category=PartialRunWarning)``, where the code that
  asked for it names it. The package issues no other warning class, so a common warning base
  would add nothing to filter on.

Example:
    >>> from curator_dask.errors import CuratorDaskError, StageError
    >>> from curator_dask.jobs.index import JobNotFoundError
    >>> issubclass(StageError, RuntimeError), issubclass(StageError, CuratorDaskError)
    (True, True)
    >>> issubclass(JobNotFoundError, FileNotFoundError), issubclass(JobNotFoundError,
    ...                                                                CuratorDaskError)
    (True, True)
"""  # noqa: E501 (a Markdown table: one row a line)

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import TracebackType

# distributed replaces an exception whose text is longer than distributed.admin.max-error-length
# (10000) by a generic one: the traceback is cut (its end kept) to stay well below that.
_MAX_TRACEBACK = 6000
_SHOWN = 5


def _listed(values: list[str], quote: bool = False) -> str:
    shown = ", ".join(repr(v) if quote else str(v) for v in values[:_SHOWN])
    more = f" (+{len(values) - _SHOWN} more)" if len(values) > _SHOWN else ""
    return shown + more


class CuratorDaskError(Exception):
    """The base of every exception curator_dask raises (the table of :mod:`curator_dask.errors`
    lists them): catch it to handle any of the package's errors in one line. Each error also
    keeps its built-in base (``RuntimeError``, ``ValueError``, ...), so code that catches that
    keeps working.

    Example:
        >>> from curator_dask import CuratorDaskError
        >>> from curator_dask.utils.files import gather_file_records
        >>> try:
        ...     gather_file_records("memory://no-such-dir/", extensions=None, require_files=True)
        ... except CuratorDaskError as exc:
        ...     print(type(exc).__name__, isinstance(exc, FileNotFoundError))
        NoInputFilesError True
    """


class StageError(RuntimeError, CuratorDaskError):
    """A stage raised while processing a task; carries the stage, task ids, the input files of
    the failing partition (when known) and the traceback.

    The message leads with what to look at: the stage, the files, the exception; the original
    traceback follows as lines. It survives pickling (workers raise it, the driver re-raises
    it).

    Example:
        >>> error = StageError("picky", ["0_ab"], "ValueError: bad", "Traceback ...\\n",
        ...                    source_files=["/data/part-2.jsonl"])
        >>> print(str(error).splitlines()[0])
        Stage 'picky' failed on /data/part-2.jsonl: ValueError: bad
        >>> import pickle
        >>> pickle.loads(pickle.dumps(error)).source_files
        ['/data/part-2.jsonl']
    """

    def __init__(self, stage_name: str, task_ids: list[str], error: str, traceback_text: str,
                 source_files: list[str] | None = None):
        self.stage_name = stage_name
        self.task_ids = list(task_ids)
        self.error = error
        self.source_files = list(source_files or [])
        if len(traceback_text) > _MAX_TRACEBACK:
            cut = traceback_text[-_MAX_TRACEBACK:]
            traceback_text = "  ... (start of the traceback cut)\n" + cut[cut.find("\n") + 1:]
        self.traceback_text = traceback_text
        where = (f"on {_listed(self.source_files)}" if self.source_files
                 else f"on task {_listed(self.task_ids, quote=True)}")
        tasks = f"\n  task: {_listed(self.task_ids, quote=True)}" if self.source_files else ""
        super().__init__(
            f"Stage {stage_name!r} failed {where}: {error}{tasks}\n\n"
            f"Original traceback:\n{traceback_text}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.stage_name, self.task_ids, self.error, self.traceback_text,
                             self.source_files))


class ResourceUnavailableError(RuntimeError, CuratorDaskError):
    """No worker of the cluster offers the Dask resources a stage needs."""


class RunStopped(RuntimeError, CuratorDaskError):
    """The run was asked to stop (SIGUSR1, SIGTERM, ``DaskExecutor.request_stop``) and drained:
    no new sources were started, completions were flushed; unfinished sources stay pending."""


class PartialRunWarning(RuntimeWarning):
    """A run ended without an error, but a stage returned ``FailedTask`` for some sources:
    those did not complete (with a checkpoint they stay pending, and a run with the same
    checkpoint retries them). The message counts them and says how to retry; the result
    names them (``RunResult.failed_sources``). Issued once per run by ``DaskExecutor``, so
    also under NeMo Curator's ``Pipeline.run``; ``warnings.filterwarnings("error",
    category=PartialRunWarning)`` makes such a run raise instead.
    """


def warn_partial_run(message: str) -> None:
    """Issue :class:`PartialRunWarning` at the caller's own line (the first frame outside
    curator_dask and NeMo Curator, e.g. ``pipeline.run(...)`` in a script or a notebook
    cell), every time: Python's per-line registry would show the warning of a rerun that
    failed the same way only once."""
    import warnings

    from curator_dask.utils import private_api

    frame = private_api.caller_frame(1)
    while frame.f_back is not None and str(frame.f_globals.get("__name__", "")).partition(
            ".")[0] in ("curator_dask", "nemo_curator"):
        frame = frame.f_back
    warnings.warn_explicit(PartialRunWarning(message), PartialRunWarning,
                           frame.f_code.co_filename, frame.f_lineno,
                           module=frame.f_globals.get("__name__"))


def run_interrupted(message: str) -> KeyboardInterrupt:
    """The ``KeyboardInterrupt`` a run ends with after Ctrl+C, once it has cancelled its tasks
    and flushed its checkpoint: ``message`` says how many sources completed and how to resume.

    Uncaught in a script it prints that one line, not a traceback (a ``sys.excepthook``
    installed here, chained to the one in place; every other exception keeps its usual
    report), and Python still ends with the SIGINT status (130 in a shell).

    Example:
        >>> error = run_interrupted("Interrupted (Ctrl+C): 2 of 8 source partitions completed")
        >>> isinstance(error, KeyboardInterrupt), is_run_interrupted(error)
        (True, True)
    """
    error = KeyboardInterrupt(message)
    error._curator_dask_run = True  # type: ignore[attr-defined]  # a marker on the exception
    _quiet_interrupts()
    return error


def with_resume_hint(error: BaseException, hint: str | None) -> BaseException:
    """A stopped or interrupted run's ``error`` with how to resume (``hint``: a job's command),
    as raised; any other error, or no hint, as it is.

    Example:
        >>> str(with_resume_hint(RunStopped("stopped"), "curator_dask jobs resume j1"))
        'stopped; resume with: curator_dask jobs resume j1'
    """
    if hint is None:
        return error
    if isinstance(error, RunStopped):
        return RunStopped(f"{error}; resume with: {hint}")
    if is_run_interrupted(error):
        return run_interrupted(f"{error}; resume with: {hint}")
    return error


def stop_summary(*, done: int, todo: int, skipped: int, collected: int, cut: int,
                 checkpoint: str | None, more_to_come: bool = False) -> str:
    """What a stopped or interrupted run says after its reason: what completed, what else
    may have been written, and how to go on.

    ``done`` is the checkpoint's count when there is one (it includes chains that finished
    after the driver stopped collecting), else ``collected``, the sources whose chains the
    driver collected (their outputs are written). ``cut`` counts the sources of chains
    cancelled while they may have been running: on the workers they can still write outputs
    that nothing recorded; those the checkpoint recorded anyway are not counted twice.
    ``more_to_come``: ``todo`` counts what a lazy source stage had given when the run stopped.

    Example:
        >>> print(stop_summary(done=6, todo=8, skipped=0, collected=5, cut=3, checkpoint="ck"))
        6 of 8 source partitions recorded as complete; up to 2 more were cut short and may have written outputs, which the next run writes again; completions are recorded in ck; run it again with the same checkpoint to process the rest
    """  # noqa: E501 (the line as it prints)
    before = f" ({skipped} were already complete)" if skipped else ""
    if more_to_come:  # a lazy source stage had not given its last source yet
        before += ", of those its source stage had given so far (it had more)"
    if checkpoint is None:
        text = f"{done} of {todo} source partitions completed{before}"
        after = ("this run had no checkpoint, so running it again starts over (give it a "
                 "checkpoint_path to make it resumable)")
    else:
        text = f"{done} of {todo} source partitions recorded as complete{before}"
        after = (f"completions are recorded in {checkpoint}; run it again with the same "
                 "checkpoint to process the rest")
    unrecorded = max(0, collected - done)
    maybe = max(0, cut - max(0, done - collected))
    extra = ([f"{unrecorded} more wrote their outputs but were not recorded"] if unrecorded
             else []) + ([f"up to {maybe} more were cut short and may have written outputs"]
                         if maybe else [])
    if extra:
        text += "; " + " and ".join(extra) + ", which the next run writes again"
    return f"{text}; {after}"


_TRACEBACK_HEADS = ("\nOriginal traceback:", "\nTraceback (most recent call last):")


def one_line(error: BaseException) -> str:
    """``error``'s message as the command line prints it without ``-v``: what it says before
    any traceback it carries (a :class:`StageError`'s original traceback), its lines joined
    into one (docs/guarantees.md: one line; the traceback with ``-v``).

    Example:
        >>> error = StageError("reader", ["0_ab"], "ValueError: bad line 3", "Traceback ...\\n",
        ...                    source_files=["/data/part-2.jsonl"])
        >>> one_line(error)
        "Stage 'reader' failed on /data/part-2.jsonl: ValueError: bad line 3; task: '0_ab'"
    """
    text = str(error)
    for head in _TRACEBACK_HEADS:
        text = text.split(head, 1)[0]
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def nothing_started(*, skipped: int, checkpoint: str | None) -> str:
    """What a run stopped or interrupted before any source partition started (while its
    cluster started, say) says after its reason.

    Example:
        >>> print(nothing_started(skipped=0, checkpoint=None))
        before any source partition started: nothing was processed or written; run it again to start over
    """  # noqa: E501 (the line as it prints)
    before = (f" ({skipped} were already complete in {checkpoint})" if skipped and checkpoint
              else "")
    return (f"before any source partition started{before}: nothing was processed or written; "
            "run it again to start over")


def is_run_interrupted(error: BaseException) -> bool:
    """Whether ``error`` is a run's :func:`run_interrupted` (it carries its one-line message)."""
    return isinstance(error, KeyboardInterrupt) and getattr(error, "_curator_dask_run", False)


def _quiet_interrupts() -> None:
    import sys

    previous = sys.excepthook
    if getattr(previous, "_curator_dask_quiet", False):
        return

    def hook(kind: type[BaseException], value: BaseException,
             tb: TracebackType | None) -> None:
        if is_run_interrupted(value):
            print(value, file=sys.stderr)
            return
        previous(kind, value, tb)

    hook._curator_dask_quiet = True  # type: ignore[attr-defined]  # a marker on the function
    sys.excepthook = hook


class SchedulerLostError(RuntimeError, CuratorDaskError):
    """The run lost its Dask scheduler (no connection for longer than the grace period):
    completions already recorded are kept; running the job again processes the rest."""


class WorkerJobsFailedError(RuntimeError, CuratorDaskError):
    """``slurm.max-failed-job-starts`` SLURM worker jobs of ``cluster="slurm"`` in a row ended
    before their Dask worker joined (a bad ``python``, a ``job_script_prologue`` that fails, a
    job cancelled at once): the message names each job, the state it ended in and its output
    file. Completions already recorded are kept; exit status 1 on the command line
    (``curator_dask/slurm/job_starts.py``)."""


class WorkerFailedError(RuntimeError, CuratorDaskError):
    """The Dask workers could not finish a partition: the workers running it died
    ``distributed.scheduler.allowed-failures`` + 1 times (Dask's ``KilledWorker``), or the
    cluster was left with no worker able to run anything. One line naming the stages (the
    fusion group's), the partition's input files, what happened and what to change.
    Completions already recorded are kept and the partition stays pending; exit status 1 on
    the command line (``curator_dask/backends/dask/worker_faults.py``).

    A ``RuntimeError`` like :class:`StageError`: the driver is not out of memory, so it is no
    ``MemoryError`` (code that catches one to free memory in this process would be misled).

    Example:
        >>> error = WorkerFailedError("the workers running it died 4 times", stages=["hog"],
        ...                           source_files=["/in/part-2.jsonl"])
        >>> print(error)
        Stage 'hog' could not finish on /in/part-2.jsonl: the workers running it died 4 times
    """

    what = "could not finish"

    def __init__(self, reason: str, *, stages: list[str], source_files: list[str] | None = None,
                 task_ids: list[str] | None = None, memory_limit: int | None = None,
                 workers: list[str] | None = None) -> None:
        self.reason, self.stages = reason, list(stages)
        self.source_files, self.task_ids = list(source_files or []), list(task_ids or [])
        self.memory_limit, self.workers = memory_limit, list(workers or [])
        names = " + ".join(repr(s) for s in self.stages)
        subject = f"Stage {names}" if len(self.stages) == 1 else f"Stages {names}"
        where = (_listed(self.source_files) if self.source_files
                 else f"task {_listed(self.task_ids, quote=True)}")
        super().__init__(f"{subject} {self.what} on {where}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.reason, self.stages, self.source_files,
                           self.task_ids, self.memory_limit, self.workers))


class WorkerMemoryError(WorkerFailedError):
    """A :class:`WorkerFailedError` caused by worker memory: Dask restarted the workers running
    the partition for passing ``distributed.worker.memory.terminate`` (95 %) of their memory
    limit, or every worker stayed paused (``distributed.worker.memory.pause``, 80 %) with
    nothing running for ``cluster.stalled-workers-grace`` seconds. ``memory_limit`` is the
    worker's limit in bytes.

    Example:
        >>> error = WorkerMemoryError("restarted 4 times", stages=["hog"],
        ...                           source_files=["/in/big.jsonl"], memory_limit=600_000_000)
        >>> print(error)
        Stage 'hog' ran out of worker memory on /in/big.jsonl: restarted 4 times
    """

    what = "ran out of worker memory"


def _rebuild(cls: type, reason: str, stages: list[str], source_files: list[str],
             task_ids: list[str], memory_limit: int | None, workers: list[str]) -> Exception:
    return cls(reason, stages=stages, source_files=source_files, task_ids=task_ids,
               memory_limit=memory_limit, workers=workers)


class PartitioningChangedError(ValueError, CuratorDaskError):
    """The source stage groups input files differently from the runs that completed sources in
    this checkpoint (another ``files_per_partition``, ``blocksize`` or file list): the
    regrouped files would be processed again and their output written twice. Raised before
    anything is processed; exit status 2 on the command line
    (``curator_dask/partitions/record.py``)."""


class OverwriteWithCheckpointError(ValueError, CuratorDaskError):
    """A writer with ``mode="overwrite"`` in a run with a ``checkpoint_path``: the writer empties
    its folder, and the run skips the sources the checkpoint records as complete, so their
    outputs would never be written again. Raised before anything runs, alike for curator_dask's
    writers (``prepare_output``) and NeMo Curator's (``curator_dask/nemo/checks.py``); exit
    status 2 on the command line."""


class OutputFolderError(ValueError, CuratorDaskError):
    """A writer's output path cannot take its files: it is a file, or a folder this process
    cannot make or write into (a read-only mount, missing permissions). Raised on the driver
    before any cluster starts, naming the writer and the path (exit 2 on the command line)."""


class CommittedRecordError(ValueError, CuratorDaskError):
    """A committed record (``curator_dask/utils/records.py``: the JSON file whose presence says
    a step is complete) that this version must not use: another kind of record at its path, a
    version newer than this curator_dask reads, or, for a record whose policy is ``refuse``,
    a file that cannot be read. The file is kept; the message names it and the fix."""


class PartitionRecordError(CommittedRecordError):
    """The checkpoint's partition record cannot be used: ``.curator_dask/partitioning_info.json``
    (row-range partitions) missing on a resume of a checkpoint that has completions,
    unreadable, of an older version without boundaries, with illegal boundaries, or made with
    other ``partition=`` parameters; either record (``partitioning.json`` too) of another kind
    or of a newer version. Raised before anything is processed; nothing is deleted; exit status
    2 on the command line (``curator_dask/partitions/``)."""


class PartitionContentChangedError(PartitionRecordError):
    """The input of a recorded row-range partition changed since the checkpoint recorded it
    (a file gone, another size, or another content hash): names each partition, its file and
    its boundaries. Raised before any completed partition is skipped; nothing is deleted."""
