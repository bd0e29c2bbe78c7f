"""Pipeline.build: composite decomposition and source/sink roles (docs/design/contract.md §1.9;
upstream
tests/pipelines/test_pipelines.py TestPipelineBuild and TestRootTaskIds). Never runs it."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd
import pytest

from curator_dask.lineage import assign_root_task_ids
from curator_dask.pipeline.pipeline import Pipeline
from curator_dask.stages.base import CompositeStage, ProcessingStage
from curator_dask.stages.file_partitioning import FilePartitioningStage
from curator_dask.stages.resources import Resources
from curator_dask.stages.text.io.reader import JsonlReader
from curator_dask.stages.text.io.reader.jsonl import JsonlReaderStage
from curator_dask.tasks import DocumentBatch, EmptyTask


@dataclass
class Noop(ProcessingStage[DocumentBatch, DocumentBatch]):
    name: str = "noop"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        return task


@dataclass
class Pair(CompositeStage[DocumentBatch, DocumentBatch]):
    name: str = "pair"
    prefix: str = "p"

    def decompose(self) -> list[ProcessingStage]:
        return [Noop(name=f"{self.prefix}1"), Noop(name=f"{self.prefix}2")]


@dataclass
class Nested(CompositeStage[DocumentBatch, DocumentBatch]):
    name: str = "nested"

    def decompose(self) -> list[ProcessingStage]:
        return [Pair(prefix="inner"), Noop(name="tail")]


def stages(*names: str) -> list[Noop]:
    return [Noop(name=n) for n in names]


def flags(p: Pipeline) -> tuple[list[bool], list[bool]]:
    return [s.is_source_stage for s in p.stages], [s.is_sink_stage for s in p.stages]


class TestPipelineBuild:
    def test_default_roles(self) -> None:
        p = Pipeline(name="p", stages=stages("a", "b", "c"))
        p.build()
        assert flags(p) == ([True, False, False], [False, False, True])

    def test_lone_stage_is_source_and_sink(self) -> None:
        p = Pipeline(name="p", stages=stages("only"))
        p.build()
        assert flags(p) == ([True], [True])

    def test_explicit_middle_marks(self) -> None:
        a, b, c = stages("a", "b", "c")
        b.is_source_stage = True
        b.is_sink_stage = True
        p = Pipeline(name="p", stages=[a, b, c])
        p.build()
        assert flags(p) == ([False, True, False], [False, True, False])

    def test_explicit_middle_source_only(self) -> None:
        a, b, c = stages("a", "b", "c")
        b.is_source_stage = True
        p = Pipeline(name="p", stages=[a, b, c])
        p.build()
        assert flags(p) == ([False, True, False], [False, False, True])

    def test_explicit_first_sink_only(self) -> None:
        a, b, c = stages("a", "b", "c")
        a.is_sink_stage = True
        p = Pipeline(name="p", stages=[a, b, c])
        p.build()
        assert flags(p) == ([True, False, False], [True, False, False])

    def test_multiple_sources(self) -> None:
        a, b, c = stages("a", "b", "c")
        a.is_source_stage = True
        c.is_source_stage = True
        with pytest.raises(ValueError, match="multiple source stages marked") as info:
            Pipeline(name="p", stages=[a, b, c]).build()
        msg = str(info.value)
        assert msg.startswith("Pipeline has multiple source stages marked: ")
        assert msg.endswith(". At most one is supported.")
        assert "'a'" in msg and "'c'" in msg and "'b'" not in msg

    def test_multiple_sinks(self) -> None:
        a, b, c = stages("a", "b", "c")
        a.is_sink_stage = True
        b.is_sink_stage = True
        with pytest.raises(ValueError, match="multiple sink stages marked") as info:
            Pipeline(name="p", stages=[a, b, c]).build()
        msg = str(info.value)
        assert msg.startswith("Pipeline has multiple sink stages marked: ")
        assert msg.endswith(". At most one is supported.")
        assert "'a'" in msg and "'b'" in msg and "'c'" not in msg

    def test_empty_pipeline(self) -> None:
        with pytest.raises(ValueError, match=re.escape("Pipeline 'empty_one' has no stages")):
            Pipeline(name="empty_one").build()
        with pytest.raises(ValueError) as info:
            Pipeline(name="x", stages=[]).build()
        assert str(info.value) == "Pipeline 'x' has no stages"

    def test_flags_are_instance_attributes(self) -> None:
        a, b = stages("a", "b")
        Pipeline(name="p", stages=[a, b]).build()
        assert a.__dict__["is_source_stage"] is True
        assert b.__dict__["is_sink_stage"] is True
        assert ProcessingStage.is_source_stage is False
        assert ProcessingStage.is_sink_stage is False
        assert Noop.is_source_stage is False
        assert Noop().is_source_stage is False

    def test_flags_persist_on_reused_stage_objects(self) -> None:
        a, b = stages("a", "b")
        Pipeline(name="first", stages=[a, b]).build()
        c = Noop(name="c")
        p = Pipeline(name="second", stages=[c, a, b])
        p.build()
        # `a` is still marked source from the first build, so `c` gets no default.
        assert flags(p) == ([False, True, False], [False, False, True])

    def test_composite_decomposition_jsonl_reader(self) -> None:
        reader = JsonlReader(file_paths="/data/in", files_per_partition=2)
        p = Pipeline(name="p").add_stage(reader).add_stage(Noop(name="after"))
        p.build()
        assert [s.name for s in p.stages] == ["file_partitioning", "jsonl_reader", "after"]
        assert isinstance(p.stages[0], FilePartitioningStage)
        assert isinstance(p.stages[1], JsonlReaderStage)
        assert p.stages[0].file_paths == "/data/in"
        assert p.stages[0].files_per_partition == 2
        assert p.stages[0].file_extensions == [".jsonl", ".json"]
        assert p.stages[0].resources == Resources(cpus=0.5)
        assert flags(p) == ([True, False, False], [False, False, True])

    def test_lone_composite(self) -> None:
        p = Pipeline(name="p", stages=[JsonlReader(file_paths="/data/in")])
        p.build()
        assert [s.name for s in p.stages] == ["file_partitioning", "jsonl_reader"]
        assert flags(p) == ([True, False], [False, True])

    def test_nested_composites_are_flattened(self) -> None:
        p = Pipeline(name="p", stages=[Noop(name="head"), Nested()])
        p.build()
        assert [s.name for s in p.stages] == ["head", "inner1", "inner2", "tail"]
        assert not any(isinstance(s, CompositeStage) for s in p.stages)
        assert flags(p) == ([True, False, False, False], [False, False, False, True])

    def test_add_stage(self) -> None:
        p = Pipeline(name="p")
        noop = Noop()
        assert p.add_stage(noop) is p
        assert p.stages == [noop]
        with pytest.raises(TypeError, match="add_stage expects a ProcessingStage"):
            p.add_stage("not a stage")  # type: ignore[arg-type]

    def test_stages_list_is_copied(self) -> None:
        given = stages("a")
        p = Pipeline(name="p", stages=given)
        p.add_stage(Noop(name="b"))
        assert [s.name for s in given] == ["a"]

    def test_describe_mentions_every_stage(self) -> None:
        p = Pipeline(name="demo", description="what it does")
        p.add_stage(JsonlReader(file_paths="/data/in")).add_stage(Noop(name="my_filter"))
        before = p.describe()
        for name in ("demo", "what it does", "jsonl_reader", "file_partitioning", "my_filter"):
            assert name in before
        p.build()
        after = p.describe()
        for name in ("demo", "file_partitioning", "jsonl_reader", "my_filter"):
            assert name in after
        lines = after.splitlines()
        fp_line = next(line for line in lines if "file_partitioning" in line)
        filter_line = next(line for line in lines if "my_filter" in line)
        assert "source" in fp_line
        assert "sink" in filter_line
        assert "Stages: 3" in after

    def test_repr(self) -> None:
        p = Pipeline(name="p", stages=stages("a", "b"))
        assert repr(p) == "Pipeline(name='p', stages=['a', 'b'])"


class TestRootTaskIds:
    @staticmethod
    def _doc() -> DocumentBatch:
        return DocumentBatch(dataset_name="d", data=pd.DataFrame({"text": ["x"]}))

    def test_three_tasks(self) -> None:
        tasks = [self._doc() for _ in range(3)]
        assign_root_task_ids(tasks)
        assert [t.task_id for t in tasks] == ["0_0", "0_1", "0_2"]

    def test_empty_task_then_real(self) -> None:
        tasks = [EmptyTask(), self._doc()]
        assign_root_task_ids(tasks)
        assert [t.task_id for t in tasks] == ["0", "0_1"]
