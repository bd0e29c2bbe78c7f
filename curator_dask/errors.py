"""Exceptions raised by curator_dask with a message that says what to do."""

from __future__ import annotations

# distributed replaces an exception whose text is longer than distributed.admin.max-error-length
# (10000) by a generic one: the traceback is cut (its end kept) to stay well below that.
_MAX_TRACEBACK = 6000
_SHOWN = 5


def _listed(values: list[str], quote: bool = False) -> str:
    shown = ", ".join(repr(v) if quote else str(v) for v in values[:_SHOWN])
    more = f" (+{len(values) - _SHOWN} more)" if len(values) > _SHOWN else ""
    return shown + more


class StageError(RuntimeError):
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

    def __reduce__(self):
        return (type(self), (self.stage_name, self.task_ids, self.error, self.traceback_text,
                             self.source_files))


class ResourceUnavailableError(RuntimeError):
    """No worker of the cluster offers the Dask resources a stage needs."""


class RunStopped(RuntimeError):
    """The run was asked to stop (SIGUSR1, SIGTERM, ``DaskExecutor.request_stop``) and drained:
    no new sources were started, completions were flushed; unfinished sources stay pending."""


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
    error._curator_dask_run = True  # type: ignore[attr-defined]
    _quiet_interrupts()
    return error


def is_run_interrupted(error: BaseException) -> bool:
    """Whether ``error`` is a run's :func:`run_interrupted` (it carries its one-line message)."""
    return isinstance(error, KeyboardInterrupt) and getattr(error, "_curator_dask_run", False)


def _quiet_interrupts() -> None:
    import sys

    previous = sys.excepthook
    if getattr(previous, "_curator_dask_quiet", False):
        return

    def hook(kind, value, tb):  # noqa: ANN001 (sys.excepthook's signature)
        if is_run_interrupted(value):
            print(value, file=sys.stderr)
            return
        previous(kind, value, tb)

    hook._curator_dask_quiet = True  # type: ignore[attr-defined]
    sys.excepthook = hook


class SchedulerLostError(RuntimeError):
    """The run lost its Dask scheduler (no connection for longer than the grace period):
    completions already recorded are kept; running the job again processes the rest."""


class PartitioningChangedError(ValueError):
    """The source stage groups input files differently from the runs that completed sources in
    this checkpoint (another ``files_per_partition``, ``blocksize`` or file list): the
    regrouped files would be processed again and their output written twice. Raised before
    anything is processed; exit status 2 on the command line
    (``curator_dask/resumability/partitioning.py``)."""
