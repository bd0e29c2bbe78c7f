"""``ArrayShardRun`` as an observer of its run (issue 23): the run decides once whether a
``FailedTask`` was seen (``RunEnd.failed_task_seen``); the shard leaves NeMo's empty marker
whenever one was, however the run ended, and its completion manifest only after a run that
raised nothing and saw none. The observer's rules without a cluster, then a real run on a
LocalCluster that saw a ``FailedTask`` and then failed.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from curator_dask import Pipeline
from curator_dask.backends.base import RunEnd
from curator_dask.resumability.client import CheckpointError
from curator_dask.sample_data import generate_jsonl
from curator_dask.slurm.array import SlurmArrayConfig
from curator_dask.slurm.completion import read_completion_manifests
from curator_dask.slurm.run import ArrayShardRun
from curator_dask.slurm.run_config import run_config_path
from curator_dask.stages.text.io.reader import JsonlReader
from curator_dask.stages.text.io.writer import JsonlWriter
from tests.resumability.resume_test_stages import FailSoftOn, SendMalformedDeltas

ENV = {"SLURM_JOB_ID": "5", "SLURM_ARRAY_TASK_ID": "1"}


def manifests(ckpt: str) -> list[int]:
    return sorted(r.payload["shard_index"] for r in read_completion_manifests(
        ckpt, namespace="slurm_array", completion_dirname=".slurm_array_completion"))


def marker(ckpt: str, shard: int = 1) -> Path:
    return (Path(ckpt) / ".nemo_curator_metadata" / ".failed_tasks" / "slurm_job_5"
            / "array_task_1" / "restart_0" / f"shard_{shard}" / "failed_tasks.json")


@pytest.mark.parametrize(("end", "marked", "manifest"), [
    (RunEnd(result=object()), False, True),
    (RunEnd(result=object(), failed_task_seen=True), True, False),
    (RunEnd(error=RuntimeError("boom"), failed_task_seen=True), True, False),
    (RunEnd(error=RuntimeError("boom")), False, False),
], ids=["completed", "completed-with-failed-task", "failed-with-failed-task", "failed"])
def test_marker_whenever_a_failed_task_was_seen_manifest_only_after_a_clean_run(
        tmp_path, end, marked, manifest):
    ckpt = str(tmp_path / "ckpt")
    shard = ArrayShardRun(SlurmArrayConfig(1, 2), ckpt, environ=ENV)
    assert run_config_path(ckpt).is_file()  # run.json before the run
    shard.run_finished(end)
    assert marker(ckpt).is_file() is marked
    assert manifests(ckpt) == ([1] if manifest else [])


def test_the_plain_call_marks_nemos_folder_and_writes_no_run_json(tmp_path):
    """NeMo's own ``Pipeline.run`` writes run.json and the manifest itself."""
    ckpt, nemo = str(tmp_path / "ckpt"), tmp_path / "nemo-failed"
    shard = ArrayShardRun(SlurmArrayConfig(1, 2), ckpt, environ=ENV,
                          failed_task_dir=str(nemo), manifest=False)
    shard.run_finished(RunEnd(result=object(), failed_task_seen=True))
    assert (nemo / "failed_tasks.json").read_bytes() == b""
    assert not run_config_path(ckpt).exists() and not marker(ckpt).exists()


@pytest.mark.slow
def test_a_shard_that_saw_a_failed_task_and_then_failed_leaves_the_marker(
        executor, tmp_path, monkeypatch, caplog):
    """Every chain ends; one source saw a ``FailedTask``; the run then fails (the completion
    plugin heard malformed deltas): the marker is written, no manifest (before issue 23 the
    marker came only after a run that raised nothing)."""
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    generate_jsonl(str(tmp_path / "in"), files=3, docs_per_file=2, seed=5)
    ckpt = str(tmp_path / "ckpt")
    pipeline = (Pipeline(name="shard")
                .add_stage(JsonlReader(file_paths=str(tmp_path / "in"), fields=["id", "text"]))
                .add_stage(FailSoftOn(bad_ids=("0-0",)))
                .add_stage(SendMalformedDeltas())
                .add_stage(JsonlWriter(path=str(tmp_path / "out"))))
    with caplog.at_level(logging.INFO, logger="curator_dask"), pytest.raises(
            CheckpointError, match="the completion plugin failed"):
        pipeline.run(executor=executor, checkpoint_path=ckpt,
                     slurm_array=SlurmArrayConfig(shard_index=1, total_shards=1,
                                                  minimum_shard_index=1))
    assert marker(ckpt).is_file() and marker(ckpt).stat().st_size == 0
    assert manifests(ckpt) == []
    assert "Wrote Slurm array completion manifest" not in caplog.text
