"""Stage checkpoints: settings, the store on real files and memory://, and real runs.

The kill test SIGKILLs a real driver (a subprocess with its LocalCluster) while the expensive
stage runs, after the cheap stage checkpointed; the resumed run must not call the cheap stage
again for those sources (calls are counted through files the stages write) and must produce the
same files as a clean run. A truncated checkpoint file falls back to the source.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import lmdb
import pyarrow as pa
import pytest

from curator_dask import JsonlReader, JsonlWriter, Pipeline
from curator_dask.backends.dask.plan import build_plan
from curator_dask.errors import StageError
from curator_dask.jobs.events import read_events
from curator_dask.resumability.inspect import inspect_checkpoint
from curator_dask.resumability.stage_checkpoints import (
    SUBDIR,
    CheckpointUnusable,
    StageCheckpoints,
    StageCheckpointStore,
    chain_fingerprint,
)
from curator_dask.sample_data import generate_jsonl
from curator_dask.tasks import DocumentBatch, FileGroupTask
from tests.backends.dask_test_stages import FailOn
from tests.helpers import REPO_ROOT, cli_env, completed_ids, poll_for
from tests.resumability.resume_test_stages import Cheap, Expensive, FailSoftOn, Rows

# The shared `executor` fixture (tests/conftest.py) with this module's own settings, which its
# runs were written against: one worker process with two threads (not two worker processes).
EXECUTOR_KWARGS = {"n_workers": 1, "threads_per_worker": 2}


def built(tmp_path, *middle) -> Pipeline:
    p = Pipeline(name="sc").add_stage(JsonlReader(file_paths=str(tmp_path / "in")))
    for stage in middle:
        p.add_stage(stage)
    p.add_stage(JsonlWriter(path=str(tmp_path / "out")))
    p.build()
    return p


# -- settings -------------------------------------------------------------------------------
class TestSettings:
    @pytest.mark.parametrize(("kwargs", "match"), [
        ({"strategy": "every_op"}, "strategy 'every_op' is not one of disabled"),
        ({"strategy": "every_stage", "retention": "cleanup_some"},
         "retention 'cleanup_some' is not one of cleanup_on_complete, keep_all, "
         "keep_failed_only, cleanup_all"),
        ({"strategy": "every_stage", "format": "csv"},
         "format 'csv' is not one of arrow, parquet, jsonl"),
        ({"strategy": "every_stage", "compression": "snappy"},  # arrow's: none, lz4, zstd
         "compression 'snappy' does not go with format 'arrow': its compressions are none, "
         "lz4, zstd"),
        ({"strategy": "every_stage", "format": "jsonl", "compression": "zstd"},
         "compression 'zstd' does not go with format 'jsonl': its compressions are none, gzip"),
        ({"strategy": "every_stage", "format": "parquet", "compression": "lzma"},
         "compression 'lzma' does not go with format 'parquet': its compressions are snappy, "
         "gzip, zstd, none"),
        ({"strategy": "every_n_stages"}, "every_n_stages needs n"),
        ({"strategy": "every_n_stages", "n": 0}, "every_n_stages needs n"),
        ({"strategy": "every_stage", "n": 2}, "only used with strategy every_n_stages"),
        ({"strategy": "manual"}, "manual strategy needs stages"),
        ({"strategy": "every_stage", "stages": ["a"]}, "only used with strategy manual"),
    ])
    def test_unknown_and_inconsistent_values_are_rejected(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            StageCheckpoints(**kwargs)

    def test_coerce(self):
        assert StageCheckpoints.coerce(None).strategy == "disabled"
        assert StageCheckpoints.coerce("every_stage").enabled
        assert StageCheckpoints.coerce({"strategy": "every_n_stages", "n": 2}).n == 2
        with pytest.raises(ValueError, match=r"unknown stage checkpoint settings \['every'\]"):
            StageCheckpoints.coerce({"strategy": "every_stage", "every": 1})

    def test_boundaries_per_strategy(self, tmp_path):
        # file_partitioning(0, source) jsonl_reader(1) cheap(2) rows(3) expensive(4) writer(5)
        p = built(tmp_path, Cheap(), Rows(), Expensive())
        assert [s.name for s in p.stages][1:5] == ["jsonl_reader", "cheap", "rows", "expensive"]
        assert StageCheckpoints("every_stage").boundaries(p.stages) == (1, 2, 3, 4)
        assert StageCheckpoints("every_n_stages", n=2).boundaries(p.stages) == (2, 4)
        assert StageCheckpoints("manual", stages=("expensive", "cheap")).boundaries(
            p.stages) == (2, 4)
        assert StageCheckpoints().boundaries(p.stages) == ()
        with pytest.raises(ValueError, match=r"no stage named \['nope'\]"):
            StageCheckpoints("manual", stages=("nope",)).boundaries(p.stages)
        with pytest.raises(ValueError, match=r"\['jsonl_writer'\] cannot be checkpointed"):
            StageCheckpoints("manual", stages=("jsonl_writer",)).boundaries(p.stages)

    def test_a_boundary_ends_a_fusion_group(self, tmp_path):
        p = built(tmp_path, Cheap(), Rows(), Expensive())
        plan = build_plan(p.stages, fuse=True, boundaries=(2,))
        assert [g.stage_indices for g in plan.groups] == [(1, 2), (3, 4, 5)]
        assert build_plan(p.stages, fuse=True).groups[0].stage_indices == (1, 2, 3, 4, 5)

    def test_chain_fingerprint_changes_only_at_and_after_a_changed_stage(self, tmp_path):
        a = built(tmp_path, Cheap(calls_dir="x"), Expensive(calls_dir="x")).stages
        b = built(tmp_path, Cheap(calls_dir="x"), Expensive(calls_dir="y")).stages
        assert chain_fingerprint(a, 2) == chain_fingerprint(b, 2)
        assert chain_fingerprint(a, 3) != chain_fingerprint(b, 3)

    def test_needs_a_checkpoint(self, tmp_path):
        generate_jsonl(str(tmp_path / "in"), files=1, docs_per_file=1, seed=1)
        p = Pipeline(name="x").add_stage(JsonlReader(file_paths=str(tmp_path / "in")))
        p.add_stage(JsonlWriter(path=str(tmp_path / "out")))
        with pytest.raises(ValueError, match="stage_checkpoints='every_stage' needs "
                                             "checkpoint_path"):
            p.run(stage_checkpoints="every_stage")
        assert not list((tmp_path / "out").glob("*"))


# -- the store ------------------------------------------------------------------------------
def doc(task_id: str, sid: str, rows: int, pandas: bool = False) -> DocumentBatch:
    table = pa.table({"id": [f"{sid}-{i}" for i in range(rows)], "n": list(range(rows))})
    t = DocumentBatch(dataset_name="d", data=table.to_pandas() if pandas else table,
                      _metadata={"source_files": ["a.jsonl"]})
    t.task_id, t._source_id = task_id, sid
    return t


@pytest.fixture(params=["local", "memory"])
def store_url(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "ckpt")
    return f"memory://sc-{tmp_path.name}/ckpt"


class TestStore:
    def test_round_trip_keeps_ids_batches_metadata_and_deltas(self, store_url):
        # every format and compression: test_stage_checkpoint_formats.py
        store = StageCheckpointStore(store_url)
        batches = [[doc("0_s_0", "s", 3), doc("0_s_1", "s", 0)], [doc("0_s_2", "s", 2, True)]]
        deltas = [("0_s_0", "s", 2), ("0_s_2", "s", 0)]
        name, size = store.save("s", 2, "fp1", "cheap", batches, deltas, "in1")
        assert size > 0 and store.listing() == {"s": [(2, "fp1", name)]}
        loaded, got = store.load(name, "fp1", "in1")
        assert got == deltas
        assert [[t.task_id for t in b] for b in loaded] == [["0_s_0", "0_s_1"], ["0_s_2"]]
        assert loaded[0][0].data.equals(batches[0][0].data)
        assert loaded[1][0].data.equals(batches[1][0].data)  # a DataFrame again
        assert loaded[0][0]._metadata == {"source_files": ["a.jsonl"]}
        assert loaded[0][0]._source_id == "s"

    def test_non_tabular_tasks_and_empty_outputs(self, store_url):
        store = StageCheckpointStore(store_url)
        group = FileGroupTask(dataset_name="d", data=["x.jsonl", "y.jsonl"])
        group.task_id, group._source_id = "0_s", "s"
        name, _ = store.save("s", 1, "fp", "split", [[group]], [], None)
        loaded, _ = store.load(name, "fp", None)
        assert loaded[0][0].data == ["x.jsonl", "y.jsonl"]
        empty, _ = store.save("t", 1, "fp", "filter", [], [("0_t_0", "t", -1)], None)
        assert store.load(empty, "fp", None) == ([], [("0_t_0", "t", -1)])

    def test_unusable_entries_say_why(self, tmp_path):
        store = StageCheckpointStore(str(tmp_path / "ckpt"))
        name, _ = store.save("s", 2, "fp1", "cheap", [[doc("0_s_0", "s", 50)]], [], "in1")
        with pytest.raises(CheckpointUnusable, match="different stage chain"):
            store.load(name, "fp2", "in1")
        with pytest.raises(CheckpointUnusable, match="input files changed"):
            store.load(name, "fp1", "in2")
        entry = tmp_path / "ckpt" / SUBDIR / name
        part = entry / "part-00000.arrow"
        data = part.read_bytes()
        part.write_bytes(data[: len(data) // 2])
        with pytest.raises(CheckpointUnusable, match=r"part-00000.arrow has \d+ bytes, the "
                                                     r"manifest says \d+"):
            store.load(name, "fp1", "in1")
        (entry / "manifest.json").unlink()
        with pytest.raises(CheckpointUnusable, match="no manifest"):
            store.load(name, "fp1", "in1")

    def test_delete(self, store_url):
        store = StageCheckpointStore(store_url)
        names = [store.save(s, 1, "fp", "a", [[doc(f"0_{s}_0", s, 1)]], [], None)[0]
                 for s in ("a", "b")]
        assert store.delete(names[:1]) == 1
        assert list(store.listing()) == ["b"]
        assert store.delete(["missing--001-fp"]) == 0

    def test_ids_that_are_not_plain_tokens_are_hashed(self, tmp_path):
        store = StageCheckpointStore(str(tmp_path / "ckpt"))
        name, _ = store.save("../../etc", 1, "fp", "a", [], [], None)
        assert "/" not in name and name.startswith("h")
        assert (tmp_path / "ckpt" / SUBDIR / name / "manifest.json").exists()


# -- real runs ------------------------------------------------------------------------------
def outputs(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def calls(directory: Path, stage: str) -> list[str]:
    if not directory.exists():
        return []
    return sorted(p.name.split("--")[1] for p in directory.iterdir()
                  if p.name.startswith(f"{stage}--"))


def entries(ckpt: Path) -> list[str]:
    root = ckpt / SUBDIR
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


@pytest.mark.slow
def test_replayed_source_resumes_from_its_deepest_boundary_with_identical_ids_and_counts(
        executor, tmp_path):
    """Source 2-* fails (FailedTask) after the boundaries; the next run loads its deepest
    checkpoint, replays the stored deltas (with a fan-out before it) and completes it."""
    generate_jsonl(str(tmp_path / "in"), files=3, docs_per_file=3, seed=5)
    ckpt, work = tmp_path / "ckpt", tmp_path / "jobs"

    def pipeline(out: str, bad: tuple[str, ...], calls_dir: str) -> Pipeline:
        p = Pipeline(name="deep").add_stage(JsonlReader(file_paths=str(tmp_path / "in")))
        p.add_stage(Cheap(calls_dir=calls_dir)).add_stage(Rows())
        p.add_stage(Expensive(calls_dir=calls_dir)).add_stage(FailSoftOn(bad_ids=bad))
        return p.add_stage(JsonlWriter(path=out))

    clean = pipeline(str(tmp_path / "clean"), (), str(tmp_path / "calls-clean")).run(
        executor=executor)
    first = pipeline(str(tmp_path / "out"), ("2-1",), str(tmp_path / "calls")).run(
        executor=executor, checkpoint_path=str(ckpt), work_dir=str(work), job_id="deep",
        stage_checkpoints="every_stage")
    assert len(first) == len(clean) - 1
    saved = {k: v["count"] for k, v in first.stage_checkpoints["saved"].items()}
    # every stage but the sink; the failing source is not saved after fail_soft_on
    assert saved == {"jsonl_reader": 3, "cheap": 3, "rows": 3, "expensive": 3,
                     "fail_soft_on": 2}
    failed_source = next(iter(first.checkpoint["failed_sources"]))
    # completed sources' entries are gone; the failed one keeps all four
    assert [e.split("--")[0] for e in entries(ckpt)] == [failed_source] * 4
    before = {s: len(calls(tmp_path / "calls", s)) for s in ("cheap", "expensive")}

    second = pipeline(str(tmp_path / "out"), (), str(tmp_path / "calls")).run(
        executor=executor, checkpoint_path=str(ckpt), work_dir=str(work), resume=None,
        job_id="deep2", stage_checkpoints="every_stage")
    assert second.skipped_sources == 2
    assert second.stage_checkpoints["loaded"] == {"expensive": 1}
    after = {s: len(calls(tmp_path / "calls", s)) for s in ("cheap", "expensive")}
    assert after == before  # neither the cheap nor the expensive stage ran again
    ids = {t.task_id for t in second}
    assert len(ids) == 3 and ids <= {t.task_id for t in clean}  # the 3 rows of that source
    assert outputs(tmp_path / "out") == outputs(tmp_path / "clean")
    assert len(inspect_checkpoint(str(ckpt)).completed) == 3
    assert entries(ckpt) == []  # cleanup_on_complete
    types = [e["type"] for e in read_events(str(work / "deep2" / "events.jsonl"))]
    assert "checkpoint_load" in types
    saves = [e for e in read_events(str(work / "deep" / "events.jsonl"))
             if e["type"] == "checkpoint_save"]
    assert {e["stage"]: e["count"] for e in saves} == saved
    assert all(e["bytes"] > 0 for e in saves)


@pytest.mark.slow
@pytest.mark.parametrize(("retention", "left"), [
    ("keep_all", 2),
    # the source that saw the FailedTask after `cheap` keeps its entry
    ("keep_failed_only", 1),
    # ... but not when the run ends, under cleanup_all: whether or not its sources completed
    ("cleanup_all", 0),
])
def test_retention(executor, tmp_path, retention, left):
    generate_jsonl(str(tmp_path / "in"), files=2, docs_per_file=2, seed=6)
    ckpt = tmp_path / "ckpt"
    p = Pipeline(name="r").add_stage(JsonlReader(file_paths=str(tmp_path / "in")))
    p.add_stage(Cheap(calls_dir=str(tmp_path / "c"))).add_stage(FailSoftOn(bad_ids=("1-0",)))
    p.add_stage(JsonlWriter(path=str(tmp_path / "out")))
    p.run(executor=executor, checkpoint_path=str(ckpt),
          stage_checkpoints={"strategy": "manual", "stages": ["cheap"],
                             "retention": retention})
    assert len(entries(ckpt)) == left


@pytest.mark.slow
@pytest.mark.parametrize(("retention", "left"), [("cleanup_on_complete", 1), ("cleanup_all", 0)])
def test_cleanup_all_also_when_the_run_fails(executor, tmp_path, retention, left):
    """One source (so no other chain is still running on a worker when the run fails): its
    checkpoint after `cheap` is saved, then a later stage raises."""
    generate_jsonl(str(tmp_path / "in"), files=1, docs_per_file=2, seed=6)
    ckpt = tmp_path / "ckpt"
    p = Pipeline(name="c").add_stage(JsonlReader(file_paths=str(tmp_path / "in")))
    p.add_stage(Cheap(calls_dir=str(tmp_path / "c"))).add_stage(FailOn(bad_id="0-0"))
    p.add_stage(JsonlWriter(path=str(tmp_path / "out")))
    with pytest.raises(StageError, match="boom on 0-0"):
        p.run(executor=executor, checkpoint_path=str(ckpt),
              stage_checkpoints={"strategy": "manual", "stages": ["cheap"], "format": "jsonl",
                                 "compression": "gzip", "retention": retention})
    assert len(entries(ckpt)) == left
    assert len(list((tmp_path / "c").iterdir())) == 1  # `cheap` ran, and saved, before the error


# A driver of its own, in a subprocess the test SIGKILLs (its cluster dies with it). Run with
# the repository root on PYTHONPATH (its workers inherit the driver's sys.path).
RUNNER = textwrap.dedent("""
    from tests.resumability.resume_test_stages import Cheap, Expensive
    from curator_dask import DaskExecutor, JsonlReader, JsonlWriter, Pipeline

    p = Pipeline(name="kill").add_stage(JsonlReader(file_paths={inp!r}))
    p.add_stage(Cheap(calls_dir={calls!r}))
    p.add_stage(Expensive(calls_dir={calls!r}, gate={gate!r}, free_ids=("0-0", "1-0")))
    p.add_stage(JsonlWriter(path={out!r}))
    executor = DaskExecutor(n_workers=1, threads_per_worker=4, progress=False)
    p.run(executor=executor, checkpoint_path={ckpt!r}, work_dir={work!r}, job_id={job!r},
          stage_checkpoints={{"strategy": "manual", "stages": ["cheap"]}})
""")


def flip_middle_byte(data: bytes) -> bytes:
    """The same size, one byte changed: a file that still reads, with other values."""
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0x20]) + data[middle + 1:]


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated", "one-byte-flipped"])
def test_killed_during_the_expensive_stage_resumes_without_the_cheap_one(executor, tmp_path,
                                                                          damage):
    generate_jsonl(str(tmp_path / "in"), files=4, docs_per_file=3, seed=7)
    paths = {"inp": str(tmp_path / "in"),
             "calls": str(tmp_path / "calls"), "gate": str(tmp_path / "gate"),
             "out": str(tmp_path / "out"), "ckpt": str(tmp_path / "ckpt"),
             "work": str(tmp_path / "jobs"), "job": "kill"}
    proc = subprocess.Popen([sys.executable, "-c", RUNNER.format(**paths)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=cli_env(pythonpath=[REPO_ROOT]))
    ckpt = tmp_path / "ckpt"

    def at_kill_point() -> bool:
        done = len(list((tmp_path / "out").glob("*.jsonl"))) if (tmp_path / "out").exists() \
            else 0
        blocked = len(calls(tmp_path / "calls", "expensive"))
        manifests = list((ckpt / SUBDIR).glob("*/manifest.json")) \
            if (ckpt / SUBDIR).exists() else []
        if done == 2 and blocked == 4 and len(manifests) == 2:
            return True
        assert proc.poll() is None, proc.stdout.read()
        return False

    try:
        # wait: all 4 sources checkpointed after `cheap`, 2 written, 2 blocked in `expensive`
        poll_for(at_kill_point, 120, "the run never reached the kill point", interval=0.1)
        # the completions of the 2 written sources reach LMDB (the writer commits every 0.2 s);
        # a read racing a commit is retried
        poll_for(lambda: len(completed_ids(ckpt)) == 2, 30,
                 "the 2 written sources were not recorded as completed",
                 ignore=(FileNotFoundError, lmdb.Error, UnicodeDecodeError))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    completed = set(inspect_checkpoint(str(ckpt)).completed)
    assert len(completed) == 2
    pending = sorted(e.split("--")[0] for e in entries(ckpt))
    assert len(pending) == 2 and not set(pending) & completed  # completed ones were cleaned
    assert calls(tmp_path / "calls", "cheap") == sorted(list(completed) + pending)

    # corrupt one pending source's checkpoint: it must fall back to the source, not skip `cheap`
    victim, intact = pending
    part = next((ckpt / SUBDIR).glob(f"{victim}--*/part-00000.arrow"))
    data = part.read_bytes()
    part.write_bytes(data[:100] if damage == "truncated" else flip_middle_byte(data))
    (tmp_path / "gate").write_text("open")
    (tmp_path / "calls").rename(tmp_path / "calls-first-run")

    p = Pipeline(name="kill").add_stage(JsonlReader(file_paths=str(tmp_path / "in")))
    p.add_stage(Cheap(calls_dir=str(tmp_path / "calls")))
    p.add_stage(Expensive(calls_dir=str(tmp_path / "calls"), gate=str(tmp_path / "gate"),
                          free_ids=("0-0", "1-0")))
    p.add_stage(JsonlWriter(path=str(tmp_path / "out")))
    # the resume and the clean run on the module's cluster (EXECUTOR_KWARGS); the killed run
    # above was a driver of its own, in a subprocess
    result = p.run(executor=executor, checkpoint_path=str(ckpt), work_dir=str(tmp_path / "jobs"),
                   resume="kill", stage_checkpoints={"strategy": "manual", "stages": ["cheap"]})
    assert result.skipped_sources == 2
    assert calls(tmp_path / "calls", "cheap") == [victim]  # not `intact`
    assert calls(tmp_path / "calls", "expensive") == sorted(pending)
    assert result.stage_checkpoints["loaded"] == {"cheap": 1}
    assert result.stage_checkpoints["fallbacks"] == 1
    warnings = [e for e in read_events(str(tmp_path / "jobs" / "kill" / "events.jsonl"))
                if e["type"] == "warning"]
    assert any("unusable" in w["message"] and victim in w["message"] for w in warnings)

    # identical files to a clean run without checkpoints
    clean = Pipeline(name="clean").add_stage(JsonlReader(file_paths=str(tmp_path / "in")))
    clean.add_stage(Cheap(calls_dir=str(tmp_path / "calls-clean")))
    clean.add_stage(Expensive(calls_dir=str(tmp_path / "calls-clean")))
    clean.add_stage(JsonlWriter(path=str(tmp_path / "clean")))
    clean.run(executor=executor)
    assert outputs(tmp_path / "out") == outputs(tmp_path / "clean")
    assert entries(ckpt) == []
    plan = json.loads((tmp_path / "jobs" / "kill" / "dag_execution_plan.json").read_text())
    assert plan["stage_checkpoints"]["boundaries"] == ["cheap"]
    assert [g["stages"] for g in plan["fusion_groups"]] == [
        ["jsonl_reader", "cheap"], ["expensive", "jsonl_writer"]]
