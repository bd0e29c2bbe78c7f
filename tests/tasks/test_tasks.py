"""Tasks and sentinels (docs/design/contract.md §1.1-§1.6, §2.4; upstream test_sentinels /
test_tasks /
test_file_group_tasks)."""

from __future__ import annotations

import dataclasses
import logging
import re

import pandas as pd
import pyarrow as pa
import pytest

from curator_dask.stages.base import ProcessingStage
from curator_dask.tasks import (
    DocumentBatch,
    EmptyTask,
    FailedTask,
    FileGroupTask,
    NoneTask,
    SentinelTask,
    StagePerfStats,
    Task,
)

HEX12 = re.compile(r"^[0-9a-f]{12}$")


def doc(texts: list[str] | None = None) -> DocumentBatch:
    return DocumentBatch(dataset_name="d", data=pd.DataFrame({"text": texts or ["x"]}))


# --------------------------------------------------------------------------------------------
# Sentinels (§1.6)
# --------------------------------------------------------------------------------------------


class TestSentinels:
    @pytest.mark.parametrize("cls", [SentinelTask, EmptyTask, NoneTask, FailedTask])
    def test_sentinels_are_empty_valid_tasks(self, cls: type[SentinelTask]) -> None:
        task = cls()
        assert isinstance(task, Task)
        assert isinstance(task, SentinelTask)
        assert task.data is None
        assert task.num_items == 0
        assert task.validate() is True
        assert task._source_id == ""
        assert task.get_deterministic_id() is None

    def test_sentinel_with_data_asserts(self) -> None:
        with pytest.raises(AssertionError):
            SentinelTask(dataset_name="s", data="oops")

    @pytest.mark.parametrize("cls", [EmptyTask, NoneTask, FailedTask])
    def test_subclasses_also_refuse_data(self, cls: type[SentinelTask]) -> None:
        with pytest.raises(AssertionError):
            cls(data=[1])

    def test_empty_task(self) -> None:
        task = EmptyTask()
        assert task.task_id == "0"
        assert task.dataset_name == "empty"

    def test_empty_task_id_cannot_be_passed(self) -> None:
        with pytest.raises(TypeError):
            EmptyTask(task_id="5")

    def test_none_and_failed_tasks(self) -> None:
        none, failed = NoneTask(), FailedTask()
        assert none.dataset_name == "none"
        assert failed.dataset_name == "failed"
        assert none.task_id == ""
        assert failed.task_id == ""
        assert not isinstance(none, FailedTask)
        assert not isinstance(failed, NoneTask)
        assert not issubclass(NoneTask, FailedTask)
        assert not issubclass(FailedTask, NoneTask)
        assert not isinstance(none, EmptyTask)
        assert not isinstance(failed, EmptyTask)


# --------------------------------------------------------------------------------------------
# Task fields (§1.1)
# --------------------------------------------------------------------------------------------


class TestTaskFields:
    def test_field_names_and_order(self) -> None:
        names = [f.name for f in dataclasses.fields(Task)]
        assert names == [
            "dataset_name",
            "data",
            "_stage_perf",
            "_metadata",
            "task_id",
            "_source_id",
        ]

    def test_framework_owned_fields_are_not_init(self) -> None:
        fields = {f.name: f for f in dataclasses.fields(Task)}
        assert fields["task_id"].init is False
        assert fields["task_id"].default == ""
        assert fields["_source_id"].init is False
        assert fields["_source_id"].default == ""
        assert fields["dataset_name"].init is True
        assert fields["data"].init is True

    def test_task_is_abstract(self) -> None:
        with pytest.raises(TypeError):
            Task(dataset_name="d", data=None)  # type: ignore[abstract]

    def test_task_id_not_accepted_by_constructors(self) -> None:
        with pytest.raises(TypeError):
            FileGroupTask(dataset_name="d", data=["a"], task_id="0_1")  # type: ignore[call-arg]
        with pytest.raises(TypeError):
            DocumentBatch(  # type: ignore[call-arg]
                dataset_name="d", data=pd.DataFrame({"text": ["x"]}), task_id="0_1"
            )
        with pytest.raises(TypeError):
            NoneTask(task_id="1")  # type: ignore[call-arg]
        with pytest.raises(TypeError):
            FileGroupTask(dataset_name="d", data=["a"], _source_id="x")  # type: ignore[call-arg]

    def test_defaults(self) -> None:
        task = doc()
        assert task.task_id == ""
        assert task._source_id == ""
        assert task._stage_perf == []
        assert task._metadata == {}

    def test_mutable_defaults_are_per_instance(self) -> None:
        a, b = doc(), doc()
        a._metadata["k"] = 1
        a.add_stage_perf(StagePerfStats(stage_name="s"))
        assert b._metadata == {}
        assert b._stage_perf == []

    def test_default_process_batch_of_fan_out_leaves_ids_empty(self) -> None:
        class Triple(ProcessingStage[DocumentBatch, DocumentBatch]):
            name = "triple"

            def process(self, task: DocumentBatch) -> list[DocumentBatch]:
                return [doc() for _ in range(3)]

        parent = doc()
        parent._set_task_id("0", 4)
        outs = Triple().process_batch([parent])
        assert len(outs) == 3
        assert [t.task_id for t in outs] == ["", "", ""]


class TestSetTaskId:
    @pytest.mark.parametrize(
        ("parent", "suffix", "expected"),
        [("", 3, "3"), ("0", 7, "0_7"), ("root", "abc123", "root_abc123"), ("", "abc", "abc")],
    )
    def test_vectors(self, parent: str, suffix: str | int, expected: str) -> None:
        task = doc()
        task._set_task_id(parent, suffix)
        assert task.task_id == expected

    def test_twice_overwrites(self) -> None:
        task = doc()
        task._set_task_id("0", 7)
        task._set_task_id("0", 7)
        assert task.task_id == "0_7"
        task._set_task_id("0_1", 2)
        task._set_task_id("0", 7)
        assert task.task_id == "0_7"

    def test_on_empty_task_overwrites_root(self) -> None:
        task = EmptyTask()
        task._set_task_id("0", 1)
        assert task.task_id == "0_1"

    def test_base_deterministic_id_is_none(self) -> None:
        assert doc().get_deterministic_id() is None
        assert EmptyTask().get_deterministic_id() is None


class TestGetSourceId:
    @pytest.mark.parametrize(
        ("task_id", "expected"),
        [
            ("3", "3"),
            ("0_3", "3"),
            ("0_5ca81c9e2d3b", "5ca81c9e2d3b"),
            ("0_5ca81c9e2d3b_0_0", "0"),
            ("", ""),
        ],
    )
    def test_last_segment(self, task_id: str, expected: str) -> None:
        task = doc()
        task.task_id = task_id
        assert task.get_source_id() == expected

    def test_empty_task(self) -> None:
        assert EmptyTask().get_source_id() == "0"


class TestStagePerf:
    def test_stage_perf_stats_defaults(self) -> None:
        stats = StagePerfStats(stage_name="s")
        assert stats.process_time == 0.0
        assert stats.num_items_processed == 0
        assert stats.custom_metrics == {}

    def test_add_stage_perf_appends(self) -> None:
        task = doc()
        s1, s2 = StagePerfStats(stage_name="a"), StagePerfStats(stage_name="b")
        task.add_stage_perf(s1)
        task.add_stage_perf(s2)
        assert task._stage_perf == [s1, s2]
        assert task._stage_perf[0] is s1


# --------------------------------------------------------------------------------------------
# FileGroupTask (§1.4, §2.4)
# --------------------------------------------------------------------------------------------


class TestFileGroupTask:
    def test_id_ignores_order(self) -> None:
        ab = FileGroupTask(dataset_name="d", data=["b.parquet", "a.parquet"])
        ba = FileGroupTask(dataset_name="d", data=["a.parquet", "b.parquet"])
        c = FileGroupTask(dataset_name="d", data=["c.parquet"])
        assert ab.get_deterministic_id() == ba.get_deterministic_id() == "663c66c4fc54"
        assert c.get_deterministic_id() != ab.get_deterministic_id()
        assert c.get_deterministic_id() == "8f522a55b52c"
        for t in (ab, ba, c):
            assert HEX12.match(t.get_deterministic_id())

    def test_single_file_vector(self) -> None:
        task = FileGroupTask(dataset_name="d", data=["a.parquet"])
        assert task.get_deterministic_id() == "5ca81c9e2d3b"

    def test_id_does_not_reorder_data(self) -> None:
        task = FileGroupTask(dataset_name="d", data=["b.parquet", "a.parquet"])
        task.get_deterministic_id()
        assert task.data == ["b.parquet", "a.parquet"]

    def test_fields_and_num_items(self) -> None:
        task = FileGroupTask(dataset_name="d", data=["a", "b", "c"])
        assert task.num_items == 3
        assert task.reader_config == {}
        assert task.validate() is True
        assert task.task_id == ""

    def test_reader_config_is_per_instance(self) -> None:
        a = FileGroupTask(dataset_name="d", data=["a"])
        b = FileGroupTask(dataset_name="d", data=["b"])
        a.reader_config["x"] = 1
        assert b.reader_config == {}

    def test_default_data_is_empty_list(self, caplog: pytest.LogCaptureFixture) -> None:
        with caplog.at_level(logging.WARNING):
            task = FileGroupTask(dataset_name="d")
        assert task.data == []
        assert task.num_items == 0

    def test_empty_list_warns_and_is_invalid(self, caplog: pytest.LogCaptureFixture) -> None:
        task = FileGroupTask(dataset_name="d", data=["a"])
        task.data = []
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert task.validate() is False
        assert any(r.levelno == logging.WARNING for r in caplog.records)

    def test_non_list_raises_type_error(self) -> None:
        with pytest.raises(TypeError):
            FileGroupTask(dataset_name="d", data="a.parquet")  # type: ignore[arg-type]
        task = FileGroupTask(dataset_name="d", data=["a"])
        task.data = ("a",)  # type: ignore[assignment]
        with pytest.raises(TypeError):
            task.validate()


# --------------------------------------------------------------------------------------------
# DocumentBatch
# --------------------------------------------------------------------------------------------


class TestDocumentBatch:
    def test_pyarrow_data(self) -> None:
        table = pa.table({"text": ["a", "bb", "ccc"], "id": [1, 2, 3]})
        batch = DocumentBatch(dataset_name="d", data=table)
        assert batch.num_items == 3
        assert batch.columns == ["text", "id"]
        assert batch.to_pyarrow() is table
        df = batch.to_pandas()
        assert isinstance(df, pd.DataFrame)
        assert list(df["text"]) == ["a", "bb", "ccc"]
        assert list(df["id"]) == [1, 2, 3]
        assert batch.validate() is True
        assert batch.get_deterministic_id() is None

    def test_pandas_data(self) -> None:
        df = pd.DataFrame({"text": ["a", "bb"], "n": [1, 2]}, index=[10, 20])
        batch = DocumentBatch(dataset_name="d", data=df)
        assert batch.num_items == 2
        assert batch.columns == ["text", "n"]
        assert batch.to_pandas() is df
        table = batch.to_pyarrow()
        assert isinstance(table, pa.Table)
        assert table.column_names == ["text", "n"]  # index not preserved
        assert table.column("text").to_pylist() == ["a", "bb"]
        assert batch.validate() is True

    def test_non_string_pandas_columns(self) -> None:
        batch = DocumentBatch(dataset_name="d", data=pd.DataFrame({0: [1], "b": [2]}))
        assert batch.columns == ["0", "b"]

    def test_empty_table(self) -> None:
        batch = DocumentBatch(dataset_name="d", data=pa.table({"text": pa.array([], pa.string())}))
        assert batch.num_items == 0
        assert batch.columns == ["text"]

    @pytest.mark.parametrize("data", [[{"text": "a"}], {"text": ["a"]}, None, "text"])
    def test_invalid_data_raises_type_error(self, data: object) -> None:
        with pytest.raises(TypeError, match="DocumentBatch.data must be a pyarrow.Table"):
            DocumentBatch(dataset_name="d", data=data)

    def test_repr(self) -> None:
        batch = DocumentBatch(dataset_name="d", data=pa.table({"text": ["a", "b"]}))
        batch._set_task_id("0", 1)
        assert repr(batch) == "DocumentBatch(task_id='0_1', dataset_name='d', num_items=2)"
