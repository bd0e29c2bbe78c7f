"""What the HTML report (:mod:`curator_dask.jobs.report`) computes from a job's records: its
attempts, the rows each fusion group processed over time, and task durations per stage.

A job resumed twice has three attempts; each attempt has its own ``run_id`` on every record of
``events.jsonl`` (its first record is ``job_start`` or ``run_resume``), while
``job_summary.json`` describes the last attempt only. Every number here is computed for named
attempts, so each section of the report can say which ones it covers.
"""

from __future__ import annotations

import datetime
import statistics
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

END_TYPES = {"job_complete": "completed", "job_failed": "failed", "job_stopped": "stopped"}


def stage_records(events: list[dict[str, Any]],
                  run_ids: Collection[str] | None = None) -> list[dict[str, Any]]:
    """The per-task and per-window ``stage_complete`` records, of the attempts ``run_ids``
    (all attempts when ``None``)."""
    return [e for e in events if e.get("type") == "stage_complete"
            and e.get("scope") in ("task", "window") and e.get("ended")
            and (run_ids is None or e.get("run_id") in run_ids)]


def parse_ts(text: Any) -> float | None:
    """Seconds since the epoch of an event's ``ts`` (``2026-12-01T21:35:57.499Z``)."""
    try:
        when = datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.timestamp()


def to_second(text: Any) -> str | None:
    """An event's ``ts`` to the second, as the job summary writes times."""
    return f"{str(text)[:19]}Z" if text else None


@dataclass(frozen=True)
class Attempt:
    """One attempt of a job, from its records in ``events.jsonl``.

    Attributes:
        number, total: this attempt's place (1-based) and the job's number of attempts.
        run_id: the attempt's id on its records.
        started, ended: the times of its first record and of its end record (None when it
            has none: still running, or its driver was killed).
        outcome: ``completed``, ``completed_with_failures``, ``failed``, ``stopped``,
            ``running`` or ``no end recorded``.
        to_process, skipped: the sources it planned to process and those it skipped
            (completed before it), from its ``sources_planned`` record.
        completed: sources it completed: what its end record says the checkpoint recorded
            (``completed``), else its ``source_complete`` records (no end record, or a log
            written before end records counted them).
        dask_tasks: Dask tasks it recorded one by one (its per-task records).

    Example:
        >>> a = Attempt(2, 3, "r2", "2026-12-01T10:00:00Z", None, "stopped", 6, 4, 3, 3)
        >>> a.label, a.short
        ('attempt 2 of 3', '2 of 3')
    """

    number: int
    total: int
    run_id: str
    started: str | None
    ended: str | None
    outcome: str
    to_process: int | None
    skipped: int | None
    completed: int
    dask_tasks: int

    @property
    def label(self) -> str:
        return f"attempt {self.number} of {self.total}"

    @property
    def short(self) -> str:
        return f"{self.number} of {self.total}"


def all_label(total: int) -> str:
    """How a section covering every attempt says so: ``all 3 attempts`` (or, for a job of one
    attempt, ``attempt 1 of 1``)."""
    return f"all {total} attempts" if total > 1 else "attempt 1 of 1"


def job_attempts(events: list[dict[str, Any]], summary: dict[str, Any]) -> list[Attempt]:
    """The job's attempts in the order they started: one per ``run_id`` of its records (and
    the summary's attempt, when it has no record yet).

    Example:
        >>> ev = [{"run_id": "a", "type": "job_start", "ts": "2026-12-01T10:00:00.100Z"},
        ...       {"run_id": "a", "type": "job_stopped", "ts": "2026-12-01T10:05:00.000Z"},
        ...       {"run_id": "b", "type": "run_resume", "ts": "2026-12-01T11:00:00.000Z"}]
        >>> [(a.label, a.started, a.outcome) for a in job_attempts(ev, {"run_id": "b",
        ...                                                              "state": "running"})]
        [('attempt 1 of 2', '2026-12-01T10:00:00Z', 'stopped'), ('attempt 2 of 2', \
'2026-12-01T11:00:00Z', 'running')]
    """
    by_run: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        by_run.setdefault(str(e.get("run_id")), []).append(e)
    last_run = summary.get("run_id")
    if last_run is not None and str(last_run) not in by_run:
        by_run[str(last_run)] = []
    out = []
    for number, (run_id, records) in enumerate(by_run.items(), start=1):
        ends = [e for e in records if e.get("type") in END_TYPES]
        planned = next((e for e in records if e.get("type") == "sources_planned"), {})
        if ends:
            # job_complete carries state completed_with_failures when sources saw FailedTask
            outcome = str(ends[-1].get("state") or END_TYPES[ends[-1]["type"]])
        elif run_id == str(last_run) and summary.get("state") in ("running", *END_TYPES.values()):
            outcome = summary["state"]
        else:
            outcome = "no end recorded"
        started = to_second(records[0].get("ts")) if records else summary.get("started")
        ended = to_second(ends[-1].get("ts")) if ends else (
            summary.get("ended") if run_id == str(last_run) else None)
        tasks = {(e.get("task_id"), e.get("ended")) for e in records
                 if e.get("type") == "stage_complete" and e.get("scope") == "task"}
        out.append(Attempt(
            number=number, total=len(by_run), run_id=run_id, started=started, ended=ended,
            outcome=outcome, to_process=planned.get("to_process"), skipped=planned.get("skipped"),
            completed=_completed(records, ends),
            dask_tasks=len(tasks)))
    return out


def _completed(records: list[dict[str, Any]], ends: list[dict[str, Any]]) -> int:
    """An attempt's completed sources: its end record's count, read from the checkpoint
    (chains recorded there but not collected by the driver included), else its
    ``source_complete`` records."""
    if ends and isinstance(ends[-1].get("completed"), int):
        return int(ends[-1]["completed"])
    return sum(int(e.get("count") or 0) for e in records if e.get("type") == "source_complete")


def fusion_groups(plan: dict[str, Any] | None) -> dict[str, str]:
    """``{stage name: label}`` of the plan's fusion groups; the label names the group's stages
    (``"jsonl_reader + keep_long + jsonl_writer"``). Stages in no group label themselves.

    Example:
        >>> fusion_groups({"fusion_groups": [{"stages": ["read", "keep"]},
        ...                                  {"stages": ["write"]}]})
        {'read': 'read + keep', 'keep': 'read + keep', 'write': 'write'}
    """
    labels: dict[str, str] = {}
    for group in (plan or {}).get("fusion_groups") or []:
        names = [str(n) for n in group.get("stages") or []]
        labels.update(dict.fromkeys(names, " + ".join(names)))
    return labels


def cumulative_rows(events: list[dict[str, Any]], groups: dict[str, str] | None = None
                    ) -> dict[str, list[tuple[float, int]]]:
    """``{group label: [(time, rows so far), ...]}``: the rows each fusion group processed,
    cumulative over the job's attempts, from the per-task and per-window records.

    Each Dask task (or window) of a group counts once, with the largest rows in or out of its
    stages (a reader's rows read, not its files; a writer's rows written, not its files).
    ``groups`` maps stage names to group labels (:func:`fusion_groups`); a stage missing from
    it is its own group. Each line starts at 0 when the group's first task started (its end
    less its stages' durations).

    Example:
        >>> ev = [{"type": "stage_complete", "scope": "task", "stage": s, "task_id": t,
        ...        "ended": 10.0 + t, "duration": 0.25, "rows_in": n, "rows_out": n - 1}
        ...       for t in (1, 2) for s, n in (("read", 1), ("keep", 5))]
        >>> cumulative_rows(ev, {"read": "read + keep", "keep": "read + keep"})
        {'read + keep': [(10.5, 0), (11.0, 5), (12.0, 10)]}
    """
    groups = groups or {}
    tasks: dict[tuple, list] = {}  # (label, run, window, task, ended) -> [rows, seconds]
    for r in stage_records(events):
        label = groups.get(r["stage"], r["stage"])
        key = (label, r.get("run_id"), r.get("window_start"), r.get("task_id"), r["ended"])
        entry = tasks.setdefault(key, [0, 0.0])
        entry[0] = max(entry[0], int(r.get("rows_in") or 0), int(r.get("rows_out") or 0))
        entry[1] += float(r.get("duration") or 0)
    series: dict[str, list[tuple[float, int]]] = {}
    for (label, _, window, _, ended), (rows, seconds) in sorted(tasks.items(),
                                                              key=lambda kv: kv[0][4]):
        start = float(window) if window is not None else ended - seconds
        points = series.setdefault(label, [(start, 0)])
        points[0] = (min(points[0][0], start), 0)
        points.append((ended, points[-1][1] + rows))
    return series


def duration_stats(events: list[dict[str, Any]], run_ids: Collection[str] | None = None
                   ) -> dict[str, dict[str, float]]:
    """Per stage, over the attempts ``run_ids`` (all when ``None``): the Dask tasks recorded one
    by one and their median, p95 and max seconds; and ``tasks_in``, the stage's input tasks
    summed over every record, per-task and per-window (so it equals the stage's ``tasks in``
    count of the same attempts, also after the records turned to windows). Stages come in
    pipeline order.

    Example:
        >>> ev = [{"type": "stage_complete", "scope": "task", "stage": "a", "run_id": r,
        ...        "ended": 1.0, "duration": d, "tasks_in": 2} for r, d in (("x", 1), ("y", 3))]
        >>> duration_stats(ev, run_ids={"y"})
        {'a': {'tasks': 1, 'tasks_in': 2, 'median': 3.0, 'p95': 3.0, 'max': 3.0}}
    """
    by_stage: dict[str, list[float]] = {}
    tasks_in: dict[str, int] = {}
    index: dict[str, int] = {}
    for r in stage_records(events, run_ids):
        tasks_in[r["stage"]] = tasks_in.get(r["stage"], 0) + int(r.get("tasks_in") or 0)
        index.setdefault(r["stage"], int(r.get("index") or 0))
        if r.get("scope") == "task":
            by_stage.setdefault(r["stage"], []).append(float(r.get("duration") or 0))
    out = {}  # in pipeline order, as the stage table
    for stage, values in sorted(by_stage.items(), key=lambda kv: (index[kv[0]], kv[0])):
        values.sort()
        out[stage] = {"tasks": len(values), "tasks_in": tasks_in[stage],
                      "median": statistics.median(values),
                      "p95": values[min(len(values) - 1, int(0.95 * len(values)))],
                      "max": values[-1]}
    return out
