"""The report's two bokeh plots: rows processed by fusion group (cumulative) and task durations.

Both cover every attempt of the job: a dashed line marks where each attempt started (when there
are several; the plotted range takes in every start, the first one included), and the legend
sits to the right of the plot, off the lines and points (inside the plot it hid the points of
the last seconds, where a legend's default corner is).
"""

from __future__ import annotations

import datetime
from typing import Any

from curator_dask.jobs.report_data import (
    Attempt,
    all_label,
    cumulative_rows,
    fusion_groups,
    parse_ts,
    stage_records,
)

LEGEND_SIDE = "right"  # where each plot's legend goes (a side panel, not over the data)
ATTEMPT_STARTS = "attempt starts"  # the name of the invisible points at the attempts' starts


def _utc(t: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(t, datetime.UTC)


def _figure(title: str, x_label: str, y_label: str) -> Any:
    from bokeh.plotting import figure

    return figure(title=title, x_axis_type="datetime", height=300, sizing_mode="stretch_width",
                  x_axis_label=x_label, y_axis_label=y_label)


def _finish(fig: Any, attempts: list[Attempt]) -> Any:
    """The legend beside the plot (clicking an entry hides its line), and the attempts'
    starts as dashed lines when there are several."""
    # the same classes as bokeh.models', whose star re-export its stubs do not declare
    from bokeh.models.annotations import Label, Span

    legend = fig.legend[0]
    fig.center = [r for r in fig.center if r is not legend]
    fig.add_layout(legend, LEGEND_SIDE)
    legend.location = "top_left"
    legend.click_policy = "hide"
    if len(attempts) < 2:
        return fig
    starts = [t for t in (parse_ts(a.started) for a in attempts) if t is not None]
    # An attempt starts before its first Dask task ends (its cluster starts in between), so
    # the first start lies left of the data, where a range fit to the data clips its marker:
    # invisible points there take the starts into the range.
    fig.scatter([_utc(t) for t in starts], [0] * len(starts), alpha=0, size=0,
                name=ATTEMPT_STARTS)
    for attempt in attempts:
        start = parse_ts(attempt.started)
        if start is None:
            continue
        ms = start * 1000.0  # a datetime axis counts milliseconds
        fig.add_layout(Span(location=ms, dimension="height", line_dash="dashed",
                            line_color="#888", line_width=1))
        fig.add_layout(Label(x=ms, y=4, y_units="screen", x_offset=3, text_font_size="9pt",
                             text_color="#555", text=f"attempt {attempt.number}"))
    return fig


def rows_figure(series: dict[str, list[tuple[float, int]]], attempts: list[Attempt]) -> Any:
    from bokeh.palettes import Category10_10

    fig = _figure(f"Rows processed by fusion group (cumulative), {all_label(len(attempts))}",
                  "time (UTC)", "rows processed")
    for i, (label, points) in enumerate(sorted(series.items())):
        fig.step([_utc(t) for t, _ in points], [v for _, v in points], mode="after",
                 legend_label=label, color=Category10_10[i % 10], line_width=2)
    return _finish(fig, attempts)


def durations_figure(records: list[dict[str, Any]], attempts: list[Attempt]) -> Any:
    from bokeh.models import ColumnDataSource, HoverTool
    from bokeh.palettes import Category10_10

    number = {a.run_id: a.short for a in attempts}
    fig = _figure("Task durations (one point per Dask task and stage), "
                  f"{all_label(len(attempts))}", "task end (UTC)", "seconds")
    for i, stage in enumerate(sorted({r["stage"] for r in records})):
        rows = [r for r in records if r["stage"] == stage]
        source = ColumnDataSource({
            "x": [_utc(r["ended"]) for r in rows],
            "y": [float(r.get("duration") or 0) for r in rows],
            "task": [str(r.get("task_id")) for r in rows],
            "rows": [int(r.get("rows_in") or 0) for r in rows],
            "attempt": [number.get(str(r.get("run_id")), "?") for r in rows],
        })
        fig.scatter("x", "y", source=source, legend_label=stage, size=5, alpha=0.6,
                    color=Category10_10[i % 10])
    fig.add_tools(HoverTool(renderers=list(fig.renderers),  # not the attempts' starts
                            tooltips=[("task", "@task"), ("attempt", "@attempt"),
                                      ("seconds", "@y{0.000}"), ("rows in", "@rows")]))
    return _finish(fig, attempts)


def plots(events: list[dict[str, Any]], plan: dict[str, Any] | None,
          attempts: list[Attempt]) -> tuple[str, str]:
    """``(HTML of the plots, resources HTML)``; a plot without data is a "no data" line, and
    with no plot at all no JavaScript is included."""
    series = cumulative_rows(events, fusion_groups(plan))
    tasks = [r for r in stage_records(events) if r.get("scope") == "task"]
    figures, notes = [], []
    if series:
        figures.append(rows_figure(series, attempts))
    else:
        notes.append("<p class='nodata'>Rows processed: no data (no Dask task finished).</p>")
    if tasks:
        figures.append(durations_figure(tasks, attempts))
    else:
        notes.append("<p class='nodata'>Task durations: no data (no per-task records).</p>")
    if not figures:
        return "".join(notes), ""
    from bokeh.embed import components
    from bokeh.layouts import column
    from bokeh.resources import INLINE

    script, div = components(column(*figures, sizing_mode="stretch_width"))
    return script + div + "".join(notes), INLINE.render()
