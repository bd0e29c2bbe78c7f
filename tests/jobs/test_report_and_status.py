"""`report JOB`, `status JOB` (rich table, --json with rates) and the run's checkpoint options."""

from __future__ import annotations

import json
import re
from pathlib import Path

import dask
import pytest

from curator_dask import DaskExecutor, JsonlReader, JsonlWriter, Pipeline
from curator_dask.cli.common import UsageError
from curator_dask.cli.main import build_parser
from curator_dask.cli.run_command import checkpoint_kwargs
from curator_dask.jobs.report import cumulative_rows, duration_stats
from curator_dask.jobs.view import rates
from curator_dask.sample_data import generate_jsonl
from tests.helpers import cli


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("report")
    generate_jsonl(str(root / "in"), files=6, docs_per_file=5, seed=21)
    p = Pipeline(name="rep").add_stage(JsonlReader(file_paths=str(root / "in")))
    p.add_stage(JsonlWriter(path=str(root / "out")))
    # the suite turns the report off (tests/conftest.py): this job checks it
    with dask.config.set({"curator-dask.jobs.performance-report": True}), DaskExecutor(
            n_workers=1, progress=False, max_sources_per_task=1) as ex:
        p.run(executor=ex, work_dir=str(root / "jobs"), job_id="rep", command="cmd")
    return root


@pytest.mark.slow
def test_report_is_self_contained_with_plots_and_dask_report(job):
    out = cli("report", "rep", "--work-dir", str(job / "jobs"), timeout=120)
    assert out.returncode == 0, out.stderr
    path = Path(out.stdout.strip())
    assert path == job / "jobs" / "rep" / "report.html"
    html = path.read_text()
    assert "Rows processed by fusion group (cumulative)" in html and "Task durations" in html
    assert "jsonl_reader + jsonl_writer" in html  # the fusion group's line is named by stages
    assert "no data" not in html
    assert not re.search(r"<script[^>]+src=", html)  # bokeh's JavaScript is inlined
    assert "jsonl_writer" in html
    assert (job / "jobs" / "rep" / "dask-performance-report.html").is_file()
    assert 'href="dask-performance-report.html"' in html
    missing = cli("report", "nope", "--work-dir", str(job / "jobs"))
    assert missing.returncode == 2 and "no job 'nope'" in missing.stderr


@pytest.mark.slow
def test_status_table_and_json(job):
    table = cli("status", "rep", "--work-dir", str(job / "jobs"))
    assert table.returncode == 0, table.stderr
    assert "completed" in table.stdout and "jsonl_writer" in table.stdout
    assert "6/6 done" in table.stdout
    data = json.loads(cli("status", "rep", "--json", "--work-dir", str(job / "jobs")).stdout)
    assert data["sources"]["completed"] == 6 and data["rates"]["remaining"] == 0
    assert data["rates"]["sources_per_s"] > 0


@pytest.mark.slow
def test_job_progress_from_python_and_status_detailed(job, capsys):
    """``show_job_progress`` (the seed's monitor) returns the data and prints nothing unless
    asked; ``detailed`` adds stages and partitions; ``status --detailed --json`` has them."""
    from curator_dask.jobs import JobUtils, show_job_progress
    from curator_dask.jobs.index import JobNotFoundError

    work = str(job / "jobs")
    data = show_job_progress("rep", work_dir=work)
    assert capsys.readouterr().out == ""
    assert (data["job_id"], data["state"], data["percent"]) == ("rep", "completed", 100.0)
    assert data["sources"] == {"total": 6, "skipped": 0, "to_process": 6, "completed": 6,
                               "failed": 0, "in_flight": 0, "pending": 0}
    assert "partitions" not in data and data["resume_command"] == "cmd --resume rep"
    detailed = show_job_progress(job / "jobs" / "rep", detailed=True, echo=True)  # its folder
    out = capsys.readouterr().out
    assert "job rep  completed" in out, out
    assert "partitions (Dask tasks of sources, this attempt): 6 completed" in out, out
    parts = detailed["partitions"]  # one source per Dask task (max_sources_per_task=1)
    assert len(parts) == 6 and len({p["task_id"] for p in parts}) == 6
    assert all(p["state"] == "completed" and (p["sources"], p["completed"]) == (1, 1)
               and p["submitted"] <= p["ended"] for p in parts), parts
    stages = {s["stage"]: s for s in detailed["stages"]}
    assert stages["jsonl_writer"]["dask_tasks"] == 6 and stages["jsonl_writer"]["started"]
    assert stages["file_partitioning"]["started"] is None  # the driver's head: no Dask task
    assert detailed["attempts"] == 1 and detailed["partitions_unlisted"] == 0
    assert JobUtils("rep", work_dir=work).progress(detailed=True) == detailed
    shown = json.loads(cli("status", "rep", "--detailed", "--json", "--work-dir", work).stdout)
    assert shown["partitions"] == parts and shown["stages"] == detailed["stages"]
    with pytest.raises(JobNotFoundError, match="no job 'nope' in "):
        show_job_progress("nope", work_dir=work)


def test_series_and_stats_from_records():
    events = [{"type": "stage_complete", "scope": "task", "stage": "a", "ended": 100.0 + i,
               "rows_in": 10, "duration": 0.1 * (i + 1)} for i in range(10)]
    events.append({"type": "stage_complete", "scope": "run", "stage": "a", "rows_in": 100})
    series = cumulative_rows(events)
    assert series["a"][0] == (pytest.approx(99.9), 0)  # the first task's start
    assert [v for _, v in series["a"]] == list(range(0, 101, 10))  # the run record: not counted
    stats = duration_stats(events)["a"]
    assert stats["tasks"] == 10 and stats["max"] == pytest.approx(1.0)
    assert stats["median"] == pytest.approx(0.55)


def test_rates_and_eta():
    summary = {"state": "running", "processing_started": 0.0,
               "sources": {"to_process": 100, "completed": 25, "failed": 5}}
    assert rates(summary, now=50.0) == {"elapsed": 50.0, "sources_per_s": 0.5,
                                        "remaining": 70, "eta_s": 140.0}
    assert rates({"sources": {}}, now=1.0)["eta_s"] is None


def parse(*argv: str):
    return build_parser().parse_args(["run", "p.yaml", *argv])


def test_checkpoint_options():
    assert checkpoint_kwargs(parse())["verify_inputs"] is None
    sc = checkpoint_kwargs(parse("--checkpoint-every", "2"))["stage_checkpoints"]
    assert (sc.strategy, sc.n) == ("every_n_stages", 2)
    sc = checkpoint_kwargs(parse("--checkpoint-stages", "a, b",
                                 "--checkpoint-retention", "keep_all"))["stage_checkpoints"]
    assert (sc.strategy, sc.stages, sc.retention) == ("manual", ("a", "b"), "keep_all")
    sc = checkpoint_kwargs(parse("--stage-checkpoints", "every_stage",
                                 "--checkpoint-format", "parquet"))["stage_checkpoints"]
    assert (sc.strategy, sc.format) == ("every_stage", "parquet")
    with pytest.raises(UsageError, match="--checkpoint-every goes with every_n_stages"):
        checkpoint_kwargs(parse("--stage-checkpoints", "manual", "--checkpoint-every", "2"))
    with pytest.raises(UsageError, match="the manual strategy needs stages"):
        checkpoint_kwargs(parse("--stage-checkpoints", "manual"))
    kw = checkpoint_kwargs(parse("--verify-inputs", "content", "--on-input-change", "error"))
    assert kw == {"verify_inputs": "content", "on_input_change": "error"}
