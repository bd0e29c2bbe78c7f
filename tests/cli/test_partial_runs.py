"""`run` when a stage returns ``FailedTask`` for some sources (issue 20, item 1): exit code 5
(``EXIT_PARTIAL``), a last line that counts them and says how to retry them, the job state
``completed_with_failures`` in the summary, the event log, ``status`` and ``report``; a resume
that fixes them ends ``completed`` with exit code 0. Also: the exit-code table of
docs/guarantees.md lists exactly the codes ``curator_dask/cli/common.py`` defines.
"""

from __future__ import annotations

import json
import re
import textwrap

import pytest

from curator_dask.sample_data import generate_jsonl
from tests.helpers import REPO_ROOT, cli

# The failing ids come from the environment, read in the workers (they inherit the driver's):
# a resume with FAIL_IDS unset runs the same pipeline, so strict resume accepts it.
PIPELINE = textwrap.dedent("""
    import os
    from dataclasses import dataclass
    from curator_dask import FailedTask, JsonlReader, JsonlWriter, Pipeline, ProcessingStage

    @dataclass
    class FailSome(ProcessingStage):
        name: str = "fail_some"
        def process(self, task):
            bad = os.environ.get("FAIL_IDS", "").split(",")
            return FailedTask() if task.to_pyarrow()["id"][0].as_py() in bad else task

    def build():
        return (Pipeline(name="partial").add_stage(JsonlReader(file_paths="input"))
                .add_stage(FailSome()).add_stage(JsonlWriter(path="output")))
""")
RUN = ("run", "pipe.py:build", "--workers", "1", "--no-progress")


def written(tmp_path) -> int:
    return len(list((tmp_path / "output").glob("*.jsonl")))


@pytest.mark.slow
def test_failed_sources_exit_5_with_a_state_of_their_own_until_a_resume_retries_them(tmp_path):
    (tmp_path / "pipe.py").write_text(PIPELINE)
    generate_jsonl(str(tmp_path / "input"), files=6, docs_per_file=2, seed=8)

    out = cli(*RUN, "--job-id", "partial", cwd=tmp_path, env={"FAIL_IDS": "1-0,4-0"})

    assert out.returncode == 5, out.stderr[-3000:]
    job_dir = tmp_path / "curator-dask-jobs" / "partial"
    summary = json.loads((job_dir / "job_summary.json").read_text())
    assert summary["state"] == "completed_with_failures"
    assert summary["sources"]["completed"] == 4 and summary["sources"]["failed"] == 2
    assert len(summary["failed_source_ids"]) == 2
    resume = summary["resume_command"]
    assert resume.endswith("run pipe.py:build --workers 1 --no-progress --resume partial")
    assert out.stdout.strip().splitlines()[-1] == (
        "4 of 6 sources completed, 2 failed (a stage returned FailedTask) and stay pending: "
        f"resume with `{resume}` to retry them")
    assert "PartialRunWarning" not in out.stderr  # the CLI says it once, in its last line
    assert "4 of 6 sources completed, 2 failed" in out.stderr  # the driver's INFO line
    assert written(tmp_path) == 4
    end = [json.loads(line) for line in (job_dir / "events.jsonl").read_text().splitlines()][-1]
    assert (end["type"], end["state"], end["failed_sources"]) == (
        "job_complete", "completed_with_failures", 2)

    status = cli("status", "partial", cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert "completed_with_failures" in status.stdout
    assert "2 failed (a stage returned FailedTask: pending, a resume retries them)" in " ".join(
        status.stdout.split())
    assert "resume with:" in status.stdout
    listing = cli("status", cwd=tmp_path)
    assert re.search(r"partial\W+completed_with_failures\W", listing.stdout), listing.stdout
    report = cli("report", "partial", cwd=tmp_path, timeout=120)
    assert report.returncode == 0, report.stderr
    html = (job_dir / "report.html").read_text()
    assert "<b>completed_with_failures</b>" in html
    assert "2 sources failed (a stage returned FailedTask) and stay pending" in html
    assert summary["failed_source_ids"][0] in html

    again = cli(*RUN, "--resume", "partial", cwd=tmp_path)

    assert again.returncode == 0, again.stderr[-3000:]
    assert "6 source partitions: 4 already complete (skipped), 2 to process" in again.stderr
    assert "failed (a stage returned FailedTask)" not in again.stdout + again.stderr
    assert json.loads((job_dir / "job_summary.json").read_text())["state"] == "completed"
    assert written(tmp_path) == 6


@pytest.mark.slow
def test_without_a_checkpoint_the_last_line_says_nothing_recorded_them(tmp_path):
    (tmp_path / "pipe.py").write_text(PIPELINE)
    generate_jsonl(str(tmp_path / "input"), files=3, docs_per_file=2, seed=9)

    out = cli(*RUN, "--no-job", cwd=tmp_path, env={"FAIL_IDS": "2-0"})

    assert out.returncode == 5, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == (
        "2 of 3 sources completed, 1 failed (a stage returned FailedTask): the run had no "
        "checkpoint, so nothing recorded them and a rerun processes every source again "
        "(give it a checkpoint to retry only them)")
    assert not (tmp_path / "curator-dask-jobs").exists()


def test_the_exit_code_table_lists_every_code_the_cli_defines():
    from curator_dask.cli import common

    defined = {value: name for name, value in vars(common).items()
               if name.startswith("EXIT_") and isinstance(value, int)}
    page = (REPO_ROOT / "docs" / "guarantees.md").read_text()
    table = page.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| (\d+) \| `(EXIT_\w+)` \|", table, re.M))
    assert {int(code): name for code, name in rows.items()} == defined
    assert common.EXIT_PARTIAL == 5
