"""After Ctrl+C, the job tools count what the checkpoint recorded (issue 32, item 5).

Ctrl+C reaches the driver while chains are still finishing: a chain that wrote its output and
was recorded complete on the scheduler, but whose result the driver had not collected yet, is
complete for the resume (it skips it) and for the interrupt line (it reads the checkpoint).
``status``, ``status --json``, the job summary and ``report`` must say the same, and a resume's
attempts must add up to every source.
"""

from __future__ import annotations

import json
import os
import re
import signal

import pytest

from curator_dask.jobs.events import read_events
from curator_dask.sample_data import generate_jsonl
from tests.helpers import CLI, cli, completed_ids, in_terminal, slow_pipeline

pytestmark = pytest.mark.slow

FILES = 16
LINE = re.compile(r"^.*Interrupted \(Ctrl\+C\): (\d+) of 16 source partitions recorded as "
                  r"complete(?:; up to (\d+) more were cut short)?", re.M)


def outputs(root) -> int:
    folder = root / "output"
    return len(list(folder.glob("*.jsonl"))) if folder.is_dir() else 0


def report_tables(root, job: str) -> dict[str, list[dict[str, str]]]:
    """The rows of the report's Attempts and Sources tables (cell texts by column)."""
    from tests.jobs.test_report_attempts import parse, table

    out = cli("report", job, cwd=root, timeout=120)
    assert out.returncode == 0, out.stderr
    sections = parse((root / "curator-dask-jobs" / job / "report.html").read_text())
    return {title: table(sections, title) for title in ("Attempts", "Sources")}


def test_status_and_report_count_what_the_checkpoint_recorded_after_ctrl_c(tmp_path):
    (tmp_path / "pipe.py").write_text(slow_pipeline(1.0))
    generate_jsonl(str(tmp_path / "input"), files=FILES, docs_per_file=2, seed=32)
    run = [*CLI, "run", "pipe.py:build", "--workers", "4"]

    status, text = in_terminal([*run, "--job-id", "j5"], tmp_path,
                               when=lambda: outputs(tmp_path) >= 5,
                               then=lambda pid: os.killpg(pid, signal.SIGINT))
    assert os.waitstatus_to_exitcode(status) == 130, text
    stated = LINE.findall(text)
    assert len(stated) == 1, text
    recorded, cut = int(stated[0][0]), int(stated[0][1] or 0)
    checkpoint = tmp_path / "curator-dask-jobs" / "j5" / "checkpoint"
    assert len(completed_ids(checkpoint)) == recorded, text
    assert 1 <= recorded < FILES

    events = read_events(str(tmp_path / "curator-dask-jobs" / "j5" / "events.jsonl"))
    assert [e.get("completed") for e in events if e["type"] == "job_stopped"] == [recorded]
    shown = cli("status", "j5", "--json", cwd=tmp_path, timeout=60)
    assert shown.returncode == 0, shown.stderr
    sources = json.loads(shown.stdout)["sources"]
    assert sources["completed"] == recorded, (sources, text)
    line = cli("status", "j5", cwd=tmp_path, timeout=60).stdout
    cancelled = f", {cut} cancelled (pending)" if cut else ", 0 in flight"
    assert f"{recorded}/{FILES} done, 0 failed{cancelled}" in line, (line, text)
    first = report_tables(tmp_path, "j5")
    assert [(r["outcome"], r["sources completed"]) for r in first["Attempts"]] == [
        ("stopped", str(recorded))]
    assert [(r["attempt"], r["completed"], r["cancelled (pending)"]) for r in first["Sources"]
            ] == [("1 of 1", str(recorded), str(cut))]

    resumed = cli(*run[3:], "--resume", "j5", "--no-progress", cwd=tmp_path, timeout=180)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"{FILES} source partitions: {recorded} already complete (skipped)" in resumed.stderr
    both = report_tables(tmp_path, "j5")["Attempts"]
    assert [r["sources skipped"] for r in both] == ["0", str(recorded)]
    assert sum(int(r["sources completed"]) for r in both) == FILES, both
