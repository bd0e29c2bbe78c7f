"""JSONL and Parquet writers (docs/design/contract.md §6.2, §8 writer entries) with this package's
differences.

Differences from NeMo Curator 1.4 tested here: atomic commits (hidden temp file + ``os.replace``
locally, one ``pipe_file`` elsewhere), lineage-hashed names without ``source_files`` (random
only for ``r`` ids and empty ids), and ``mode="overwrite"`` applied by ``prepare_output``.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import uuid
from collections.abc import Iterator

import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curator_dask.lineage import get_deterministic_hash, output_basename
from curator_dask.stages.text.io.writer import BaseWriter, JsonlWriter, ParquetWriter
from curator_dask.tasks import DocumentBatch, FileGroupTask, StagePerfStats

PARENT_ID = "0_1f82e4a37355"
TASK_ID = "0_1f82e4a37355_0"
SOURCE_FILES = ["/data/in/a.jsonl"]
# docs/design/contract.md §6.2: ["/data/in/a.jsonl"] + "0_1f82e4a37355_0"
CONTRACT_BASENAME = "24834f8afda2"

ROWS = {
    "text": ["hello", "wörld ✓", "你好, 世界"],
    "id": [1, 2, 3],
    "score": [0.5, 1.5, 2.5],
}
RECORDS = [dict(zip(ROWS, values, strict=True)) for values in zip(*ROWS.values(), strict=True)]

WRITERS = {"jsonl": JsonlWriter, "parquet": ParquetWriter}


# --------------------------------------------------------------------------------------------
# helpers and fixtures
# --------------------------------------------------------------------------------------------


def _data(kind: str) -> pa.Table | pd.DataFrame:
    if kind == "pyarrow":
        return pa.table(ROWS)
    return pd.DataFrame(ROWS)


def _batch(
    kind: str = "pyarrow",
    *,
    source_files: list[str] | None = SOURCE_FILES,
    parent: str = PARENT_ID,
    suffix: int | str = 0,
    extra_metadata: dict | None = None,
) -> DocumentBatch:
    metadata: dict = dict(extra_metadata or {})
    if source_files is not None:
        metadata["source_files"] = list(source_files)
    batch = DocumentBatch(dataset_name="ds", data=_data(kind), _metadata=metadata)
    batch._set_task_id(parent, suffix)
    return batch


def _read_back(fmt: str, url: str) -> list[dict]:
    with fsspec.open(url, "rb") as f:
        payload = f.read()
    if fmt == "jsonl":
        return [json.loads(line) for line in payload.decode("utf-8").splitlines() if line.strip()]
    return pq.read_table(io.BytesIO(payload)).to_pylist()


def _sha12(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class Storage:
    """An output location: ``url`` is passed to the writer, ``listing()`` lists its files."""

    def __init__(self, kind: str, url: str) -> None:
        self.kind = kind
        self.url = url
        self.fs, self.fs_path = fsspec.core.url_to_fs(url)

    def expected(self, name: str) -> str:
        """The path a writer should return for a file ``name`` directly under ``url``."""
        if self.kind == "local":
            return os.path.join(self.url, name)
        return f"memory://{self.fs_path}/{name}"

    def listing(self) -> list[str]:
        if not self.fs.exists(self.fs_path):
            return []
        return sorted(p.rsplit("/", 1)[-1] for p in self.fs.ls(self.fs_path, detail=False))

    def put(self, name: str, payload: bytes) -> None:
        self.fs.makedirs(self.fs_path, exist_ok=True)
        self.fs.pipe_file(f"{self.fs_path}/{name}", payload)

    def exists(self) -> bool:
        return self.fs.exists(self.fs_path)


@pytest.fixture
def memory_root() -> Iterator[str]:
    root = f"memory://cd-test-writers-{uuid.uuid4().hex}"
    fs = fsspec.filesystem("memory")
    yield root
    if fs.exists(root):
        fs.rm(root, recursive=True)
    assert not fs.exists(root)


@pytest.fixture(params=["local", "memory"])
def storage(request: pytest.FixtureRequest, tmp_path) -> Storage:
    if request.param == "local":
        return Storage("local", str(tmp_path / "out"))
    return Storage("memory", request.getfixturevalue("memory_root") + "/out")


def _no_hidden(listing: list[str]) -> bool:
    return not any(name.startswith(".") or name.endswith(".tmp") for name in listing)


# --------------------------------------------------------------------------------------------
# naming
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_contract_vector_name(tmp_path, fmt: str) -> None:
    batch = _batch()
    assert batch.task_id == TASK_ID
    out_dir = str(tmp_path / "out")

    result = WRITERS[fmt](path=out_dir).process(batch)

    assert result.data == [os.path.join(out_dir, f"{CONTRACT_BASENAME}.{fmt}")]
    assert os.listdir(out_dir) == [f"{CONTRACT_BASENAME}.{fmt}"]


def test_name_is_hash_of_sorted_source_files_and_input_task_id(tmp_path) -> None:
    batch = _batch(source_files=["/in/b.jsonl", "/in/a.jsonl"], parent="0_abc", suffix=3)
    expected = _sha12("/in/a.jsonl|/in/b.jsonl|0_abc_3")
    assert get_deterministic_hash(["/in/b.jsonl", "/in/a.jsonl"], "0_abc_3") == expected

    result = JsonlWriter(path=str(tmp_path)).process(batch)

    assert result.data == [os.path.join(str(tmp_path), f"{expected}.jsonl")]


def test_same_sources_different_task_ids_give_different_names(tmp_path) -> None:
    writer = JsonlWriter(path=str(tmp_path))
    first = writer.process(_batch(suffix=0)).data[0]
    second = writer.process(_batch(suffix=1)).data[0]

    assert os.path.basename(first) == f"{CONTRACT_BASENAME}.jsonl"
    assert os.path.basename(second) == f"{_sha12('/data/in/a.jsonl|' + PARENT_ID + '_1')}.jsonl"
    assert sorted(os.listdir(tmp_path)) == sorted(
        [os.path.basename(first), os.path.basename(second)]
    )


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_without_source_files_name_hashes_the_lineage_id(tmp_path, caplog, fmt: str) -> None:
    batch = _batch(source_files=None, parent="0_abc", suffix=2)
    expected = _sha12("|lineage:0_abc_2")
    assert output_basename(None, "0_abc_2") == expected

    with caplog.at_level(logging.WARNING):
        writer = WRITERS[fmt](path=str(tmp_path))
        first = writer.process(batch)
        second = writer.process(batch)

    assert first.data == [os.path.join(str(tmp_path), f"{expected}.{fmt}")]
    assert second.data == first.data
    assert os.listdir(tmp_path) == [f"{expected}.{fmt}"]
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize("task_id", ["r" + "0" * 32, ""])
def test_random_or_empty_task_id_gets_uuid_name_with_warning(tmp_path, caplog, task_id) -> None:
    batch = _batch(source_files=None)
    batch.task_id = task_id
    writer = JsonlWriter(path=str(tmp_path))

    with caplog.at_level(logging.WARNING):
        first = writer.process(batch).data[0]
        second = writer.process(batch).data[0]

    for path in (first, second):
        assert re.fullmatch(r"[0-9a-f]{32}\.jsonl", os.path.basename(path)), path
    assert first != second
    assert os.path.getsize(first) == os.path.getsize(second)
    assert sorted(os.listdir(tmp_path)) == sorted(
        [os.path.basename(first), os.path.basename(second)]
    )
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "random" in warnings[0].getMessage()


def test_source_files_win_over_an_r_task_id(tmp_path) -> None:
    batch = _batch()
    batch.task_id = "r" + "a" * 32
    result = JsonlWriter(path=str(tmp_path)).process(batch)
    expected = _sha12("/data/in/a.jsonl|" + batch.task_id)
    assert result.data == [os.path.join(str(tmp_path), f"{expected}.jsonl")]


# --------------------------------------------------------------------------------------------
# round trips and returned task
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["pyarrow", "pandas"])
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_round_trip_content_equals_input(storage: Storage, fmt: str, kind: str) -> None:
    batch = _batch(kind)

    result = WRITERS[fmt](path=storage.url).process(batch)

    name = f"{CONTRACT_BASENAME}.{fmt}"
    assert result.data == [storage.expected(name)]
    assert storage.listing() == [name]
    assert _read_back(fmt, result.data[0]) == RECORDS


def test_memory_output_keeps_protocol_prefix(memory_root: str) -> None:
    url = f"{memory_root}/nested/out"
    result = JsonlWriter(path=url).process(_batch())

    path = result.data[0]
    assert path.startswith("memory://")
    fs, fs_path = fsspec.core.url_to_fs(path)
    assert "memory" in fs.protocol
    assert fs_path == f"{fsspec.core.url_to_fs(url)[1]}/{CONTRACT_BASENAME}.jsonl"
    assert _read_back("jsonl", path) == RECORDS


def test_parquet_round_trip_keeps_arrow_types(tmp_path) -> None:
    table = pa.table(
        {
            "text": pa.array(["a", None], pa.string()),
            "id": pa.array([1, 2], pa.int32()),
            "tags": pa.array([["x"], []], pa.list_(pa.string())),
        }
    )
    batch = DocumentBatch(dataset_name="ds", data=table, _metadata={"source_files": ["s"]})
    batch._set_task_id(PARENT_ID, 0)

    result = ParquetWriter(path=str(tmp_path)).process(batch)

    assert pq.read_table(result.data[0]).equals(table)


def test_jsonl_exact_bytes(tmp_path) -> None:
    batch = DocumentBatch(dataset_name="ds", data=pd.DataFrame({"text": ["x"], "id": [1]}))
    batch._set_task_id(PARENT_ID, 0)

    result = JsonlWriter(path=str(tmp_path)).process(batch)

    with open(result.data[0], "rb") as f:
        assert f.read() == b'{"text":"x","id":1}\n'


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_returned_file_group_task(tmp_path, fmt: str) -> None:
    perf = StagePerfStats(stage_name="reader", process_time=0.25, num_items_processed=3)
    batch = _batch(extra_metadata={"dummy_key": "dummy_value", "partition_index": 7})
    batch._stage_perf.append(perf)
    metadata_before = dict(batch._metadata)

    result = WRITERS[fmt](path=str(tmp_path)).process(batch)

    assert isinstance(result, FileGroupTask)
    assert result.dataset_name == "ds"
    assert result.data == [os.path.join(str(tmp_path), f"{CONTRACT_BASENAME}.{fmt}")]
    assert result._metadata == {
        "dummy_key": "dummy_value",
        "partition_index": 7,
        "source_files": SOURCE_FILES,
        "format": fmt,
    }
    assert result._stage_perf == [perf]
    assert batch._metadata == metadata_before  # the input's metadata is not mutated
    assert result.task_id == ""  # assigned later by the adapter


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_writer_names_and_extensions(tmp_path, fmt: str) -> None:
    writer = WRITERS[fmt](path=str(tmp_path))
    assert writer.name == f"{fmt}_writer"
    assert writer.get_file_extension() == fmt
    assert isinstance(writer, BaseWriter)
    assert writer.inputs() == (["data"], [])
    assert WRITERS[fmt](path=str(tmp_path), fields=["text"]).inputs() == (["data"], ["text"])


@pytest.mark.parametrize("kind", ["pyarrow", "pandas"])
def test_jsonl_fields_writes_only_those_columns(storage: Storage, kind: str) -> None:
    result = JsonlWriter(path=storage.url, fields=["text", "score"]).process(_batch(kind))

    with fsspec.open(result.data[0], "rb") as f:
        lines = f.read().decode("utf-8").splitlines()
    assert [list(json.loads(line)) for line in lines] == [["text", "score"]] * 3
    assert _read_back("jsonl", result.data[0]) == [
        {"text": r["text"], "score": r["score"]} for r in RECORDS
    ]


@pytest.mark.parametrize("kind", ["pyarrow", "pandas"])
def test_parquet_fields_writes_only_those_columns(storage: Storage, kind: str) -> None:
    result = ParquetWriter(path=storage.url, fields=["score", "text"]).process(_batch(kind))

    with fsspec.open(result.data[0], "rb") as f:
        table = pq.read_table(io.BytesIO(f.read()))
    assert table.column_names == ["score", "text"]
    assert table.column("text").to_pylist() == ROWS["text"]


def test_jsonl_missing_field_raises_key_error_and_leaves_nothing(tmp_path) -> None:
    with pytest.raises(KeyError):
        JsonlWriter(path=str(tmp_path), fields=["text", "nope"]).process(_batch("pandas"))
    assert os.listdir(tmp_path) == []


def test_parquet_without_pandas_index(tmp_path) -> None:
    batch = _batch("pandas")
    result = ParquetWriter(path=str(tmp_path)).process(batch)
    assert pq.read_table(result.data[0]).column_names == ["text", "id", "score"]


def test_parquet_write_kwargs_are_honoured(tmp_path) -> None:
    result = ParquetWriter(
        path=str(tmp_path), write_kwargs={"compression": "gzip", "row_group_size": 1}
    ).process(_batch())

    meta = pq.ParquetFile(result.data[0]).metadata
    assert meta.num_row_groups == 3
    assert meta.row_group(0).column(0).compression == "GZIP"


def test_parquet_partition_cols_is_refused(tmp_path) -> None:
    with pytest.raises(NotImplementedError, match="partition_cols"):
        ParquetWriter(path=str(tmp_path), write_kwargs={"partition_cols": ["id"]})


# --------------------------------------------------------------------------------------------
# JSONL options
# --------------------------------------------------------------------------------------------


def test_jsonl_defaults_to_utf8(storage: Storage) -> None:
    batch = DocumentBatch(dataset_name="ds", data=pd.DataFrame({"text": ["你好, 世界"], "id": [1]}))
    batch._set_task_id(PARENT_ID, 0)

    result = JsonlWriter(path=storage.url).process(batch)

    with fsspec.open(result.data[0], "rb") as f:
        payload = f.read()
    assert "你好, 世界".encode() in payload
    assert b"\\u4f60" not in payload
    assert payload == '{"text":"你好, 世界","id":1}\n'.encode()


def test_jsonl_force_ascii_is_honoured(storage: Storage) -> None:
    batch = DocumentBatch(dataset_name="ds", data=pd.DataFrame({"text": ["你好, 世界"], "id": [1]}))
    batch._set_task_id(PARENT_ID, 0)

    result = JsonlWriter(path=storage.url, write_kwargs={"force_ascii": True}).process(batch)

    with fsspec.open(result.data[0], "rb") as f:
        payload = f.read()
    assert "你好".encode() not in payload
    assert b"\\u4f60" in payload
    assert json.loads(payload) == {"text": "你好, 世界", "id": 1}


@pytest.mark.parametrize(
    ("writer_cls", "extension"),
    [(JsonlWriter, "ndjson"), (JsonlWriter, "json"), (ParquetWriter, "pq")],
)
def test_custom_file_extension(storage: Storage, writer_cls: type, extension: str) -> None:
    result = writer_cls(path=storage.url, file_extension=extension).process(_batch())

    name = f"{CONTRACT_BASENAME}.{extension}"
    assert result.data == [storage.expected(name)]
    assert result._metadata["format"] == extension
    assert storage.listing() == [name]
    fmt = "parquet" if writer_cls is ParquetWriter else "jsonl"
    assert _read_back(fmt, result.data[0]) == RECORDS


def test_orient_index_with_default_lines_raises_value_error(storage: Storage) -> None:
    writer = JsonlWriter(path=storage.url, write_kwargs={"orient": "index"})

    with pytest.raises(ValueError, match="'lines' keyword only valid when 'orient' is records"):
        writer.process(_batch("pandas"))

    assert storage.listing() == []


def test_orient_index_without_lines_writes_a_json_document(tmp_path) -> None:
    writer = JsonlWriter(
        path=str(tmp_path), file_extension="json", write_kwargs={"orient": "index", "lines": False}
    )
    result = writer.process(_batch("pandas"))

    assert result.data == [os.path.join(str(tmp_path), f"{CONTRACT_BASENAME}.json")]
    with open(result.data[0], encoding="utf-8") as f:
        assert json.load(f) == {str(i): r for i, r in enumerate(RECORDS)}


def test_storage_options_are_not_passed_to_the_serialiser(tmp_path) -> None:
    out = str(tmp_path / "so")
    result = JsonlWriter(path=out, write_kwargs={"storage_options": {"auto_mkdir": True}}).process(
        _batch()
    )
    assert _read_back("jsonl", result.data[0]) == RECORDS


# --------------------------------------------------------------------------------------------
# replays and paths
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_writing_twice_gives_same_path_same_size_and_rewrites(tmp_path, fmt: str) -> None:
    writer = WRITERS[fmt](path=str(tmp_path))
    batch = _batch("pandas")

    first = writer.process(batch).data[0]
    size_1 = os.path.getsize(first)
    os.utime(first, ns=(1_000_000_000, 1_000_000_000))  # mark the first version as old
    second = writer.process(batch).data[0]

    assert first == second
    assert os.path.getsize(second) == size_1
    assert os.stat(second).st_mtime_ns > 1_000_000_000
    assert os.listdir(tmp_path) == [os.path.basename(first)]
    assert _read_back(fmt, second) == RECORDS


def test_memory_writing_twice_replaces_the_file(memory_root: str) -> None:
    writer = ParquetWriter(path=memory_root)
    first = writer.process(_batch()).data[0]
    second = writer.process(_batch()).data[0]
    fs = fsspec.filesystem("memory")
    assert first == second
    assert len(fs.ls(fsspec.core.url_to_fs(memory_root)[1])) == 1


def test_relative_local_path_is_returned_absolute(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = JsonlWriter(path="rel_out").process(_batch())
    assert result.data == [str(tmp_path / "rel_out" / f"{CONTRACT_BASENAME}.jsonl")]


def test_file_url_is_returned_without_protocol(tmp_path) -> None:
    result = JsonlWriter(path=f"file://{tmp_path}/out").process(_batch())
    assert result.data == [str(tmp_path / "out" / f"{CONTRACT_BASENAME}.jsonl")]


def test_missing_path_is_refused() -> None:
    with pytest.raises(ValueError, match="needs an output path"):
        JsonlWriter(path="")


# --------------------------------------------------------------------------------------------
# modes
# --------------------------------------------------------------------------------------------


def test_prepare_output_creates_the_directory(storage: Storage) -> None:
    """Not construction (issue 32, item 3): a run refused before it starts (a misspelled
    input path) leaves no empty output folder; the run's prepare_output makes it."""
    assert not storage.exists()
    writer = JsonlWriter(path=storage.url)
    assert not storage.exists()
    writer.prepare_output()
    assert storage.exists()
    assert storage.listing() == []


def test_ignore_mode_keeps_existing_files(storage: Storage) -> None:
    storage.put("keep.txt", b"old")
    writer = JsonlWriter(path=storage.url)
    writer.prepare_output()
    writer.prepare_output(checkpoint_path="/ckpt")
    writer.process(_batch())
    assert storage.listing() == [f"{CONTRACT_BASENAME}.jsonl", "keep.txt"]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_overwrite_deletes_in_prepare_output_not_at_construction(
    storage: Storage, fmt: str
) -> None:
    storage.put("dummy.txt", b"to be removed")
    storage.put(f"stale.{fmt}", b"old output")

    writer = WRITERS[fmt](path=storage.url, mode="overwrite")
    assert storage.listing() == ["dummy.txt", f"stale.{fmt}"]  # nothing deleted yet

    writer.prepare_output()
    assert storage.exists()
    assert storage.listing() == []

    result = writer.process(_batch())
    assert storage.listing() == [f"{CONTRACT_BASENAME}.{fmt}"]
    assert result.data == [storage.expected(f"{CONTRACT_BASENAME}.{fmt}")]
    assert _read_back(fmt, result.data[0]) == RECORDS


def test_overwrite_with_checkpoint_path_is_refused_and_deletes_nothing(storage: Storage) -> None:
    storage.put("dummy.txt", b"keep me")
    writer = JsonlWriter(path=storage.url, mode="overwrite")

    with pytest.raises(ValueError, match="checkpoint_path") as info:
        writer.prepare_output(checkpoint_path="x")

    assert "'x'" in str(info.value)
    assert storage.listing() == ["dummy.txt"]


def test_overwrite_prepare_output_on_missing_directory(tmp_path) -> None:
    out = tmp_path / "fresh"
    writer = JsonlWriter(path=str(out), mode="overwrite")
    assert not out.exists()
    writer.prepare_output()
    assert out.is_dir()
    assert list(out.iterdir()) == []


def test_error_mode_with_existing_directory(storage: Storage) -> None:
    storage.put("x.txt", b"x")
    with pytest.raises(
        FileExistsError, match=f"^Output directory {re.escape(storage.url)} already exists$"
    ):
        JsonlWriter(path=storage.url, mode="error")
    assert storage.listing() == ["x.txt"]


def test_error_mode_with_new_directory_creates_it(storage: Storage) -> None:
    writer = JsonlWriter(path=storage.url, mode="error")
    writer.prepare_output()
    assert storage.exists()
    writer.process(_batch())
    assert storage.listing() == [f"{CONTRACT_BASENAME}.jsonl"]


def test_mode_is_normalised(tmp_path) -> None:
    with pytest.raises(FileExistsError, match="already exists"):
        JsonlWriter(path=str(tmp_path), mode="  ERROR ")
    (tmp_path / "dummy.txt").write_text("x")
    writer = JsonlWriter(path=str(tmp_path), mode=" Overwrite")
    writer.prepare_output()
    assert os.listdir(tmp_path) == []


def test_invalid_mode(tmp_path) -> None:
    expected = "Invalid mode: 'bogus'. Allowed: ['append', 'error', 'ignore', 'overwrite']"
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        JsonlWriter(path=str(tmp_path / "out"), mode="bogus")


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_append_mode_is_not_implemented(tmp_path, fmt: str) -> None:
    with pytest.raises(NotImplementedError, match="append mode is not implemented yet"):
        WRITERS[fmt](path=str(tmp_path / "out"), mode="append")


# --------------------------------------------------------------------------------------------
# atomicity: no temp files, no partial finals
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_no_hidden_files_after_a_successful_write(tmp_path, fmt: str) -> None:
    WRITERS[fmt](path=str(tmp_path)).process(_batch())
    listing = os.listdir(tmp_path)
    assert listing == [f"{CONTRACT_BASENAME}.{fmt}"]
    assert _no_hidden(listing)


def _make_serialisation_raise(monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    """Monkeypatch of the *serialiser* (pandas / pyarrow), not of the writer: it writes a few
    bytes to the handle it is given and then raises, like a serialiser failing mid-file."""

    def partial_then_raise(*args, **kwargs):
        handle = args[1] if len(args) > 1 else kwargs.get("path_or_buf", kwargs.get("where"))
        handle.write(b'{"text": "partial')
        raise RuntimeError("serialisation failed half-way")

    if fmt == "jsonl":
        monkeypatch.setattr(pd.DataFrame, "to_json", partial_then_raise)
    else:
        monkeypatch.setattr(pq, "write_table", partial_then_raise)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_serialisation_error_leaves_no_final_and_no_temp_file(
    storage: Storage, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    writer = WRITERS[fmt](path=storage.url)
    _make_serialisation_raise(monkeypatch, fmt)

    with pytest.raises(RuntimeError, match="serialisation failed half-way"):
        writer.process(_batch())

    assert storage.listing() == []


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_failed_rewrite_keeps_the_previous_complete_file(
    storage: Storage, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    writer = WRITERS[fmt](path=storage.url)
    path = writer.process(_batch()).data[0]
    with fsspec.open(path, "rb") as f:
        before = f.read()

    _make_serialisation_raise(monkeypatch, fmt)
    with pytest.raises(RuntimeError, match="serialisation failed half-way"):
        writer.process(_batch())

    with fsspec.open(path, "rb") as f:
        assert f.read() == before
    assert storage.listing() == [f"{CONTRACT_BASENAME}.{fmt}"]


def test_fsync_false_still_commits(tmp_path) -> None:
    writer = JsonlWriter(path=str(tmp_path), fsync=False)
    result = writer.process(_batch())
    assert os.listdir(tmp_path) == [f"{CONTRACT_BASENAME}.jsonl"]
    assert _read_back("jsonl", result.data[0]) == RECORDS


# --------------------------------------------------------------------------------------------
# JSONL from Arrow tables: values must equal the pandas path's (and the input's)
# --------------------------------------------------------------------------------------------

TRICKY_TABLES = {
    "escapes": pa.table(
        {
            "text": [
                'say "hi"',
                "back\\slash",
                "line\nbreak\r\ttab\b\f",
                "url http://a/b",
                "emoji 😀 ünïcödé",
                "",
                None,
            ],
            "id": [1, -2, 3, None, 123456789, 0, 7],
            "flag": [True, False, None, True, True, False, True],
        }
    ),
    "rare_control_chars": pa.table({"text": ["bell\x07", "nul\x00x", "esc\x1b"], "id": [1, 2, 3]}),
    "odd_column_names": pa.table({'we"ird': ["a"], "naïve key": [1], "sl/ash": [True]}),
    "large_and_view_strings": pa.table(
        {
            "a": pa.array(["x", 'q"'], pa.large_string()),
            "b": pa.array(["y", None], pa.string_view()),
            "c": pa.array([1, 2], pa.uint8()),
        }
    ),
    "dictionary_and_float": pa.table(
        {
            "cat": pa.array(["a", "b"]).dictionary_encode(),
            "score": [0.1, None],
        }
    ),
    "all_null_column": pa.table({"text": ["a", "b"], "nothing": pa.nulls(2)}),
}


@pytest.mark.parametrize("case", sorted(TRICKY_TABLES))
def test_jsonl_from_arrow_table_round_trips_and_matches_pandas_path(tmp_path, case: str) -> None:
    table = TRICKY_TABLES[case]
    arrow_batch = DocumentBatch(dataset_name="ds", data=table, _metadata={"source_files": ["a"]})
    arrow_batch._set_task_id(PARENT_ID, 0)
    pandas_batch = DocumentBatch(
        dataset_name="ds", data=table.to_pandas(), _metadata={"source_files": ["b"]}
    )
    pandas_batch._set_task_id(PARENT_ID, 0)
    writer = JsonlWriter(path=str(tmp_path))

    from_arrow = _read_back("jsonl", writer.process(arrow_batch).data[0])
    from_pandas = _read_back("jsonl", writer.process(pandas_batch).data[0])

    expected = table.to_pylist()
    if case == "dictionary_and_float":  # NaN-free comparison: pandas writes null for None
        expected = [{"cat": "a", "score": 0.1}, {"cat": "b", "score": None}]
    assert from_arrow == expected
    assert from_pandas == expected
    # key order follows the columns
    assert [list(r) for r in from_arrow] == [table.column_names] * table.num_rows


def test_jsonl_from_arrow_table_exact_bytes(tmp_path) -> None:
    table = pa.table({"text": ['say "hi"\n', None], "id": [1, None], "ok": [True, False]})
    batch = DocumentBatch(dataset_name="ds", data=table, _metadata={"source_files": ["a"]})
    batch._set_task_id(PARENT_ID, 0)

    result = JsonlWriter(path=str(tmp_path)).process(batch)

    with open(result.data[0], "rb") as f:
        payload = f.read()
    assert payload.splitlines() == [
        b'{"text":"say \\"hi\\"\\n","id":1,"ok":true}',
        b'{"text":null,"id":null,"ok":false}',
    ]
    assert payload.endswith(b"\n")


def test_jsonl_from_arrow_table_utf8_default_and_force_ascii(tmp_path) -> None:
    table = pa.table({"text": ["你好, 世界"], "id": [1]})
    batch = DocumentBatch(dataset_name="ds", data=table, _metadata={"source_files": ["a"]})
    batch._set_task_id(PARENT_ID, 0)

    utf8 = JsonlWriter(path=str(tmp_path / "utf8")).process(batch).data[0]
    ascii_ = JsonlWriter(path=str(tmp_path / "ascii"), write_kwargs={"force_ascii": True})
    ascii_path = ascii_.process(batch).data[0]

    with open(utf8, "rb") as f:
        assert f.read() == '{"text":"你好, 世界","id":1}\n'.encode()
    with open(ascii_path, "rb") as f:
        payload = f.read()
    assert b"\\u4f60" in payload
    assert payload.isascii()
    assert json.loads(payload) == {"text": "你好, 世界", "id": 1}


def test_jsonl_from_arrow_table_fields(tmp_path) -> None:
    table = pa.table({"text": ["a", "b"], "id": [1, 2], "flag": [True, False]})
    batch = DocumentBatch(dataset_name="ds", data=table, _metadata={"source_files": ["a"]})
    batch._set_task_id(PARENT_ID, 0)

    result = JsonlWriter(path=str(tmp_path), fields=["id", "text"]).process(batch)

    with open(result.data[0], "rb") as f:
        assert f.read() == b'{"id":1,"text":"a"}\n{"id":2,"text":"b"}\n'


def test_jsonl_from_arrow_table_missing_field_raises_key_error(tmp_path) -> None:
    out = tmp_path / "out"
    with pytest.raises(KeyError):
        JsonlWriter(path=str(out), fields=["text", "nope"]).process(_batch("pyarrow"))
    assert os.listdir(out) == []


@pytest.mark.parametrize("kind", ["pyarrow", "pandas"])
def test_empty_batch_written_as_jsonl_is_readable_with_allow_empty(tmp_path, kind: str) -> None:
    from curator_dask.stages.text.io.reader import JsonlReaderStage

    table = pa.table({"text": pa.array([], pa.string()), "id": pa.array([], pa.int64())})
    data = table if kind == "pyarrow" else table.to_pandas()
    batch = DocumentBatch(dataset_name="ds", data=data, _metadata={"source_files": ["a"]})
    batch._set_task_id(PARENT_ID, 0)

    result = JsonlWriter(path=str(tmp_path)).process(batch)
    assert _read_back("jsonl", result.data[0]) == []

    group = FileGroupTask(dataset_name="ds", data=result.data, _metadata={})
    group._set_task_id("0", 0)
    assert JsonlReaderStage(allow_empty=True).process(group).num_items == 0
