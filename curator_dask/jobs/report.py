"""``python -m curator_dask report JOB``: one self-contained HTML file about a job.

It is built from the job's own records (``events.jsonl`` and ``job_summary.json``): per-stage
throughput over time and task durations (bokeh plots, with bokeh's JavaScript inlined so the
file opens anywhere, offline), counts, stage checkpoints, lost workers and warnings, and a link
to Dask's performance report of the run (``dask-performance-report.html``) when one was saved.
"""

from __future__ import annotations

import datetime
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


def throughput_series(events: list[dict[str, Any]], buckets: int = 60
                      ) -> dict[str, list[tuple[float, float]]]:
    """``{stage: [(bucket start, rows per second), ...]}`` from the per-task/window records.

    Example:
        >>> ev = [{"type": "stage_complete", "scope": "task", "stage": "f", "ended": 10.0,
        ...        "rows_in": 100}, {"type": "stage_complete", "scope": "task", "stage": "f",
        ...        "ended": 12.0, "rows_in": 100}]
        >>> throughput_series(ev, buckets=2)["f"]
        [(10.0, 100.0), (11.0, 0.0), (12.0, 100.0)]
    """
    records = _stage_records(events)
    if not records:
        return {}
    start = min(r["ended"] for r in records)
    end = max(r["ended"] for r in records)
    width = max((end - start) / buckets, 0.1)
    n = int((end - start) // width) + 1
    series: dict[str, list[float]] = {}
    for r in records:
        rows = series.setdefault(r["stage"], [0.0] * n)
        rows[min(n - 1, int((r["ended"] - start) // width))] += float(r.get("rows_in") or 0)
    return {stage: [(start + i * width, v / width) for i, v in enumerate(rows)]
            for stage, rows in series.items()}


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


def _plots(events: list[dict[str, Any]]) -> tuple[str, str]:
    """``(script + div HTML, resources HTML)`` of the two plots."""
    from bokeh.embed import components
    from bokeh.layouts import column
    from bokeh.models import ColumnDataSource, HoverTool
    from bokeh.palettes import Category10_10
    from bokeh.plotting import figure
    from bokeh.resources import INLINE

    series = throughput_series(events)
    throughput = figure(title="Rows per second by stage", x_axis_type="datetime", height=300,
                        sizing_mode="stretch_width", x_axis_label="time (UTC)",
                        y_axis_label="rows in / s")
    for i, (stage, points) in enumerate(sorted(series.items())):
        color = Category10_10[i % 10]
        xs = [datetime.datetime.fromtimestamp(t, datetime.UTC) for t, _ in points]
        throughput.line(xs, [v for _, v in points], legend_label=stage, color=color,
                        line_width=2)
    durations = figure(title="Task durations (one point per Dask task and stage)",
                       x_axis_type="datetime", height=300, sizing_mode="stretch_width",
                       x_axis_label="task end (UTC)", y_axis_label="seconds")
    records = [r for r in _stage_records(events) if r.get("scope") == "task"]
    stages = sorted({r["stage"] for r in records})
    for i, stage in enumerate(stages):
        rows = [r for r in records if r["stage"] == stage]
        source = ColumnDataSource({
            "x": [datetime.datetime.fromtimestamp(r["ended"], datetime.UTC) for r in rows],
            "y": [float(r.get("duration") or 0) for r in rows],
            "task": [str(r.get("task_id")) for r in rows],
            "rows": [int(r.get("rows_in") or 0) for r in rows],
        })
        durations.scatter("x", "y", source=source, legend_label=stage, size=5, alpha=0.6,
                          color=Category10_10[i % 10])
    durations.add_tools(HoverTool(tooltips=[("task", "@task"), ("seconds", "@y{0.000}"),
                                            ("rows in", "@rows")]))
    for fig in (throughput, durations):
        if fig.legend:
            fig.legend.click_policy = "hide"
    script, div = components(column(throughput, durations, sizing_mode="stretch_width"))
    return script + div, INLINE.render()


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(v))}</td>" for v in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_report(job_dir: str) -> str:
    """The report's HTML (self-contained)."""
    events = read_events(os.path.join(job_dir, "events.jsonl"))
    summary = read_summary(os.path.join(job_dir, SUMMARY_FILE)) or {}
    plots, resources = _plots(events)
    src = summary.get("sources") or {}
    attempts = [e for e in events if e.get("type") in ("job_start", "run_resume")]
    ends = [e for e in events if e.get("type") in ("job_complete", "job_failed", "job_stopped")]
    sections = [
        f"<h1>Job {escape(str(summary.get('job_id', os.path.basename(job_dir))))}</h1>",
        f"<p>State <b>{escape(str(summary.get('state', '?')))}</b>; started "
        f"{escape(str(summary.get('started')))}, ended {escape(str(summary.get('ended')))}; "
        f"{len(attempts)} attempt(s); host {escape(str(summary.get('host')))}.</p>",
        _table(["sources", "total", "skipped", "to process", "completed", "failed"],
               [["", src.get("total"), src.get("skipped"), src.get("to_process"),
                 src.get("completed"), src.get("failed")]]),
        "<h2>Stages (last attempt)</h2>",
        _table(["stage", "tasks in", "tasks out", "rows in", "rows out", "filtered", "failed",
                "seconds"],
               [[r.get("stage"), r.get("tasks_in"), r.get("tasks_out"), r.get("items_in"),
                 r.get("items_out"), r.get("filtered"), r.get("failed"),
                 f"{float(r.get('seconds') or 0):.2f}"] for r in summary.get("stages") or []]),
        "<h2>Throughput and task durations</h2>", plots,
        "<h2>Dask task durations per stage</h2>",
        _table(["stage", "Dask tasks", "median s", "p95 s", "max s"],
               [[k, v["tasks"], f"{v['median']:.3f}", f"{v['p95']:.3f}", f"{v['max']:.3f}"]
                for k, v in sorted(duration_stats(events).items())]),
    ]
    ckpt = [e for e in events if e.get("type") in ("checkpoint_save", "checkpoint_load")]
    if ckpt:
        sections += ["<h2>Stage checkpoints</h2>",
                     _table(["run", "event", "stage", "entries", "bytes"],
                            [[e.get("run_id"), e["type"], e.get("stage"), e.get("count"),
                              e.get("bytes", "")] for e in ckpt])]
    lost = [e for e in events if e.get("type") == "worker_lost"]
    if lost:
        sections += ["<h2>Lost workers</h2>",
                     _table(["time", "worker", "remaining"],
                            [[e.get("ts"), e.get("worker"), e.get("remaining")] for e in lost])]
    notes = [e for e in events if e.get("type") in ("warning", "job_failed", "source_failed")]
    if notes:
        sections += ["<h2>Warnings and failures</h2>",
                     _table(["time", "run", "type", "detail"],
                            [[e.get("ts"), e.get("run_id"), e["type"],
                              e.get("message") or e.get("error") or e.get("source_ids")]
                             for e in notes[:200]])]
    if ends:
        sections.append(f"<p>Last record: {escape(ends[-1]['type'])} at "
                        f"{escape(str(ends[-1].get('ts')))}.</p>")
    if os.path.exists(os.path.join(job_dir, PERFORMANCE_REPORT)):
        sections.append(f'<p>Dask\'s performance report of the last attempt: '
                        f'<a href="{PERFORMANCE_REPORT}">{PERFORMANCE_REPORT}</a>.</p>')
    style = ("body{font-family:sans-serif;margin:2em;max-width:1200px}"
             "table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
             "td:first-child,th:first-child{text-align:left}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>curator_dask job {escape(str(summary.get('job_id')))}</title>"
            f"<style>{style}</style>{resources}</head><body>{''.join(sections)}</body></html>")


def write_report(job_dir: str, output: str | None = None) -> str:
    """Write the report (default ``<job dir>/report.html``) atomically; returns its path."""
    import fsspec

    from curator_dask.utils.atomic import write_atomic

    path = os.path.abspath(output or os.path.join(job_dir, "report.html"))
    html = render_report(job_dir).encode()
    write_atomic(fsspec.filesystem("file"), path, lambda f: f.write(html), fsync=False)
    return path
