"""SIGUSR1 / SIGTERM to `python -m curator_dask run`: drain, flush, exit 3, resume later."""

from __future__ import annotations

import os
import re
import signal
import textwrap

import pytest

from curator_dask.sample_data import generate_jsonl
from tests.helpers import cli, completed_ids, poll_for, slow_pipeline, start_cli

pytestmark = pytest.mark.slow

PIPELINE = slow_pipeline(0.7, "drain")


def start_job(tmp_path, pipeline: str, job_id: str, *, files: int, seed: int):
    """Start `run pipe.py:build` as job ``job_id`` on generated input; returns the process and
    the job summary's path."""
    (tmp_path / "pipe.py").write_text(pipeline)
    generate_jsonl(str(tmp_path / "input"), files=files, docs_per_file=2, seed=seed)
    proc = start_cli("run", "pipe.py:build", "--workers", "1", "--no-progress", "--job-id",
                     job_id, cwd=tmp_path)
    return proc, tmp_path / "curator-dask-jobs" / job_id / "job_summary.json"


def summary_with_sources(path) -> dict | None:
    """The job summary once it counts the sources (the run has planned), else None."""
    import json

    if path.exists() and (summary := json.loads(path.read_text())).get("sources"):
        return summary
    return None


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGTERM], ids=["usr1", "term"])
def test_signal_drains_then_resume_skips_completed(tmp_path, sig):
    (tmp_path / "pipe.py").write_text(PIPELINE)
    generate_jsonl(str(tmp_path / "input"), files=10, docs_per_file=2, seed=1)
    cmd = ["run", "pipe.py:build", "--workers", "1", "--checkpoint-path", "ckpt", "--no-progress"]
    proc = start_cli(*cmd, cwd=tmp_path)
    poll_for(lambda: list((tmp_path / "output").glob("*.jsonl")), 60, "no output appeared",
             on_timeout=proc.kill)
    proc.send_signal(sig)  # to the driver only, as SLURM's --signal=B:USR1 does
    stdout, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 3, stderr[-2000:]
    assert f"received {sig.name}" in stderr
    written = len(list((tmp_path / "output").glob("*.jsonl")))
    done = completed_ids(tmp_path / "ckpt")
    # everything that was running finished and was recorded; nothing new was started
    assert len(done) == written and 1 <= written < 10
    # the message counts what really completed (recorded), and says how to go on
    stated = re.search(r"stopped after (\d+) of 10 source partitions recorded as complete",
                       stderr)
    assert stated and int(stated.group(1)) == written, stderr[-2000:]
    assert "cut short" not in stderr  # the drain let every running partition finish
    assert "run it again with the same checkpoint" in stderr

    again = cli(*cmd, cwd=tmp_path, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    m = re.search(r"10 source partitions: (\d+) already complete \(skipped\), (\d+) to process",
                  again.stderr)
    assert m and int(m.group(1)) == written and int(m.group(2)) == 10 - written
    assert len(completed_ids(tmp_path / "ckpt")) == 10


def test_status_reflects_a_running_then_stopped_job_and_resume_finishes(tmp_path):
    import json

    from curator_dask.jobs.events import read_events

    (tmp_path / "pipe.py").write_text(PIPELINE)
    generate_jsonl(str(tmp_path / "input"), files=8, docs_per_file=2, seed=2)
    proc = start_cli("run", "pipe.py:build", "--workers", "1", "--no-progress", "--job-id",
                     "slow-job", cwd=tmp_path)

    def status_with_sources() -> dict | None:
        out = cli("status", "slow-job", "--json", cwd=tmp_path)
        if out.returncode == 0 and (summary := json.loads(out.stdout)).get("sources"):
            return summary
        return None

    summary = poll_for(status_with_sources, 60, "`status slow-job --json` never counted sources",
                       interval=0.2, on_timeout=proc.kill)
    assert summary["state"] == "running" and summary["pid"] == proc.pid
    listing = cli("status", cwd=tmp_path)
    assert "slow-job" in listing.stdout and "running" in listing.stdout
    proc.send_signal(signal.SIGUSR1)
    proc.communicate(timeout=90)
    assert proc.returncode == 3
    stopped = json.loads(cli("status", "slow-job", "--json", cwd=tmp_path).stdout)
    assert stopped["state"] == "stopped"
    done = cli("run", "pipe.py:build", "--workers", "1", "--no-progress", "--resume", "slow-job",
               cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    events = read_events(str(tmp_path / "curator-dask-jobs" / "slow-job" / "events.jsonl"))
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    types = [e["type"] for e in events]
    assert "job_stopped" in types and types[-1] == "job_complete" and "run_resume" in types
    assert len(list((tmp_path / "output").glob("*.jsonl"))) == 8


def test_stop_command_is_cooperative_and_checks_the_process(tmp_path):
    import json

    proc, summary_path = start_job(tmp_path, PIPELINE, "stop-me", files=10, seed=6)
    poll_for(lambda: summary_with_sources(summary_path), 60, "the job summary never counted "
             "sources", interval=0.1, on_timeout=proc.kill, ignore=(json.JSONDecodeError,))
    stop = cli("stop", "stop-me", "--timeout", "60", cwd=tmp_path, timeout=90)
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout.strip().endswith("job stop-me: stopped")
    proc.communicate(timeout=60)
    assert proc.returncode == 3
    done = completed_ids(tmp_path / "curator-dask-jobs" / "stop-me" / "checkpoint")
    assert 1 <= len(done) < 10
    again = cli("stop", "stop-me", cwd=tmp_path)
    assert "is not running (state: stopped)" in again.stdout
    # --force never signals a process that is not the recorded driver
    summary = json.loads(summary_path.read_text())
    summary.update(state="running", pid=os.getpid(), process_start=1.0)
    summary_path.write_text(json.dumps(summary))
    forced = cli("stop", "stop-me", "--force", "--timeout", "0.5", cwd=tmp_path, timeout=60)
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


def processing_run_tasks(summary: dict) -> int:
    """How many of the job's run's tasks its scheduler has in state ``processing``."""
    from distributed import Client

    token = summary["run_key_token"]

    def count(dask_scheduler=None) -> int:
        from curator_dask.utils.run_keys import is_run_key

        return sum(1 for key, ts in dask_scheduler.tasks.items()
                   if is_run_key(key, token) and ts.state == "processing")

    with Client(summary["scheduler"], timeout=10) as client:
        return client.run_on_scheduler(count)


def test_stop_force_cancels_through_the_scheduler_without_signals(tmp_path):
    import json

    proc, summary_path = start_job(tmp_path, BLOCKING, "stuck", files=3, seed=8)
    poll_for(lambda: list((tmp_path / "output").glob("*.jsonl")), 60, "no output appeared",
             interval=0.1, on_timeout=proc.kill)
    summary = json.loads(summary_path.read_text())
    assert summary["scheduler"].startswith("tcp://127.0.0.1:") and summary["run_key_token"]
    # the stuck sources' tasks run on the job's cluster: what `stop --force` must cancel
    poll_for(lambda: processing_run_tasks(summary), 60, "no task of the run is processing",
             interval=0.1, on_timeout=proc.kill)
    stop = cli("stop", "stuck", "--force", "--timeout", "60", cwd=tmp_path, timeout=120)
    assert stop.returncode == 0, stop.stderr
    assert re.search(r"cancelled [1-9]\d* Dask tasks of the run", stop.stdout)
    assert "SIGTERM" not in stop.stdout and stop.stdout.strip().endswith("job stuck: stopped")
    proc.communicate(timeout=60)
    assert proc.returncode == 3
    assert json.loads(summary_path.read_text())["state"] == "stopped"


STARTS = textwrap.dedent("""
    import os, time
    from dataclasses import dataclass
    from curator_dask import JsonlReader, JsonlWriter, Pipeline, ProcessingStage

    @dataclass
    class RecordsStarts(ProcessingStage):
        name: str = "records_starts"
        def process(self, task):
            with open(os.path.abspath("starts.log"), "a") as f:
                f.write("start\\n")
            time.sleep(2.0)
            return task

    def build():
        return (Pipeline(name="starts").add_stage(JsonlReader(file_paths="input"))
                .add_stage(RecordsStarts()).add_stage(JsonlWriter(path="output")))
""")


def test_a_stop_cancels_queued_sources_at_once(tmp_path):
    """One worker thread, two chains in flight: one runs, one waits. After SIGUSR1 the one
    waiting never starts (the stage logs each start in the log the test marks when it
    signals: order, not time), and the message counts what completed."""
    (tmp_path / "pipe.py").write_text(STARTS)
    generate_jsonl(str(tmp_path / "input"), files=6, docs_per_file=2, seed=9)
    starts = tmp_path / "starts.log"
    proc = start_cli("run", "pipe.py:build", "--workers", "1", "--threads-per-worker", "1",
                     "--no-progress", "--no-fuse", "--checkpoint-path", "ckpt", cwd=tmp_path)
    poll_for(starts.exists, 60, "no source started", on_timeout=proc.kill)
    with open(starts, "a") as f:
        f.write("signal\n")
    proc.send_signal(signal.SIGUSR1)
    _, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 3, stderr[-2000:]
    log = starts.read_text().split()
    assert log.count("signal") == 1 and log[-1] == "signal", log  # nothing started after it
    started = log.count("start")
    assert 1 <= started < 6, log
    assert "queued tasks cancelled" in stderr
    done = completed_ids(tmp_path / "ckpt")
    stated = re.search(r"stopped after (\d+) of 6 source partitions recorded as complete",
                       stderr)
    assert stated and int(stated.group(1)) == len(done) == started, stderr[-2000:]
