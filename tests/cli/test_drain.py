"""SIGUSR1 / SIGTERM to `python -m curator_dask run`: drain, flush, exit 3, resume later."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from curator_dask.resumability.store import METADATA_DIRNAME, read_completed
from curator_dask.sample_data import generate_jsonl

pytestmark = pytest.mark.slow

PIPELINE = textwrap.dedent("""
    import time
    from dataclasses import dataclass
    from curator_dask import JsonlReader, JsonlWriter, Pipeline, ProcessingStage

    @dataclass
    class Slow(ProcessingStage):
        name: str = "slow"
        def process(self, task):
            time.sleep(0.7)
            return task

    def build():
        return (Pipeline(name="drain").add_stage(JsonlReader(file_paths="input"))
                .add_stage(Slow()).add_stage(JsonlWriter(path="output")))
""")


def start_job(tmp_path, pipeline: str, job_id: str, *, files: int, seed: int):
    """Start `run pipe.py:build` as job ``job_id`` on generated input; returns the process and
    the job summary's path."""
    (tmp_path / "pipe.py").write_text(pipeline)
    generate_jsonl(str(tmp_path / "input"), files=files, docs_per_file=2, seed=seed)
    proc = subprocess.Popen([sys.executable, "-m", "curator_dask", "run", "pipe.py:build",
                             "--workers", "1", "--no-progress", "--job-id", job_id],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    return proc, tmp_path / "curator-dask-jobs" / job_id / "job_summary.json"


def completed(ckpt) -> set[str]:
    ids: set[str] = set()
    for f in (ckpt / METADATA_DIRNAME).glob("*.mdb"):
        ids |= read_completed(str(f))
    return ids


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGTERM], ids=["usr1", "term"])
def test_signal_drains_then_resume_skips_completed(tmp_path, sig):
    (tmp_path / "pipe.py").write_text(PIPELINE)
    generate_jsonl(str(tmp_path / "input"), files=10, docs_per_file=2, seed=1)
    cmd = [sys.executable, "-m", "curator_dask", "run", "pipe.py:build", "--workers", "1",
           "--checkpoint-path", "ckpt", "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out = tmp_path / "output"
        if out.exists() and len(list(out.glob("*.jsonl"))) >= 1:
            break
        time.sleep(0.05)
    proc.send_signal(sig)  # to the driver only, as SLURM's --signal=B:USR1 does
    stdout, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 3, stderr[-2000:]
    assert "stopped after" in stderr and "the rest stay pending" in stderr
    assert f"received {sig.name}" in stderr
    written = len(list((tmp_path / "output").glob("*.jsonl")))
    done = completed(tmp_path / "ckpt")
    # everything that was running finished and was recorded; nothing new was started
    assert len(done) == written and 1 <= written < 10

    again = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    m = re.search(r"10 source partitions: (\d+) already complete \(skipped\), (\d+) to process",
                  again.stderr)
    assert m and int(m.group(1)) == written and int(m.group(2)) == 10 - written
    assert len(completed(tmp_path / "ckpt")) == 10


def test_status_reflects_a_running_then_stopped_job_and_resume_finishes(tmp_path):
    import json

    from curator_dask.jobs.events import read_events

    (tmp_path / "pipe.py").write_text(PIPELINE)
    generate_jsonl(str(tmp_path / "input"), files=8, docs_per_file=2, seed=2)
    base = [sys.executable, "-m", "curator_dask"]
    proc = subprocess.Popen([*base, "run", "pipe.py:build", "--workers", "1", "--no-progress",
                             "--job-id", "slow-job"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    summary = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out = subprocess.run([*base, "status", "slow-job", "--json"], cwd=tmp_path,
                             capture_output=True, text=True)
        if out.returncode == 0:
            summary = json.loads(out.stdout)
            if summary.get("sources"):
                break
        time.sleep(0.2)
    assert summary["state"] == "running" and summary["pid"] == proc.pid
    listing = subprocess.run([*base, "status"], cwd=tmp_path, capture_output=True, text=True)
    assert "slow-job" in listing.stdout and "running" in listing.stdout
    proc.send_signal(signal.SIGUSR1)
    proc.communicate(timeout=90)
    assert proc.returncode == 3
    stopped = json.loads(subprocess.run([*base, "status", "slow-job", "--json"], cwd=tmp_path,
                                        capture_output=True, text=True).stdout)
    assert stopped["state"] == "stopped"
    done = subprocess.run([*base, "run", "pipe.py:build", "--workers", "1", "--no-progress",
                           "--resume", "slow-job"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    events = read_events(str(tmp_path / "curator-dask-jobs" / "slow-job" / "events.jsonl"))
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    types = [e["type"] for e in events]
    assert "job_stopped" in types and types[-1] == "job_complete" and "run_resume" in types
    assert len(list((tmp_path / "output").glob("*.jsonl"))) == 8


def test_stop_command_is_cooperative_and_checks_the_process(tmp_path):
    import json

    base = [sys.executable, "-m", "curator_dask"]
    proc, summary_path = start_job(tmp_path, PIPELINE, "stop-me", files=10, seed=6)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if summary_path.exists() and json.loads(summary_path.read_text()).get("sources"):
            break
        time.sleep(0.1)
    stop = subprocess.run([*base, "stop", "stop-me", "--timeout", "60"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=90)
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout.strip().endswith("job stop-me: stopped")
    proc.communicate(timeout=60)
    assert proc.returncode == 3
    done = completed(tmp_path / "curator-dask-jobs" / "stop-me" / "checkpoint")
    assert 1 <= len(done) < 10
    again = subprocess.run([*base, "stop", "stop-me"], cwd=tmp_path, capture_output=True,
                           text=True)
    assert "is not running (state: stopped)" in again.stdout
    # --force never signals a process that is not the recorded driver
    summary = json.loads(summary_path.read_text())
    summary.update(state="running", pid=os.getpid(), process_start=1.0)
    summary_path.write_text(json.dumps(summary))
    forced = subprocess.run([*base, "stop", "stop-me", "--force", "--timeout", "0.5"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert forced.returncode == 1 and "nothing was signalled" in forced.stderr


BLOCKING = textwrap.dedent("""
    import time
    from dataclasses import dataclass
    from curator_dask import JsonlReader, JsonlWriter, Pipeline, ProcessingStage

    @dataclass
    class Stuck(ProcessingStage):
        name: str = "stuck"
        def process(self, task):
            if task.to_pyarrow()["id"][0].as_py() != "0-0":
                time.sleep(3600)  # only a cancellation through the scheduler ends this run
            return task

    def build():
        return (Pipeline(name="stuck").add_stage(JsonlReader(file_paths="input"))
                .add_stage(Stuck()).add_stage(JsonlWriter(path="output")))
""")


def test_stop_force_cancels_through_the_scheduler_without_signals(tmp_path):
    import json

    base = [sys.executable, "-m", "curator_dask"]
    proc, summary_path = start_job(tmp_path, BLOCKING, "stuck", files=3, seed=8)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (tmp_path / "output").exists() and list((tmp_path / "output").glob("*.jsonl")):
            break
        time.sleep(0.1)
    time.sleep(0.5)
    summary = json.loads(summary_path.read_text())
    assert summary["scheduler"].startswith("tcp://127.0.0.1:") and summary["run_key_token"]
    stop = subprocess.run([*base, "stop", "stuck", "--force", "--timeout", "60"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert stop.returncode == 0, stop.stderr
    assert re.search(r"cancelled [1-9]\d* Dask tasks of the run", stop.stdout)
    assert "SIGTERM" not in stop.stdout and stop.stdout.strip().endswith("job stuck: stopped")
    proc.communicate(timeout=60)
    assert proc.returncode == 3
    assert json.loads(summary_path.read_text())["state"] == "stopped"
