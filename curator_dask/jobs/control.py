"""Stopping a job from outside: a cooperative request first, signals only to the right process."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from curator_dask.errors import CuratorDaskError
from curator_dask.jobs.dj_format import FORMAT as DJ_FORMAT
from curator_dask.jobs.summary import (
    STOP_REQUEST,
    SUMMARY_FILE,
    process_start_time,
    read_summary,
)


class StopError(RuntimeError, CuratorDaskError):
    """The job cannot be stopped as asked (unknown, finished, or another host's process)."""


def request_stop(job_dir: str) -> dict[str, Any]:
    """Ask the job's driver to stop: no new sources, running ones finish, state ``stopped``.

    The request names the attempt it is for (the summary's ``run_id``, driver ``pid`` and
    ``process_start``): only that attempt obeys it; a later attempt removes it
    (docs/design/architecture.md "Jobs"). A driver that is gone from this host gets no request
    (nobody would read it, and it must not stop the resume): :class:`StopError` says so.
    Returns the request written.

    Example:
        >>> import tempfile
        >>> from curator_dask.jobs.summary import write_summary
        >>> job_dir = tempfile.mkdtemp()
        >>> _ = write_summary(os.path.join(job_dir, SUMMARY_FILE), state="running",
        ...                   run_id="0a1b2c3d", process_start=process_start_time())
        >>> request_stop(job_dir)["run_id"]
        '0a1b2c3d'
        >>> _ = write_summary(os.path.join(job_dir, SUMMARY_FILE), state="running",
        ...                   run_id="0a1b2c3d", process_start=1.0, resume_command="run --resume j")
        >>> request_stop(job_dir)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        curator_dask.jobs.control.StopError: the job's driver (pid ...) is gone (it ended, ...
    """
    summary = read_summary(os.path.join(job_dir, SUMMARY_FILE)) or {}
    if summary.get("host") == socket.gethostname() and not is_recorded_driver(summary):
        resume = summary.get("resume_command")
        msg = (f"the job's driver (pid {summary.get('pid')}) is gone (it ended, or its pid was "
               "reused): state 'running (driver gone)'; nothing was signalled and no stop "
               "request was left" + (f"; resume it with: {resume}" if resume else ""))
        raise StopError(msg)
    request = {"requested": time.time(), "by_pid": os.getpid(), "run_id": summary.get("run_id"),
               "pid": summary.get("pid"), "process_start": summary.get("process_start")}
    path = os.path.join(job_dir, STOP_REQUEST)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(request, f)
    os.replace(path + ".tmp", path)  # the driver never reads half a request
    return request


def read_stop_request(path: str) -> dict[str, Any] | None:
    """The stop request at ``path``; ``None`` when there is none. A file that is not a JSON
    object (written by hand, say) reads as a request for no attempt in particular; one without
    a time as made when the file was last modified."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        mtime = os.path.getmtime(path)
    except FileNotFoundError:
        return None
    try:
        request = json.loads(text)
    except ValueError:
        request = None
    if not isinstance(request, dict):
        return {"requested": mtime}
    if not isinstance(request.get("requested"), (int, float)):
        request["requested"] = mtime
    return request


def stop_request_for(request: dict[str, Any], run_id: str, started: float) -> bool:
    """Whether ``request`` is for the attempt ``run_id`` that started at ``started``: it names
    that attempt, or (written by an older ``stop``) names none and was made after it started.

    Example:
        >>> stop_request_for({"run_id": "a", "requested": 5.0}, "a", started=10.0)
        True
        >>> stop_request_for({"run_id": "b", "requested": 50.0}, "a", started=10.0)
        False
        >>> stop_request_for({"requested": 5.0}, "a", started=10.0)
        False
    """
    if request.get("run_id"):
        return request["run_id"] == run_id
    try:
        return float(request.get("requested") or 0) >= started
    except (TypeError, ValueError):
        return False


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
    from curator_dask.utils.run_keys import is_run_key

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


@dataclass(frozen=True)
class StopOutcome:
    """What stopping a job did (:func:`stop_job_dir`, ``curator_dask.jobs.stop_job``).

    Attributes:
        job_id, job_dir: the job and its folder.
        was_running: whether its summary said ``running`` when the stop began.
        stopped: whether the job is no longer running now (``state`` is not ``running``).
        how: ``"not running"`` (nothing to do), ``"stop request"`` (the cooperative stop),
            ``"cancelled on the scheduler"``, ``"SIGTERM"``, ``"SIGKILL"``, or
            ``"still running"`` (the wait ran out, or ``error`` says what could not be done).
        state: the job's state when the call returned (``killed`` after SIGKILL: the driver
            could not record its end).
        cancelled_tasks: Dask tasks cancelled on the scheduler (``force``), if it was reached.
        error: why a forced stop could not signal the driver (another host, pid reused).

    Example:
        >>> StopOutcome("j", "/jobs/j", True, True, "stop request", "stopped").stopped
        True
    """

    job_id: str
    job_dir: str
    was_running: bool
    stopped: bool
    how: str
    state: str
    cancelled_tasks: int | None = None
    error: str | None = None


def stop_job_dir(job_dir: str, *, force: bool = False, timeout: float = 60.0,
                 say: Callable[[str, bool], None] | None = None) -> StopOutcome:
    """Stop the job whose folder is ``job_dir``: what ``stop JOB [--force]`` does.

    A stop request first (a Data-Juicer recipe's driver gets SIGTERM instead: it stops
    between operators' results, :mod:`~curator_dask.jobs.dj_format`), then a wait of up to
    ``timeout`` seconds for the job to end. With
    ``force``, the cooperative wait is at most 5 s; then the run's Dask tasks are cancelled on
    its scheduler and, if the driver still runs ``timeout`` seconds later, it gets SIGTERM,
    then SIGKILL after another ``timeout`` (signals only to the recorded driver, on its host).
    ``say(text, is_error)`` hears each step as the command prints it.

    Raises:
        FileNotFoundError: the job has no summary (it has not started).
        StopError: its driver is gone from this host (nothing was signalled, no request left),
            or a Data-Juicer recipe's driver runs on another host.
    """
    def tell(text: str, error: bool = False) -> None:
        if say is not None:
            say(text, error)

    path = os.path.join(job_dir, SUMMARY_FILE)
    summary = read_summary(path)
    job_id = os.path.basename(os.path.normpath(job_dir))
    if summary is None:
        msg = f"job {job_id!r} in {job_dir} has no summary (yet)"
        raise FileNotFoundError(msg)
    job_id = str(summary.get("job_id") or job_id)
    if summary.get("state") != "running":
        tell(f"job {job_id} is not running (state: {summary.get('state')})")
        return StopOutcome(job_id, job_dir, False, False, "not running",
                           str(summary.get("state")))
    recipe = summary.get("format") == DJ_FORMAT
    if recipe:  # a Data-Juicer recipe's driver stops on SIGTERM, as Data-Juicer's stopper does
        tell(f"sent SIGTERM to driver {signal_driver(job_dir, signal.SIGTERM)}")
        how, cancelled = "SIGTERM", None
    else:
        request_stop(job_dir)
        how, cancelled = "stop request", None
    state = wait_for_state(job_dir, timeout if not force else min(timeout, 5))
    if state == "running" and force and not recipe:  # a recipe has no run token to cancel by
        try:
            cancelled = cancel_run_tasks(read_summary(path) or {},
                                         timeout=max(1.0, min(timeout, 10.0)))
            tell(f"cancelled {cancelled} Dask tasks of the run on its scheduler")
            how = "cancelled on the scheduler"
            state = wait_for_state(job_dir, timeout)
        except StopError as exc:
            tell(f"could not cancel through the scheduler: {exc}", True)
    if state == "running" and force:
        try:
            pid = signal_driver(job_dir, signal.SIGTERM)
            tell(f"sent SIGTERM to driver {pid}")
            how = "SIGTERM"
            state = wait_for_state(job_dir, timeout)
            if state == "running":
                signal_driver(job_dir, signal.SIGKILL)
                tell(f"sent SIGKILL to driver {pid}")
                how, state = "SIGKILL", "killed"
        except StopError as exc:
            tell(str(exc), True)
            return StopOutcome(job_id, job_dir, True, False, "still running", state,
                               cancelled, str(exc))
    if state == "running":
        how = "still running"
    return StopOutcome(job_id, job_dir, True, state != "running", how, state, cancelled)
