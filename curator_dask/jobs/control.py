"""Stopping a job from outside: a cooperative request first, signals only to the right process."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from typing import Any

from curator_dask.jobs.summary import (
    STOP_REQUEST,
    SUMMARY_FILE,
    process_start_time,
    read_summary,
)


class StopError(RuntimeError):
    """The job cannot be stopped as asked (unknown, finished, or another host's process)."""


def request_stop(job_dir: str) -> None:
    """Ask the job's driver to stop: no new sources, running ones finish, state ``stopped``."""
    with open(os.path.join(job_dir, STOP_REQUEST), "w", encoding="utf-8") as f:
        json.dump({"requested": time.time(), "by_pid": os.getpid()}, f)


def wait_for_state(job_dir: str, timeout: float) -> str:
    """Wait until the job is no longer ``running``; returns its final (or current) state."""
    deadline = time.monotonic() + timeout
    while True:
        summary = read_summary(os.path.join(job_dir, SUMMARY_FILE)) or {}
        state = summary.get("state", "?")
        if state != "running" or time.monotonic() >= deadline:
            return state
        time.sleep(0.2)


def is_recorded_driver(summary: dict[str, Any]) -> bool:
    """Whether the summary's pid is, on this machine, the process that wrote it (same start
    time: a recycled pid is not)."""
    pid = int(summary.get("pid") or 0)
    recorded = summary.get("process_start")
    actual = process_start_time(pid) if pid > 0 else None
    return actual is not None and recorded is not None and abs(actual - float(recorded)) <= 1.0


def signal_driver(job_dir: str, sig: int = signal.SIGTERM) -> int:
    """Signal the recorded driver after checking it is that process (host, pid, start time)."""
    summary = read_summary(os.path.join(job_dir, SUMMARY_FILE))
    if summary is None:
        msg = f"no job summary in {job_dir}"
        raise StopError(msg)
    if summary.get("host") != socket.gethostname():
        msg = (f"the job's driver runs on {summary.get('host')}, not here; run `stop --force` "
               "there")
        raise StopError(msg)
    pid = int(summary.get("pid", 0))
    if not is_recorded_driver(summary):
        msg = (f"process {pid} is not the job's driver any more (it ended, or its pid was "
               "reused); nothing was signalled")
        raise StopError(msg)
    os.kill(pid, sig)
    return pid


def _cancel_on_scheduler(dask_scheduler: Any = None, token: str = "", client: str = "",
                         reason: str = "") -> int:
    from curator_dask.backends.dask.keys import is_run_key

    keys = [k for k in dask_scheduler.tasks if is_run_key(k, token)]
    if keys:
        dask_scheduler.stimulus_cancel(keys, client, force=True, reason=reason,
                                       msg="cancelled by `curator_dask stop --force`")
    return len(keys)


def cancel_run_tasks(summary: dict[str, Any], timeout: float = 10.0) -> int:
    """Cancel the job's Dask tasks on its scheduler (keys carry the run's token); returns how
    many. Raises :class:`StopError` when the scheduler cannot be reached."""
    address, token = summary.get("scheduler"), summary.get("run_key_token")
    if not address or not token:
        msg = "the job summary names no scheduler or run token (the run had not started)"
        raise StopError(msg)
    if str(address).startswith("tls://"):
        msg = (f"the scheduler {address} uses TLS with the driver's temporary credentials; "
               "only the driver can cancel its tasks")
        raise StopError(msg)
    from distributed import Client

    try:
        with Client(address, timeout=timeout) as client:
            return int(client.run_on_scheduler(_cancel_on_scheduler, token=token,
                                               client=client.id, reason="stop --force"))
    except OSError as exc:
        msg = f"cannot reach the scheduler {address}: {exc}"
        raise StopError(msg) from exc
