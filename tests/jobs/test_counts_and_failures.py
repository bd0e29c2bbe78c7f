"""Honest counts in a job's records (issue 13, items 3 and 9): rows dropped by a row filter in
every table and record, rates labelled, a failed job's summary (nothing in flight, the failure
counted, the stages that ran) and its report (the error preformatted, no empty plots), on a
real LocalCluster and through the CLI."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from curator_dask import JsonlReader, JsonlWriter, Pipeline
from curator_dask.errors import StageError
from curator_dask.jobs.events import read_events
from curator_dask.jobs.report import cumulative_rows, fusion_groups, render_report
from curator_dask.jobs.summary import read_summary
from curator_dask.jobs.view import render
from curator_dask.sample_data import generate_jsonl
from tests.backends.dask_test_stages import DropShortRows, FailOn
from tests.helpers import cli

pytestmark = pytest.mark.slow


def pipeline(tmp_path: Path, middle) -> Pipeline:
    return (Pipeline(name="counts")
            .add_stage(JsonlReader(file_paths=str(tmp_path / "in"), files_per_partition=1))
            .add_stage(middle).add_stage(JsonlWriter(path=str(tmp_path / "out"))))


def rendered(summary: dict) -> str:
    from rich.console import Console

    console = Console(record=True, width=250)
    console.print(render(summary))
    return console.export_text()


def test_a_row_filter_reports_its_dropped_rows_everywhere(executor, tmp_path):
    files = generate_jsonl(str(tmp_path / "in"), files=4, docs_per_file=25, short_fraction=0.3,
                           seed=5)
    docs = [json.loads(line) for f in files for line in Path(f).read_text().splitlines()]
    short = sum(len(d["text"]) < 50 for d in docs)
    assert 0 < short < len(docs)
    result = pipeline(tmp_path, DropShortRows(min_chars=50)).run(
        executor=executor, work_dir=str(tmp_path / "jobs"), job_id="rows")
    counts = dict(result.stage_counts)
    assert counts["drop_short_rows"].rows_dropped == short
    assert counts["drop_short_rows"].filtered == 0  # no batch was all short: no task dropped
    assert counts["drop_short_rows"].items_out == len(docs) - short
    assert [counts[s].rows_dropped for s in ("file_partitioning", "jsonl_reader",
                                             "jsonl_writer")] == [0, 0, 0]
    line = next(x for x in str(result.counts_table()).splitlines()
                if x.startswith("drop_short_rows"))
    assert line.split()[1:6] == ["4", "4", str(len(docs)), str(len(docs) - short), str(short)]

    job_dir = tmp_path / "jobs" / "rows"
    summary = read_summary(str(job_dir / "job_summary.json"))
    row = next(r for r in summary["stages"] if r["stage"] == "drop_short_rows")
    assert row["rows_dropped"] == short
    events = read_events(str(job_dir / "events.jsonl"))
    records = [e for e in events if e["type"] == "stage_complete"
               and e["stage"] == "drop_short_rows"]
    assert [e["rows_dropped"] for e in records if e["scope"] == "run"] == [short]
    assert sum(e["rows_dropped"] for e in records if e["scope"] == "task") == short

    text = rendered(summary)
    assert "rows dropped" in text and "rows/s busy" in text and "sources/s (wall clock)" in text
    assert "not per wall-clock second" in text  # the legend says what the rate is
    table_row = next(x for x in text.splitlines() if x.lstrip().startswith("drop_short_rows"))
    assert f" {short} " in table_row.replace("│", " ")

    html = render_report(str(job_dir))
    assert "<th>rows dropped</th>" in html and f"<td>{short}</td>" in html
    # the plot: rows processed by the one fusion group, cumulative, ending at every row read
    plan = json.loads((job_dir / "dag_execution_plan.json").read_text())
    series = cumulative_rows(events, fusion_groups(plan))
    assert list(series) == ["jsonl_reader + drop_short_rows + jsonl_writer"]
    points = series["jsonl_reader + drop_short_rows + jsonl_writer"]
    assert points[0][1] == 0 and points[-1][1] == len(docs)
    assert [t for t, _ in points] == sorted(t for t, _ in points)
    assert "Rows processed by fusion group (cumulative)" in html
    assert "jsonl_reader + drop_short_rows + jsonl_writer" in html


def test_a_failed_job_counts_the_failure_and_keeps_the_stages_that_ran(executor, tmp_path):
    """The last source raises; the sources before it finished (the first ones are submitted
    one per Dask task, before the last), so there are counts to keep."""
    generate_jsonl(str(tmp_path / "in"), files=8, docs_per_file=3, seed=6)
    with pytest.raises(StageError, match="boom on 7-0"):
        pipeline(tmp_path, FailOn(bad_id="7-0")).run(
            executor=executor, work_dir=str(tmp_path / "jobs"), job_id="failed")
    job_dir = tmp_path / "jobs" / "failed"
    summary = read_summary(str(job_dir / "job_summary.json"))
    src = summary["sources"]
    assert summary["state"] == "failed" and src["in_flight"] == 0
    # one source per Dask task at first: exactly the source whose stage raised failed
    assert src["failed"] == 1
    assert src["completed"] >= 1 and src["completed"] + 1 + summary["cancelled_at_end"] <= 8
    stages = {r["stage"]: r for r in summary["stages"]}
    assert list(stages) == ["file_partitioning", "jsonl_reader", "fail_on", "jsonl_writer"]
    assert stages["file_partitioning"]["tasks_out"] == 8
    # every source the driver collected passed each stage once; the completed count is the
    # checkpoint's (RunEnd.recorded), which also holds a chain that finished on the cluster
    # while the failure ended the run, before the driver collected it
    collected = stages["jsonl_writer"]["tasks_out"]
    assert stages["jsonl_reader"]["tasks_in"] == stages["fail_on"]["tasks_out"] == collected
    assert collected <= src["completed"], (collected, src)
    assert summary["failed_stage"] == "fail_on"
    text = rendered(summary)
    assert "fail_on (raised)" in text and "0 in flight" in text
    assert f"1 failed, {summary['cancelled_at_end']} cancelled (pending)" in text or (
        summary["cancelled_at_end"] == 0 and "1 failed, 0 in flight" in text)
    assert "ETA" not in text  # the job has ended: no estimate
    html = render_report(str(job_dir))
    assert "<pre class='error'>StageError: Stage &#x27;fail_on&#x27; failed on " in html
    assert "Rows processed by fusion group (cumulative)" in html  # some tasks finished


FAILING = textwrap.dedent("""
    from dataclasses import dataclass
    from curator_dask import JsonlReader, JsonlWriter, Pipeline, ProcessingStage

    @dataclass
    class Boom(ProcessingStage):
        name: str = "boom"
        def process(self, task):
            raise ValueError("bad <record> & co")

    def build():
        return (Pipeline(name="failing")
                .add_stage(JsonlReader(file_paths="input", files_per_partition=1))
                .add_stage(Boom()).add_stage(JsonlWriter(path="output")))
""")


def test_a_failed_cli_job_reads_well_in_status_and_report_from_anywhere(tmp_path):
    """Every source raises (nothing completes, so no plot has data); `status` and `report`
    are run from another directory and find the job through the job index."""
    (tmp_path / "pipe.py").write_text(FAILING)
    generate_jsonl(str(tmp_path / "input"), files=6, docs_per_file=2, seed=8)
    run = cli("run", "pipe.py:build", "--workers", "1", "--no-progress", "--job-id",
              "failing-cli", cwd=tmp_path, timeout=180)
    assert run.returncode == 1, run.stdout + run.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    status = json.loads(cli("status", "failing-cli", "--json", cwd=elsewhere).stdout)
    job_dir = tmp_path / "curator-dask-jobs" / "failing-cli"
    assert status["job_dir"] == str(job_dir)
    src = status["sources"]
    assert (src["completed"], src["in_flight"]) == (0, 0)
    assert src["failed"] == 1  # the source whose stage raised; any other in flight: cancelled
    assert [(r["stage"], r["tasks_in"], r["tasks_out"]) for r in status["stages"]] == [
        ("file_partitioning", 1, 6), ("jsonl_reader", 0, 0), ("boom", 0, 0),
        ("jsonl_writer", 0, 0)]
    table = cli("status", "failing-cli", cwd=elsewhere)
    assert table.returncode == 0, table.stderr
    assert "boom (raised)" in table.stdout and "0/6 done" in table.stdout
    report = cli("report", "failing-cli", cwd=elsewhere, timeout=120)
    assert report.returncode == 0, report.stderr
    html = Path(report.stdout.strip()).read_text()
    error = html.split("<pre class='error'>", 1)[1].split("</pre>", 1)[0]
    assert error.startswith("StageError: Stage &#x27;boom&#x27; failed on ")
    assert "ValueError: bad &lt;record&gt; &amp; co\n" in error  # escaped, lines kept
    assert "\nTraceback (most recent call last):\n  File " in error
    assert "pipe.py&quot;, line 9, in process\n" in error
    assert "pre.error{" in html and "text-align:left" in html
    assert html.count("class='nodata'") == 3  # two plots and the durations table: "no data"
    assert "<script" not in html  # no empty bokeh plots, no JavaScript for them
