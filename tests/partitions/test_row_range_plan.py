"""Row-range partitions without a cluster: ``partition=`` values, JSONL line ranges and Parquet
row ranges that cover every row exactly once, reading a range alone, ids (docs/design/contract.md
§2.6) and compressed files. Files on local disk and on ``memory://``."""

from __future__ import annotations

import gzip
import json
import logging
import uuid

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curator_dask.lineage import get_deterministic_hash, output_basename, row_range_id
from curator_dask.partitions import jsonl as jsonl_scan
from curator_dask.stages.file_partitioning import FilePartitioningStage
from curator_dask.stages.text.io.reader import (
    JsonlReader,
    JsonlReaderStage,
    MalformedJsonError,
    ParquetReader,
    ParquetReaderStage,
)
from curator_dask.tasks import EmptyTask, FileGroupTask, RowRangeTask

MANUAL = [{"mode": "manual", "num_of_partitions": n} for n in (1, 3, 40)]
AUTO = [{"mode": "auto", "max_rows": n} for n in (1, 5)]


def doc(i: int, text: str = "x") -> bytes:
    return json.dumps({"id": i, "text": text}).encode()


# CRLF endings, blank and whitespace-only lines, no final newline; an empty file; LF lines.
TRICKY = {
    "a.jsonl": (doc(0) + b"\r\n" + b"\r\n" + doc(1) + b"\r\n" + b"   \n" + doc(2) + b"\n\n"
                + doc(3) + b"\r\n" + doc(4)),
    "b.jsonl": b"",
    "c.jsonl": b"".join(doc(i) + b"\n" for i in range(10, 17)),
    "d.jsonl": b"\n" + doc(20) + b"\n",
}


@pytest.fixture(params=["local", "memory"])
def root(request, tmp_path):
    """A folder for input files: ``tmp_path`` or a fresh ``memory://`` root."""
    if request.param == "local":
        yield str(tmp_path / "in")
        return
    path = f"memory://rr-{uuid.uuid4().hex}"
    yield path
    fs = fsspec.filesystem("memory")
    if fs.exists(path):
        fs.rm(path, recursive=True)


def write(root: str, files: dict[str, bytes]) -> None:
    fs, base = fsspec.core.url_to_fs(root)
    fs.makedirs(base, exist_ok=True)
    for name, data in files.items():
        fs.pipe_file(f"{base}/{name}", data)


def ids_of(batch) -> list[int]:
    return batch.to_pyarrow().column("id").to_pylist() if batch.num_items else []


def read_all(tasks, reader) -> list[int]:
    return [i for t in tasks for i in ids_of(reader.process(t))]


def whole_file_ids(root: str) -> list[int]:
    tasks = FilePartitioningStage(root, allow_no_files=True).process(EmptyTask())
    reader = JsonlReaderStage(allow_empty=True)
    return read_all(tasks, reader)


def check_tiling(tasks, root: str) -> None:
    """The pieces of each file, in task order, are its bytes end to end, once."""
    fs, _ = fsspec.core.url_to_fs(root)
    got: dict[str, bytes] = {}
    for task in tasks:
        for piece in task.pieces:
            _, path = fsspec.core.url_to_fs(piece["path"])
            got[piece["path"]] = got.get(piece["path"], b"") + fs.cat_file(
                path, start=piece["start_byte"], end=piece["end_byte"])
    for path, data in got.items():
        assert data == fs.cat_file(fsspec.core.url_to_fs(path)[1])


@pytest.mark.parametrize("chunk", [7, jsonl_scan.CHUNK], ids=["chunk7", "8MiB"])
@pytest.mark.parametrize("spec", MANUAL + AUTO, ids=lambda s: "-".join(map(str, s.values())))
def test_jsonl_ranges_cover_every_row_once(root, spec, chunk, monkeypatch):
    monkeypatch.setattr(jsonl_scan, "CHUNK", chunk)  # chunk edges inside lines and at newlines
    write(root, TRICKY)
    tasks = FilePartitioningStage(root, partition=spec).process(EmptyTask())
    assert all(isinstance(t, RowRangeTask) for t in tasks)
    # what a whole-file read gives, in the same order: blank lines are no documents either way
    assert read_all(tasks, JsonlReaderStage()) == whole_file_ids(root) == [
        0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 15, 16, 20]
    check_tiling(tasks, root)
    lines = sum(t.num_rows for t in tasks)
    assert lines == 8 + 7 + 2  # a.jsonl's 8 lines (the last one unterminated), c's 7, d's 2
    if spec["mode"] == "manual":
        sizes = [t.num_rows for t in tasks]
        assert len(tasks) == min(spec["num_of_partitions"], lines)
        assert max(sizes) - min(sizes) <= 1  # nearly equal
    else:
        assert max(t.num_rows for t in tasks) <= spec["max_rows"]
        assert all(len(t.pieces) == 1 for t in tasks)  # auto: each file on its own


def test_a_range_may_span_files_and_ids_hash_its_pieces(root):
    write(root, TRICKY)
    tasks = FilePartitioningStage(root, partition=MANUAL[1]).process(EmptyTask())
    spanning = [t for t in tasks if len(t.pieces) > 1]
    assert spanning and all(len(set(t.data)) == len(t.data) for t in tasks)
    for t in tasks:
        assert t.data == t._metadata["source_files"] == [p["path"] for p in t.pieces]
        assert t._metadata["row_ranges"] == [[p["path"], p["start_row"], p["end_row"]]
                                             for p in t.pieces]
        assert t.get_deterministic_id() == row_range_id(
            (p["path"], p["start_row"], p["end_row"]) for p in t.pieces)
        assert "_" not in t.get_deterministic_id() and len(t.get_deterministic_id()) == 12


def test_very_long_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(jsonl_scan, "CHUNK", 1 << 16)  # a line spans many chunks
    long = "y" * 1_200_000
    write(str(tmp_path / "in"), {"big.jsonl": doc(0) + b"\n" + doc(1, long) + b"\n" + doc(2, long)
                                 + b"\r\n" + doc(3) + b"\n"})
    for spec in (MANUAL[1], AUTO[0]):
        tasks = FilePartitioningStage(str(tmp_path / "in"), partition=spec).process(EmptyTask())
        texts = [r["text"] for t in tasks
                 for r in JsonlReaderStage().process(t).to_pyarrow().to_pylist()]
        assert texts == ["x", long, long, "x"]
        check_tiling(tasks, str(tmp_path / "in"))


def test_ids_stay_when_another_file_is_added(root):
    write(root, {"a.jsonl": TRICKY["a.jsonl"], "c.jsonl": TRICKY["c.jsonl"]})
    spec = {"mode": "auto", "max_rows": 3}
    before = {t.get_deterministic_id(): t.pieces
              for t in FilePartitioningStage(root, partition=spec).process(EmptyTask())}
    write(root, {"b2.jsonl": TRICKY["c.jsonl"]})  # sorts between the two
    after = {t.get_deterministic_id(): t.pieces
             for t in FilePartitioningStage(root, partition=spec).process(EmptyTask())}
    assert before.items() <= after.items()
    assert len(after) == len(before) + 3  # b2's 7 lines in ranges of 3


def test_two_partitions_of_one_file_get_different_output_names(tmp_path):
    write(str(tmp_path / "in"), {"c.jsonl": TRICKY["c.jsonl"]})
    tasks = FilePartitioningStage(str(tmp_path / "in"), partition=MANUAL[1]).process(EmptyTask())
    assert len({tuple(t.data) for t in tasks}) == 1 and len(tasks) == 3
    # the writer's rule: source files and the reader's output id "0_<partition id>_0"
    names = {output_basename(t._metadata["source_files"], f"0_{t.get_deterministic_id()}_0")
             for t in tasks}
    assert len(names) == 3


def test_a_bad_line_is_named_by_its_line_in_the_file(tmp_path):
    lines = [doc(i) for i in range(9)]
    lines[6] = b'{"id": 6, "text": '  # line 7 of the file
    write(str(tmp_path / "in"), {"bad.jsonl": b"\n".join(lines) + b"\n"})
    tasks = FilePartitioningStage(str(tmp_path / "in"),
                                  partition=MANUAL[1]).process(EmptyTask())
    assert [(t.pieces[0]["start_row"], t.pieces[0]["end_row"]) for t in tasks] == [
        (0, 3), (3, 6), (6, 9)]
    assert read_all(tasks[:2], JsonlReaderStage()) == list(range(6))
    with pytest.raises(MalformedJsonError, match=r"bad\.jsonl at line 7:"):
        JsonlReaderStage().process(tasks[2])


def test_auto_falls_back_to_size_when_the_sample_does_not_parse(tmp_path, caplog):
    data = b'{"id": 0, "v": "text"}\n{"id": 1, "v": 5}\n' + b"".join(
        doc(i) + b"\n" for i in range(2, 9))
    write(str(tmp_path / "in"), {"mixed.jsonl": data})
    with caplog.at_level(logging.WARNING, logger="curator_dask.partitions.plan"):
        tasks = FilePartitioningStage(str(tmp_path / "in"), partition={
            "mode": "auto", "size": 4}).process(EmptyTask())
    assert [t.num_rows for t in tasks] == [4, 4, 1]
    assert "1 file(s) could not be measured" in caplog.text and "size=4 rows" in caplog.text


def test_compressed_jsonl_stays_one_whole_file_partition(tmp_path, caplog):
    write(str(tmp_path / "in"), {"c.jsonl": TRICKY["c.jsonl"],
                                 "z.jsonl.gz": gzip.compress(TRICKY["c.jsonl"])})
    with caplog.at_level(logging.WARNING, logger="curator_dask.partitions.plan"):
        tasks = FilePartitioningStage(str(tmp_path / "in"), file_extensions=[".jsonl", ".gz"],
                                      partition=MANUAL[1]).process(EmptyTask())
    whole = [t for t in tasks if not isinstance(t, RowRangeTask)]
    assert len(tasks) == 4 and len(whole) == 1 and isinstance(whole[0], FileGroupTask)
    gz = str(tmp_path / "in" / "z.jsonl.gz")
    assert whole[0].data == [gz] and whole[0].get_deterministic_id() == get_deterministic_hash(
        [gz])  # NeMo Curator's whole-file id
    assert caplog.text.count("compressed JSONL file(s) cannot be split") == 1
    assert "1 compressed" in caplog.text
    assert read_all(tasks, JsonlReaderStage()) == list(range(10, 17)) * 2


def parquet_input(root: str) -> pa.Table:
    """p1: 5 row groups of 100 rows; p2: one row group of 700 rows (larger than the target)."""
    fs, base = fsspec.core.url_to_fs(root)
    fs.makedirs(base, exist_ok=True)
    table = pa.table({"id": list(range(1200)), "text": [f"t{i}" * (i % 7) for i in range(1200)],
                      "n": [None if i % 11 == 0 else i for i in range(1200)]})
    with fs.open(f"{base}/p1.parquet", "wb") as f:
        pq.write_table(table.slice(0, 500), f, row_group_size=100)
    with fs.open(f"{base}/p2.parquet", "wb") as f:
        pq.write_table(table.slice(500), f, row_group_size=700)
    return table


@pytest.mark.parametrize("spec", [MANUAL[1], {"mode": "auto", "max_rows": 250}],
                         ids=["manual3", "auto250"])
def test_parquet_ranges_cover_every_row_once(root, spec):
    table = parquet_input(root)
    tasks = FilePartitioningStage(root, partition=spec).process(EmptyTask())
    reader = ParquetReaderStage()
    read = pa.concat_tables([reader.process(t).to_pyarrow() for t in tasks])
    assert read.equals(table)
    ranges = [(p["path"].rsplit("/", 1)[-1], p["start_row"], p["end_row"])
              for t in tasks for p in t.pieces]
    if spec["mode"] == "auto":  # row-group boundaries, except inside p2's one big row group
        assert ranges == [("p1.parquet", 0, 200), ("p1.parquet", 200, 400),
                          ("p1.parquet", 400, 500), ("p2.parquet", 0, 233),
                          ("p2.parquet", 233, 466), ("p2.parquet", 466, 700)]
    else:  # 1200 rows in 3 ranges of 400, the second across both files
        assert ranges == [("p1.parquet", 0, 400), ("p1.parquet", 400, 500),
                          ("p2.parquet", 0, 300), ("p2.parquet", 300, 700)]


def test_parquet_range_reads_fields_and_filters(tmp_path):
    parquet_input(str(tmp_path / "in"))
    tasks = ParquetReader(str(tmp_path / "in"), partition={"mode": "auto", "max_rows": 250},
                          fields=["id"], read_kwargs={"filters": [("id", "<", 250)]}
                          ).decompose()[0].process(EmptyTask())
    stage = ParquetReaderStage(fields=["id"], read_kwargs={"filters": [("id", "<", 250)]})
    got = [stage.process(t).to_pyarrow() for t in tasks[:2]]
    assert [t.column_names for t in got] == [["id"], ["id"]]
    assert [t.num_rows for t in got] == [200, 50]


@pytest.mark.parametrize(("partition", "error"), [
    ({"mode": "auto", "target_size_mb": 300}, r"target_size_mb must be one of \[128, 256, 512, "
                                              r"1024\], got 300"),
    ({"mode": "auto", "num_of_partitions": 2}, r"unknown key\(s\) \['num_of_partitions'\] for "
                                               r"mode 'auto'; the valid keys are \['mode', "
                                               r"'target_size_mb', 'size', 'max_size_mb', "
                                               r"'max_rows'\]"),
    ({"mode": "manual"}, "mode 'manual' needs num_of_partitions"),
    ({"mode": "manual", "num_of_partitions": 0}, "num_of_partitions must be a positive integer"),
    ({"mode": "fast"}, r"'mode' must be one of \['manual', 'auto'\], got 'fast'"),
    ({"mode": "auto", "size": -1}, "size must be a positive integer, got -1"),
])
def test_bad_partition_values_are_refused_naming_the_valid_ones(partition, error):
    with pytest.raises(ValueError, match=error):
        JsonlReader("in/", partition=partition)
    with pytest.raises(ValueError, match=error):
        FilePartitioningStage("in/", partition=partition)


def test_partition_with_whole_file_grouping_or_forced_compression_is_refused():
    with pytest.raises(ValueError, match="files_per_partition=2 groups whole files: give one"):
        JsonlReader("in/", files_per_partition=2, partition=AUTO[0])
    with pytest.raises(ValueError, match="blocksize='1MB' groups whole files"):
        FilePartitioningStage("in/", blocksize="1MB", partition=MANUAL[0])
    with pytest.raises(ValueError, match="compression='gzip' does not allow"):
        JsonlReader("in/", partition=AUTO[0], read_kwargs={"compression": "gzip"})


def test_whole_file_default_and_canonical_partition_value():
    assert FilePartitioningStage("in/").partition is None
    reader = JsonlReader("in/", partition={"mode": "auto", "max_rows": 9})
    assert reader.decompose()[0].partition == {"mode": "auto", "target_size_mb": 256,
                                               "size": 10000, "max_size_mb": 256, "max_rows": 9}


def test_contract_vectors():
    """docs/design/contract.md §2.6."""
    assert row_range_id([("/data/in/a.jsonl", 0, 5000)]) == "2318ff57c281"
    assert row_range_id([("/data/in/a.jsonl", 5000, 10000)]) == "466ba8168819"
    assert row_range_id([("/data/in/a.jsonl", 9000, 9500),
                         ("/data/in/b.jsonl", 0, 500)]) == "731f0962befc"
    assert row_range_id([("/data/in/b.jsonl", 0, 500),
                         ("/data/in/a.jsonl", 9000, 9500)]) == "731f0962befc"  # sorted
    assert get_deterministic_hash(["/data/in/a.jsonl#rows=0-5000"]) == "2318ff57c281"
    assert row_range_id([("/data/in/a.jsonl", 0, 10000)]) == "8478f068291d"
    assert output_basename(["/data/in/a.jsonl"], "0_2318ff57c281_0") == "4fe5aa74794e"
    assert output_basename(["/data/in/a.jsonl"], "0_466ba8168819_0") == "baa438aaf099"
