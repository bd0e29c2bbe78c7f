"""Array shards run through Pipeline.run on a real LocalCluster (SLURM itself not needed)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from curator_dask import Pipeline
from curator_dask.sample_data import generate_jsonl
from curator_dask.slurm.array import SlurmArrayConfig, shard_for_task
from curator_dask.slurm.completion import read_completion_manifests
from curator_dask.slurm.retry import find_slurm_array_retries
from curator_dask.slurm.run_config import run_config_path
from curator_dask.stages.text.io.reader import JsonlReader
from curator_dask.stages.text.io.writer import JsonlWriter
from tests.resumability.resume_test_stages import FailSoftOn

pytestmark = pytest.mark.slow


def make(data: Path, out: str, bad=()) -> Pipeline:
    return (Pipeline(name="array")
            .add_stage(JsonlReader(file_paths=str(data / "in"), fields=["id", "text"]))
            .add_stage(FailSoftOn(bad_ids=bad))
            .add_stage(JsonlWriter(path=str(data / out))))


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_four_shards_failure_retry_and_union(executor, tmp_path, caplog, monkeypatch):
    # A stale value (as NeMo Curator leaves behind) must not make later shards look failed.
    monkeypatch.setenv("NEMO_CURATOR_FAILED_TASKS_DIR", str(tmp_path / "stale"))
    (tmp_path / "stale").mkdir()
    (tmp_path / "stale" / "failed_tasks.json").touch()
    generate_jsonl(str(tmp_path / "in"), files=12, docs_per_file=3, seed=4)
    ckpt = str(tmp_path / "ckpt")
    single = make(tmp_path, "single").run(executor=executor, slurm_array=False)
    assert len(single) == 12
    ids = sorted("_".join(t.task_id.split("_")[:2]) for t in single)  # the source ids "0_<hash>"
    by_shard = {i: [s for s in ids if shard_for_task(s, 4) == i] for i in range(4)}
    assert sum(map(len, by_shard.values())) == 12

    failing_shard = next(i for i in range(4) if by_shard[i])
    results = {}
    for i in range(4):
        # the failing shard's partitions all fail (FailedTask), the others succeed
        bad = tuple(f"{n}-0" for n in range(12)) if i == failing_shard else ()
        monkeypatch.setenv("SLURM_JOB_ID", "777")
        monkeypatch.setenv("SLURM_ARRAY_TASK_ID", str(i))
        with caplog.at_level(logging.INFO, logger="curator_dask"):
            results[i] = make(tmp_path, "out", bad).run(
                executor=executor, checkpoint_path=ckpt,
                slurm_array=SlurmArrayConfig(shard_index=i, total_shards=4))
        assert results[i].num_sources == len(by_shard[i])
    assert run_config_path(ckpt).read_text() == '{"minimum_shard_index":0,"total_shards":4}\n'
    done = {r.payload["shard_index"] for r in read_completion_manifests(
        ckpt, namespace="slurm_array", completion_dirname=".slurm_array_completion")}
    assert done == set(range(4)) - {failing_shard}
    assert "Pipeline completed without raising, but a FailedTask manifest exists" in caplog.text
    marker = (Path(ckpt) / ".nemo_curator_metadata" / ".failed_tasks" / "slurm_job_777"
              / f"array_task_{failing_shard}" / "restart_0" / f"shard_{failing_shard}"
              / "failed_tasks.json")
    assert marker.is_file() and marker.stat().st_size == 0
    plan = find_slurm_array_retries(ckpt)
    assert plan.shard_indices == (failing_shard,)

    # the retry (a new attempt: restart 1) completes the shard
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", str(failing_shard))
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    retry = make(tmp_path, "out").run(
        executor=executor, checkpoint_path=ckpt,
        slurm_array=SlurmArrayConfig(shard_index=failing_shard, total_shards=4))
    assert retry.skipped_sources == 0 and len(retry) == len(by_shard[failing_shard])
    assert find_slurm_array_retries(ckpt).shard_indices == ()
    # the union of the shards' outputs is the single run's output, byte for byte
    assert files(tmp_path / "out") == files(tmp_path / "single")


def test_mixed_layouts_on_one_checkpoint_are_refused(executor, tmp_path):
    generate_jsonl(str(tmp_path / "in"), files=2, docs_per_file=2)
    ckpt = str(tmp_path / "ckpt")
    make(tmp_path, "out").run(executor=executor, checkpoint_path=ckpt,
                              slurm_array=SlurmArrayConfig(0, 10))
    with pytest.raises(ValueError, match="use a separate checkpoint path"):
        make(tmp_path, "out").run(executor=executor, checkpoint_path=ckpt,
                                  slurm_array=SlurmArrayConfig(0, 20))


def test_array_from_environment_filters_on_the_driver(executor, tmp_path, monkeypatch):
    generate_jsonl(str(tmp_path / "in"), files=9, docs_per_file=2, seed=9)
    monkeypatch.setenv("NEMO_CURATOR_SLURM_ARRAY_SHARD_INDEX", "1")
    monkeypatch.setenv("NEMO_CURATOR_SLURM_ARRAY_TOTAL_SHARDS", "3")
    shard1 = make(tmp_path, "out").run(executor=executor)
    monkeypatch.setenv("NEMO_CURATOR_SLURM_ARRAY_ENABLED", "0")
    everything = make(tmp_path, "all").run(executor=executor)
    assert len(everything) == 9
    expected = [t for t in everything if shard_for_task("_".join(t.task_id.split("_")[:2]), 3) == 1]
    assert sorted(t.task_id for t in shard1) == sorted(t.task_id for t in expected)
