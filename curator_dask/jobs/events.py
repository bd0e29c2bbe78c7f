"""One append-only event log per job: ``<job dir>/events.jsonl``.

Every record carries ``job_id``, ``run_id`` (the attempt), a ``seq`` that strictly increases
across all attempts of the job (a new writer continues after the last record on disk), a UTC
timestamp and a ``type``. Records are flushed as they are written; ``close`` fsyncs. Each
record is written through :func:`~curator_dask.utils.redact.redact` (no credential in clear).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Collection
from typing import Any

from curator_dask.utils.redact import redact

EVENT_TYPES = frozenset({
    "job_start", "job_complete", "job_failed", "job_stopped", "run_resume", "sources_planned",
    "source_start", "source_complete", "source_failed", "stage_start", "stage_complete",
    "stage_failed", "checkpoint_save", "checkpoint_load", "worker_lost", "warning",
    # a deduplication workflow's phases (dedup/progress.py): phase, unit, done, total, rate
    "phase_started", "phase_progress", "phase_finished",
})
# The event types of Data-Juicer's partitioned executor (the seed document) and the types this
# log writes for them: a source task is the seed's partition, a stage its operator.
# A partition fails in two ways here: a stage returned FailedTask for it (source_failed) or a
# stage raised in its Dask task (stage_failed, which ends the attempt).
SEED_EVENT_TYPES: dict[str, tuple[str, ...]] = {
    "job_start": ("job_start", "run_resume"),
    "job_complete": ("job_complete",),
    "job_failed": ("job_failed",),
    "partition_start": ("source_start",),
    "partition_complete": ("source_complete",),
    "partition_failed": ("source_failed", "stage_failed"),
    "op_start": ("stage_start",),
    "op_complete": ("stage_complete",),
    "op_failed": ("stage_failed",),
    "checkpoint_save": ("checkpoint_save",),
    "checkpoint_load": ("checkpoint_load",),
}


def event_types_for(names: str | Collection[str]) -> frozenset[str]:
    """The log's event types that ``names`` select: this log's own types, and the seed's
    (:data:`SEED_EVENT_TYPES`) as the types they map to; an unknown name is refused naming
    both lists. A name that is both (``job_start``) selects what the seed means by it: an
    attempt starting, resumed ones (``run_resume``) included.

    Example:
        >>> sorted(event_types_for(["partition_failed", "warning"]))
        ['source_failed', 'stage_failed', 'warning']
    """
    wanted = [names] if isinstance(names, str) else list(names)
    out: set[str] = set()
    for name in wanted:
        if name in SEED_EVENT_TYPES:
            out.update(SEED_EVENT_TYPES[name])
        elif name in EVENT_TYPES:
            out.add(name)
        else:
            msg = (f"unknown event type {name!r}; this log's types: {sorted(EVENT_TYPES)}; "
                   f"the seed's names: {sorted(SEED_EVENT_TYPES)}")
            raise ValueError(msg)
    return frozenset(out)


def _last_seq(path: str) -> int:
    """The ``seq`` of the last complete record in ``path`` (0 when none)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 65536))
            tail = f.read().splitlines()
    except FileNotFoundError:
        return 0
    for line in reversed(tail):
        try:
            return int(json.loads(line)["seq"])
        except (ValueError, KeyError, TypeError):
            continue  # a torn last line from a killed writer
    return 0


class EventLog:
    """Appends typed records to a job's ``events.jsonl``.

    Example:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "events.jsonl")
        >>> with EventLog(path, job_id="j", run_id="r1") as log:
        ...     log.emit("job_start", pid=1)["seq"]
        1
    """

    def __init__(self, path: str, *, job_id: str, run_id: str,
                 secrets: Collection[str] = ()) -> None:
        self.path = path
        self.secrets = secrets  # the job's secret values, scrubbed from free text
        self.job_id = job_id
        self.run_id = run_id
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self._lock = threading.Lock()
        self._seq = _last_seq(path)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (kept open for the job)

    def emit(self, type_: str, **fields: Any) -> dict[str, Any]:
        """Append one record (redacted); returns it."""
        if type_ not in EVENT_TYPES:
            msg = f"unknown event type {type_!r}; known: {sorted(EVENT_TYPES)}"
            raise ValueError(msg)
        with self._lock:
            self._seq += 1
            now = time.time()  # one reading: seconds and milliseconds agree
            record = {"seq": self._seq, "job_id": self.job_id, "run_id": self.run_id,
                      "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
                      + f".{int(now * 1000) % 1000:03d}Z",
                      "type": type_, **redact(fields, self.secrets)}
            self._file.write(json.dumps(record, default=str) + "\n")
            self._file.flush()
            return record

    def close(self) -> None:
        with self._lock:
            if self._file.closed:
                return
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_events(path: str) -> list[dict[str, Any]]:
    """Every complete record of an event log (a torn last line is skipped)."""
    records = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    records.append(json.loads(line))
                except ValueError:
                    continue
    except FileNotFoundError:
        return []
    return records


def read_job_events(job_dir: str) -> list[dict[str, Any]]:
    """Every record of the job's event log: its ``events.jsonl``; for a Data-Juicer recipe's
    job folder, its ``events_*.jsonl`` (one per attempt) as records of this log
    (:func:`curator_dask.jobs.dj_format.events`)."""
    path = os.path.join(job_dir, "events.jsonl")
    if not os.path.exists(path):
        from curator_dask.jobs import dj_format

        if dj_format.is_dj_folder(job_dir):
            return dj_format.events(job_dir)
    return read_events(path)


def has_event_log(job_dir: str) -> bool:
    """Whether the job folder has an event log (``events.jsonl``, or Data-Juicer's)."""
    if os.path.isfile(os.path.join(job_dir, "events.jsonl")):
        return True
    from curator_dask.jobs import dj_format

    return bool(dj_format.event_files(job_dir)) and dj_format.is_dj_folder(job_dir)
