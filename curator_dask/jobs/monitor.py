"""A job's progress as data (``show_job_progress``, ``status JOB --json``) and the detail of
``status JOB --detailed``: per stage, what the event log says of it; per partition (one Dask
task's sources), when it was submitted and how it ended.

Everything is read from the job folder (``job_summary.json``, ``events.jsonl``), so it works
for a running job and for one that ended, from any process. The per-partition detail is as
fine as the event log: the first 20,000 records describe each Dask task; sources submitted
after that are counted (``partitions_unlisted``), not listed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from curator_dask.jobs import view
from curator_dask.jobs.events import read_job_events
from curator_dask.jobs.status import load_job

# the sources line's counts, in the order `status` shows them
SOURCE_KEYS = ("total", "skipped", "to_process", "completed", "failed", "in_flight")
SHOWN_PARTITIONS = 20  # the terminal's partition table: running ones first, then the latest


def progress_data(job_dir: str, *, detailed: bool = False) -> dict[str, Any]:
    """The job's progress: state, sources (with ``pending``), ``percent``, rates, resume
    command; with ``detailed``, also ``stages``, ``partitions``, ``partitions_unlisted`` and
    ``attempts`` (:func:`detail`).

    ``percent`` is the share of the job's sources done: completed in this attempt or skipped
    (completed by an earlier one), of ``total``.

    Raises:
        FileNotFoundError: the job has no summary yet.
    """
    summary = load_job(job_dir)
    if summary is None:
        msg = f"job in {job_dir} has no summary yet: it has not started"
        raise FileNotFoundError(msg)
    src = summary.get("sources") or {}
    sources = {key: int(src.get(key) or 0) for key in SOURCE_KEYS}
    sources["pending"] = max(0, sources["to_process"] - sources["completed"]
                             - sources["failed"] - sources["in_flight"])
    total, done = sources["total"], sources["skipped"] + sources["completed"]
    state = str(summary.get("state"))
    percent = round(100.0 * done / total, 1) if total else (
        100.0 if state.startswith("completed") else 0.0)
    out: dict[str, Any] = {
        "job_id": summary.get("job_id"), "state": state, "job_dir": job_dir,
        "run_id": summary.get("run_id"), "pid": summary.get("pid"), "host": summary.get("host"),
        "started": summary.get("started"), "updated": summary.get("updated"),
        "ended": summary.get("ended"), "sources": sources, "percent": percent,
        "rates": view.rates(summary), "failed_stage": summary.get("failed_stage"),
        "error": summary.get("error"), "stop_reason": view.stop_reason(summary),
        "resume_command": summary.get("resume_command"), "dashboard": summary.get("dashboard"),
        "phases": summary.get("phases"),  # a deduplication job's (dedup/progress.py)
    }
    if detailed:
        out.update(detail(summary, read_job_events(job_dir)))
    return out


def detail(summary: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    """Per stage and per partition, for the attempt the summary describes (the last one).

    ``stages``: the summary's stage rows, each with ``started`` (its ``stage_start`` time),
    ``dask_tasks`` (the Dask tasks that ran it), ``raised`` (it raised: ``stage_failed``),
    ``checkpoint_saved`` / ``checkpoint_loaded`` (stage checkpoints). ``partitions``: one per
    Dask task of sources, in submission order: ``task_id``, ``sources``, ``source_ids`` (the
    first 20), ``completed``, ``failed`` (saw a ``FailedTask``), ``state`` (``running``,
    ``completed``, ``failed`` when any of its sources failed, or ``not finished``: the
    attempt ended first, its sources stay pending), ``submitted`` and ``ended`` (event
    times). ``attempts``: how many attempts the job has had.

    Example:
        >>> ev = [{"run_id": "r", "type": "source_start", "scope": "task", "task_id": "a+1",
        ...        "count": 2, "source_ids": ["a", "b"], "ts": "t1"},
        ...       {"run_id": "r", "type": "source_complete", "scope": "task",
        ...        "task_id": "a+1", "count": 2, "ts": "t2"}]
        >>> d = detail({"run_id": "r", "state": "completed", "stages": []}, ev)
        >>> [(p["task_id"], p["state"], p["ended"]) for p in d["partitions"]]
        [('a+1', 'completed', 't2')]
    """
    run_id = summary.get("run_id")
    mine = [e for e in events if e.get("run_id") == run_id]
    return {"attempts": len({e.get("run_id") for e in events} | {run_id}),
            "stages": _stages(summary, mine),
            **_partitions(mine, running=summary.get("state") == "running")}


def _stages(summary: dict[str, Any], events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    started: dict[str, Any] = {}
    tasks: dict[str, int] = {}
    raised: set[str] = set()
    saved: dict[str, int] = {}
    loaded: dict[str, int] = {}
    for e in events:
        kind, stage = e.get("type"), str(e.get("stage"))
        if kind == "stage_start":
            started.setdefault(stage, e.get("ts"))
        elif kind == "stage_complete" and e.get("scope") in ("task", "window"):
            tasks[stage] = tasks.get(stage, 0) + int(e.get("tasks") or 1)
        elif kind == "stage_failed":
            raised.add(stage)
        elif kind == "checkpoint_save":
            saved[stage] = saved.get(stage, 0) + int(e.get("count") or 0)
        elif kind == "checkpoint_load":
            loaded[stage] = loaded.get(stage, 0) + int(e.get("count") or 0)
    if summary.get("failed_stage"):
        raised.add(str(summary["failed_stage"]))
    return [{**row, "started": started.get(str(row.get("stage"))),
             "dask_tasks": tasks.get(str(row.get("stage")), 0),
             "raised": str(row.get("stage")) in raised,
             "checkpoint_saved": saved.get(str(row.get("stage")), 0),
             "checkpoint_loaded": loaded.get(str(row.get("stage")), 0)}
            for row in summary.get("stages") or []]


def _partitions(events: Iterable[dict[str, Any]], *, running: bool) -> dict[str, Any]:
    parts: dict[str, dict[str, Any]] = {}
    unlisted = 0

    def part(e: dict[str, Any]) -> dict[str, Any]:
        # a log written before source_start existed: the partition appears when it ends
        return parts.setdefault(str(e["task_id"]), {
            "task_id": str(e["task_id"]), "sources": 0, "source_ids": [], "completed": 0,
            "failed": 0, "state": None, "submitted": None, "ended": None})

    for e in events:
        kind, scope = e.get("type"), e.get("scope")
        if kind == "source_start" and scope == "window":
            unlisted += int(e.get("count") or 0)
        elif scope != "task" or not e.get("task_id"):
            continue
        elif kind == "source_start":
            p = part(e)
            p.update(sources=int(e.get("count") or 0), source_ids=list(e.get("source_ids") or []),
                     submitted=e.get("ts"))
        elif kind in ("source_complete", "source_failed"):
            p = part(e)
            p["completed" if kind == "source_complete" else "failed"] += int(e.get("count") or 0)
            p["ended"] = e.get("ts")
    for p in parts.values():
        p["sources"] = max(p["sources"], p["completed"] + p["failed"])
        if p["completed"] + p["failed"] >= p["sources"] and p["ended"]:
            p["state"] = "failed" if p["failed"] else "completed"
        else:
            p["state"] = "running" if running else "not finished"
    return {"partitions": list(parts.values()), "partitions_unlisted": unlisted}


def render_detail(data: dict[str, Any]) -> Any:
    """What ``status JOB --detailed`` adds under the job's status: the stage detail table and
    the partitions (counts by state; the running ones and the latest others)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = [Text(f"progress: {data['percent']:.1f} % of {data['sources']['total']} "
                             f"sources done (completed or skipped); attempt "
                             f"{data['attempts']} of the job", style="bold")]
    if data["stages"]:
        table = Table(show_edge=False, header_style="bold", title="stages (this attempt)",
                      title_justify="left")
        for column in ("stage", "first task", "dask tasks", "raised", "ckpt saved",
                       "ckpt loaded"):
            table.add_column(column, justify="left" if column in ("stage", "first task")
                             else "right")
        for s in data["stages"]:
            table.add_row(str(s.get("stage")), str(s.get("started") or "-"),
                          str(s["dask_tasks"]), Text("yes", style="red") if s["raised"] else "",
                          str(s["checkpoint_saved"]), str(s["checkpoint_loaded"]))
        parts.append(table)
    partitions = data["partitions"]
    counts: dict[str, int] = {}
    for p in partitions:
        counts[p["state"]] = counts.get(p["state"], 0) + 1
    line = ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "none listed"
    if data["partitions_unlisted"]:
        line += (f"; {data['partitions_unlisted']} more sources submitted after the event "
                 "log's per-task detail ended (counted, not listed)")
    parts.append(Text(f"partitions (Dask tasks of sources, this attempt): {line}"))
    running = [p for p in partitions if p["state"] == "running"][:SHOWN_PARTITIONS]
    others = [p for p in partitions if p["state"] != "running"]
    room = SHOWN_PARTITIONS - len(running)
    shown = running + (others[-room:] if room > 0 else [])
    if shown:
        table = Table(show_edge=False, header_style="bold")
        for column in ("partition", "state", "sources", "done", "failed", "submitted", "ended"):
            table.add_column(column, justify="right" if column in (
                "sources", "done", "failed") else "left")
        for p in shown:
            table.add_row(p["task_id"], Text(p["state"], style=view.STATE_COLORS.get(
                p["state"], "")), str(p["sources"]), str(p["completed"]), str(p["failed"]),
                str(p["submitted"] or "-"), str(p["ended"] or "-"))
        parts.append(table)
    if len(shown) < len(partitions):
        parts.append(Text(f"{len(partitions) - len(shown)} more partitions not shown (--json "
                          "lists every one)", style="dim"))
    return Group(*parts)


def renderable(summary: dict[str, Any], data: dict[str, Any] | None = None) -> Any:
    """``status JOB``'s renderable for ``summary``; with ``data`` (:func:`progress_data`,
    ``detailed``), the detail under it (``status JOB --detailed``)."""
    if data is None:
        return view.render(summary)
    from rich.console import Group

    return Group(view.render(summary), render_detail(data))
