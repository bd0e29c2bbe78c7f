"""ProcessingStage, CompositeStage and Resources (docs/design/contract.md §1.9 defaults, §7.1)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import pytest

from curator_dask.stages.base import CompositeStage, NodeInfo, ProcessingStage, WorkerMetadata
from curator_dask.stages.resources import Resources, _device_memory_gb
from curator_dask.tasks import DocumentBatch, FileGroupTask


def doc(text: str = "x", **cols: list) -> DocumentBatch:
    data = {"text": [text], **cols} if cols else {"text": [text]}
    return DocumentBatch(dataset_name="d", data=pd.DataFrame(data))


@dataclass
class Echo(ProcessingStage[DocumentBatch, DocumentBatch]):
    name: str = "echo"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        return task


@dataclass
class Mixed(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Returns a list, None or a single task depending on the text."""

    name: str = "mixed"

    def process(self, task: DocumentBatch) -> DocumentBatch | list[DocumentBatch] | None:
        text = task.to_pandas()["text"].iloc[0]
        if text == "drop":
            return None
        if text == "split":
            return [doc("s0"), doc("s1")]
        if text == "empty":
            return []
        return task


@dataclass
class NeedsText(ProcessingStage[DocumentBatch, DocumentBatch]):
    name: str = "needs_text"

    def inputs(self) -> tuple[list[str], list[str]]:
        return ["data"], ["text", "lang"]

    def process(self, task: DocumentBatch) -> DocumentBatch:
        return task


# --------------------------------------------------------------------------------------------
# ProcessingStage
# --------------------------------------------------------------------------------------------


class TestProcessingStageDefaults:
    def test_class_defaults(self) -> None:
        assert ProcessingStage.is_source_stage is False
        assert ProcessingStage.is_sink_stage is False
        assert ProcessingStage.is_resumable is True
        assert ProcessingStage.batch_size == 1
        assert ProcessingStage.runtime_env is None

    def test_instance_defaults(self) -> None:
        stage = Echo()
        assert stage.name == "echo"
        assert stage.resources == Resources(cpus=1.0)
        assert stage.resources.cpus == 1.0
        assert stage.resources.gpus == 0.0
        assert stage.batch_size == 1
        assert stage.num_workers() is None
        assert stage.num_workers_per_node() is None
        assert stage.xenna_stage_spec() == {}
        assert stage.inputs() == ([], [])
        assert stage.outputs() == ([], [])
        assert stage.supports_batch_processing() is False
        assert repr(stage) == "Echo(name='echo')"

    def test_lifecycle_hooks_are_no_ops(self) -> None:
        stage = Echo()
        assert stage.setup_on_node(NodeInfo(node_id="n"), WorkerMetadata(worker_id="w")) is None
        assert stage.setup(WorkerMetadata()) is None
        assert stage.teardown() is None

    def test_node_and_worker_metadata_defaults(self) -> None:
        assert NodeInfo().node_id == ""
        meta = WorkerMetadata()
        assert meta.worker_id == ""
        assert meta.allocation is None

    def test_process_not_implemented(self) -> None:
        class Bare(ProcessingStage):
            name = "bare"

        with pytest.raises(NotImplementedError, match="Bare must implement process"):
            Bare().process_batch([doc()])

    def test_supports_batch_processing_when_overridden(self) -> None:
        class Batched(ProcessingStage):
            def process_batch(self, tasks):  # type: ignore[override]
                return tasks

        assert Batched().supports_batch_processing() is True

    def test_ray_stage_spec_is_fanout(self) -> None:
        @dataclass
        class Fan(ProcessingStage[DocumentBatch, DocumentBatch]):
            name: str = "fan"

            def process(self, task: DocumentBatch) -> list[DocumentBatch]:
                return [task]

        assert Fan().ray_stage_spec() == {"is_fanout_stage": True}
        assert Echo().ray_stage_spec() == {"is_fanout_stage": False}


class TestDefaultProcessBatch:
    def test_flattens_lists_and_keeps_none(self) -> None:
        a, drop, split, b = doc("a"), doc("drop"), doc("split"), doc("b")
        out = Mixed().process_batch([a, drop, split, b])
        assert len(out) == 5
        assert out[0] is a
        assert out[1] is None
        assert [t.to_pandas()["text"].iloc[0] for t in out[2:4]] == ["s0", "s1"]
        assert out[4] is b

    def test_empty_list_result_adds_nothing(self) -> None:
        a = doc("a")
        assert Mixed().process_batch([doc("empty"), a]) == [a]

    def test_empty_batch(self) -> None:
        assert Mixed().process_batch([]) == []

    def test_validation_failure_message(self) -> None:
        stage = NeedsText()
        bad = doc("x")  # has "text" but no "lang"
        with pytest.raises(ValueError, match="failed validation for stage") as info:
            stage.process_batch([bad])
        assert str(info.value) == f"Task {bad!s} failed validation for stage {stage}"
        assert str(info.value) == (
            "Task DocumentBatch(task_id='', dataset_name='d', num_items=1) failed validation "
            "for stage NeedsText(name='needs_text')"
        )

    def test_validation_stops_before_processing_later_tasks(self) -> None:
        calls: list[str] = []

        @dataclass
        class Recording(NeedsText):
            def process(self, task: DocumentBatch) -> DocumentBatch:
                calls.append(task.to_pandas()["text"].iloc[0])
                return task

        good = doc("g", lang=["en"])
        with pytest.raises(ValueError, match="failed validation for stage"):
            Recording().process_batch([good, doc("bad")])
        assert calls == ["g"]

    def test_validate_input(self) -> None:
        stage = NeedsText()
        assert stage.validate_input(doc("x", lang=["en"])) is True
        assert stage.validate_input(doc("x")) is False
        # A task without a `columns` attribute is checked with hasattr on its data.
        assert stage.validate_input(FileGroupTask(dataset_name="d", data=["a"])) is False
        assert Echo().validate_input(FileGroupTask(dataset_name="d", data=["a"])) is True


class TestWith:
    def test_returns_modified_copy(self) -> None:
        stage = Echo()
        res = Resources(cpus=2.0)
        new = stage.with_(name="echo2", resources=res, batch_size=8)
        assert new is not stage
        assert type(new) is Echo
        assert (new.name, new.resources, new.batch_size) == ("echo2", res, 8)
        assert new.resources is res
        assert (stage.name, stage.resources, stage.batch_size) == ("echo", Resources(), 1)

    def test_none_arguments_keep_values(self) -> None:
        stage = Echo().with_(batch_size=4)
        same = stage.with_()
        assert same is not stage
        assert (same.name, same.batch_size, same.resources) == ("echo", 4, Resources(cpus=1.0))

    def test_roles_are_copied(self) -> None:
        stage = Echo()
        stage.is_source_stage = True
        assert stage.with_(name="x").is_source_stage is True


class TestCustomMetrics:
    def test_log_and_consume(self) -> None:
        stage = Echo()
        stage._log_metric("rows", 2)
        stage._log_metric("rows", 3)
        stage._log_metric("bytes", 1.5)
        assert stage._consume_custom_metrics() == {"rows": 5, "bytes": 1.5}
        assert stage._consume_custom_metrics() == {}


# --------------------------------------------------------------------------------------------
# CompositeStage
# --------------------------------------------------------------------------------------------


@dataclass
class TwoStep(CompositeStage[DocumentBatch, DocumentBatch]):
    name: str = "two_step"

    def decompose(self) -> list[ProcessingStage]:
        return [NeedsText(), Echo(name="last")]


class TestCompositeStage:
    def test_decompose_and_delegation(self) -> None:
        comp = TwoStep()
        assert [s.name for s in comp.decompose()] == ["needs_text", "last"]
        assert comp.inputs() == (["data"], ["text", "lang"])
        assert comp.outputs() == ([], [])
        assert isinstance(comp, ProcessingStage)

    def test_process_refuses(self) -> None:
        with pytest.raises(RuntimeError, match="must be decomposed before it runs"):
            TwoStep().process(doc())

    def test_decompose_not_implemented(self) -> None:
        class NoParts(CompositeStage):
            name = "no_parts"

        with pytest.raises(NotImplementedError):
            NoParts().decompose()

    def test_jsonl_reader_decomposes(self) -> None:
        from curator_dask.stages.file_partitioning import FilePartitioningStage
        from curator_dask.stages.text.io.reader import JsonlReader

        parts = JsonlReader(file_paths="in/", files_per_partition=3).decompose()
        assert [s.name for s in parts] == ["file_partitioning", "jsonl_reader"]
        assert isinstance(parts[0], FilePartitioningStage)
        assert parts[0].file_paths == "in/"
        assert parts[0].files_per_partition == 3


# --------------------------------------------------------------------------------------------
# Resources (§7.1)
# --------------------------------------------------------------------------------------------


class TestResources:
    def test_defaults(self) -> None:
        res = Resources()
        assert (res.cpus, res.gpu_memory_gb, res.gpus) == (1.0, 0.0, 0.0)
        assert res.requires_gpu is False
        assert res.dask_resources() == {}

    def test_gpus_and_gpu_memory_both_set(self) -> None:
        with pytest.raises(ValueError):
            Resources(gpus=1, gpu_memory_gb=10)

    def test_gpus(self) -> None:
        res = Resources(gpus=1)
        assert res.requires_gpu is True
        assert res.dask_resources() == {"GPU": 1}
        assert Resources(gpus=0.5).dask_resources() == {"GPU": 0.5}

    def test_cpus_only_needs_no_dask_resources(self) -> None:
        res = Resources(cpus=4)
        assert res.requires_gpu is False
        assert res.dask_resources() == {}

    def test_gpu_memory_converts_to_gpus(self) -> None:
        device = _device_memory_gb()
        want = 0.4 * device
        res = Resources(gpu_memory_gb=want)
        assert res.gpus == max(0.1, round(want / device, 1)) == 0.4
        assert res.requires_gpu is True
        assert res.dask_resources() == {"GPU": 0.4}

    def test_gpu_memory_minimum_is_a_tenth(self) -> None:
        res = Resources(gpu_memory_gb=_device_memory_gb() * 0.01)
        assert res.gpus == 0.1

    def test_gpu_memory_more_than_one_device(self) -> None:
        with pytest.raises(ValueError):
            Resources(gpu_memory_gb=_device_memory_gb() * 1.6)

    def test_gpu_memory_exactly_one_device(self) -> None:
        assert Resources(gpu_memory_gb=_device_memory_gb()).gpus == 1.0

    def test_device_memory_default_without_nvml(self) -> None:
        try:
            import pynvml  # noqa: F401
        except ImportError:
            assert _device_memory_gb() == 24.0
        else:
            pytest.skip("pynvml installed: device memory comes from NVML")
