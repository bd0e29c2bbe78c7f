"""The job tools from Python, as Data-Juicer's job utilities name them: list the running jobs,
stop one, read its progress, its summary and its event log.

Each function takes a job id (looked up in ``work_dir``, default config ``jobs.work-dir``,
then in the per-user job index, as the command line does) or the path of a job's folder.
Nothing prints unless asked (``echo=True``). Importable as ``from curator_dask.jobs import
list_running_jobs, stop_job, show_job_progress, JobUtils``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Collection
from typing import Any

from curator_dask.jobs.control import StopOutcome, stop_job_dir
from curator_dask.jobs.events import event_types_for, read_job_events
from curator_dask.jobs.index import job_rows, locate_job
from curator_dask.jobs.monitor import progress_data
from curator_dask.jobs.status import load_job

PathOrId = str | os.PathLike[str]
# what list_running_jobs gives of each job's summary
_RUNNING_FIELDS = ("job_id", "state", "pid", "host", "started", "updated", "run_id", "sources",
                   "scheduler", "dashboard", "resume_command")


def list_running_jobs(*, work_dir: PathOrId | None = None) -> list[dict[str, Any]]:
    """The running jobs, oldest first: those of the per-user job index (and of ``work_dir``)
    whose summary says ``running`` and whose driver is alive (checked by pid and start time
    when it runs on this host, as ``status`` does; a job whose driver is gone is left out).

    Each is a dict of ``job_id``, ``state``, ``pid``, ``host``, ``started``, ``updated``,
    ``run_id``, ``sources``, ``scheduler``, ``dashboard``, ``resume_command``, ``job_dir`` (its
    folder), ``work_dir`` (the folder above it) and ``driver_checked`` (whether its driver
    runs on this host, so that its liveness was checked).

    Example:
        >>> from curator_dask.jobs import list_running_jobs
        >>> for job in list_running_jobs():  # doctest: +SKIP
        ...     print(job["job_id"], job["pid"], job["job_dir"])
    """
    from curator_dask import config

    folder = os.fspath(work_dir) if work_dir is not None else config.get("jobs.work-dir")
    rows, _ = job_rows(folder)
    here = socket.gethostname()
    return [{**{key: row.get(key) for key in _RUNNING_FIELDS}, "job_dir": row["job_dir"],
             "work_dir": os.path.dirname(row["job_dir"]), "driver_checked": row.get("host") == here}
            for row in rows if row["state"] == "running"]


def stop_job(job: PathOrId, force: bool = False, timeout: float = 60, *,
             work_dir: PathOrId | None = None, echo: bool = False) -> StopOutcome:
    """Stop a running job, as ``python -m curator_dask stop JOB [--force]`` does, and wait up to
    ``timeout`` seconds for it to end.

    Without ``force``: a stop request the driver notices within half a second; it starts no
    new sources, lets running ones finish and ends ``stopped``. With ``force``: after at most
    5 s of that, the run's Dask tasks are cancelled on its scheduler, then the driver gets
    SIGTERM and, ``timeout`` seconds later, SIGKILL (only the recorded driver, on its host).

    Args:
        job: a job id or a job's folder.
        force: cancel and signal when the cooperative stop is not enough.
        timeout: seconds to wait for the job to end (and, with ``force``, after each step).
        work_dir: where to look for the job id first (default: config ``jobs.work-dir``).
        echo: print each step as the command does.

    Returns:
        A :class:`~curator_dask.jobs.control.StopOutcome`: ``stopped``, ``how``, ``state``.

    Raises:
        JobNotFoundError: no such job (the command's exit code 2).
        StopError: its driver is gone from this host; nothing was signalled.

    Example:
        >>> from curator_dask.jobs import stop_job
        >>> stop_job("20261129_132204_22313d", force=True, timeout=60).state  # doctest: +SKIP
        'stopped'
    """
    import sys

    def say(text: str, error: bool) -> None:
        print(text, file=sys.stderr if error else sys.stdout)

    return stop_job_dir(locate_job(job, work_dir), force=force, timeout=timeout,
                        say=say if echo else None)


def show_job_progress(job: PathOrId, detailed: bool = False, *,
                      work_dir: PathOrId | None = None, echo: bool = False) -> dict[str, Any]:
    """A job's progress as data: what ``status JOB [--detailed]`` shows.

    Keys: ``job_id``, ``state``, ``job_dir``, ``run_id``, ``pid``, ``host``, ``started``,
    ``updated``, ``ended``, ``sources`` (``total``, ``skipped``, ``to_process``,
    ``completed``, ``failed``, ``in_flight``, ``pending``), ``percent`` (sources completed or
    skipped, of the total), ``rates`` (``sources_per_s``, ``eta_s``, ...), ``failed_stage``,
    ``error``, ``stop_reason``, ``resume_command``, ``dashboard``. With ``detailed``, also
    ``stages`` (the per-stage counts, each with ``started``, ``dask_tasks``, ``raised`` and its
    stage checkpoints), ``partitions`` (per Dask task of sources: ``task_id``, ``state``,
    ``sources``, ``completed``, ``failed``, ``submitted``, ``ended``), ``partitions_unlisted``
    and ``attempts`` (see :func:`curator_dask.jobs.monitor.detail`).

    Args:
        job: a job id or a job's folder.
        detailed: add per-stage and per-partition detail (reads the event log).
        work_dir: where to look for the job id first (default: config ``jobs.work-dir``).
        echo: also print it as ``status JOB [--detailed]`` does.

    Raises:
        JobNotFoundError: no such job.
        FileNotFoundError: the job has not started (no summary yet).

    Example:
        >>> from curator_dask.jobs import show_job_progress
        >>> data = show_job_progress("20261129_132204_22313d", detailed=True)  # doctest: +SKIP
        >>> data["percent"], data["sources"]["in_flight"]  # doctest: +SKIP
        (62.5, 2)
    """
    job_dir = locate_job(job, work_dir)
    data = progress_data(job_dir, detailed=detailed)
    if echo:
        import sys

        from rich.console import Console

        from curator_dask.jobs.monitor import renderable

        # as the command prints it: the terminal's width, else wide enough not to truncate
        Console(width=None if sys.stdout.isatty() else 160).print(
            renderable(load_job(job_dir) or {}, data if detailed else None))
    return data


class JobUtils:
    """One job's folder and records: its summary, its event log, its progress; stop it.

    ``job`` is a job id (looked up in ``work_dir``, then in the per-user job index) or the
    path of a job's folder.

    Attributes:
        job_id: the job's id.
        job_dir: its folder, ``<work dir>/<job id>``.

    Example:
        >>> from curator_dask.jobs import JobUtils
        >>> job = JobUtils("20261129_132204_22313d", work_dir="curator-dask-jobs")  # doctest: +SKIP
        >>> job.load_job_summary()["state"]  # doctest: +SKIP
        'completed'
        >>> len(job.load_event_logs(types=["partition_complete"]))  # doctest: +SKIP
        8
    """

    def __init__(self, job: PathOrId, *, work_dir: PathOrId | None = None) -> None:
        self.job_dir = locate_job(job, work_dir)
        self.job_id = os.path.basename(self.job_dir)

    @property
    def events_path(self) -> str:
        return os.path.join(self.job_dir, "events.jsonl")

    def load_job_summary(self) -> dict[str, Any] | None:
        """``job_summary.json`` with its state checked (``running (driver gone)`` when the
        driver died on this host) and ``job_dir`` added; ``None`` before the job started."""
        return load_job(self.job_dir)

    def load_event_logs(self, types: str | Collection[str] | None = None, *,
                        run_id: str | None = None) -> list[dict[str, Any]]:
        """The records of ``events.jsonl``, oldest first (a torn last line is skipped); of a
        Data-Juicer recipe's job, its events files as such records (``jobs/dj_format.py``).

        Args:
            types: keep only these types: the log's own (``source_complete``) or the seed's
                names (``partition_complete``; see ``SEED_EVENT_TYPES``). An unknown name
                raises ``ValueError`` naming both lists.
            run_id: keep only this attempt's records (``"last"``: the attempt the summary
                describes).
        """
        wanted = event_types_for(types) if types is not None else None
        if run_id == "last":
            run_id = (self.load_job_summary() or {}).get("run_id")
        return [e for e in read_job_events(self.job_dir)
                if (wanted is None or e.get("type") in wanted)
                and (run_id is None or e.get("run_id") == run_id)]

    def progress(self, detailed: bool = False) -> dict[str, Any]:
        """:func:`show_job_progress` of this job."""
        return progress_data(self.job_dir, detailed=detailed)

    def stop(self, force: bool = False, timeout: float = 60) -> StopOutcome:
        """:func:`stop_job` of this job."""
        return stop_job_dir(self.job_dir, force=force, timeout=timeout)

    def __repr__(self) -> str:
        return f"JobUtils({self.job_id!r}, job_dir={self.job_dir!r})"
