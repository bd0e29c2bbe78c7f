"""SLURM job arrays from NeMo Curator's own ``Pipeline.run`` on the Dask executor: sources
filtered once on the driver by ``sha256(task_id)``, NeMo's ``run.json``, completion manifest and
failed-task marker as with its own backends, and ``slurm retry`` finding the failed shard."""

from __future__ import annotations

import json

import pytest

from tests.helpers import cli
from tests.nemo.nemo_pipelines import int_pipeline

# shards of the sources 0_0 .. 0_7 with 3 shards (NeMo Curator 1.4's own vector)
SHARDS = {0: [0, 3], 1: [2, 7], 2: [1, 4, 5, 6]}


@pytest.fixture
def array_env(monkeypatch, tmp_path):
    def shard(index: int, total: int = 3, attempt: int = 0) -> None:
        monkeypatch.setenv("NEMO_CURATOR_SLURM_ARRAY_ENABLED", "1")
        monkeypatch.setenv("NEMO_CURATOR_SLURM_ARRAY_SHARD_INDEX", str(index))
        monkeypatch.setenv("NEMO_CURATOR_SLURM_ARRAY_TOTAL_SHARDS", str(total))
        monkeypatch.setenv("NEMO_CURATOR_SLURM_ARRAY_MINIMUM_SHARD_INDEX", "0")
        # NeMo's Pipeline.run reuses a set failed-task folder; one per shard attempt here.
        monkeypatch.setenv("NEMO_CURATOR_FAILED_TASKS_DIR",
                           str(tmp_path / f"failed-{index}-{attempt}"))

    for name in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_PROCID", "SLURM_NODEID"):
        monkeypatch.delenv(name, raising=False)
    return shard


def test_each_shard_processes_its_sources_once_without_a_checkpoint(array_env, executor):
    for index, expected in SHARDS.items():
        array_env(index)
        assert sorted(t.data for t in int_pipeline(8).run(executor=executor)) == expected


def test_manifests_markers_and_retry_as_with_nemos_backends(array_env, executor, tmp_path):
    ck = tmp_path / "ck"
    for index in SHARDS:
        array_env(index)
        out = int_pipeline(8, fail=(2,)).run(executor=executor, checkpoint_path=str(ck))
        assert sorted(t.data for t in out) == [d for d in SHARDS[index] if d != 2]
    meta = ck / ".nemo_curator_metadata"
    run_json = meta / ".slurm_array_completion" / "run.json"
    assert run_json.read_text() == '{"minimum_shard_index":0,"total_shards":3}\n'
    manifests = sorted(p.name for p in run_json.parent.glob("completed_slurm_array_*.json"))
    assert len(manifests) == 2  # shards 0 and 2; shard 1 saw a FailedTask
    payloads = [json.loads((run_json.parent / m).read_text()) for m in manifests]
    assert sorted(p["shard_index"] for p in payloads) == [0, 2]
    assert (tmp_path / "failed-1-0" / "failed_tasks.json").read_bytes() == b""
    assert not (tmp_path / "failed-0-0").exists() and not (tmp_path / "failed-2-0").exists()
    retry = cli("slurm", "retry", "--checkpoint-path", str(ck))
    assert retry.returncode == 0 and retry.stdout == "1\n", retry.stderr
    # the retried shard (a new attempt) succeeds; every shard is complete, retry prints nothing
    array_env(1, attempt=1)
    assert [t.data for t in int_pipeline(8).run(executor=executor,
                                                 checkpoint_path=str(ck))] == [2]
    assert cli("slurm", "retry", "--checkpoint-path", str(ck)).stdout == ""
