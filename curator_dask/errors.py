"""Exceptions raised by curator_dask with a message that says what to do."""

from __future__ import annotations


class StageError(RuntimeError):
    """A stage raised while processing a task; carries the stage, task ids and traceback.

    It survives pickling (workers raise it, the driver re-raises it).
    """

    def __init__(self, stage_name: str, task_ids: list[str], error: str, traceback_text: str):
        self.stage_name = stage_name
        self.task_ids = list(task_ids)
        self.error = error
        self.traceback_text = traceback_text
        shown = ", ".join(repr(t) for t in self.task_ids[:5])
        more = f" (+{len(self.task_ids) - 5} more)" if len(self.task_ids) > 5 else ""
        super().__init__(
            f"Stage {stage_name!r} failed on task {shown}{more}: {error}\n\n"
            f"Original traceback:\n{traceback_text}"
        )

    def __reduce__(self):
        return (type(self), (self.stage_name, self.task_ids, self.error, self.traceback_text))


class ResourceUnavailableError(RuntimeError):
    """No worker of the cluster offers the Dask resources a stage needs."""


class RunStopped(RuntimeError):
    """The run was asked to stop (SIGUSR1, SIGTERM, ``DaskExecutor.request_stop``) and drained:
    no new sources were started, completions were flushed; unfinished sources stay pending."""
