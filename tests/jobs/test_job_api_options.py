"""The job API's options and refusals without a run (issue 21, item 6): the new options of
`stop` and `status` with their help, the usage errors (exit 2 in the CLI), job lookup by id or
folder, the seed's event names, and partitions read from a log older than ``source_start``.

The API on real jobs is tested where those jobs already run: tests/jobs/test_job_runs.py (the
event types), test_report_and_status.py (``show_job_progress``), test_status_listing.py (a
running job listed, watched and stopped with ``stop_job``), test_stale_stop.py (a dead driver).
"""

from __future__ import annotations

import pytest

from curator_dask.cli.common import UsageError
from curator_dask.cli.jobs import cmd_status, cmd_stop
from curator_dask.cli.main import build_parser


def subparser(name: str):
    return next(a for a in build_parser()._actions if a.dest == "command").choices[name]


def parse(*argv: str):
    return build_parser().parse_args(list(argv))


def test_help_names_the_new_options():
    stop = " ".join(subparser("stop").format_help().split())
    assert "--list list the running jobs" in stop and "[JOB]" in stop, stop
    status = " ".join(subparser("status").format_help().split())
    assert "--interval S seconds between redraws (default 2); implies --watch" in status, status
    assert "--detailed with JOB: also per stage" in status and "per partition" in status, status


@pytest.mark.parametrize(("argv", "message"), [
    (("stop",), "give the JOB to stop, or --list"),
    (("stop", "j1", "--list"), "--list lists the running jobs: give it without JOB ('j1')"),
    (("status", "j1", "--interval", "0"), "--interval 0: give a number of seconds above 0"),
    (("status", "--interval", "-1"), "--interval -1: give a number of seconds above 0"),
    (("status", "--detailed"), "--detailed shows one job: give JOB"),
    (("stop", "nope"), "no job 'nope' in "),
    (("status", "./not-a-job"), "not-a-job is not a job folder"),
])
def test_refusals_are_usage_errors(tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "not-a-job").mkdir()
    args = parse(*argv, "--work-dir", str(tmp_path))
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        (cmd_stop if argv[0] == "stop" else cmd_status)(args)


def test_a_job_is_found_by_id_or_folder(tmp_path):
    from curator_dask.jobs import JobUtils
    from curator_dask.jobs.index import JobNotFoundError
    from curator_dask.jobs.job import JobDirectory

    job = JobDirectory(str(tmp_path / "work"), "j1")
    job.create({}, {})
    assert JobUtils("j1", work_dir=tmp_path / "work").job_dir == job.path
    found = JobUtils(tmp_path / "work" / "j1")  # a folder: no work dir needed
    assert (found.job_id, found.job_dir) == ("j1", job.path)
    assert found.load_job_summary() is None and found.load_event_logs() == []  # not started
    with pytest.raises(JobNotFoundError, match="is not a job folder"):
        JobUtils(tmp_path / "work")
    # an id no test makes: the per-user job index (one per test process) holds the jobs of
    # the tests that ran before this one in the same process
    with pytest.raises(FileNotFoundError, match="no job 'never-made' in "):  # JobNotFoundError
        JobUtils("never-made", work_dir=tmp_path / "work")


def test_seed_event_names_map_onto_the_logs_types():
    from curator_dask.jobs.events import EVENT_TYPES, SEED_EVENT_TYPES, event_types_for

    assert set(SEED_EVENT_TYPES) == {
        "job_start", "job_complete", "job_failed", "partition_start", "partition_complete",
        "partition_failed", "op_start", "op_complete", "op_failed", "checkpoint_save",
        "checkpoint_load"}
    assert all(set(types) <= EVENT_TYPES for types in SEED_EVENT_TYPES.values())
    assert event_types_for("op_complete") == {"stage_complete"}
    assert event_types_for(["partition_failed", "worker_lost"]) == {
        "source_failed", "stage_failed", "worker_lost"}
    with pytest.raises(ValueError, match="unknown event type 'partition_done'"):
        event_types_for(["partition_done"])


def test_partitions_of_a_log_without_source_start():
    """A log written before ``source_start`` existed: partitions appear when they end; one
    still open when the attempt ended is ``not finished``."""
    from curator_dask.jobs.monitor import detail

    def ev(type_: str, task: str, count: int, ts: str) -> dict:
        return {"run_id": "r1", "type": type_, "scope": "task", "task_id": task, "count": count,
                "ts": ts}

    events = [ev("source_complete", "a+1", 2, "t1"), ev("source_failed", "b", 1, "t2"),
              ev("source_start", "c", 1, "t3"),
              {"run_id": "r1", "type": "source_start", "scope": "window", "count": 7}]
    got = detail({"run_id": "r1", "state": "stopped"}, events)
    assert [(p["task_id"], p["state"], p["sources"]) for p in got["partitions"]] == [
        ("a+1", "completed", 2), ("b", "failed", 1), ("c", "not finished", 1)]
    assert got["partitions_unlisted"] == 7 and got["attempts"] == 1
    running = detail({"run_id": "r1", "state": "running"}, events)["partitions"][-1]
    assert running["state"] == "running"
