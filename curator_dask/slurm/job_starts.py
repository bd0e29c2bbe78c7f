"""SLURM worker jobs that end before their Dask worker joins: replaced, counted, and at a bound
the run's error.

dask-jobqueue learns that a worker job is gone only through its Dask worker. A job that ends
before its worker connects (a ``python`` that does not exist, a ``job_script_prologue`` that
exits 1, a job cancelled at once) stays in the cluster's plan, so neither ``scale`` nor
adaptive scaling submits another, and the run would wait for workers that never come. The
watchdog of :class:`~curator_dask.slurm.cluster.SlurmClusterHandle` asks :class:`JobStarts`
every ``slurm.watchdog-interval`` seconds which of the cluster's jobs ended without a worker;
those are dropped from the plan, so a replacement is submitted, until
``slurm.max-failed-job-starts`` of them ended in a row with no worker joining in between. Then
:meth:`JobStarts.failure` is a :class:`~curator_dask.errors.WorkerJobsFailedError` naming each
job, the state it ended in and its output file, and the run raises it.
"""

from __future__ import annotations

import collections
import dataclasses
import getpass
import logging
import os
import re
import shlex
import subprocess
from typing import Any

from curator_dask.errors import WorkerJobsFailedError

logger = logging.getLogger(__name__)

# squeue states of a job that may still start its worker (everything else has ended).
ALIVE = frozenset({
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "REQUEUED",
    "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "SPECIAL_EXIT",
    "RESV_DEL_HOLD",
})
# scontrol prints these alone on their line: the rest of the line is the value (spaces too).
_WHOLE_LINE = ("StdOut=", "StdErr=", "StdIn=", "WorkDir=", "Command=")
_PAIR = re.compile(r"(?:^|\s)([A-Za-z][\w:/]*)=(\S*)")


@dataclasses.dataclass(frozen=True)
class FailedStart:
    """One worker job that ended before its Dask worker joined.

    Example:
        >>> FailedStart("12", "FAILED, exit code 1:0", "/l/w-12.out", "/l/w-12.err").describe()
        'job 12 FAILED, exit code 1:0, output /l/w-12.out, errors /l/w-12.err'
    """

    job_id: str
    state: str
    output: str
    errors: str

    def describe(self) -> str:
        errors = f", errors {self.errors}" if self.errors != self.output else ""
        return f"job {self.job_id} {self.state}, output {self.output}{errors}"


class JobStarts:
    """Which worker jobs of a dask-jobqueue cluster ended before their Dask worker joined.

    ``limit`` such jobs in a row (no worker joining in between) make :meth:`failure` an error;
    until then :meth:`check` returns the cluster's names of the failed jobs, to be dropped from
    its plan so that replacements are submitted.

    Example:
        >>> starts = JobStarts(limit=3)
        >>> starts.failure() is None
        True
    """

    def __init__(self, limit: int, submit_dir: str | None = None) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            msg = (f"slurm.max-failed-job-starts must be a whole number of 1 or more (worker "
                   f"jobs that may end in a row before any worker joins), got {limit!r}")
            raise ValueError(msg)
        self.limit = limit
        self.submit_dir = submit_dir or os.getcwd()  # where dask-jobqueue runs sbatch
        self._arrived: collections.deque[str] = collections.deque()  # appended on the loop
        self._unmapped: set[str] = set()
        self._joined: set[str] = set()  # job ids whose worker joined
        self._failed_ids: set[str] = set()
        self._failed: list[FailedStart] = []  # in a row, since the last worker joined
        self._message: str | None = None

    def attach(self, cluster: Any) -> None:
        """Record the workers that join ``cluster``'s scheduler (it runs in this process),
        before any job is submitted: a worker that joins and leaves between two looks of the
        watchdog has still joined."""
        from distributed.diagnostics.plugin import SchedulerPlugin

        arrived = self._arrived

        class ArrivedWorkers(SchedulerPlugin):
            name = "curator-dask-worker-arrivals"

            def add_worker(self, scheduler: Any = None, worker: str = "", **kwargs: Any) -> None:
                state = scheduler.workers.get(worker) if scheduler is not None else None
                if state is not None:
                    arrived.append(str(state.name))

        scheduler: Any = getattr(cluster, "scheduler", None)  # in-process Scheduler or none
        if hasattr(scheduler, "add_plugin"):
            async def add() -> None:
                scheduler.add_plugin(ArrivedWorkers(), idempotent=True)

            cluster.sync(add)

    def failure(self) -> WorkerJobsFailedError | None:
        """The error the run ends with once ``limit`` jobs in a row ended without a worker."""
        return None if self._message is None else WorkerJobsFailedError(self._message)

    def check(self, cluster: Any) -> list[str]:
        """One look at ``cluster``'s jobs: the names of those that ended before their worker
        joined, to drop from its plan (none once the bound is reached: nothing more is
        submitted then)."""
        if self._message is not None:
            return []
        jobs = self._jobs(cluster)
        waiting = {job_id: name for name, job_id in jobs.items()
                   if job_id not in self._joined and job_id not in self._failed_ids}
        if not waiting:
            return []
        states = queue_states(sorted(waiting))
        if states is None:  # squeue did not answer: judge nothing this time
            return []
        ended = [(job_id, name) for job_id, name in waiting.items()
                 if states.get(job_id) not in ALIVE]
        now = self._jobs(cluster) if ended else {}  # the cluster may have retired some since
        dropped = []
        for job_id, name in ended:
            if now.get(name) != job_id or job_id in self._joined:
                continue  # scaled down (cancelled) by the cluster, or its worker just joined
            self._failed_ids.add(job_id)
            self._failed.append(describe_job(job_id, cluster.workers.get(name), self.submit_dir))
            logger.warning("SLURM worker job %s ended before its Dask worker joined (%d of %d "
                           "in a row): %s", job_id, len(self._failed), self.limit,
                           self._failed[-1].describe())
            dropped.append(name)
        if len(self._failed) >= self.limit:
            self._message = failure_message(self._failed, self.limit)
            logger.error("%s", self._message)
            return []
        return dropped

    def _jobs(self, cluster: Any) -> dict[str, str]:
        """``{name: job id}`` of the jobs in the cluster's plan, after taking in the workers
        that joined (each marks its job joined and ends a run of failed starts)."""
        jobs = {name: str(job.job_id) for name, job in list(cluster.workers.items())
                if getattr(job, "job_id", None) and name in cluster.worker_spec}
        while self._arrived:
            self._unmapped.add(self._arrived.popleft())
            self._failed.clear()
        for worker in list(self._unmapped):
            # a job of several processes names its workers <job name>-<i>
            name = worker if worker in cluster.worker_spec else worker.rsplit("-", 1)[0]
            if name in jobs:
                self._joined.add(jobs[name])
            if name in jobs or name not in cluster.worker_spec:  # else: its job is starting
                self._unmapped.discard(worker)
        return jobs


def failure_message(failed: list[FailedStart], limit: int) -> str:
    """The one-line message of :class:`~curator_dask.errors.WorkerJobsFailedError`."""
    jobs = "; ".join(f.describe() for f in failed)
    return (f"{len(failed)} SLURM worker jobs in a row ended before their Dask worker joined "
            f"(slurm.max-failed-job-starts={limit}): {jobs}. Their output says why the worker "
            "command did not start: check python=, job_script_prologue= and "
            "job_extra_directives= in cluster_kwargs (SLURMCluster.job_script() shows the "
            "script), fix it and run again; completions already recorded are kept")


def queue_states(job_ids: list[str]) -> dict[str, str] | None:
    """``{job id: state}`` of the jobs the SLURM controller still knows (``squeue -t all``);
    a job it no longer lists has ended. ``None`` when ``squeue`` does not answer."""
    rc, out, err = _run("squeue", "-h", "-t", "all", "-o", "%i %T", "-j", ",".join(job_ids))
    if rc != 0:
        # one id the controller has forgotten (MinJobAge) is an error; several are not
        return {} if "Invalid job id" in err else None
    rows = (line.split() for line in out.splitlines())
    return {row[0]: row[1] for row in rows if len(row) >= 2}


def describe_job(job_id: str, job: Any, submit_dir: str) -> FailedStart:
    """How job ``job_id`` ended and where SLURM wrote its output: ``scontrol show job`` while
    the controller remembers it, else ``sacct`` (accounting, then the job completion log),
    else ``unknown``; the output files from scontrol or from the job script's directives."""
    fields = scontrol_fields(job_id)
    if fields.get("JobState"):
        state = f"{fields['JobState']}, exit code {fields.get('ExitCode', '?')}"
        reason = fields.get("Reason", "None")
        state += f" ({reason})" if reason not in ("None", "") else ""
    else:
        state = sacct_state(job_id) or "state unknown (neither scontrol nor sacct knows it)"
    name = fields.get("JobName") or getattr(job, "job_name", None) or "dask-worker"
    if fields.get("StdOut"):  # scontrol leaves some patterns (%J, %x) as written
        output = expand_pattern(fields["StdOut"], job_id, name)
        errors = expand_pattern(fields.get("StdErr") or fields["StdOut"], job_id, name)
    else:
        script = job.job_script() if hasattr(job, "job_script") else ""
        output, errors = output_files(script, job_id, name, submit_dir)
    return FailedStart(job_id, state, output, errors)


def scontrol_fields(job_id: str) -> dict[str, str]:
    """``scontrol show job`` as ``{field: value}`` (empty when the controller forgot it)."""
    rc, out, _ = _run("scontrol", "show", "job", job_id)
    fields: dict[str, str] = {}
    if rc != 0:
        return fields
    for line in out.splitlines():
        line = line.strip()
        if line.startswith(_WHOLE_LINE):
            key, value = line.split("=", 1)
            fields[key] = value
        else:
            fields.update(_PAIR.findall(line))
    return fields


def sacct_state(job_id: str) -> str | None:
    """``STATE, exit code X:Y`` from accounting, else from the job completion log
    (``sacct -c``, e.g. ``JobCompType=jobcomp/filetxt``); ``None`` when neither has the job."""
    for log in ((), ("-c",)):
        rc, out, _ = _run("sacct", *log, "-n", "-P", "-X", "-j", job_id,
                          "-o", "JobID,State,ExitCode")
        rows = [line.split("|") for line in out.splitlines() if line.startswith(f"{job_id}|")]
        if rc == 0 and rows and len(rows[-1]) >= 3:
            return f"{rows[-1][1]}, exit code {rows[-1][2]}"
    return None


def output_files(script: str, job_id: str, job_name: str, submit_dir: str) -> tuple[str, str]:
    """Where SLURM writes a batch job's stdout and stderr, by its script's ``#SBATCH`` lines
    as ``sbatch`` reads them (the last of each wins; stderr goes with stdout unless ``-e``
    is given); relative to ``-D``/``--chdir``, else to ``submit_dir``; ``slurm-%j.out`` when
    no ``-o`` is given.

    Example:
        >>> output_files("#SBATCH -J w\\n#SBATCH -o logs/%x-%j.out\\n", "7", "w", "/home/me")
        ('/home/me/logs/w-7.out', '/home/me/logs/w-7.out')
    """
    found: dict[str, str] = {}
    flags = {"-o": "output", "--output": "output", "-e": "error", "--error": "error",
             "-D": "chdir", "--chdir": "chdir"}
    for line in script.splitlines():
        if not line.startswith("#SBATCH"):
            continue
        try:
            words = shlex.split(line[len("#SBATCH"):], comments=True)
        except ValueError:
            continue
        for i, word in enumerate(words):
            flag, _, value = word.partition("=")
            if flag in flags and not value and i + 1 < len(words):
                value = words[i + 1]
            if flag in flags and value:
                found[flags[flag]] = value
    where = os.path.join(submit_dir, found.get("chdir", ""))

    def path(pattern: str) -> str:
        return os.path.normpath(os.path.join(where, expand_pattern(pattern, job_id, job_name)))

    output = path(found.get("output", "slurm-%j.out"))
    return output, path(found["error"]) if "error" in found else output


def expand_pattern(pattern: str, job_id: str, job_name: str) -> str:
    """A file name pattern of ``sbatch -o`` for one (non-array) batch job: ``%j``, ``%J`` and
    ``%A`` are its id, ``%x`` its name, ``%u`` the user, ``%%`` a ``%``.

    Example:
        >>> expand_pattern("logs/%x-%J.err", "12", "dask-worker")
        'logs/dask-worker-12.err'
    """
    names = {"%%": "%", "%x": job_name}
    return re.sub(r"%%|%[jJAxu]", lambda m: names.get(m.group(0)) or (
        _user() if m.group(0) == "%u" else job_id), pattern)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def _run(*command: str, timeout: float = 15) -> tuple[int, str, str]:
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr
