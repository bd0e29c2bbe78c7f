"""Resumable runs end to end: real LocalCluster, real LMDB files, real outputs."""

from __future__ import annotations

import logging
import os
import threading

import pytest

from curator_dask import DaskExecutor, Pipeline
from curator_dask.resumability.store import METADATA_DIRNAME
from curator_dask.sample_data import generate_jsonl
from curator_dask.stages.text.io.reader import JsonlReader
from curator_dask.stages.text.io.writer import JsonlWriter
from tests.helpers import completed_ids, poll_for
from tests.resumability.resume_test_stages import (
    DropIds,
    FailSoftOn,
    KillWorkerOnce,
    MergePairs,
    Rows,
    SendMalformedDeltas,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def data(tmp_path):
    generate_jsonl(str(tmp_path / "in"), files=6, docs_per_file=4, seed=11)
    return tmp_path


def pipeline(data, *middle, out="out") -> Pipeline:
    p = Pipeline(name="resume")
    p.add_stage(JsonlReader(file_paths=str(data / "in"), fields=["id", "text"]))
    for stage in middle:
        p.add_stage(stage)
    p.add_stage(JsonlWriter(path=str(data / out)))
    return p


def test_failed_task_reruns_next_time_and_completes(executor, data):
    ckpt = str(data / "ckpt")
    first = pipeline(data, FailSoftOn(bad_ids=("2-0", "4-0"))).run(executor=executor,
                                                                   checkpoint_path=ckpt)
    assert (first.num_sources, first.skipped_sources, len(first)) == (6, 0, 4)
    assert len(first.checkpoint["failed_sources"]) == 2
    assert first.checkpoint["pending"] == 2 and len(completed_ids(ckpt)) == 4
    second = pipeline(data, FailSoftOn()).run(executor=executor, checkpoint_path=ckpt)
    assert (second.num_sources, second.skipped_sources, len(second)) == (6, 4, 2)
    assert {t._metadata["source_files"][0][-16:] for t in second} == {
        "part-00002.jsonl", "part-00004.jsonl"}
    assert len(completed_ids(ckpt)) == 6
    third = pipeline(data, FailSoftOn()).run(executor=executor, checkpoint_path=ckpt)
    assert (third.skipped_sources, len(third)) == (6, 0)
    assert len(os.listdir(data / "out")) == 6


def test_filter_completes_its_source(executor, data):
    ckpt = str(data / "ckpt")
    first = pipeline(data, DropIds(ids=("1-0", "3-0"))).run(executor=executor,
                                                           checkpoint_path=ckpt)
    assert len(first) == 4 and first.checkpoint["pending"] == 0
    assert len(completed_ids(ckpt)) == 6
    again = pipeline(data, DropIds()).run(executor=executor, checkpoint_path=ckpt)
    assert (again.skipped_sources, len(again)) == (6, 0)


def test_fanout_completes_only_when_every_child_reaches_the_sink(executor, data):
    ckpt = str(data / "ckpt")
    # one child of partition 3 fails: only that source stays pending
    first = pipeline(data, Rows(), FailSoftOn(bad_ids=("3-2",))).run(executor=executor,
                                                                     checkpoint_path=ckpt)
    assert len(first) == 6 * 4 - 1
    assert first.checkpoint["pending"] == 1 and len(completed_ids(ckpt)) == 5
    second = pipeline(data, Rows(), FailSoftOn()).run(executor=executor, checkpoint_path=ckpt)
    assert (second.skipped_sources, len(second)) == (5, 4)
    assert len(completed_ids(ckpt)) == 6


def test_m_to_k_batch_logs_the_contract_warning_and_stays_pending(executor, data, caplog):
    ckpt = str(data / "ckpt")
    with caplog.at_level(logging.WARNING, logger="curator_dask"):
        first = pipeline(data, Rows(), MergePairs()).run(executor=executor,
                                                         checkpoint_path=ckpt)
    text = ("resumability: MergePairs produced 1 outputs for 2 inputs; can't attribute "
            "sources, skipping counter update for this batch.")
    assert text in first.checkpoint["warnings"]
    assert any(text in r.getMessage() for r in caplog.records)
    assert all(t.task_id.startswith("r") for t in first)
    assert completed_ids(ckpt) == set() and first.checkpoint["pending"] == 6
    again = pipeline(data, Rows(), MergePairs()).run(executor=executor, checkpoint_path=ckpt)
    assert again.skipped_sources == 0


def test_killed_worker_task_reruns_and_counts_stay_exact(executor, data):
    ckpt = str(data / "ckpt")
    marker = str(data / "killed")
    # Unfused: the reader group's outputs live on the worker that is killed, so Dask
    # recomputes them and their deltas arrive twice; dedup must keep the counts exact. A
    # cluster of its own: a worker is killed.
    with DaskExecutor(n_workers=2, progress=False, fuse=False) as ex:
        result = pipeline(data, KillWorkerOnce(victim_id="2-0", marker=marker)).run(
            executor=ex, checkpoint_path=ckpt)
    assert os.path.exists(marker)
    assert len(result) == 6
    summary = result.checkpoint
    assert summary["completed"] == 6 and summary["pending"] == 0
    assert len(completed_ids(ckpt)) == 6
    again = pipeline(data, KillWorkerOnce()).run(executor=executor, checkpoint_path=ckpt)
    assert (again.skipped_sources, len(again)) == (6, 0)


def test_two_checkpointed_pipelines_share_one_cluster(executor, tmp_path):
    runs = {}
    for name, files in (("a", 4), ("b", 7)):
        generate_jsonl(str(tmp_path / name / "in"), files=files, docs_per_file=3, seed=files)
    errors = []

    def run(name: str) -> None:
        try:
            ex = DaskExecutor(client=executor.start(), progress=False)
            p = pipeline(tmp_path / name, Rows())
            runs[name] = p.run(executor=ex, checkpoint_path=str(tmp_path / name / "ckpt"))
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert runs["a"].checkpoint["completed"] == 4 and runs["b"].checkpoint["completed"] == 7
    assert len(completed_ids(tmp_path / "a" / "ckpt")) == 4
    assert len(completed_ids(tmp_path / "b" / "ckpt")) == 7
    assert not completed_ids(tmp_path / "a" / "ckpt") & completed_ids(tmp_path / "b" / "ckpt")


def test_non_resumable_stage_and_overwrite_are_refused(executor, data):
    stage = DropIds()
    stage.is_resumable = False
    with pytest.raises(ValueError, match="not marked resumable: \\['drop_ids'\\]"):
        pipeline(data, stage).run(executor=executor, checkpoint_path=str(data / "ckpt"))
    (data / "keep").mkdir()
    (data / "keep" / "x.jsonl").write_text("{}\n")
    p = Pipeline(name="ow").add_stage(JsonlReader(file_paths=str(data / "in")))
    p.add_stage(JsonlWriter(path=str(data / "keep"), mode="overwrite"))
    with pytest.raises(ValueError, match="overwrite.*checkpoint_path"):
        p.run(executor=executor, checkpoint_path=str(data / "ckpt"))
    assert (data / "keep" / "x.jsonl").exists()


def test_memory_checkpoint_and_output(tmp_path):
    import fsspec

    fs = fsspec.filesystem("memory")
    root = f"memory://resume-{os.getpid()}-{id(tmp_path)}"
    try:
        for i in range(3):
            fs.pipe(f"{root}/in/p{i}.jsonl", f'{{"id": "{i}", "text": "t{i}"}}\n'.encode())
        # memory:// is per process: run the cluster's workers as threads of this process (a
        # cluster of its own).
        with DaskExecutor(n_workers=1, progress=False,
                          cluster_kwargs={"processes": False}) as ex:
            def make():
                return (Pipeline(name="mem").add_stage(JsonlReader(file_paths=f"{root}/in"))
                        .add_stage(FailSoftOn(bad_ids=("1",)))
                        .add_stage(JsonlWriter(path=f"{root}/out")))
            first = make().run(executor=ex, checkpoint_path=f"{root}/ckpt")
            assert len(first) == 2
            assert fs.glob(f"{root}/ckpt/{METADATA_DIRNAME}/*.mdb")
            second = (Pipeline(name="mem").add_stage(JsonlReader(file_paths=f"{root}/in"))
                      .add_stage(JsonlWriter(path=f"{root}/out"))).run(
                executor=ex, checkpoint_path=f"{root}/ckpt")
            assert (second.skipped_sources, len(second)) == (2, 1)
        assert len(fs.ls(f"{root}/out")) == 3
    finally:
        fs.rm(root, recursive=True)


def test_plugin_errors_fail_the_run(executor, data):
    from curator_dask.resumability.client import CheckpointError

    with pytest.raises(CheckpointError, match="completion plugin failed"):
        pipeline(data, SendMalformedDeltas()).run(executor=executor,
                                                  checkpoint_path=str(data / "ckpt"))
    # the cluster is fine and the next run works
    again = pipeline(data).run(executor=executor, checkpoint_path=str(data / "ckpt2"))
    assert len(again) == 6


def test_owner_disconnect_flushes_and_unregisters(data):
    from distributed import Client, LocalCluster

    from curator_dask.resumability.client import CompletionClient
    from curator_dask.tasks import FileGroupTask

    ckpt = str(data / "ckpt")
    with LocalCluster(n_workers=0, host="127.0.0.1", dashboard_address=None) as cluster:
        observer = Client(cluster)
        owner = Client(cluster)
        completion = CompletionClient(owner, "ownerrun", ckpt)
        source = FileGroupTask(dataset_name="d", data=["x.jsonl"])
        source._set_task_id("0", source.get_deterministic_id())
        completion.open_sources([source])
        sid = source._source_id
        # the sink's -1 arrives as a worker would send it
        observer.run_on_scheduler(
            lambda dask_scheduler: dask_scheduler.log_event(
                "curator-dask-deltas",
                {"run": "ownerrun", "deltas": [[source.task_id + "_0", sid, -1]]}))
        owner.close()  # no close() call: the disconnect must flush and unregister

        def plugins(dask_scheduler):
            return list(dask_scheduler.plugins)

        poll_for(lambda: not any("ownerrun" in n for n in observer.run_on_scheduler(plugins)),
                 5, "the owner's completion plugin stayed registered")
        assert not any("ownerrun" in n for n in observer.run_on_scheduler(plugins))
        observer.close()
    assert completed_ids(ckpt) == {sid}
