"""Preload of the embedded cluster's worker processes: Ctrl+C is the driver's to handle.

A terminal's Ctrl+C sends SIGINT to the whole foreground process group: the driver and the
embedded ``LocalCluster``'s worker processes alike. Each worker would then die with a
``KeyboardInterrupt`` traceback of its own while the driver is still cancelling its tasks and
flushing the checkpoint. Workers started by the driver therefore ignore SIGINT; the driver
closes them in order when it handles the interrupt (docs/guarantees.md, "Ctrl+C"). Two
notes of Dask's own bookkeeping are not printed by these workers: the tasks the driver
cancelled, and the size of the profile a performance report collects.
External clusters (``address=``, SLURM) are not touched.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

MODULE = __name__


def _not_a_cancelled_task(record: logging.LogRecord) -> bool:
    """Drop "Async instruction for <Task cancelled ...> ended with CancelledError": the
    worker's note on a task the driver cancelled itself (a drain, Ctrl+C, a failure)."""
    return "ended with CancelledError" not in record.getMessage()


def _not_a_profile_size(record: logging.LogRecord) -> bool:
    """Drop "Sizeof calculation for object of type 'dict' failed": the worker sizing its
    call-stack profile (a dict nested deeper than the recursion limit) when a job's Dask
    performance report asks for it at the end of a run; the size only feeds memory
    accounting, and the profile still reaches the report."""
    return "for object of type 'dict' failed" not in record.getMessage()


def dask_setup(worker: Any = None) -> None:
    """Called by Dask in each worker process (``preload``): ignore SIGINT there, and do not
    print the two notes that are Dask's bookkeeping, not the user's business."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.getLogger("distributed.worker.state_machine").addFilter(_not_a_cancelled_task)
    logging.getLogger("distributed.sizeof").addFilter(_not_a_profile_size)


def with_preload(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``LocalCluster`` keyword arguments with this module added to the workers' preloads.

    Example:
        >>> with_preload({"preload": ["mine"]})["preload"]
        ['mine', 'curator_dask.backends.dask.worker_setup']
    """
    preload = kwargs.get("preload") or []
    preload = [preload] if isinstance(preload, str) else list(preload)
    if MODULE not in preload:
        preload.append(MODULE)
    return {**kwargs, "preload": preload}
