"""Progress of the deduplication phases: a bar per phase, lines where no bar is drawn, and the
phase events and summary of the run's job.

Phase 1 and the removal are pipeline runs: the engine draws their bars (one per stage, in
sources), and this module only times them and counts their documents. The phases between them
(the exact workflow's grouping; LSH buckets, buckets to edges, the Jaccard check, connected
components and the ids of the fuzzy workflow) are Dask computations, followed here by their
futures (:func:`compute_partitions`, :func:`gather`): each output partition that finishes
advances its phase by the documents, pairs or files it held.

Where someone looks (the executor's ``progress``, decided as for the engine's bars:
``backends/dask/progress.showing``), each phase gets a ``tqdm.auto`` bar: a widget updated in
place in a notebook, one redrawn line on a terminal with log records written above it.
Elsewhere (``progress=False``, a batch job's log) the phase says a line when its first
partition finishes, then at most every ``line_every`` seconds, and one when it ends::

    dedup phase jaccard: 1,204/5,000 pairs (24%), 310 pairs/s, ETA 0:00:12

A run given ``work_dir=`` or ``job_id=`` is a job (the folder ``Pipeline.run`` makes,
``jobs/run.py``): its ``events.jsonl`` gets ``phase_started``, ``phase_progress`` (at most every
``event_every`` seconds) and ``phase_finished`` records, and its summary each phase's counts,
which ``python -m curator_dask status JOB`` shows.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from curator_dask.backends.dask.progress import logs_above_bars, notice, showing
from curator_dask.errors import RunStopped

logger = logging.getLogger(__name__)

LINE_EVERY_S = 30.0  # a line without a bar: often enough for a log, rare enough to read
EVENT_EVERY_S = 5.0  # the job summary's heartbeat
TICK_S = 1.0  # how often a waiting phase refreshes its bar and checks for a stop


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class PhaseProgress:
    """One phase of a run, from :meth:`PhaseReporter.phase`; a context manager.

    The phase's work calls :meth:`start` (with the total when it is known) and then
    :meth:`advance`; a phase whose work never starts (committed by an earlier run) ends
    ``skipped``; one that raises ends ``failed`` and the error goes on.

    Example:
        >>> reporter = PhaseReporter("dedup", progress=False)
        >>> with reporter.phase("lsh", "documents") as p:
        ...     p.start(total=40, per=20)  # 20 rows per document: one per band
        ...     p.advance(400, say=False)
        >>> reporter.snapshot()["phases"][0]["done"]
        20
    """

    def __init__(self, reporter: PhaseReporter, name: str, unit: str,
                 total: int | None = None) -> None:
        self.reporter = reporter
        self.name, self.unit = name, unit
        self.state = "pending"
        self.total = total
        self.per = 1
        self.raw = 0  # what advance counted, ``per`` of them to a unit
        self.started: float | None = None
        self.ended: float | None = None
        self._bar: Any = None
        self._logs = contextlib.ExitStack()
        self._said = False  # the first line, at the first partition done
        self._last_line = self._last_event = float("-inf")
        self._lock = threading.Lock()

    @property
    def done(self) -> int:
        return self.raw // self.per

    def start(self, total: int | None = None, *, per: int = 1) -> None:
        """The phase's work begins: ``total`` units (``None``: the one the phase was given, if
        any), each ``per`` of what :meth:`advance` counts (the LSH rows: one per document and
        band)."""
        if total is not None:
            self.total = int(total)
        self.per = max(1, int(per))
        self.state, self.started = "running", time.time()
        self._last_line = time.monotonic()  # the next line after line_every, or at a partition
        self.reporter.emit("phase_started", phase=self.name, unit=self.unit, total=self.total)
        if self.reporter.show:
            from tqdm.auto import tqdm

            if not self.reporter.notebook:
                self._logs.enter_context(logs_above_bars())
            self._bar = tqdm(total=self.total, unit=f" {self.unit}", desc=self.name,
                             leave=True, unit_scale=False)

    def skip(self) -> None:
        """The phase was committed by an earlier run after all (it ends ``skipped``)."""
        self.started = None

    def advance(self, n: int, *, say: bool = True) -> None:
        """``n`` more (of what ``per`` divides) are done; ``say``: a line at once if it is the
        first without a bar (not for the count a phase gets as it ends)."""
        with self._lock:
            before = self.done
            self.raw += int(n)
            if self._bar is not None and self.done > before:
                self._bar.update(self.done - before)
        self.tick(first=say)

    def tick(self, *, first: bool = False) -> None:
        """Said and recorded as the intervals allow (``first``: a finished partition, said at
        once the first time)."""
        now = time.monotonic()
        if self._bar is not None:
            self._bar.refresh()  # its elapsed time moves while nothing finishes
        elif (first and self.done and not self._said) or (
                now - self._last_line >= self.reporter.line_every):
            self._said, self._last_line = True, now
            notice(self.line(), shown=False, log=logger)
        if now - self._last_event >= self.reporter.event_every:
            self._last_event = now
            data = self.as_dict()
            self.reporter.emit("phase_progress", **{k: data[k] for k in (
                "phase", "unit", "done", "total", "rate", "eta_s")})

    def rate(self) -> float | None:
        if self.started is None:
            return None
        elapsed = (self.ended or time.time()) - self.started
        return self.done / elapsed if elapsed > 0 else None

    def eta(self) -> float | None:
        rate = self.rate()
        if self.total is None or not rate:
            return None
        return max(0, self.total - self.done) / rate

    def line(self) -> str:
        """What a line without a bar says: done of total, rate and ETA (or elapsed)."""
        who = f"{self.reporter.workflow} phase {self.name}"
        rate = self.rate()
        speed = "" if rate is None else f", {rate:,.0f} {self.unit}/s"
        if self.state == "skipped":
            return f"{who}: committed by an earlier run, skipped"
        if self.state in ("completed", "failed"):
            took = (self.ended or 0) - (self.started or 0)
            return (f"{who} {self.state}: {self.done:,} {self.unit} in {took:.2f} s{speed}")
        if self.total is None:  # nothing to reckon an ETA with: the time so far
            took = time.time() - (self.started or time.time())
            return f"{who}: {self.done:,} {self.unit}{speed}, running for {_clock(took)}"
        share = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        return (f"{who}: {self.done:,}/{self.total:,} {self.unit}{share}{speed}, "
                f"ETA {_clock(self.eta())}")

    def as_dict(self) -> dict[str, Any]:
        """The phase as the job's summary and events carry it."""
        rate = self.rate()
        end = self.ended or time.time()
        return {"phase": self.name, "unit": self.unit, "state": self.state, "done": self.done,
                "total": self.total, "rate": None if rate is None else round(rate, 3),
                "eta_s": None if self.eta() is None else round(self.eta() or 0, 1),
                "elapsed_s": None if self.started is None else round(end - self.started, 3)}

    def __enter__(self) -> PhaseProgress:
        self.reporter.check_stop()
        return self

    def __exit__(self, kind: Any, error: BaseException | None, tb: Any) -> None:
        self.ended = time.time()
        self.state = ("skipped" if self.started is None and error is None
                      else "failed" if error is not None else "completed")
        if self.state == "completed" and self.total is None:
            self.total = self.done  # counted as it ended (phase 1's documents)
        if self._bar is not None:
            if self.state == "completed" and self._bar.total is None:
                self._bar.total = self._bar.n  # "8/8", not "8/?"
            self._bar.refresh()
            self._bar.close()
        self._logs.close()
        data = self.as_dict()
        fields = {k: data[k] for k in ("phase", "unit", "state", "done", "total", "rate",
                                       "elapsed_s")}
        if error is not None:
            fields["error"] = f"{type(error).__name__}: {error}"
        self.reporter.emit("phase_finished", **fields)
        if self._bar is None and self.state != "failed":
            notice(self.line(), shown=False, log=logger)
        else:
            logger.info("%s", self.line())


class PhaseReporter:
    """Where one deduplication run's phases report: bars or lines (``progress``: the
    executor's setting), and the run's job (a ``JobRun``, or ``None``).

    Example:
        >>> reporter = PhaseReporter("fuzzy deduplication", progress=False)
        >>> with reporter.phase("edges", "files") as p:
        ...     p.start(total=2); p.advance(2, say=False)
        >>> reporter.snapshot()["phases"][0]["state"]
        'completed'
    """

    def __init__(self, workflow: str, *, progress: bool | None, job: Any = None,
                 executor: Any = None) -> None:
        import sys

        self.workflow = workflow
        self.show = showing(progress)
        self.notebook = "ipykernel" in sys.modules
        self.job, self.executor = job, executor
        self.line_every, self.event_every, self.tick_s = LINE_EVERY_S, EVENT_EVERY_S, TICK_S
        self.phases: list[PhaseProgress] = []
        self._stop: str | None = None
        if job is not None:
            job.bind(stop=self.request_stop, progress=self.snapshot)

    def phase(self, name: str, unit: str, total: int | None = None) -> PhaseProgress:
        """A new phase (enter it with ``with``) of ``total`` ``unit`` (if known already)."""
        progress = PhaseProgress(self, name, unit, total)
        self.phases.append(progress)
        return progress

    def emit(self, type_: str, **fields: Any) -> None:
        if self.job is not None:
            self.job.event(type_, workflow=self.workflow, **fields)

    def snapshot(self) -> dict[str, Any]:
        """The job summary's part: the workflow and every phase so far."""
        return {"workflow": self.workflow, "phases": [p.as_dict() for p in list(self.phases)]}

    def request_stop(self, reason: str) -> None:
        """``stop JOB``: a pipeline phase in flight drains; the next phase does not start."""
        from curator_dask.backends.dask.stop import request_stop

        self._stop = reason
        request_stop(reason, self.executor)

    def check_stop(self) -> None:
        if self._stop is not None:
            raise RunStopped(f"{self._stop}: stopped before the phase's end")


def gather(futures: Sequence[Any], progress: PhaseProgress | None,
           count: Callable[[Any], int]) -> list[Any]:
    """The results of ``futures`` in their order; each, as it finishes, advances ``progress``
    by ``count(result)``. While none finishes the phase still refreshes and checks for a stop
    every ``tick_s`` seconds. An error of a future raises at once."""
    from distributed import wait

    if progress is None:
        return [f.result() for f in futures]
    where = {f.key: i for i, f in enumerate(futures)}
    results: list[Any] = [None] * len(futures)
    pending = set(futures)
    while pending:
        progress.reporter.check_stop()
        try:
            done, pending = wait(pending, timeout=progress.reporter.tick_s,
                                 return_when="FIRST_COMPLETED")
        except TimeoutError:
            progress.tick()
            continue
        for future in done:
            result = future.result()
            results[where[future.key]] = result
            progress.advance(count(result), say=len(futures) > 1)
    return results


def compute_partitions(client: Any, frame: Any, progress: PhaseProgress | None,
                       count: Callable[[Any], int]) -> Any:
    """``client.compute(frame).result()`` (a pandas frame, partitions in order), computed one
    future per output partition so that each advances ``progress`` by ``count(partition)``."""
    import pandas as pd

    if progress is None:
        return client.compute(frame).result()
    parts = gather(client.compute(frame.to_delayed()), progress, count)
    return pd.concat(parts, ignore_index=True) if parts else frame._meta


def rows_of(column: str) -> Callable[[Any], int]:
    """``count`` for a partition of counts: the sum of its ``column``."""
    return lambda part: int(part[column].sum())


def open_job(workflow: str, parameters: dict[str, Any], *, work_dir: str | None,
             job_id: str | None, checkpoint_path: str | None) -> Any:
    """The run's job (``work_dir=``, ``job_id=``: a ``JobRun``, the folder ``Pipeline.run``
    makes, its configuration the workflow's parameters), or ``None`` without either."""
    if work_dir is None and job_id is None:
        return None
    from curator_dask import config
    from curator_dask.jobs.run import JobRun

    return JobRun([], work_dir=work_dir or config.get("jobs.work-dir"), job_id=job_id,
                  checkpoint_path=checkpoint_path, checkpointed=False,
                  settings={"workflow": workflow, "parameters": parameters})


@contextlib.contextmanager
def job_reporter(workflow: str, parameters: dict[str, Any], executor: Any, *,
                 work_dir: str | None, job_id: str | None,
                 checkpoint_path: str | None) -> Any:
    """A :class:`PhaseReporter` for one run, its job opened first and ended with the run
    (``completed``, or ``stopped``/``failed`` with the run's error)."""
    from curator_dask.backends.base import RunEnd

    job = open_job(workflow, parameters, work_dir=work_dir, job_id=job_id,
                   checkpoint_path=checkpoint_path)
    reporter = PhaseReporter(workflow, progress=getattr(executor, "progress", None), job=job,
                             executor=executor)
    try:
        yield reporter
    except BaseException as exc:
        if job is not None:
            job.run_finished(RunEnd(error=exc))
        raise
    if job is not None:
        job.run_finished(RunEnd())


__all__ = ["PhaseProgress", "PhaseReporter", "compute_partitions", "gather", "job_reporter",
           "open_job", "rows_of"]
