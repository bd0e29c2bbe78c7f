"""The report's layout (issue 32, item 13): the first attempt's start marker lies inside the
plotted range, and the Sources table has no empty cell.

Written records of a job of two attempts (no cluster): each attempt's first Dask task ends
seconds after the attempt started (its cluster starts in between), as in a real job.
"""

from __future__ import annotations

import json

import pytest

from curator_dask.jobs.report import render_report
from curator_dask.jobs.report_data import job_attempts, parse_ts
from tests.jobs.test_report_attempts import parse, table

pytest.importorskip("bokeh")

T0 = 1_796_000_000.0  # 2026-12-01


def ts(t: float) -> str:
    import datetime

    when = datetime.datetime.fromtimestamp(t, datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(t * 1000) % 1000:03d}Z"


@pytest.fixture
def job(tmp_path):
    def rec(seq, run, type_, t, **fields):
        return {"seq": seq, "job_id": "job", "run_id": run, "type": type_, "ts": ts(t),
                **fields}

    def task(seq, run, t, task_id):
        return rec(seq, run, "stage_complete", t, scope="task", stage="read", index=1,
                   task_id=task_id, duration=0.5, rows_in=2, rows_out=2, tasks_in=1, ended=t)

    events = [rec(1, "r1", "job_start", T0),
              rec(2, "r1", "sources_planned", T0 + 3, total=4, skipped=0, to_process=4),
              task(3, "r1", T0 + 5, "a"), task(4, "r1", T0 + 6, "b"),
              rec(5, "r1", "job_stopped", T0 + 7, completed=2),
              rec(6, "r2", "run_resume", T0 + 20),
              rec(7, "r2", "sources_planned", T0 + 23, total=4, skipped=2, to_process=2),
              task(8, "r2", T0 + 25, "c"), task(9, "r2", T0 + 26, "d"),
              rec(10, "r2", "job_complete", T0 + 27, completed=2)]
    job = tmp_path / "job"
    job.mkdir()
    (job / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    summary = {"job_id": "job", "run_id": "r2", "state": "completed", "host": "h",
               "started": ts(T0 + 20)[:19] + "Z", "ended": ts(T0 + 27)[:19] + "Z",
               "sources": {"total": 4, "skipped": 2, "to_process": 2, "completed": 2,
                           "failed": 0, "in_flight": 0},
               "stages": [{"stage": "read", "tasks_in": 2}]}
    (job / "job_summary.json").write_text(json.dumps(summary))
    return job, events, summary


def test_every_attempt_start_lies_in_the_plotted_range(job):
    from curator_dask.jobs.report_data import cumulative_rows, stage_records
    from curator_dask.jobs.report_plots import durations_figure, rows_figure

    _, events, summary = job
    attempts = job_attempts(events, summary)
    starts = [parse_ts(a.started) * 1000 for a in attempts]
    tasks = [r for r in stage_records(events) if r.get("scope") == "task"]
    for fig in (rows_figure(cumulative_rows(events), attempts),
                durations_figure(tasks, attempts)):
        # what the figure's automatic range is fit to: the x of every renderer's data
        xs = [x.timestamp() * 1000 for r in fig.renderers
              for x in r.data_source.data.get("x", [])]
        assert min(xs) <= min(starts) and max(starts) <= max(xs), fig.title.text


def test_the_sources_table_names_its_attempt_in_every_cell(job):
    path, _, _ = job
    sections = parse(render_report(str(path)))
    rows = table(sections, "Sources (attempt 2 of 2)")
    assert rows == [{"attempt": "2 of 2", "total": "4", "skipped": "2", "to process": "2",
                     "completed": "2", "failed": "0", "cancelled (pending)": "0"}]
    attempts = table(sections, "Attempts")
    assert [a["sources completed"] for a in attempts] == ["2", "2"]
