"""What ``status`` shows: one job's per-stage progress, rates, ETA and failures, and the table
of jobs; as rich renderables for the terminal and, through :func:`status`, as HTML in a notebook.

The jobs table fits the terminal: a folder is shortened (``~`` for the home folder, the middle
elided with ``…``) rather than wrapped, so each job stays one line.
"""

from __future__ import annotations

import datetime
import os
import time
from typing import Any


def _parse_ts(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.UTC).timestamp()
    except ValueError:
        return None


def rates(summary: dict[str, Any], now: float | None = None) -> dict[str, Any]:
    """Sources per second since processing started, and the ETA of the rest (seconds).

    Example:
        >>> s = {"state": "running", "processing_started": 100.0,
        ...      "sources": {"to_process": 10, "completed": 4, "failed": 1}}
        >>> rates(s, now=110.0)
        {'elapsed': 10.0, 'sources_per_s': 0.4, 'remaining': 5, 'eta_s': 12.5}
    """
    src = summary.get("sources") or {}
    start = summary.get("processing_started")
    end = None
    if summary.get("state") != "running":
        end = summary.get("ended_at") or _parse_ts(summary.get("ended"))
    now = end if end is not None else (now if now is not None else time.time())
    elapsed = max(0.0, now - start) if start is not None else None
    done = int(src.get("completed") or 0)
    remaining = max(0, int(src.get("to_process") or 0) - done - int(src.get("failed") or 0))
    rate = done / elapsed if elapsed else None
    eta = remaining / rate if rate else None
    return {"elapsed": elapsed, "sources_per_s": rate, "remaining": remaining, "eta_s": eta}


def _fmt_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    value = int(value)
    return f"{value // 3600}:{value // 60 % 60:02d}:{value % 60:02d}"


STAGE_COLUMNS = ("stage", "progress", "tasks in", "tasks out", "rows in", "rows out",
                 "rows dropped", "tasks filtered", "tasks failed", "busy s", "rows/s busy")
LEGEND = ("rows: the tasks' items (rows of document batches, files of file groups); rows "
          "dropped: rows a stage that maps document batches to document batches did not pass "
          "on; tasks filtered: tasks a stage returned None for; busy s: the stage's own "
          "processing time summed over workers; rows/s busy: rows in per busy second (not "
          "per wall-clock second); sources/s: sources completed per wall-clock second since "
          "processing started")


def sources_line(summary: dict[str, Any]) -> str:
    """The sources line of ``status JOB``: counts, and while running the rate and ETA.

    Example:
        >>> sources_line({"state": "failed", "cancelled_at_end": 1, "sources": {
        ...     "total": 8, "skipped": 0, "to_process": 8, "completed": 3, "failed": 1,
        ...     "in_flight": 0}})
        'sources: 8 total, 0 skipped, 3/8 done, 1 failed, 1 cancelled (pending), 0 in flight'
    """
    src = summary.get("sources") or {}
    r = rates(summary)
    failed = f"{src.get('failed', 0)} failed"
    if summary.get("state") == "completed_with_failures":
        failed += " (a stage returned FailedTask: pending, a resume retries them)"
    if summary.get("cancelled_at_end"):
        failed += f", {summary['cancelled_at_end']} cancelled (pending)"
    text = (f"sources: {src.get('total', '?')} total, {src.get('skipped', 0)} skipped, "
            f"{int(src.get('completed') or 0)}/{int(src.get('to_process') or 0)} done, "
            f"{failed}, {src.get('in_flight', 0)} in flight")
    if r["sources_per_s"] is not None:
        text += f"; {r['sources_per_s']:.2f} sources/s (wall clock)"
        if summary.get("state") == "running":
            text += f", ETA {_fmt_seconds(r['eta_s'])}"
    return text


def phase_line(row: dict[str, Any]) -> str:
    """One phase of a deduplication job (its summary's ``phases``, ``dedup/progress.py``):
    done of total, rate, and the ETA while it runs or the time it took.

    Example:
        >>> phase_line({"phase": "jaccard", "unit": "pairs", "state": "running", "done": 1204,
        ...             "total": 5000, "rate": 310.2, "eta_s": 12.2, "elapsed_s": 3.9})
        'jaccard: running, 1,204/5,000 pairs (24%), 310 pairs/s, ETA 0:00:12'
    """
    state, unit = str(row.get("state")), str(row.get("unit") or "")
    if state == "skipped":
        return f"{row.get('phase')}: skipped (committed by an earlier run)"
    done, total = int(row.get("done") or 0), row.get("total")
    text = f"{row.get('phase')}: {state}, {done:,}"
    if total is not None:
        text += f"/{int(total):,}"
    text += f" {unit}"
    if total:
        text += f" ({100 * done / int(total):.0f}%)"
    if row.get("rate") is not None:
        text += f", {float(row['rate']):,.0f} {unit}/s"
    if state == "running":
        text += f", ETA {_fmt_seconds(row.get('eta_s'))}"
    elif row.get("elapsed_s") is not None:
        text += f" in {float(row['elapsed_s']):.2f} s"
    return text


def phase_lines(summary: dict[str, Any]) -> list[str]:
    """A deduplication job's lines (its workflow, then each phase), or none for a pipeline's."""
    if summary.get("phases") is None:
        return []
    phases, workflow = summary["phases"], summary.get("workflow") or "deduplication"
    running = [row["phase"] for row in phases if row.get("state") == "running"]
    if running:
        head = f"{workflow}: phase {running[-1]} running ({len(phases)} so far)"
    else:
        head = f"{workflow}: {len(phases)} phases" if phases else f"{workflow}: no phase yet"
    return [head, *(f"  phase {phase_line(row)}" for row in phases)]


def stop_reason(summary: dict[str, Any]) -> str | None:
    """Why a ``stopped`` job stopped and what completed (``None`` for any other state): its
    recorded error without the exception's name, since a stop is no error.

    Example:
        >>> stop_reason({"state": "stopped", "error": "RunStopped: received SIGUSR1: stopped "
        ...              "after 2 of 20 source partitions completed"})
        'received SIGUSR1; 2 of 20 source partitions completed'
    """
    if summary.get("state") != "stopped":
        return None
    text = str(summary.get("error") or "")
    for prefix in ("RunStopped: ", "KeyboardInterrupt: "):
        text = text.removeprefix(prefix)
    return text.replace(": stopped after ", "; ", 1) or "stop requested"


def stage_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Per stage, what the stage table shows: ``stage``, ``raised`` (the stage that raised),
    ``done`` of ``total`` sources (the progress) and ``cells``, the texts of the columns after
    ``progress`` (shared by the terminal's table and the notebook's HTML)."""
    total = int((summary.get("sources") or {}).get("to_process") or 0)
    out = []
    for row in summary.get("stages") or []:
        secs = float(row.get("seconds") or 0)
        done = row.get("sources_done")
        if done is None:
            done = total if row.get("tasks_in") else 0
        cells = [str(row.get(k, 0)) for k in ("tasks_in", "tasks_out", "items_in", "items_out",
                                              "rows_dropped", "filtered", "failed")]
        cells += [f"{secs:.2f}", f"{row.get('items_in', 0) / secs:,.0f}" if secs > 0 else "-"]
        out.append({"stage": str(row["stage"]), "raised": row["stage"] == summary.get(
            "failed_stage"), "done": min(total, done), "total": total, "cells": cells,
            "failed": bool(row.get("failed"))})
    return out


def _stage_table(summary: dict[str, Any]) -> Any:
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    table = Table(show_edge=False, header_style="bold")
    for column in STAGE_COLUMNS:
        table.add_column(column, justify="left" if column in ("stage", "progress") else "right")
    for row in stage_rows(summary):
        cells: list[Any] = list(row["cells"])
        cells[6] = Text(cells[6], style="red" if row["failed"] else "")  # tasks failed
        table.add_row(
            Text(row["stage"] + (" (raised)" if row["raised"] else ""),
                 style="red" if row["raised"] else ""),
            ProgressBar(total=max(row["total"], 1), width=20, completed=row["done"]), *cells)
    return table


# completed_with_failures: the run ended, but some sources saw a FailedTask (pending)
STATE_COLORS = {"running": "yellow", "completed": "green", "completed_with_failures": "yellow",
                "failed": "red", "stopped": "magenta"}


def render(summary: dict[str, Any]) -> Any:
    """A rich renderable: a header, the sources line, the per-stage table and its legend."""
    from rich.console import Group
    from rich.text import Text

    state = summary.get("state", "?")
    header = Text.assemble(
        ("job ", "bold"), (str(summary.get("job_id")), "bold cyan"), "  ",
        (state, STATE_COLORS.get(state.split(" ")[0], "white")),
        f"  pid {summary.get('pid')} on {summary.get('host')}, started "
        f"{summary.get('started')}, updated {summary.get('updated')}",
    )
    parts: list[Any] = [header]
    phases = phase_lines(summary)
    if phases:  # a deduplication job: its phases, not a pipeline's sources and stages
        parts += [Text(line) for line in phases]
    elif summary.get("stages"):
        parts += [Text(sources_line(summary)), _stage_table(summary), Text(LEGEND, style="dim")]
    else:
        parts += [Text(sources_line(summary)), Text("stages: none ran yet")]
    if summary.get("job_dir"):
        parts.append(Text(f"folder: {summary['job_dir']}"))
    if summary.get("dashboard") and state == "running":
        parts.append(Text(f"dashboard: {summary['dashboard']}"))
    reason = stop_reason(summary)
    if reason is not None:
        parts.append(Text(f"stopped: {reason}", style="magenta"))
    elif summary.get("error"):
        parts.append(Text(f"error: {summary['error']}", style="red"))
    if summary.get("resume_command") and state != "completed":
        parts.append(Text(f"resume with: {summary['resume_command']}"))
    return Group(*parts)


# "work dir": the folder holding the job's folder (what --work-dir takes), not the job folder
# itself, whose last part would repeat the job id
JOB_COLUMNS = ("job", "state", "started", "ended", "sources", "skipped", "done", "failed",
               "work dir")
_NUMBERS = {"sources": "total", "skipped": "skipped", "done": "completed", "failed": "failed"}


def short_time(text: str | None, same_day_as: str | None = None) -> str:
    """A summary's UTC time as ``YYYY-MM-DD HH:MM``, only ``HH:MM`` on the day of
    ``same_day_as`` (an ended time next to its start); other text as it is.

    Example:
        >>> short_time("2026-12-01T21:38:02Z"), short_time("2026-12-01T23:05:10Z",
        ...                                               "2026-12-01T21:38:02Z")
        ('2026-12-01 21:38', '23:05')
    """
    if not text or _parse_ts(text) is None:
        return str(text or "")
    if same_day_as and same_day_as[:10] == text[:10]:
        return text[11:16]
    return f"{text[:10]} {text[11:16]}"


def short_folder(path: str, width: int | None = None) -> str:
    """``path`` with the home folder as ``~`` and, when longer than ``width``, its middle
    elided with ``…`` (the end, where the job's own folder is, is kept longer).

    Example:
        >>> short_folder("/data/projects/curation/run-2026/curator-dask-jobs", 30)
        '/data/pro…26/curator-dask-jobs'
    """
    home = os.path.expanduser("~").rstrip("/")
    if home and (path == home or path.startswith(home + "/")):
        path = "~" + path[len(home):]
    if width is None or len(path) <= width:
        return path
    if width <= 1:
        return "…"[:max(width, 0)]
    head = (width - 1) // 3
    return path[:head] + "…" + path[len(path) - (width - 1 - head):]


class _Folder:
    """A table cell that elides the folder's middle to the column's width instead of wrapping
    it (rich measures it as shrinkable down to 12 characters)."""

    def __init__(self, path: str) -> None:
        self.text = short_folder(path)

    def __rich_measure__(self, console: Any, options: Any) -> Any:
        from rich.measure import Measurement

        return Measurement(min(len(self.text), 12), len(self.text))

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.text import Text

        yield Text(short_folder(self.text, options.max_width), no_wrap=True, overflow="crop")


def jobs_table(rows: list[dict[str, Any]]) -> Any:
    """The rich table of jobs (:func:`curator_dask.jobs.index.job_rows`), one line per job at
    any width that holds the other columns: only the work dir column shrinks (its middle
    elided).

    Example:
        >>> from rich.console import Console
        >>> row = {"job_id": "j1", "state": "completed", "started": "2026-12-01T21:38:02Z",
        ...        "ended": "2026-12-01T21:40:10Z", "sources": {"total": 6, "completed": 6},
        ...        "job_dir": "/data/" + "x" * 200 + "/curator-dask-jobs/j1"}
        >>> console = Console(width=100, record=True, file=open(os.devnull, "w"))
        >>> console.print(jobs_table([row]))
        >>> lines = console.export_text().splitlines()
        >>> len(lines), max(len(line) for line in lines) <= 100, "…" in lines[2]
        (3, True, True)
    """
    from rich.table import Table

    table = Table(show_edge=False, header_style="bold")
    for column in JOB_COLUMNS:
        table.add_column(column, justify="right" if column in _NUMBERS else "left",
                         no_wrap=column != "work dir", overflow="fold" if column == "job"
                         else "ellipsis")
    for r in rows:
        src = r.get("sources") or {}
        table.add_row(r["job_id"], r["state"], short_time(r.get("started")),
                      short_time(r.get("ended"), r.get("started")),
                      *(str(src.get(key, "")) for key in _NUMBERS.values()),
                      _Folder(os.path.dirname(r["job_dir"])))
    return table


def hidden_line(hidden: int, prog: str = "python -m curator_dask") -> str:
    """The line under the jobs table when the index has jobs that ``status`` left out;
    ``prog``: the command as the user types it."""
    jobs = "job" if hidden == 1 else "jobs"
    return (f"{hidden} more {jobs} in the job index (other work dirs, not running): "
            f"`{prog} status --all` lists every job")
