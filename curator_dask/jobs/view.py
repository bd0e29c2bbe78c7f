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


def render(summary: dict[str, Any]) -> Any:
    """A rich renderable: a header, the sources line and the per-stage table."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    src = summary.get("sources") or {}
    r = rates(summary)
    header = Text.assemble(
        ("job ", "bold"), (str(summary.get("job_id")), "bold cyan"), "  ",
        (summary.get("state", "?"), {"running": "yellow", "completed": "green",
                                     "failed": "red", "stopped": "magenta"}.get(
                                         summary.get("state", "").split(" ")[0], "white")),
        f"  pid {summary.get('pid')} on {summary.get('host')}, started "
        f"{summary.get('started')}, updated {summary.get('updated')}",
    )
    total = int(src.get("to_process") or 0)
    done = int(src.get("completed") or 0)
    rate = r["sources_per_s"]
    line = Text(
        f"sources: {src.get('total', '?')} total, {src.get('skipped', 0)} skipped, "
        f"{done}/{total} done, {src.get('failed', 0)} failed, {src.get('in_flight', 0)} in "
        f"flight; {rate:.2f} sources/s, ETA {_fmt_seconds(r['eta_s'])}" if rate is not None else
        f"sources: {src.get('total', '?')} total, {src.get('skipped', 0)} skipped, "
        f"{done}/{total} done, {src.get('failed', 0)} failed")
    table = Table(show_edge=False, header_style="bold")
    for column, justify in (("stage", "left"), ("progress", "left"), ("tasks in", "right"),
                            ("tasks out", "right"), ("rows in", "right"), ("rows out", "right"),
                            ("rows/s", "right"), ("filtered", "right"), ("failed", "right"),
                            ("seconds", "right")):
        table.add_column(column, justify=justify)
    for row in summary.get("stages") or []:
        secs = float(row.get("seconds") or 0)
        per_s = f"{row.get('items_in', 0) / secs:,.0f}" if secs > 0 else "-"
        table.add_row(
            str(row["stage"]),
            ProgressBar(total=max(total, 1), width=20,
                        completed=min(total, row["sources_done"] if row.get("sources_done")
                                      is not None else (total if row.get("tasks_in") else 0))),
            str(row.get("tasks_in", 0)), str(row.get("tasks_out", 0)),
            str(row.get("items_in", 0)), str(row.get("items_out", 0)), per_s,
            str(row.get("filtered", 0)),
            Text(str(row.get("failed", 0)), style="red" if row.get("failed") else ""),
            f"{secs:.2f}",
        )
    parts: list[Any] = [header, line, table]
    if summary.get("dashboard") and summary.get("state") == "running":
        parts.append(Text(f"dashboard: {summary['dashboard']}"))
    if summary.get("error"):
        parts.append(Text(f"error: {summary['error']}", style="red"))
    if summary.get("resume_command") and summary.get("state") != "completed":
        parts.append(Text(f"resume with: {summary['resume_command']}"))
    return Group(*parts)
