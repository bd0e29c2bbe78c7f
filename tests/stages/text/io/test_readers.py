"""JSONL and Parquet readers (docs/design/contract.md §6.1, §8 reader entries), Arrow-native
variant.

The reader stages are called directly (no Dask): each test builds a ``FileGroupTask`` the way
``FilePartitioningStage`` + the adapter would, and checks the ``DocumentBatch`` it turns into.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterator

import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curator_dask.stages.file_partitioning import FilePartitioningStage
from curator_dask.stages.text.io.reader import (
    JsonlReader,
    JsonlReaderStage,
    MalformedJsonError,
    ParquetReader,
    ParquetReaderStage,
)
from curator_dask.tasks import DocumentBatch, FileGroupTask, StagePerfStats

PARENT_ID = "0_1f82e4a37355"
TASK_ID = "0_1f82e4a37355_0"

RECORDS = [
    {"text": "hello", "id": 1, "score": 0.5},
    {"text": "wörld ✓", "id": 2, "score": 1.5},
    {"text": "third", "id": 3, "score": 2.5},
]


# --------------------------------------------------------------------------------------------
# helpers and fixtures
# --------------------------------------------------------------------------------------------


def _file_group(paths: list[str], metadata: dict | None = None) -> FileGroupTask:
    task = FileGroupTask(
        dataset_name="ds",
        data=list(paths),
        _metadata=metadata if metadata is not None else {"source_files": list(paths)},
    )
    task._set_task_id(PARENT_ID, 0)
    assert task.task_id == TASK_ID
    return task


def _jsonl_bytes(records: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def _put_bytes(path: str, payload: bytes) -> None:
    with fsspec.open(path, "wb") as f:
        f.write(payload)


def _put_parquet(path: str, table: pa.Table) -> None:
    fs, fs_path = fsspec.core.url_to_fs(path)
    with fs.open(fs_path, "wb") as f:
        pq.write_table(table, f)


@pytest.fixture
def memory_root() -> Iterator[str]:
    """A unique ``memory://`` directory, removed after the test."""
    root = f"memory://cd-test-readers-{uuid.uuid4().hex}"
    fs = fsspec.filesystem("memory")
    fs.makedirs(root, exist_ok=True)
    yield root
    fs.rm(root, recursive=True)
    assert not fs.exists(root)


@pytest.fixture(params=["local", "memory"])
def root(request: pytest.FixtureRequest, tmp_path) -> str:
    """An input directory on the local disk or in fsspec's memory file system."""
    if request.param == "local":
        return str(tmp_path)
    return request.getfixturevalue("memory_root")


def _join(root: str, name: str) -> str:
    return f"{root.rstrip('/')}/{name}"


# --------------------------------------------------------------------------------------------
# JsonlReaderStage.process
# --------------------------------------------------------------------------------------------


class TestJsonlReaderStage:
    def test_round_trip_returns_arrow_table_with_same_rows(self, root: str) -> None:
        path = _join(root, "a.jsonl")
        _put_bytes(path, _jsonl_bytes(RECORDS))
        task = _file_group([path])

        out = JsonlReaderStage().process(task)

        assert isinstance(out, DocumentBatch)
        assert isinstance(out.data, pa.Table)
        assert out.data.column_names == ["text", "id", "score"]
        assert out.data.to_pylist() == RECORDS
        assert out.data.schema.field("id").type == pa.int64()
        assert out.data.schema.field("score").type == pa.float64()
        assert out.dataset_name == "ds"

    def test_metadata_is_the_same_dict_and_stage_perf_is_not_propagated(self, tmp_path) -> None:
        path = str(tmp_path / "a.jsonl")
        _put_bytes(path, _jsonl_bytes(RECORDS))
        metadata = {"source_files": [path], "partition_index": 4, "total_partitions": 9}
        task = _file_group([path], metadata=metadata)
        task._stage_perf.append(StagePerfStats(stage_name="file_partitioning"))

        out = JsonlReaderStage().process(task)

        assert out._metadata is task._metadata
        assert out._metadata == {
            "source_files": [path],
            "partition_index": 4,
            "total_partitions": 9,
        }
        assert out._stage_perf == []

    def test_fields_selects_columns_in_requested_order(self, root: str) -> None:
        path = _join(root, "a.jsonl")
        _put_bytes(path, _jsonl_bytes(RECORDS))

        out = JsonlReaderStage(fields=["score", "text"]).process(_file_group([path]))

        assert out.data.column_names == ["score", "text"]
        assert out.data.to_pylist() == [{"score": r["score"], "text": r["text"]} for r in RECORDS]

    def test_missing_field_warns_and_reads_the_existing_ones(self, tmp_path, caplog) -> None:
        path = str(tmp_path / "a.jsonl")
        _put_bytes(path, _jsonl_bytes(RECORDS))

        with caplog.at_level(logging.WARNING):
            out = JsonlReaderStage(fields=["text", "nope"]).process(_file_group([path]))

        assert out.data.column_names == ["text"]
        assert out.data.column("text").to_pylist() == ["hello", "wörld ✓", "third"]
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("nope" in m and path in m for m in warnings), warnings

    def test_no_requested_field_in_any_file_raises(self, tmp_path) -> None:
        path = str(tmp_path / "a.jsonl")
        _put_bytes(path, _jsonl_bytes(RECORDS))

        with pytest.raises(ValueError, match="None of the requested fields"):
            JsonlReaderStage(fields=["nope"]).process(_file_group([path]))

    def test_file_without_requested_fields_is_dropped_from_the_group(self, tmp_path) -> None:
        with_text = str(tmp_path / "a.jsonl")
        without_text = str(tmp_path / "b.jsonl")
        _put_bytes(with_text, _jsonl_bytes([{"text": "kept", "id": 1}]))
        _put_bytes(without_text, _jsonl_bytes([{"other": "dropped"}]))

        out = JsonlReaderStage(fields=["text"]).process(_file_group([with_text, without_text]))

        assert out.data.to_pylist() == [{"text": "kept"}]

    def test_multi_file_concat_with_differing_columns_is_permissive(self, root: str) -> None:
        a = _join(root, "a.jsonl")
        b = _join(root, "b.jsonl")
        _put_bytes(a, _jsonl_bytes([{"text": "a", "id": 1}, {"text": "aa", "id": 2}]))
        _put_bytes(b, _jsonl_bytes([{"text": "b", "id": 2.5, "extra": True}]))

        out = JsonlReaderStage().process(_file_group([a, b]))

        assert out.data.column_names == ["text", "id", "extra"]
        # int64 in one file and double in the other promote to double
        assert out.data.schema.field("id").type == pa.float64()
        assert out.data.to_pylist() == [
            {"text": "a", "id": 1.0, "extra": None},
            {"text": "aa", "id": 2.0, "extra": None},
            {"text": "b", "id": 2.5, "extra": True},
        ]

    def test_malformed_line_error_names_file_and_line(self, root: str) -> None:
        path = _join(root, "bad.jsonl")
        _put_bytes(path, b'{"text": "one"}\n{"text": "two"}\n{"text": "three",\n{"text": "four"}\n')

        with pytest.raises(MalformedJsonError) as info:
            JsonlReaderStage().process(_file_group([path]))

        message = str(info.value)
        assert path in message
        assert "line 3" in message
        assert "line 4" not in message
        assert isinstance(info.value, ValueError)

    def test_malformed_line_number_counts_blank_lines_and_far_lines(self, tmp_path) -> None:
        path = str(tmp_path / "far.jsonl")
        good = [json.dumps({"text": f"doc {i}"}) for i in range(2000)]
        lines = [*good[:2], "", *good[2:], "{not json}", json.dumps({"text": "after"})]
        _put_bytes(path, ("\n".join(lines) + "\n").encode())

        with pytest.raises(MalformedJsonError, match=r"line 2002\b") as info:
            JsonlReaderStage().process(_file_group([path]))
        assert path in str(info.value)

    def test_malformed_second_file_is_the_one_named(self, tmp_path) -> None:
        good = str(tmp_path / "good.jsonl")
        bad = str(tmp_path / "bad.jsonl")
        _put_bytes(good, _jsonl_bytes(RECORDS))
        _put_bytes(bad, b'{"text": "x"}\nnot json at all\n')

        with pytest.raises(MalformedJsonError) as info:
            JsonlReaderStage().process(_file_group([good, bad]))

        assert bad in str(info.value)
        assert good not in str(info.value)
        assert "line 2" in str(info.value)

    def test_gzip_file_is_decompressed_by_inference(self, root: str) -> None:
        path = _join(root, "a.jsonl.gz")
        _put_bytes(path, gzip.compress(_jsonl_bytes(RECORDS)))

        out = JsonlReaderStage().process(_file_group([path]))

        assert out.data.to_pylist() == RECORDS

    def test_gzip_malformed_line_reports_decompressed_line_number(self, tmp_path) -> None:
        path = str(tmp_path / "bad.jsonl.gz")
        _put_bytes(path, gzip.compress(b'{"a": 1}\n{"a": 2}\n{"a": \n'))

        with pytest.raises(MalformedJsonError) as info:
            JsonlReaderStage().process(_file_group([path]))

        assert path in str(info.value)
        assert "line 3" in str(info.value)

    def test_explicit_compression_kwarg(self, tmp_path) -> None:
        path = str(tmp_path / "noext.jsonl")  # gzip content behind a plain .jsonl name
        _put_bytes(path, gzip.compress(_jsonl_bytes(RECORDS)))

        out = JsonlReaderStage(read_kwargs={"compression": "gzip"}).process(_file_group([path]))

        assert out.data.to_pylist() == RECORDS

    def test_empty_file_with_allow_empty_gives_zero_rows(self, tmp_path) -> None:
        path = str(tmp_path / "empty.jsonl")
        _put_bytes(path, b"")

        out = JsonlReaderStage(allow_empty=True).process(_file_group([path]))

        assert isinstance(out, DocumentBatch)
        assert out.num_items == 0

    def test_empty_file_without_allow_empty_raises_no_data(self, tmp_path) -> None:
        path = str(tmp_path / "empty.jsonl")
        _put_bytes(path, b"")

        with pytest.raises(ValueError, match=f"no data read from {path} \\(task {TASK_ID}\\)"):
            JsonlReaderStage().process(_file_group([path]))

    def test_empty_file_next_to_a_non_empty_one_contributes_no_rows(self, tmp_path) -> None:
        empty = str(tmp_path / "empty.jsonl")
        full = str(tmp_path / "full.jsonl")
        _put_bytes(empty, b"")
        _put_bytes(full, _jsonl_bytes(RECORDS))

        out = JsonlReaderStage().process(_file_group([empty, full]))

        assert out.data.to_pylist() == RECORDS

    def test_blank_lines_only_with_allow_empty_gives_zero_rows(self, tmp_path) -> None:
        path = str(tmp_path / "blank.jsonl")
        _put_bytes(path, b"\n\n\n")

        out = JsonlReaderStage(allow_empty=True).process(_file_group([path]))
        assert out.num_items == 0

        with pytest.raises(ValueError, match=f"no data read from {path} \\(task {TASK_ID}\\)"):
            JsonlReaderStage().process(_file_group([path]))

    def test_pandas_engine_returns_dataframe(self, root: str) -> None:
        a = _join(root, "a.jsonl")
        b = _join(root, "b.jsonl")
        _put_bytes(a, _jsonl_bytes(RECORDS[:2]))
        _put_bytes(b, _jsonl_bytes(RECORDS[2:]))

        out = JsonlReaderStage(read_kwargs={"engine": "pandas"}, fields=["text", "id"]).process(
            _file_group([a, b])
        )

        assert isinstance(out.data, pd.DataFrame)
        assert list(out.data.columns) == ["text", "id"]
        assert list(out.data.index) == [0, 1, 2]
        assert out.data.to_dict("records") == [{"text": r["text"], "id": r["id"]} for r in RECORDS]

    def test_lines_false_is_refused_at_construction(self) -> None:
        with pytest.raises(RuntimeError, match="JsonlReader only supports lines=True"):
            JsonlReaderStage(read_kwargs={"lines": False})
        reader = JsonlReader(file_paths="/nowhere", read_kwargs={"lines": False})
        with pytest.raises(RuntimeError, match="JsonlReader only supports lines=True"):
            reader.decompose()

    def test_unsupported_kwargs_for_pyarrow_direct_raise_type_error(self) -> None:
        with pytest.raises(
            TypeError, match=r"Unsupported read_kwargs for engine='pyarrow_direct'.*dtype"
        ):
            JsonlReaderStage(read_kwargs={"dtype": {"id": "int32"}})
        # the same kwarg is accepted by the pandas engine
        stage = JsonlReaderStage(read_kwargs={"engine": "pandas", "dtype": {"id": "int32"}})
        assert stage.read_kwargs["engine"] == "pandas"
        # every allowed key passes
        JsonlReaderStage(
            read_kwargs={
                "pyarrow_block_size": 1 << 20,
                "pyarrow_max_block_size": 1 << 22,
                "storage_options": {},
                "compression": "infer",
                "engine": "pyarrow_direct",
                "lines": True,
            }
        )

    def test_object_larger_than_block_size_is_read_by_growing_the_block(self, tmp_path) -> None:
        path = str(tmp_path / "big.jsonl")
        records = [{"text": "x" * 5000, "id": i} for i in range(3)]
        _put_bytes(path, _jsonl_bytes(records))

        stage = JsonlReaderStage(
            read_kwargs={"pyarrow_block_size": 1024, "pyarrow_max_block_size": 1 << 20}
        )
        out = stage.process(_file_group([path]))

        assert out.data.to_pylist() == records

    def test_outputs_reflect_fields(self) -> None:
        assert JsonlReaderStage(fields=["a", "b"]).outputs() == (["data"], ["a", "b"])
        assert JsonlReaderStage().outputs() == (["data"], [])


# --------------------------------------------------------------------------------------------
# ParquetReaderStage.process
# --------------------------------------------------------------------------------------------


def _records_table(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "text": pa.array([f"doc_{start + i}" for i in range(n)], pa.string()),
            "category": pa.array([f"cat_{(start + i) % 3}" for i in range(n)], pa.string()),
            "score": pa.array([float(start + i) for i in range(n)], pa.float64()),
        }
    )


class TestParquetReaderStage:
    def test_reads_and_concatenates_files_in_order(self, root: str) -> None:
        paths = [_join(root, f"part_{i}.parquet") for i in range(3)]
        for i, path in enumerate(paths):
            _put_parquet(path, _records_table(i * 2, 2))
        task = _file_group(paths)

        out = ParquetReaderStage().process(task)

        assert isinstance(out.data, pa.Table)
        assert out.data.column_names == ["text", "category", "score"]
        assert out.data.column("text").to_pylist() == [f"doc_{i}" for i in range(6)]
        assert out.data.column("score").to_pylist() == [float(i) for i in range(6)]
        assert out._metadata is task._metadata
        assert out.dataset_name == "ds"

    def test_fields_selects_one_column(self, root: str) -> None:
        path = _join(root, "a.parquet")
        _put_parquet(path, _records_table(0, 3))

        out = ParquetReaderStage(fields=["text"]).process(_file_group([path]))

        assert out.data.column_names == ["text"]
        assert out.data.column("text").to_pylist() == ["doc_0", "doc_1", "doc_2"]

    @pytest.mark.parametrize("fields", [["text", "does_not_exist"], ["missing_only"]])
    def test_missing_requested_column_raises(self, tmp_path, fields: list[str]) -> None:
        path = str(tmp_path / "a.parquet")
        _put_parquet(path, _records_table(0, 3))

        with pytest.raises(ValueError) as info:
            ParquetReaderStage(fields=fields).process(_file_group([path]))

        assert fields[-1] in str(info.value)

    def test_empty_file_with_allow_empty_keeps_requested_columns(self, root: str) -> None:
        path = _join(root, "empty.parquet")
        _put_parquet(path, _records_table(0, 0))

        out = ParquetReaderStage(fields=["text"], allow_empty=True).process(_file_group([path]))

        assert out.num_items == 0
        assert out.data.column_names == ["text"]
        assert out.data.schema.field("text").type == pa.string()

    def test_empty_file_without_allow_empty_raises_no_data(self, tmp_path) -> None:
        path = str(tmp_path / "empty.parquet")
        _put_parquet(path, _records_table(0, 0))

        expected = f"^parquet_reader: no data read from {path} \\(task {TASK_ID}\\): it holds"
        with pytest.raises(ValueError, match=expected):
            ParquetReaderStage().process(_file_group([path]))

    def test_multi_file_concat_with_differing_columns_is_permissive(self, root: str) -> None:
        a = _join(root, "a.parquet")
        b = _join(root, "b.parquet")
        _put_parquet(a, pa.table({"text": ["a"], "id": pa.array([1], pa.int64())}))
        _put_parquet(b, pa.table({"text": ["b"], "id": [2.5], "lang": ["en"]}))

        out = ParquetReaderStage().process(_file_group([a, b]))

        assert out.data.column_names == ["text", "id", "lang"]
        assert out.data.schema.field("id").type == pa.float64()
        assert out.data.to_pylist() == [
            {"text": "a", "id": 1.0, "lang": None},
            {"text": "b", "id": 2.5, "lang": "en"},
        ]

    def test_filters_kwarg_is_applied(self, tmp_path) -> None:
        path = str(tmp_path / "a.parquet")
        _put_parquet(path, _records_table(0, 5))

        stage = ParquetReaderStage(read_kwargs={"filters": [("score", ">=", 3.0)]})
        out = stage.process(_file_group([path]))

        assert out.data.column("text").to_pylist() == ["doc_3", "doc_4"]

    def test_unsupported_kwargs_and_engines_are_refused(self) -> None:
        with pytest.raises(TypeError, match="Unsupported read_kwargs for ParquetReader"):
            ParquetReaderStage(read_kwargs={"use_nullable_dtypes": True})
        with pytest.raises(ValueError, match="fastparquet"):
            ParquetReaderStage(read_kwargs={"engine": "fastparquet"})
        ParquetReaderStage(read_kwargs={"engine": "pyarrow", "dtype_backend": "pyarrow"})

    def test_outputs_reflect_fields(self) -> None:
        assert ParquetReaderStage(fields=["a", "b"]).outputs() == (["data"], ["a", "b"])


# --------------------------------------------------------------------------------------------
# Composites: decompose, description, task_type
# --------------------------------------------------------------------------------------------

READER_CASES: list[tuple[type, type, list[str], str]] = [
    (JsonlReader, JsonlReaderStage, [".jsonl", ".json"], "jsonl_reader"),
    (ParquetReader, ParquetReaderStage, [".parquet"], "parquet_reader"),
]


@pytest.mark.parametrize(("composite", "stage_cls", "extensions", "name"), READER_CASES)
def test_decompose_configuration(
    tmp_path, composite: Callable, stage_cls: type, extensions: list[str], name: str
) -> None:
    reader = composite(
        file_paths=str(tmp_path),
        files_per_partition=3,
        fields=["text", "score"],
        read_kwargs={"storage_options": {"auto_mkdir": True}},
    )
    assert reader.name == name

    first, second = reader.decompose()

    assert isinstance(first, FilePartitioningStage)
    assert first.name == "file_partitioning"
    assert first.file_paths == str(tmp_path)
    assert first.files_per_partition == 3
    assert first.blocksize is None
    assert first.file_extensions == extensions
    assert first.storage_options == {"auto_mkdir": True}

    assert type(second) is stage_cls
    assert second.name == name
    assert second.fields == ["text", "score"]
    assert second.read_kwargs == {"storage_options": {"auto_mkdir": True}}
    assert second.allow_empty is False


@pytest.mark.parametrize(("composite", "stage_cls", "extensions", "name"), READER_CASES)
def test_decompose_passes_custom_extensions_blocksize_and_allow_empty(
    composite: Callable, stage_cls: type, extensions: list[str], name: str
) -> None:
    reader = composite(
        file_paths="/data/in", blocksize="64MB", file_extensions=[".x"], allow_empty=True
    )

    first, second = reader.decompose()

    assert first.file_extensions == [".x"]
    assert first.blocksize == "64MB"
    assert first.files_per_partition is None
    assert first.storage_options == {}
    assert second.allow_empty is True
    assert second.read_kwargs == {}


@pytest.mark.parametrize(("composite", "stage_cls", "extensions", "name"), READER_CASES)
def test_non_document_task_type_is_not_implemented(
    composite: Callable, stage_cls: type, extensions: list[str], name: str
) -> None:
    with pytest.raises(NotImplementedError):
        composite(file_paths="/data", task_type="image").decompose()


def test_jsonl_reader_description() -> None:
    desc = JsonlReader(
        file_paths="s3://bucket/path", files_per_partition=5, fields=["text"]
    ).get_description()
    assert "Read JSONL files from s3://bucket/path" in desc
    assert "with 5 files per partition" in desc
    assert "reading columns: ['text']" in desc

    desc2 = JsonlReader(file_paths="/data", blocksize="128MB").get_description()
    assert "Read JSONL files from /data" in desc2
    assert "with target blocksize 128MB" in desc2


def test_parquet_reader_description_matches_upstream() -> None:
    # Same assertions as upstream tests/stages/text/io/reader/test_parquet.py
    desc = ParquetReader(
        file_paths="s3://bucket/path", files_per_partition=5, fields=["text"]
    ).get_description()
    assert "Read Parquet files from s3://bucket/path" in desc
    assert "with 5 files per partition" in desc
    assert "reading columns: ['text']" in desc

    desc2 = ParquetReader(file_paths="/data", blocksize="128MB").get_description()
    assert "Read Parquet files from /data" in desc2
    assert "with target blocksize 128MB" in desc2


def test_partitioning_then_reading_end_to_end_without_dask(tmp_path) -> None:
    """decompose() stages chained by hand: discovery on disk, then one read per partition."""
    for i in range(3):
        _put_bytes(str(tmp_path / f"f{i}.jsonl"), _jsonl_bytes([{"text": f"t{i}", "id": i}]))
    _put_bytes(str(tmp_path / "ignored.txt"), b"not data\n")
    partitioning, reader = JsonlReader(file_paths=str(tmp_path), files_per_partition=2).decompose()

    from curator_dask.tasks import EmptyTask

    groups = partitioning.process(EmptyTask())
    files = sorted(p for g in groups for p in g.data)
    assert files == [os.path.join(str(tmp_path), f"f{i}.jsonl") for i in range(3)]

    rows = []
    for group in groups:
        group._set_task_id("0", 0)
        rows.extend(reader.process(group).data.to_pylist())
    assert sorted(rows, key=lambda r: r["id"]) == [{"text": f"t{i}", "id": i} for i in range(3)]
