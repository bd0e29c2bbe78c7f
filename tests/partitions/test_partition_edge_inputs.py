"""Row-range partitions on the inputs of the field test (issue 32, items 9 and 11): a JSONL file
whose documents are larger than Arrow's parse block is measured in ``auto`` mode; a range made
only of blank lines is an empty batch with the reader's columns, which NeMo Curator's
``ScoreFilter`` accepts; ``file_extensions=[".jsonl.gz"]`` finds ``.jsonl.gz`` files.

Real files under ``tmp_path``; the runs use a real LocalCluster (the ``executor`` fixture).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import fsspec
import pyarrow as pa
import pytest

from curator_dask import JsonlReader, JsonlWriter, Pipeline
from curator_dask.partitions import jsonl
from curator_dask.resumability.layout import PARTITION_INFO_PATH
from curator_dask.stages.file_partitioning import FilePartitioningStage
from curator_dask.stages.text.io.reader import JsonlReaderStage
from curator_dask.tasks import EmptyTask, RowRangeTask

BIG = 2 << 20  # one real document of 2 MiB: twice Arrow's default parse block


def _docs(ids: range, text: str = "a document of words") -> list[str]:
    return [json.dumps({"id": i, "text": f"{text} {i}"}) for i in ids]


def _write(path: Path, lines: list[str]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _ids(folder: Path) -> list[int]:
    return sorted(json.loads(line)["id"] for p in folder.glob("*.jsonl")
                  for line in p.read_text().splitlines() if line)


# --------------------------------------------------------------------------------------------
# Item 9: documents larger than Arrow's block are measured
# --------------------------------------------------------------------------------------------


def test_sample_measures_lines_longer_than_the_block_and_the_sample(tmp_path: Path) -> None:
    lines = [_docs(range(1))[0], json.dumps({"id": 1, "text": "x" * BIG}), *_docs(range(2, 9))]
    path = _write(tmp_path / "big.jsonl", lines)
    fs, size = fsspec.filesystem("file"), (tmp_path / "big.jsonl").stat().st_size
    measured = jsonl.sample(fs, path, size)
    assert measured.reason is None and measured.memory_bytes_per_row > BIG / 9
    # the first line alone is longer than the sample: the read grows until it ends
    first = _write(tmp_path / "first.jsonl", lines[1:])
    grown = jsonl.sample(fs, first, (tmp_path / "first.jsonl").stat().st_size, limit=1 << 20)
    assert grown.reason is None and grown.memory_bytes_per_row > BIG / 8


@pytest.mark.slow
def test_auto_run_measures_a_file_with_a_2_mb_document(tmp_path: Path, executor) -> None:
    lines = [*_docs(range(3)), json.dumps({"id": 3, "text": "x" * BIG}), *_docs(range(4, 40))]
    _write(tmp_path / "in" / "big.jsonl", lines)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    (Pipeline(name="big-docs")
     .add_stage(JsonlReader(str(tmp_path / "in"), partition={"mode": "auto",
                                                             "target_size_mb": 128}))
     .add_stage(JsonlWriter(str(out)))).run(executor=executor, checkpoint_path=str(ckpt))
    record = json.loads((ckpt / PARTITION_INFO_PATH).read_text())
    (analysis,) = [f["analysis"] for f in record["files"]]
    assert "fallback" not in analysis, analysis
    assert analysis["memory_bytes_per_row"] > BIG / 40
    assert _ids(out) == list(range(40))


# --------------------------------------------------------------------------------------------
# Item 11: a range of blank lines is an empty batch with the reader's columns
# --------------------------------------------------------------------------------------------


BLANK_RANGE = (_docs(range(2)) + ["", "", ""] + _docs(range(2, 4)))  # rows 2-4 are blank
MANUAL3 = {"mode": "manual", "num_of_partitions": 3}  # rows 0-2, 2-4 (blank), 4-7


@pytest.mark.parametrize(("fields", "columns"), [(None, ["id", "text"]), (["text"], ["text"]),
                                                 (["text", "lang"], ["text"])])
def test_blank_range_has_the_columns_of_the_file(tmp_path: Path, fields, columns) -> None:
    path = _write(tmp_path / "a.jsonl", BLANK_RANGE)
    start = sum(len(line) + 1 for line in BLANK_RANGE[:2])
    task = RowRangeTask.of([{"path": path, "start_row": 2, "end_row": 4, "start_byte": start,
                             "end_byte": start + 2}], dataset_name="ds")
    data = JsonlReaderStage(fields=fields).process(task).data
    assert (data.num_rows, data.column_names) == (0, columns)
    assert data.schema.field("text").type == pa.string()
    frame = JsonlReaderStage(fields=fields, read_kwargs={"engine": "pandas"}).process(task).data
    assert (len(frame), list(frame.columns)) == (0, columns)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["pyarrow_direct", "pandas"])
def test_nemo_score_filter_after_a_range_of_blank_lines(tmp_path: Path, executor,
                                                        engine: str) -> None:
    from nemo_curator.stages.text.filters import ScoreFilter
    from nemo_curator.stages.text.filters.heuristic import WordCountFilter

    _write(tmp_path / "in" / "a.jsonl", BLANK_RANGE)
    reader = JsonlReader(str(tmp_path / "in"), partition=MANUAL3,
                         read_kwargs={"engine": engine})
    pieces = [t.pieces for t in reader.decompose()[0].process(EmptyTask())]
    assert [(p[0]["start_row"], p[0]["end_row"]) for p in pieces] == [(0, 2), (2, 4), (4, 7)]
    result = (Pipeline(name="blank-range").add_stage(reader)
              .add_stage(ScoreFilter(WordCountFilter(min_words=3), text_field="text"))
              .add_stage(JsonlWriter(str(tmp_path / "out")))).run(executor=executor)
    assert result.num_sources == 3
    assert _ids(tmp_path / "out") == [0, 1, 2, 3]


# --------------------------------------------------------------------------------------------
# Item 11, second part: extensions of two parts
# --------------------------------------------------------------------------------------------


def _gz(path: Path, lines: list[str]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    return str(path)


@pytest.mark.slow
def test_jsonl_gz_extension_lists_and_reads_the_files(tmp_path: Path, executor) -> None:
    a = _gz(tmp_path / "in" / "a.jsonl.gz", _docs(range(3)))
    _gz(tmp_path / "in" / ".jsonl.gz", _docs(range(9, 10)))  # hidden, named like the extension
    _write(tmp_path / "in" / "b.jsonl", _docs(range(5, 6)))
    stage = FilePartitioningStage(str(tmp_path / "in"), file_extensions=[".JSONL.gz"])
    assert [t.data for t in stage.process(EmptyTask())] == [[a]]
    (Pipeline(name="gz")
     .add_stage(JsonlReader(str(tmp_path / "in"), file_extensions=[".jsonl.gz"]))
     .add_stage(JsonlWriter(str(tmp_path / "out")))).run(executor=executor)
    assert _ids(tmp_path / "out") == [0, 1, 2]
