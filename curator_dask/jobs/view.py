"""What ``status`` shows: per-stage progress, rates, ETA and failures of one job (rich)."""

from __future__ import annotations

import datetime
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


def _stage_table(summary: dict[str, Any]) -> Any:
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    total = int((summary.get("sources") or {}).get("to_process") or 0)
    table = Table(show_edge=False, header_style="bold")
    for column in STAGE_COLUMNS:
        table.add_column(column, justify="left" if column in ("stage", "progress") else "right")
    for row in summary.get("stages") or []:
        secs = float(row.get("seconds") or 0)
        done = row.get("sources_done")
        if done is None:
            done = total if row.get("tasks_in") else 0
        raised = row["stage"] == summary.get("failed_stage")
        table.add_row(
            Text(str(row["stage"]) + (" (raised)" if raised else ""),
                 style="red" if raised else ""),
            ProgressBar(total=max(total, 1), width=20, completed=min(total, done)),
            *(str(row.get(k, 0)) for k in ("tasks_in", "tasks_out", "items_in", "items_out",
                                            "rows_dropped", "filtered")),
            Text(str(row.get("failed", 0)), style="red" if row.get("failed") else ""),
            f"{secs:.2f}", f"{row.get('items_in', 0) / secs:,.0f}" if secs > 0 else "-",
        )
    return table


def render(summary: dict[str, Any]) -> Any:
    """A rich renderable: a header, the sources line, the per-stage table and its legend."""
    from rich.console import Group
    from rich.text import Text

    state = summary.get("state", "?")
    header = Text.assemble(
        ("job ", "bold"), (str(summary.get("job_id")), "bold cyan"), "  ",
        (state, {"running": "yellow", "completed": "green", "failed": "red",
                 "stopped": "magenta"}.get(state.split(" ")[0], "white")),
        f"  pid {summary.get('pid')} on {summary.get('host')}, started "
        f"{summary.get('started')}, updated {summary.get('updated')}",
    )
    parts: list[Any] = [header, Text(sources_line(summary))]
    if summary.get("stages"):
        parts += [_stage_table(summary), Text(LEGEND, style="dim")]
    else:
        parts.append(Text("stages: none ran yet"))
    if summary.get("job_dir"):
        parts.append(Text(f"folder: {summary['job_dir']}"))
    if summary.get("dashboard") and state == "running":
        parts.append(Text(f"dashboard: {summary['dashboard']}"))
    if summary.get("error"):
        parts.append(Text(f"error: {summary['error']}", style="red"))
    if summary.get("resume_command") and state != "completed":
        parts.append(Text(f"resume with: {summary['resume_command']}"))
    return Group(*parts)
