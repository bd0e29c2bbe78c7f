"""``python -m curator_dask report JOB``: one self-contained HTML file about a job.

It is built from the job's own records (``events.jsonl``, ``job_summary.json`` and the fusion
groups of ``dag_execution_plan.json``; a Data-Juicer recipe's job folder is read through
:mod:`~curator_dask.jobs.dj_format` and gets a table of its partitions): the job's attempts,
the error that ended a failed attempt (preformatted), the sources and per-stage counts of the
last attempt, the rows each fusion group processed over time (cumulative) and task durations
(bokeh plots,
:mod:`~curator_dask.jobs.report_plots`), task durations per stage and attempt, stage
checkpoints, lost workers and warnings, and a link to Dask's performance report
(``dask-performance-report.html``) when one was saved.

The summary describes the last attempt and the event log every attempt, so every section's
heading names the attempts it covers ("attempt 2 of 2", "all 2 attempts"), and the numbers of
one attempt agree across sections (a stage's ``tasks in`` in the stage table and in the
durations table of the same attempt).
"""

from __future__ import annotations

import json
import os
from html import escape
from typing import Any

from curator_dask.jobs import dj_format
from curator_dask.jobs.events import read_job_events
from curator_dask.jobs.report_data import (
    Attempt,
    all_label,
    cumulative_rows,
    duration_stats,
    fusion_groups,
    job_attempts,
    to_second,
)
from curator_dask.jobs.report_plots import plots
from curator_dask.jobs.summary import SUMMARY_FILE, read_summary

# Kept importable from here, where they were first defined.
__all__ = ["PERFORMANCE_REPORT", "cumulative_rows", "duration_stats", "fusion_groups",
           "render_report", "write_report"]

PERFORMANCE_REPORT = "dask-performance-report.html"


def _cell(value: Any) -> str:
    """A table cell: multi-line text keeps its lines (``<pre>``), everything is escaped."""
    text = "" if value is None else str(value)
    return f"<pre>{escape(text)}</pre>" if "\n" in text else escape(text)


def _table(header: list[str], rows: list[list[Any]], cls: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>"
                   for row in rows)
    attr = f" class='{cls}'" if cls else ""
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _h2(title: str, covers: str) -> str:
    return f"<h2>{escape(title)} ({escape(covers)})</h2>"


def _header(summary: dict[str, Any], attempts: list[Attempt], job_dir: str) -> list[str]:
    """The job's state and when it started: the first attempt's start, and the last one's
    start and end when there were several."""
    job_id = summary.get("job_id", os.path.basename(job_dir))
    first, last = attempts[0], attempts[-1]
    state = f"State <b>{escape(str(summary.get('state', '?')))}</b>"
    if len(attempts) == 1:
        when = (f"1 attempt, started {escape(str(first.started))}, ended "
                f"{escape(str(last.ended))}")
    else:
        when = (f"{len(attempts)} attempts: the first started {escape(str(first.started))}; "
                f"the last ({escape(last.label)}) started {escape(str(last.started))}, ended "
                f"{escape(str(last.ended))}")
    return [f"<h1>Job {escape(str(job_id))}</h1>",
            f"<p class='header'>{state}; {when}; host {escape(str(summary.get('host')))}.</p>"]


def _attempts_section(attempts: list[Attempt]) -> list[str]:
    rows = [[a.short, a.run_id, a.started, a.ended, a.outcome, a.skipped, a.to_process,
             a.completed, a.dask_tasks] for a in attempts]
    return [_h2("Attempts", all_label(len(attempts))),
            _table(["attempt", "run id", "started", "ended", "outcome", "sources skipped",
                    "sources to process", "sources completed", "Dask tasks"], rows),
            "<p class='legend'>sources skipped: completed before the attempt started (by "
            "earlier attempts); Dask tasks: those recorded one by one (the first 20,000 "
            "records of an attempt).</p>"]


def _sources_section(summary: dict[str, Any], last: Attempt) -> list[str]:
    src = summary.get("sources") or {}
    out = [_h2("Sources", last.label),
           _table(["attempt", "total", "skipped", "to process", "completed", "failed",
                   "cancelled (pending)"],
                  [[last.short, src.get("total"), src.get("skipped"), src.get("to_process"),
                    src.get("completed"), src.get("failed"),
                    summary.get("cancelled_at_end") or 0]]),
           "<p class='legend'>completed: recorded complete in the checkpoint; cancelled: "
           "running when the attempt ended and not recorded (a resume runs them again).</p>"]
    if summary.get("state") == "completed_with_failures":
        ids = ", ".join(str(i) for i in summary.get("failed_source_ids") or [])
        out.append(f"<p class='failures'>{escape(str(src.get('failed')))} sources failed (a "
                   "stage returned FailedTask) and stay pending in the checkpoint: a resume "
                   f"retries them. Their ids (the first 100): {escape(ids)}.</p>")
    return out


def _stages_section(summary: dict[str, Any], last: Attempt) -> list[str]:
    rows = summary.get("stages") or []
    if not rows:
        return [_h2("Stages", last.label), "<p class='nodata'>No stage counts were "
                "recorded (the attempt ended before any stage ran).</p>"]
    failed_stage = summary.get("failed_stage")
    table = _table(
        ["stage", "tasks in", "tasks out", "items in", "items out", "rows dropped",
         "tasks filtered", "tasks failed", "busy s"],
        [[f"{r.get('stage')} (raised)" if r.get("stage") == failed_stage else r.get("stage"),
          r.get("tasks_in"), r.get("tasks_out"), r.get("items_in"), r.get("items_out"),
          r.get("rows_dropped", 0), r.get("filtered"), r.get("failed"),
          f"{float(r.get('seconds') or 0):.2f}"] for r in rows], cls="stages")
    from curator_dask.backends.dask.result import COUNTS_LEGEND

    return [_h2("Stages", last.label), table, f"<p class='legend'>{escape(COUNTS_LEGEND)}.</p>"]


def _partitions_section(summary: dict[str, Any], events: list[dict[str, Any]],
                        last: Attempt) -> list[str]:
    """A Data-Juicer recipe job's partitions: what the last attempt did with each."""
    if summary.get("format") != dj_format.FORMAT:
        return []
    rows = dj_format.partition_rows(events, summary.get("run_id"),
                                    running=summary.get("state") == "running")
    if not rows:
        return [_h2("Partitions", last.label), "<p class='nodata'>No partition started.</p>"]
    return [_h2("Partitions", last.label),
            _table(["partition", "state", "rows in", "rows out", "operators run", "seconds",
                    "resumed after"],
                   [[r["partition"], r["state"], r["rows_in"], r["rows_out"], r["operators"],
                     f"{r['seconds']:.2f}", r["resumed_after"] or ""] for r in rows]),
           "<p class='legend'>A Data-Juicer recipe's partitions (its sources above): rows in "
           "to the first operator the attempt ran on it, rows out of the last; seconds: its "
           "operators' time, a whole-dataset operator (a deduplicator) with its whole run; "
           "resumed after: the operator whose checkpoint it started from.</p>"]


def _error_section(summary: dict[str, Any], events: list[dict[str, Any]],
                   attempts: list[Attempt]) -> list[str]:
    """The error that ended an attempt (the last one's, else the last recorded), as
    preformatted text (its traceback kept)."""
    if summary.get("state") == "completed":
        return []
    failed = [e for e in events if e.get("type") == "job_failed" and e.get("error")]
    run_id, error = summary.get("run_id"), summary.get("error")
    if not error and failed:
        run_id, error = failed[-1].get("run_id"), failed[-1]["error"]
    if not error:
        return []
    attempt = next((a for a in attempts if a.run_id == str(run_id)), attempts[-1])
    return [_h2("Error", attempt.label), f"<pre class='error'>{escape(str(error))}</pre>"]


def _durations_section(events: list[dict[str, Any]], attempts: list[Attempt]) -> list[str]:
    """Durations per stage for each attempt, then (with several) for all of them."""
    total = len(attempts)
    covers = (f"each of the {total} attempts, and all {total} attempts" if total > 1
              else all_label(1))
    parts = [(a.short, duration_stats(events, {a.run_id})) for a in attempts]
    if total > 1:
        parts.append((f"all {total}", duration_stats(events)))
    rows = [[stage, label, v["tasks"], v["tasks_in"], f"{v['median']:.3f}", f"{v['p95']:.3f}",
             f"{v['max']:.3f}"] for label, stats in parts for stage, v in stats.items()]
    if not rows:
        return [_h2("Dask task durations per stage", covers),
                "<p class='nodata'>No data (no per-task records).</p>"]
    return [_h2("Dask task durations per stage", covers),
            _table(["stage", "attempt", "Dask tasks", "tasks in", "median s", "p95 s", "max s"],
                   rows, cls="durations"),
            "<p class='legend'>Dask tasks: the tasks timed one by one (median, p95, max); "
            "tasks in: the stage's input tasks in all of the attempt's Dask tasks, as in the "
            "stage table of the same attempt. Stages run on the driver (up to the source) have "
            "no Dask tasks.</p>"]


def _notes_section(events: list[dict[str, Any]], label: dict[str, str], covers: str
                   ) -> list[str]:
    notes = [e for e in events if e.get("type") in ("warning", "job_failed", "source_failed")]
    if not notes:
        return []
    rows = []
    for e in notes[:200]:
        detail = e.get("message") or e.get("error") or e.get("source_ids")
        if e["type"] == "job_failed" and detail:
            detail = str(detail).splitlines()[0] + " (the full error is under Error)"
        rows.append([e.get("ts"), label.get(str(e.get("run_id")), e.get("run_id")), e["type"],
                     detail])
    return [_h2("Warnings and failures", covers),
            _table(["time", "attempt", "type", "detail"], rows, cls="notes")]


def _event_tables(events: list[dict[str, Any]], label: dict[str, str], covers: str
                  ) -> list[str]:
    """Stage checkpoints and lost workers, when there were any."""
    out = []
    ckpt = [e for e in events if e.get("type") in ("checkpoint_save", "checkpoint_load")]
    if ckpt:
        out += [_h2("Stage checkpoints", covers),
                _table(["attempt", "event", "stage", "entries", "bytes"],
                       [[label.get(str(e.get("run_id")), e.get("run_id")), e["type"],
                         e.get("stage"), e.get("count"), e.get("bytes", "")] for e in ckpt])]
    lost = [e for e in events if e.get("type") == "worker_lost"]
    if lost:
        out += [_h2("Lost workers", covers),
                _table(["time", "attempt", "worker", "remaining"],
                       [[e.get("ts"), label.get(str(e.get("run_id")), e.get("run_id")),
                         e.get("worker"), e.get("remaining")] for e in lost])]
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

    events = read_job_events(job_dir)
    summary = read_summary(os.path.join(job_dir, SUMMARY_FILE)) or {}
    attempts = job_attempts(events, summary) or [Attempt(
        1, 1, str(summary.get("run_id")), summary.get("started"), summary.get("ended"),
        str(summary.get("state", "?")), None, None, 0, 0)]
    last, covers = attempts[-1], all_label(len(attempts))
    label = {a.run_id: f"{a.short} ({a.run_id})" for a in attempts}  # "2 of 3 (run id)"
    named = {a.run_id: a.label for a in attempts}
    plot_html, resources = plots(events, _read_json(os.path.join(job_dir, PLAN_FILE)), attempts)
    ends = [e for e in events if e.get("type") in ("job_complete", "job_failed", "job_stopped")]
    sections = [
        *_header(summary, attempts, job_dir),
        *_error_section(summary, events, attempts),
        *_attempts_section(attempts),
        *_sources_section(summary, last),
        *_stages_section(summary, last),
        *_partitions_section(summary, events, last),
        _h2("Rows processed and task durations", covers), plot_html,
        *_durations_section(events, attempts),
        *_event_tables(events, label, covers), *_notes_section(events, label, covers),
    ]
    if ends:
        sections.append(f"<p>Last record: {escape(ends[-1]['type'])} at "
                        f"{escape(str(to_second(ends[-1].get('ts'))))} "
                        f"({escape(named.get(str(ends[-1].get('run_id')), '?'))}).</p>")
    if os.path.exists(os.path.join(job_dir, PERFORMANCE_REPORT)):
        sections.append("<p>Dask's performance report of the last attempt that saved one (each "
                        f'attempt replaces it): <a href="{PERFORMANCE_REPORT}">'
                        f"{PERFORMANCE_REPORT}</a>.</p>")
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
