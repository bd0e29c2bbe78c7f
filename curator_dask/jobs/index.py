"""The per-user job index: where each job's folder is, so the job tools work from any directory.

Job folders live under a work dir that defaults to a relative path (``./curator-dask-jobs``),
so ``status``, ``stop`` and ``report`` run from another directory would not find them. Every
attempt of a job therefore records ``{job_id, path, started}`` in one JSON file per user:
``$CURATOR_DASK_JOB_INDEX`` when set (the tests point it at a temporary file), else
``$XDG_STATE_HOME/curator_dask/jobs.json`` (``~/.local/state/curator_dask/jobs.json``).

The index is a convenience, never a requirement: it is rewritten atomically under a lock, a
missing index reads as empty, a corrupt one (truncated, not JSON or not UTF-8, nested too deep
to parse, of another shape) reads as empty with one warning naming it and is rewritten whole
at the next write, a failure to write it is logged and the run goes on, and entries whose
folder is gone are skipped when read. It keeps the newest :data:`MAX_ENTRIES` jobs.

On a shared account the index holds every job the user ever ran, so ``status`` lists
(:func:`job_rows`) the jobs of the current work dir plus the index's running jobs; the whole
index only when asked (``--all``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

from curator_dask.errors import CuratorDaskError
from curator_dask.jobs.job import CONFIG_FILE
from curator_dask.jobs.summary import SUMMARY_FILE

logger = logging.getLogger(__name__)

ENV_VAR = "CURATOR_DASK_JOB_INDEX"
MAX_ENTRIES = 1000
# (index, its size and mtime, problem): one warning per corrupt version, not one per read
_warned: set[tuple[str, tuple[int, int] | None, str]] = set()


def index_path() -> str:
    """Where the index is: ``$CURATOR_DASK_JOB_INDEX``, else under ``$XDG_STATE_HOME``.

    Example:
        >>> import os
        >>> old = os.environ.get(ENV_VAR)
        >>> os.environ[ENV_VAR] = "/tmp/somewhere/jobs.json"
        >>> index_path()
        '/tmp/somewhere/jobs.json'
        >>> _ = os.environ.pop(ENV_VAR) if old is None else os.environ.update({ENV_VAR: old})
    """
    explicit = os.environ.get(ENV_VAR)
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    state = os.environ.get("XDG_STATE_HOME") or os.path.join("~", ".local", "state")
    return os.path.join(os.path.abspath(os.path.expanduser(state)), "curator_dask", "jobs.json")


def _unusable(path: str, problem: str) -> list[dict[str, Any]]:
    try:
        st = os.stat(path)
        version: tuple[int, int] | None = (st.st_size, st.st_mtime_ns)
    except OSError:
        version = None
    if (path, version, problem) not in _warned:
        _warned.add((path, version, problem))
        logger.warning("job index %s is unusable (%s); reading it as empty (the next run "
                       "rewrites it, without the jobs it listed)", path, problem)
    return []


def read_index(path: str | None = None) -> list[dict[str, Any]]:
    """The index's entries (newest last); ``[]`` when it is missing or unusable (corrupt:
    then with one warning naming the file). Entries that are not job records are skipped.

    Example:
        >>> import tempfile, os
        >>> where = os.path.join(tempfile.mkdtemp(), "jobs.json")
        >>> with open(where, "w") as f:
        ...     _ = f.write("[" * 100_000)  # nested too deep for the JSON parser
        >>> read_index(where)
        []
    """
    path = path or index_path()
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        return []
    except OSError as exc:
        return _unusable(path, f"cannot read it: {exc}")
    except RecursionError:  # not a ValueError: '[' * 100000 exhausts the parser's stack
        return _unusable(path, "nested too deep to parse")
    except ValueError as exc:  # not JSON (truncated, garbage), or not UTF-8
        return _unusable(path, f"not valid JSON: {exc}")
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(jobs, list):
        return _unusable(path, 'not an object with a "jobs" list')
    return [e for e in jobs if isinstance(e, dict) and isinstance(e.get("job_id"), str)
            and isinstance(e.get("path"), str)]


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    with open(path + ".lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def record_job(job_id: str, job_dir: str, path: str | None = None) -> bool:
    """Add (or move to the end) the job at ``job_dir``; returns whether the index was written.
    Never raises: a run must not fail because the index cannot be written.

    Example:
        >>> import tempfile, os
        >>> where = os.path.join(tempfile.mkdtemp(), "jobs.json")
        >>> record_job("j1", "/data/jobs/j1", where), [e["job_id"] for e in read_index(where)]
        (True, ['j1'])
    """
    path = path or index_path()
    job_dir = os.path.abspath(job_dir)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with _locked(path):
            entries = [e for e in read_index(path) if e["path"] != job_dir]
            entries.append({"job_id": job_id, "path": job_dir, "started": time.time()})
            text = json.dumps({"version": 1, "jobs": entries[-MAX_ENTRIES:]}, indent=1)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text + "\n")
            os.replace(tmp, path)  # readers see the old index or the new one, never half
        return True
    except OSError as exc:
        logger.warning("could not record job %s in the job index %s: %s", job_id, path, exc)
        return False


def indexed_jobs(path: str | None = None) -> list[dict[str, Any]]:
    """The index's entries whose job folder still exists (:func:`is_job_folder`: a Data-Juicer
    recipe's has a summary and no saved configuration), newest last."""
    return [e for e in read_index(path) if is_job_folder(e["path"])]


def find_job(job_id: str, work_dir: str, path: str | None = None) -> list[str]:
    """The folders of job ``job_id``: ``<work_dir>/<job_id>`` when it is a job (it has a saved
    configuration or a summary), else the index's folders of that id (newest first). Empty
    when there is none.

    Example:
        >>> import tempfile, os
        >>> from curator_dask.jobs.job import JobDirectory
        >>> root = tempfile.mkdtemp()
        >>> job = JobDirectory(os.path.join(root, "elsewhere"), "j2")
        >>> job.create({}, {})
        >>> where = os.path.join(root, "jobs.json")
        >>> _ = record_job("j2", job.path, where)
        >>> find_job("j2", os.path.join(root, "here"), where) == [job.path]
        True
    """
    local = os.path.join(os.path.abspath(work_dir), job_id)
    if is_job_folder(local):
        return [local]
    found = [e["path"] for e in reversed(indexed_jobs(path)) if e["job_id"] == job_id]
    return list(dict.fromkeys(found))


class JobNotFoundError(FileNotFoundError, CuratorDaskError):
    """No job of that id in the work dir or in the job index (the CLI's exit code 2); the
    message says where it looked.

    Attributes:
        job: the id (or folder) asked for.
        work_dir: the work dir looked in (absolute).
        index: the job index looked in.
    """

    def __init__(self, job: str, work_dir: str, index: str, message: str | None = None) -> None:
        self.job, self.work_dir, self.index = job, work_dir, index
        super().__init__(message or (
            f"no job {job!r} in {work_dir} or in the job index {index}: give work_dir= the "
            "folder the job ran in (or the job's folder itself)"))

    def __reduce__(self) -> tuple[Any, ...]:
        # pickle rebuilds from __init__'s arguments, not the message alone
        return (type(self), (self.job, self.work_dir, self.index, str(self)))


class AmbiguousJobError(ValueError, CuratorDaskError):
    """The job index has that job id in several folders; ``folders`` lists them."""

    def __init__(self, job: str, folders: list[str]) -> None:
        self.job, self.folders = job, list(folders)
        super().__init__(f"job {job!r} is in several folders: {', '.join(folders)}; give "
                         "work_dir= the folder above the job's")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job, self.folders))


def is_job_folder(path: str) -> bool:
    """Whether ``path`` is a job's folder: it holds a saved configuration or a summary."""
    return any(os.path.isfile(os.path.join(path, name)) for name in (CONFIG_FILE, SUMMARY_FILE))


def locate_job(job: str | os.PathLike[str], work_dir: str | os.PathLike[str] | None = None,
               path: str | None = None) -> str:
    """The folder of ``job``: a job id, looked up in ``work_dir`` (default: config
    ``jobs.work-dir``) and then in the job index, or the path of a job's folder.

    Raises:
        JobNotFoundError: no such job (the message says where it looked).
        AmbiguousJobError: the index has that id in several folders.

    Example:
        >>> import tempfile, os
        >>> from curator_dask.jobs.job import JobDirectory
        >>> job = JobDirectory(tempfile.mkdtemp(), "j3")
        >>> job.create({}, {})
        >>> locate_job(job.path) == job.path
        True
    """
    text = os.fspath(job)
    if work_dir is None:
        from curator_dask import config

        work_dir = config.get("jobs.work-dir")
    if isinstance(job, os.PathLike) or os.sep in text or text.startswith("."):  # a folder:
        if is_job_folder(text):  # (a job id is a plain token, never holding a '/')
            return os.path.abspath(text)
        raise JobNotFoundError(text, os.path.abspath(work_dir), path or index_path(),
                               f"{os.path.abspath(text)} is not a job folder (it has no "
                               f"{CONFIG_FILE} or {SUMMARY_FILE}); give a job id or the "
                               "folder <work dir>/<job id>")
    found = find_job(text, os.fspath(work_dir), path)
    if not found:
        raise JobNotFoundError(text, os.path.abspath(work_dir), path or index_path())
    if len(found) > 1:
        raise AmbiguousJobError(text, found)
    return found[0]


def checked_state(summary: dict[str, Any]) -> str:
    """The recorded state, or ``running (driver gone)`` when its driver (checked by pid and
    start time, on its host) no longer exists.

    Example:
        >>> checked_state({"state": "completed"})
        'completed'
    """
    import socket

    from curator_dask.jobs.control import is_recorded_driver

    state = summary.get("state", "?")
    if (state == "running" and summary.get("host") == socket.gethostname()
            and not is_recorded_driver(summary)):
        return "running (driver gone)"
    return state


def job_rows(work_dir: str, *, all_jobs: bool = False,
             path: str | None = None) -> tuple[list[dict[str, Any]], int]:
    """The jobs ``status`` lists, oldest first, and how many of the index's jobs it left out.

    Each row is a job's summary with its state checked (:func:`checked_state`) and
    ``job_dir`` added. Listed: every job in ``work_dir``, and of the index's jobs elsewhere
    those still ``running`` (a driver gone from this host is not: that job ended); with
    ``all_jobs``, every job of the index.

    Example:
        >>> import tempfile, os
        >>> root = tempfile.mkdtemp()
        >>> job_rows(os.path.join(root, "jobs"), path=os.path.join(root, "index.json"))
        ([], 0)
    """
    from curator_dask.jobs.summary import read_summary

    folder = os.path.abspath(work_dir)
    local = [os.path.join(folder, n) for n in sorted(os.listdir(folder))
             if os.path.isdir(os.path.join(folder, n))] if os.path.isdir(folder) else []
    here = set(local)
    rows, hidden = [], 0
    for job_dir in dict.fromkeys(local + [e["path"] for e in indexed_jobs(path)]):
        summary = read_summary(os.path.join(job_dir, SUMMARY_FILE))
        if not (isinstance(summary, dict) and summary.get("job_id")):
            continue
        row = {**summary, "state": checked_state(summary), "job_dir": job_dir}
        if all_jobs or job_dir in here or row["state"] == "running":
            rows.append(row)
        else:
            hidden += 1
    return sorted(rows, key=lambda r: str(r.get("started") or "")), hidden
