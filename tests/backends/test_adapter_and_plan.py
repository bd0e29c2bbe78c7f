"""StageAdapter, run_stages and build_plan (docs/design/contract.md §1.8, §7.2, §7.3; upstream
tests/backends/test_task_id_postprocess.py). Pure code: no Dask cluster is started."""

from __future__ import annotations

import json
import pickle
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from curator_dask.backends.counts import StageCount
from curator_dask.backends.dask.adapter import StageAdapter, run_stages
from curator_dask.backends.dask.plan import ExecutionPlan, FusionGroup, build_plan
from curator_dask.errors import StageError
from curator_dask.lineage import get_deterministic_hash
from curator_dask.pipeline.pipeline import Pipeline
from curator_dask.stages.base import ProcessingStage
from curator_dask.stages.resources import Resources
from curator_dask.stages.text.io.reader import JsonlReader
from curator_dask.stages.text.io.writer import JsonlWriter
from curator_dask.tasks import (
    DocumentBatch,
    EmptyTask,
    FailedTask,
    FileGroupTask,
    NoneTask,
    StagePerfStats,
    Task,
)

R_ID = re.compile(r"^r[0-9a-f]{32}$")
HASH_A = "5ca81c9e2d3b"  # get_deterministic_hash(["a.parquet"])
HASH_B = "1b4e54d3c0fa"  # get_deterministic_hash(["b.parquet"])


def doc(text: str = "x", n: int = 1) -> DocumentBatch:
    return DocumentBatch(dataset_name="d", data=pd.DataFrame({"text": [text] * n}))


def with_id(task: Task, task_id: str) -> Task:
    task.task_id = task_id
    return task


def fgt(*paths: str) -> FileGroupTask:
    return FileGroupTask(dataset_name="d", data=list(paths))


@dataclass
class Fn(ProcessingStage[Task, Task]):
    """A stage whose per-task behaviour is a function (default process_batch)."""

    fn: Callable[[Task], Any] = lambda t: t
    name: str = "fn"

    def process(self, task: Task) -> Any:
        return self.fn(task)


@dataclass
class BatchFn(ProcessingStage[Task, Task]):
    """A stage whose whole-batch behaviour is a function; records every batch it gets."""

    fn: Callable[[list[Task]], list[Any]] = lambda ts: list(ts)
    name: str = "batch_fn"
    calls: list[list[Task]] = field(default_factory=list)

    def process_batch(self, tasks: list[Task]) -> list[Any]:
        self.calls.append(list(tasks))
        return self.fn(tasks)


def source(stage: ProcessingStage) -> ProcessingStage:
    stage.is_source_stage = True
    return stage


# --------------------------------------------------------------------------------------------
# Upstream test_task_id_postprocess vectors, through StageAdapter
# --------------------------------------------------------------------------------------------


class TestTaskIdPostprocess:
    def test_n_to_n_with_none_slot(self) -> None:
        c0, none, c2 = doc("a"), NoneTask(), doc("c")
        stage = BatchFn(fn=lambda ts: [c0, none, c2])
        inputs = [with_id(doc(), f"0_{i}") for i in range(3)]
        out = StageAdapter(stage).process_batch(inputs)
        assert out == [c0, c2]
        assert out[0] is c0 and out[1] is c2
        assert [c0.task_id, none.task_id, c2.task_id] == ["0_0_0", "0_1_0", "0_2_0"]

    def test_same_object_appends_segment(self) -> None:
        task = with_id(doc(), "0_5")
        out = StageAdapter(Fn()).process_batch([task])
        assert out == [task]
        assert out[0] is task
        assert task.task_id == "0_5_0"

    def test_two_inputs_three_outputs_give_r_ids(self) -> None:
        stage = BatchFn(fn=lambda ts: [doc(), doc(), doc()])
        out = StageAdapter(stage).process_batch([with_id(doc(), "0_0"), with_id(doc(), "0_1")])
        ids = [t.task_id for t in out]
        assert len(ids) == 3
        assert len(set(ids)) == 3
        for task_id in ids:
            assert task_id
            assert task_id.startswith("r")
            assert "_" not in task_id
            assert R_ID.match(task_id)

    def test_source_from_empty_task_uses_content_ids(self) -> None:
        a, b = fgt("a.parquet"), fgt("b.parquet")
        stage = source(Fn(fn=lambda t: [a, b], name="source"))
        out = StageAdapter(stage).process_batch([EmptyTask()])
        assert [t.task_id for t in out] == [
            f"0_{a.get_deterministic_id()}",
            f"0_{b.get_deterministic_id()}",
        ]
        assert [t.task_id for t in out] == [f"0_{HASH_A}", f"0_{HASH_B}"]

    def test_source_n_to_n(self) -> None:
        a, b = fgt("a.parquet"), fgt("b.parquet")
        stage = source(BatchFn(fn=lambda ts: [a, b], name="source"))
        out = StageAdapter(stage).process_batch([with_id(doc(), "0_0"), with_id(doc(), "0_1")])
        assert [t.task_id for t in out] == [f"0_0_{HASH_A}", f"0_1_{HASH_B}"]

    def test_non_source_file_group_ignores_content_id(self) -> None:
        stage = Fn(fn=lambda t: fgt("a.parquet"))
        out = StageAdapter(stage).process_batch([with_id(doc(), "0_2")])
        assert [t.task_id for t in out] == ["0_2_0"]


# --------------------------------------------------------------------------------------------
# StageAdapter.process_batch (§7.2)
# --------------------------------------------------------------------------------------------


class TestStageAdapter:
    def test_none_becomes_none_task_and_is_stripped(self) -> None:
        keep_a, keep_c = doc("a"), doc("c")
        stage = Fn(fn=lambda t: None if t.to_pandas()["text"].iloc[0] == "b" else t)
        inputs = [with_id(keep_a, "0_0"), with_id(doc("b"), "0_1"), with_id(keep_c, "0_2")]
        count = StageCount()
        out = StageAdapter(stage).process_batch(inputs, count)
        assert out == [keep_a, keep_c]
        assert [t.task_id for t in out] == ["0_0_0", "0_2_0"]
        assert count.filtered == 1
        assert count.tasks_out == 2

    def test_none_task_in_process_batch_result(self) -> None:
        seen: list[Task] = []

        def fn(ts: list[Task]) -> list[Any]:
            seen.append(NoneTask())
            return [None, seen[-1]]

        stage = BatchFn(fn=fn)
        out = StageAdapter(stage).process_batch([with_id(doc(), "0_1"), with_id(doc(), "0_2")])
        assert out == []
        assert seen[0].task_id == "0_2_0"

    def test_fan_out_sentinels_take_positional_slots(self) -> None:
        a, b = doc("a"), doc("b")
        stage = Fn(fn=lambda t: [a, None, NoneTask(), b])
        out = StageAdapter(stage).process_batch([with_id(doc(), "0_7")])
        assert out == [a, b]
        assert [a.task_id, b.task_id] == ["0_7_0", "0_7_3"]

    def test_single_input_filtered_returns_empty(self) -> None:
        count = StageCount()
        out = StageAdapter(Fn(fn=lambda t: None)).process_batch([with_id(doc(), "0_1")], count)
        assert out == []
        assert (count.calls, count.tasks_in, count.tasks_out, count.filtered) == (1, 1, 0, 1)

    def test_failed_task_from_non_source_is_stripped_and_counted(self) -> None:
        ok = doc("ok")
        stage = BatchFn(fn=lambda ts: [ok, FailedTask()])
        count = StageCount()
        out = StageAdapter(stage).process_batch(
            [with_id(doc(), "0_0"), with_id(doc(), "0_1")], count
        )
        assert out == [ok]
        assert ok.task_id == "0_0_0"
        assert (count.failed, count.filtered, count.tasks_out) == (1, 0, 1)

    def test_source_emitting_failed_task_raises(self) -> None:
        stage = source(Fn(fn=lambda t: [fgt("a.parquet"), FailedTask()], name="source"))
        with pytest.raises(ValueError, match="Source stage source emitted FailedTask"):
            StageAdapter(stage).process_batch([EmptyTask()])

    def test_source_strips_sentinels(self) -> None:
        a = fgt("a.parquet")
        stage = source(Fn(fn=lambda t: [NoneTask(), a, None], name="source"))
        count = StageCount()
        out = StageAdapter(stage).process_batch([EmptyTask()], count)
        assert out == [a]
        assert a.task_id == f"0_{HASH_A}"
        assert count.filtered == 2

    def test_perf_stats_same_object_on_every_output(self) -> None:
        earlier = StagePerfStats(stage_name="earlier")
        outs = [doc("a"), doc("b"), doc("c")]
        outs[0].add_stage_perf(earlier)

        @dataclass
        class Metered(ProcessingStage[Task, Task]):
            name: str = "metered"

            def process(self, task: Task) -> list[Task]:
                self._log_metric("seen", 1)
                self._log_metric("seen", 2)
                return outs

        stage = Metered()
        out = StageAdapter(stage).process_batch([with_id(doc("in", n=4), "0_1")])
        assert out == outs
        stats = out[0]._stage_perf[-1]
        assert out[0]._stage_perf == [earlier, stats]
        for task in out:
            assert task._stage_perf[-1] is stats
        assert isinstance(stats, StagePerfStats)
        assert stats.stage_name == "metered"
        assert stats.num_items_processed == 4
        assert stats.custom_metrics == {"seen": 3}
        assert stats.process_time >= 0.0
        assert stage._consume_custom_metrics() == {}

    def test_num_items_processed_sums_batch(self) -> None:
        out = StageAdapter(BatchFn()).process_batch(
            [with_id(doc(n=2), "0_0"), with_id(doc(n=5), "0_1")]
        )
        assert out[0]._stage_perf[-1].num_items_processed == 7
        assert out[0]._stage_perf[-1] is out[1]._stage_perf[-1]

    def test_stage_count(self) -> None:
        stage = Fn(fn=lambda t: [doc(n=3), doc(n=1)])
        count = StageCount()
        adapter = StageAdapter(stage)
        adapter.process_batch([with_id(doc(n=2), "0_0")], count)
        adapter.process_batch([with_id(doc(n=5), "0_1")], count)
        assert (count.calls, count.tasks_in, count.tasks_out) == (2, 2, 4)
        assert (count.items_in, count.items_out) == (7, 8)
        assert (count.filtered, count.failed) == (0, 0)
        assert count.seconds >= 0.0

    def test_stage_count_merge(self) -> None:
        a = StageCount(calls=1, tasks_in=1, tasks_out=2, filtered=1)
        merged = a.merge(StageCount(calls=2, tasks_in=3, tasks_out=0, failed=1, seconds=1.5))
        assert merged is a
        assert a == StageCount(calls=3, tasks_in=4, tasks_out=2, filtered=1, failed=1, seconds=1.5)

    def test_stage_exception_becomes_stage_error(self) -> None:
        def boom(t: Task) -> Task:
            raise KeyError("missing")

        with pytest.raises(StageError) as info:
            StageAdapter(Fn(fn=boom, name="exploder")).process_batch(
                [with_id(doc(), "0_1"), with_id(doc(), "0_2")]
            )
        err = info.value
        assert err.stage_name == "exploder"
        assert err.task_ids == ["0_1", "0_2"]
        assert isinstance(err.__cause__, KeyError)
        assert "KeyError" in err.error
        copy = pickle.loads(pickle.dumps(err))
        assert (copy.stage_name, copy.task_ids, copy.error) == (
            err.stage_name,
            err.task_ids,
            err.error,
        )

    def test_validation_failure_surfaces(self) -> None:
        @dataclass
        class NeedsLang(ProcessingStage[DocumentBatch, DocumentBatch]):
            name: str = "needs_lang"

            def inputs(self) -> tuple[list[str], list[str]]:
                return [], ["lang"]

            def process(self, task: DocumentBatch) -> DocumentBatch:
                return task

        with pytest.raises(StageError, match="failed validation for stage") as info:
            StageAdapter(NeedsLang()).process_batch([with_id(doc(), "0_3")])
        assert isinstance(info.value.__cause__, ValueError)


# --------------------------------------------------------------------------------------------
# run_stages: batching (§7.3)
# --------------------------------------------------------------------------------------------


class TestRunStages:
    def test_batches_by_batch_size_within_groups(self) -> None:
        stage = BatchFn().with_(batch_size=2)
        groups = [[with_id(doc(), f"0_{i}") for i in range(3)], [with_id(doc(), "0_3")]]
        out, counts = run_stages([StageAdapter(stage)], groups)
        assert [len(c) for c in stage.calls] == [2, 1, 1]
        assert [[t.task_id for t in g] for g in out] == [["0_0_0", "0_1_0"], ["0_2_0"], ["0_3_0"]]
        assert (counts[0].calls, counts[0].tasks_in, counts[0].tasks_out) == (3, 4, 4)

    def test_batch_size_none_means_one(self) -> None:
        stage = BatchFn()
        stage.batch_size = None
        groups = [[with_id(doc(), f"0_{i}") for i in range(3)]]
        out, _ = run_stages([StageAdapter(stage)], groups)
        assert [len(c) for c in stage.calls] == [1, 1, 1]
        assert [[t.task_id for t in g] for g in out] == [["0_0_0"], ["0_1_0"], ["0_2_0"]]

    def test_batches_never_mix_upstream_calls(self) -> None:
        fan = Fn(fn=lambda t: [doc(), doc(), doc()], name="fan")
        sink = BatchFn(name="sink").with_(batch_size=4)
        groups = [[with_id(doc(), "0_0"), with_id(doc(), "0_1")]]
        out, counts = run_stages([StageAdapter(fan), StageAdapter(sink)], groups)
        assert [len(c) for c in sink.calls] == [3, 3]
        assert [[t.task_id for t in g] for g in out] == [
            ["0_0_0_0", "0_0_1_0", "0_0_2_0"],
            ["0_1_0_0", "0_1_1_0", "0_1_2_0"],
        ]
        assert (counts[0].calls, counts[0].tasks_out) == (2, 6)
        assert (counts[1].calls, counts[1].tasks_in, counts[1].tasks_out) == (2, 6, 6)

    def test_multi_input_fan_out_batch_gets_r_ids(self) -> None:
        fan = Fn(fn=lambda t: [doc(), doc()], name="fan").with_(batch_size=2)
        groups = [[with_id(doc(), "0_0"), with_id(doc(), "0_1")]]
        out, _ = run_stages([StageAdapter(fan)], groups)
        assert len(out) == 1
        assert all(R_ID.match(t.task_id) for t in out[0])

    def test_empty_outputs_are_dropped(self) -> None:
        drop = Fn(fn=lambda t: None, name="drop")
        after = BatchFn(name="after")
        groups = [[with_id(doc(), "0_0")], [with_id(doc(), "0_1")]]
        out, counts = run_stages([StageAdapter(drop), StageAdapter(after)], groups)
        assert out == []
        assert after.calls == []
        assert (counts[0].calls, counts[0].filtered) == (2, 2)
        assert counts[1] == StageCount()

    def test_no_adapters(self) -> None:
        groups = [[doc()]]
        out, counts = run_stages([], groups)
        assert out is groups
        assert counts == []

    def test_source_then_downstream(self) -> None:
        a, b = fgt("a.parquet"), fgt("b.parquet")
        src = source(Fn(fn=lambda t: [a, b], name="src"))
        nxt = Fn(fn=lambda t: doc(), name="next")
        out, _ = run_stages([StageAdapter(src), StageAdapter(nxt)], [[EmptyTask()]])
        assert [[t.task_id for t in g] for g in out] == [[f"0_{HASH_A}_0"], [f"0_{HASH_B}_0"]]


class TestReaderWriterChain:
    def test_observed_chain_ids_and_output_name(self, tmp_path: Path) -> None:
        in_dir = tmp_path / "in"
        in_dir.mkdir()
        (in_dir / "a.jsonl").write_text('{"text": "hello"}\n{"text": "world"}\n')
        out_dir = tmp_path / "out"
        p = Pipeline(
            name="chain",
            stages=[
                JsonlReader(file_paths=str(in_dir)),
                JsonlWriter(path=str(out_dir)),
            ],
        )
        p.build()
        adapters = [StageAdapter(s) for s in p.stages]
        path = str(in_dir / "a.jsonl")
        h = get_deterministic_hash([path])

        (groups_fp, _) = run_stages(adapters[:1], [[EmptyTask()]])
        assert [[t.task_id for t in g] for g in groups_fp] == [[f"0_{h}"]]
        (groups_rd, _) = run_stages(adapters[1:2], groups_fp)
        assert [[t.task_id for t in g] for g in groups_rd] == [[f"0_{h}_0"]]
        assert groups_rd[0][0].num_items == 2
        (groups_wr, counts) = run_stages(adapters[2:], groups_rd)
        (written,) = groups_wr[0]
        assert written.task_id == f"0_{h}_0_0"
        name = get_deterministic_hash([path], f"0_{h}_0")
        assert written.data == [str(out_dir / f"{name}.jsonl")]
        assert sorted(p.name for p in out_dir.iterdir()) == [f"{name}.jsonl"]
        assert written._stage_perf[-1].stage_name == "jsonl_writer"
        assert counts[0].items_in == 2


# --------------------------------------------------------------------------------------------
# build_plan
# --------------------------------------------------------------------------------------------


def plain(name: str, **res: float) -> Fn:
    stage = Fn(name=name)
    if res:
        stage = stage.with_(resources=Resources(**res))
    return stage


class TestBuildPlan:
    def test_head_is_stages_up_to_source(self) -> None:
        stages = [plain("pre"), plain("pre2"), source(plain("src")), plain("a"), plain("b")]
        plan = build_plan(stages, fuse=True)
        assert plan.head == (0, 1, 2)
        assert [g.stage_indices for g in plan.groups] == [(3, 4)]

    def test_unmarked_source_defaults_to_first(self) -> None:
        plan = build_plan([plain("x"), plain("y")], fuse=True)
        assert plan.head == (0,)
        assert [g.stage_indices for g in plan.groups] == [(1,)]

    def test_lone_source_has_no_groups(self) -> None:
        plan = build_plan([source(plain("only"))], fuse=True)
        assert plan.head == (0,)
        assert plan.groups == ()

    def test_fusion_by_equal_dask_resources(self) -> None:
        stages = [
            source(plain("src")),
            plain("cpu-a"),
            plain("cpu_b", cpus=4.0),  # cpus are not a Dask resource: fuses with cpu-a
            plain("gpu_c", gpus=1.0),
            plain("gpu_d", gpus=1.0),
            plain("gpu_half", gpus=0.5),
            plain("cpu_e"),
        ]
        plan = build_plan(stages, fuse=True)
        assert plan.head == (0,)
        assert [g.stage_indices for g in plan.groups] == [(1, 2), (3, 4), (5,), (6,)]
        assert [g.index for g in plan.groups] == [0, 1, 2, 3]
        assert [g.stage_names for g in plan.groups] == [
            ("cpu-a", "cpu_b"),
            ("gpu_c", "gpu_d"),
            ("gpu_half",),
            ("cpu_e",),
        ]
        assert [g.resources for g in plan.groups] == [(), (("GPU", 1.0),), (("GPU", 0.5),), ()]
        assert plan.groups[0].label == "cpu_a+cpu_b"
        assert plan.groups[1].resource_dict == {"GPU": 1.0}
        assert plan.groups[0].resource_dict == {}
        assert plan.fuse is True

    def test_gpu_stage_starts_new_group(self) -> None:
        stages = [source(plain("src")), plain("a"), plain("g", gpus=1.0), plain("b")]
        plan = build_plan(stages, fuse=True)
        assert [g.stage_indices for g in plan.groups] == [(1,), (2,), (3,)]

    def test_gpu_memory_stage_is_a_gpu_stage(self) -> None:
        stages = [source(plain("src")), plain("a"), plain("g", gpu_memory_gb=2.0)]
        plan = build_plan(stages, fuse=True)
        assert [g.stage_indices for g in plan.groups] == [(1,), (2,)]
        assert plan.groups[1].resource_dict == {"GPU": stages[2].resources.gpus}

    def test_no_fusion(self) -> None:
        stages = [source(plain("src")), plain("a"), plain("b"), plain("c")]
        plan = build_plan(stages, fuse=False)
        assert [g.stage_indices for g in plan.groups] == [(1,), (2,), (3,)]
        assert plan.fuse is False

    def test_plan_fields_and_json(self) -> None:
        stages = [source(plain("src")), plain("a"), plain("b")]
        plan = build_plan(stages, fuse=True)
        assert isinstance(plan, ExecutionPlan)
        assert plan.stage_names == ("src", "a", "b")
        assert plan.groups == (
            FusionGroup(index=0, stage_indices=(1, 2), stage_names=("a", "b"), resources=()),
        )
        data = json.loads(plan.to_json())
        assert data["head"] == [0]
        assert data["fuse"] is True
        assert data["stage_names"] == ["src", "a", "b"]
        assert data["groups"][0]["stage_indices"] == [1, 2]

    def test_plan_of_built_reader_pipeline(self) -> None:
        p = Pipeline(
            name="p", stages=[JsonlReader(file_paths="/data/in"), plain("f"), plain("g", gpus=1.0)]
        )
        p.build()
        plan = build_plan(p.stages, fuse=True)
        assert plan.head == (0,)
        assert [g.stage_names for g in plan.groups] == [("jsonl_reader", "f"), ("g",)]
