"""``python -m curator_dask report JOB``: one self-contained HTML file about a job.

It is built from the job's own records (``events.jsonl``, ``job_summary.json`` and the fusion
groups of ``dag_execution_plan.json``): the error that ended a failed attempt (preformatted),
per-stage counts, the rows each fusion group processed over time (cumulative) and task
durations (bokeh plots, with bokeh's JavaScript inlined so the file opens anywhere, offline; a
plot without data says so), stage checkpoints, lost workers and warnings, and a link to Dask's
performance report of the run (``dask-performance-report.html``) when one was saved.
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
from html import escape
from typing import Any

from curator_dask.jobs.events import read_events
from curator_dask.jobs.summary import SUMMARY_FILE, read_summary

PERFORMANCE_REPORT = "dask-performance-report.html"


def _stage_records(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("type") == "stage_complete"
            and e.get("scope") in ("task", "window") and e.get("ended")]


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
    for r in _stage_records(events):
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


def duration_stats(events: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per stage: Dask tasks, median, p95 and max seconds of the per-task records."""
    by_stage: dict[str, list[float]] = {}
    for r in _stage_records(events):
        if r.get("scope") == "task":
            by_stage.setdefault(r["stage"], []).append(float(r.get("duration") or 0))
    out = {}
    for stage, values in by_stage.items():
        values.sort()
        out[stage] = {"tasks": len(values), "median": statistics.median(values),
                      "p95": values[min(len(values) - 1, int(0.95 * len(values)))],
                      "max": values[-1]}
    return out


def _utc(t: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(t, datetime.UTC)


def _rows_figure(series: dict[str, list[tuple[float, int]]]) -> Any:
    from bokeh.palettes import Category10_10
    from bokeh.plotting import figure

    fig = figure(title="Rows processed by fusion group (cumulative)", x_axis_type="datetime",
                 height=300, sizing_mode="stretch_width", x_axis_label="time (UTC)",
                 y_axis_label="rows processed")
    for i, (label, points) in enumerate(sorted(series.items())):
        fig.step([_utc(t) for t, _ in points], [v for _, v in points], mode="after",
                 legend_label=label, color=Category10_10[i % 10], line_width=2)
    fig.legend.location = "top_left"
    return fig


def _durations_figure(records: list[dict[str, Any]]) -> Any:
    from bokeh.models import ColumnDataSource, HoverTool
    from bokeh.palettes import Category10_10
    from bokeh.plotting import figure

    fig = figure(title="Task durations (one point per Dask task and stage)",
                 x_axis_type="datetime", height=300, sizing_mode="stretch_width",
                 x_axis_label="task end (UTC)", y_axis_label="seconds")
    for i, stage in enumerate(sorted({r["stage"] for r in records})):
        rows = [r for r in records if r["stage"] == stage]
        source = ColumnDataSource({
            "x": [_utc(r["ended"]) for r in rows],
            "y": [float(r.get("duration") or 0) for r in rows],
            "task": [str(r.get("task_id")) for r in rows],
            "rows": [int(r.get("rows_in") or 0) for r in rows],
        })
        fig.scatter("x", "y", source=source, legend_label=stage, size=5, alpha=0.6,
                    color=Category10_10[i % 10])
    fig.add_tools(HoverTool(tooltips=[("task", "@task"), ("seconds", "@y{0.000}"),
                                      ("rows in", "@rows")]))
    return fig


def _plots(events: list[dict[str, Any]], plan: dict[str, Any] | None) -> tuple[str, str]:
    """``(HTML of the plots, resources HTML)``; a plot without data is a "no data" line, and
    with no plot at all no JavaScript is included."""
    series = cumulative_rows(events, fusion_groups(plan))
    tasks = [r for r in _stage_records(events) if r.get("scope") == "task"]
    figures, notes = [], []
    if series:
        figures.append(_rows_figure(series))
    else:
        notes.append("<p class='nodata'>Rows processed: no data (no Dask task finished).</p>")
    if tasks:
        figures.append(_durations_figure(tasks))
    else:
        notes.append("<p class='nodata'>Task durations: no data (no per-task records).</p>")
    if not figures:
        return "".join(notes), ""
    from bokeh.embed import components
    from bokeh.layouts import column
    from bokeh.resources import INLINE

    for fig in figures:
        fig.legend.click_policy = "hide"
    script, div = components(column(*figures, sizing_mode="stretch_width"))
    return script + div + "".join(notes), INLINE.render()


def _cell(value: Any) -> str:
    """A table cell: multi-line text keeps its lines (``<pre>``), everything is escaped."""
    text = str(value)
    return f"<pre>{escape(text)}</pre>" if "\n" in text else escape(text)


def _table(header: list[str], rows: list[list[Any]], cls: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>"
                   for row in rows)
    attr = f" class='{cls}'" if cls else ""
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _stages_section(summary: dict[str, Any]) -> list[str]:
    rows = summary.get("stages") or []
    if not rows:
        return ["<h2>Stages (last attempt)</h2>", "<p class='nodata'>No stage counts were "
                "recorded (the attempt ended before any stage ran).</p>"]
    failed_stage = summary.get("failed_stage")
    table = _table(
        ["stage", "tasks in", "tasks out", "items in", "items out", "rows dropped",
         "tasks filtered", "tasks failed", "busy s"],
        [[f"{r.get('stage')} (raised)" if r.get("stage") == failed_stage else r.get("stage"),
          r.get("tasks_in"), r.get("tasks_out"), r.get("items_in"), r.get("items_out"),
          r.get("rows_dropped", 0), r.get("filtered"), r.get("failed"),
          f"{float(r.get('seconds') or 0):.2f}"] for r in rows])
    from curator_dask.backends.dask.result import COUNTS_LEGEND

    return ["<h2>Stages (last attempt)</h2>", table,
            f"<p class='legend'>{escape(COUNTS_LEGEND)}.</p>"]


def _error_section(summary: dict[str, Any], events: list[dict[str, Any]]) -> list[str]:
    """The error that ended the last attempt, as preformatted text (its traceback kept)."""
    failed = [e for e in events if e.get("type") == "job_failed" and e.get("error")]
    error = summary.get("error") or (failed[-1]["error"] if failed else None)
    if not error or summary.get("state") == "completed":
        return []
    return ["<h2>Error</h2>", f"<pre class='error'>{escape(str(error))}</pre>"]


def _notes_section(events: list[dict[str, Any]]) -> list[str]:
    notes = [e for e in events if e.get("type") in ("warning", "job_failed", "source_failed")]
    if not notes:
        return []
    rows = []
    for e in notes[:200]:
        detail = e.get("message") or e.get("error") or e.get("source_ids")
        if e["type"] == "job_failed" and detail:
            detail = str(detail).splitlines()[0] + " (the full error is under Error)"
        rows.append([e.get("ts"), e.get("run_id"), e["type"], detail])
    return ["<h2>Warnings and failures</h2>",
            _table(["time", "run", "type", "detail"], rows, cls="notes")]


def _durations_table(events: list[dict[str, Any]]) -> str:
    stats = duration_stats(events)
    if not stats:
        return "<p class='nodata'>No data (no per-task records).</p>"
    return _table(["stage", "Dask tasks", "median s", "p95 s", "max s"],
                  [[k, v["tasks"], f"{v['median']:.3f}", f"{v['p95']:.3f}", f"{v['max']:.3f}"]
                   for k, v in sorted(stats.items())])


def _event_tables(events: list[dict[str, Any]]) -> list[str]:
    """Stage checkpoints and lost workers, when there were any."""
    out = []
    ckpt = [e for e in events if e.get("type") in ("checkpoint_save", "checkpoint_load")]
    if ckpt:
        out += ["<h2>Stage checkpoints</h2>",
                _table(["run", "event", "stage", "entries", "bytes"],
                       [[e.get("run_id"), e["type"], e.get("stage"), e.get("count"),
                         e.get("bytes", "")] for e in ckpt])]
    lost = [e for e in events if e.get("type") == "worker_lost"]
    if lost:
        out += ["<h2>Lost workers</h2>",
                _table(["time", "worker", "remaining"],
                       [[e.get("ts"), e.get("worker"), e.get("remaining")] for e in lost])]
    return out


STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1200px}"
         "table{border-collapse:collapse;margin:1em 0}"
         "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
         "td:first-child,th:first-child{text-align:left}"
         "table.notes td,table.notes th{text-align:left}"
         "pre{text-align:left;white-space:pre-wrap;margin:0;font-size:90%}"
         "pre.error{background:#fdf0f0;border:1px solid #e0b4b4;padding:1em;overflow-x:auto}"
         ".nodata,.legend{color:#666}")


def render_report(job_dir: str) -> str:
    """The report's HTML (self-contained)."""
    from curator_dask.jobs.job import PLAN_FILE

    events = read_events(os.path.join(job_dir, "events.jsonl"))
    summary = read_summary(os.path.join(job_dir, SUMMARY_FILE)) or {}
    plots, resources = _plots(events, _read_json(os.path.join(job_dir, PLAN_FILE)))
    src = summary.get("sources") or {}
    attempts = [e for e in events if e.get("type") in ("job_start", "run_resume")]
    ends = [e for e in events if e.get("type") in ("job_complete", "job_failed", "job_stopped")]
    sections = [
        f"<h1>Job {escape(str(summary.get('job_id', os.path.basename(job_dir))))}</h1>",
        f"<p>State <b>{escape(str(summary.get('state', '?')))}</b>; started "
        f"{escape(str(summary.get('started')))}, ended {escape(str(summary.get('ended')))}; "
        f"{len(attempts)} attempt(s); host {escape(str(summary.get('host')))}.</p>",
        *_error_section(summary, events),
        _table(["sources", "total", "skipped", "to process", "completed", "failed"],
               [["", src.get("total"), src.get("skipped"), src.get("to_process"),
                 src.get("completed"), src.get("failed")]]),
        *_stages_section(summary),
        "<h2>Rows processed and task durations</h2>", plots,
        "<h2>Dask task durations per stage</h2>", _durations_table(events),
        *_event_tables(events), *_notes_section(events),
    ]
    if ends:
        sections.append(f"<p>Last record: {escape(ends[-1]['type'])} at "
                        f"{escape(str(ends[-1].get('ts')))}.</p>")
    if os.path.exists(os.path.join(job_dir, PERFORMANCE_REPORT)):
        sections.append(f'<p>Dask\'s performance report of the last attempt: '
                        f'<a href="{PERFORMANCE_REPORT}">{PERFORMANCE_REPORT}</a>.</p>')
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>curator_dask job {escape(str(summary.get('job_id')))}</title>"
            f"<style>{STYLE}</style>{resources}</head><body>{''.join(sections)}</body></html>")


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_report(job_dir: str, output: str | None = None) -> str:
    """Write the report (default ``<job dir>/report.html``) atomically; returns its path."""
    import fsspec

    from curator_dask.utils.atomic import write_atomic

    path = os.path.abspath(output or os.path.join(job_dir, "report.html"))
    html = render_report(job_dir).encode()
    write_atomic(fsspec.filesystem("file"), path, lambda f: f.write(html), fsync=False)
    return path
