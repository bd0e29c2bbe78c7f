"""Stopping a job from outside: a cooperative request first, signals only to the right process."""

from __future__ import annotations

import json
import os
import signal
import socket
import time

from curator_dask.jobs.run import STOP_REQUEST, _process_start_time
from curator_dask.jobs.summary import read_summary


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
        summary = read_summary(os.path.join(job_dir, "job_summary.json")) or {}
        state = summary.get("state", "?")
        if state != "running" or time.monotonic() >= deadline:
            return state
        time.sleep(0.2)


def signal_driver(job_dir: str, sig: int = signal.SIGTERM) -> int:
    """Signal the recorded driver after checking it is that process (host, pid, start time)."""
    summary = read_summary(os.path.join(job_dir, "job_summary.json"))
    if summary is None:
        msg = f"no job summary in {job_dir}"
        raise StopError(msg)
    if summary.get("host") != socket.gethostname():
        msg = (f"the job's driver runs on {summary.get('host')}, not here; run `stop --force` "
               "there")
        raise StopError(msg)
    pid = int(summary.get("pid", 0))
    recorded = summary.get("process_start")
    actual = _process_start_time(pid)
    if actual is None or recorded is None or abs(actual - float(recorded)) > 1.0:
        msg = (f"process {pid} is not the job's driver any more (it ended, or its pid was "
               "reused); nothing was signalled")
        raise StopError(msg)
    os.kill(pid, sig)
    return pid
