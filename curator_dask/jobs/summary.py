"""``job_summary.json``: the job's state, rewritten atomically (a heartbeat while running).

It is written through :func:`~curator_dask.utils.redact.redact`: no credential in clear.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Collection
from typing import Any

from curator_dask.utils.atomic import write_atomic
from curator_dask.utils.redact import redact

# completed_with_failures: the run ended without an error, but some sources saw a
# FailedTask and stay pending (a resume retries them)
STATES = ("running", "completed", "completed_with_failures", "failed", "stopped")
SUMMARY_FILE = "job_summary.json"
STOP_REQUEST = "stop_request.json"  # left by `stop JOB` for one attempt (run_id); see control.py


def process_start_time(pid: int | None = None) -> float | None:
    """When a process started (seconds since the epoch), to tell it from a recycled pid."""
    try:
        import psutil

        return psutil.Process(pid or os.getpid()).create_time()
    except Exception:  # noqa: BLE001 (no such process, or no psutil)
        return None


def write_summary(path: str, secrets: Collection[str] = (), **fields: Any) -> dict[str, Any]:
    """Atomically replace ``path`` with the summary; ``state`` must be a known state.

    ``secrets`` are the job's secret values, scrubbed from its free text (the ``error``).

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "job_summary.json")
        >>> write_summary(p, job_id="j", state="running")["state"]
        'running'
    """
    state = fields.get("state")
    if state not in STATES:
        msg = f"job state must be one of {list(STATES)}, got {state!r}"
        raise ValueError(msg)
    summary = redact({"host": socket.gethostname(), "pid": os.getpid(),
                      "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **fields},
                     secrets)
    data = (json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n").encode()
    import fsspec

    write_atomic(fsspec.filesystem("file"), os.path.abspath(path), lambda f: f.write(data))
    return summary


def read_summary(path: str) -> dict[str, Any] | None:
    """The summary at ``path``; ``None`` when there is none. A Data-Juicer recipe job's
    (Data-Juicer's keys: ``status``, ``start_time``...) reads as this package's, with its
    stages and partitions from its events (:mod:`curator_dask.jobs.dj_format`)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    from curator_dask.jobs import dj_format  # it imports this module

    if dj_format.is_dj_summary(data):
        return dj_format.summary(os.path.dirname(os.path.abspath(path)), data)
    return data
