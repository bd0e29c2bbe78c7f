"""Invalid UTF-8 in Parquet string columns (field test, issue 19, item 4).

Arrow's Parquet reader does not check that a ``string`` column holds UTF-8, so such bytes used
to reach the output. The files here are real Parquet files written by ``pq.write_table`` from
string arrays whose bytes are not UTF-8 (``pa.binary`` data viewed as ``pa.string``: Arrow
checks nothing there either). The reader stage is called directly, then a real pipeline runs
``ParquetReader -> JsonlWriter`` on the ``executor`` fixture's LocalCluster.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curator_dask import JsonlWriter, Pipeline
from curator_dask.errors import StageError
from curator_dask.stages.text.io.reader import InvalidUtf8Error, ParquetReader, ParquetReaderStage
from curator_dask.tasks import FileGroupTask

BAD = b"ok \xff\xfe bad"
TEXTS = [b"good one", BAD, b"good two"]


def _strings(values: list[bytes | None], binary: pa.DataType | None = None,
             string: pa.DataType | None = None) -> pa.Array:
    """A string array holding ``values`` as they are, valid UTF-8 or not."""
    return pa.array(values, binary or pa.binary()).view(string or pa.string())


def _write(path: Path, table: pa.Table, **kwargs) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, **kwargs)
    return str(path)


def _text_file(path: Path) -> str:
    return _write(path, pa.table({"text": _strings(TEXTS), "id": [1, 2, 3]}))


def _task(paths: list[str]) -> FileGroupTask:
    task = FileGroupTask(dataset_name="ds", data=paths, _metadata={"source_files": paths})
    task._set_task_id("0_abc", 0)
    return task


def _replace(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", errors="replace")


# --------------------------------------------------------------------------------------------
# 1. The three modes on a string column
# --------------------------------------------------------------------------------------------


def test_invalid_utf8_is_an_error_naming_file_column_and_row(tmp_path: Path) -> None:
    path = _text_file(tmp_path / "bad.parquet")
    # the premise: the bytes survive the round trip and only a full validation sees them
    as_read = pq.read_table(path)
    assert as_read.column("text").type == pa.string()
    with pytest.raises(pa.ArrowInvalid, match="Invalid UTF8"):
        as_read.validate(full=True)
    with pytest.raises(InvalidUtf8Error) as info:
        ParquetReaderStage().process(_task([path]))
    message = str(info.value)
    assert f"Invalid UTF-8 in {path}, column 'text', row 1 (counted from 0)" in message
    assert "invalid_utf8='replace'" in message and "'skip'" in message


def test_replace_and_skip_are_counted_and_warned(tmp_path: Path, caplog) -> None:
    path = _text_file(tmp_path / "bad.parquet")
    replaced = ParquetReaderStage(invalid_utf8="replace")
    with caplog.at_level(logging.WARNING):
        data = replaced.process(_task([path])).data
    assert data.column("text").to_pylist() == ["good one", "ok \ufffd\ufffd bad", "good two"]
    assert data.column("id").to_pylist() == [1, 2, 3]
    data.validate(full=True)
    assert replaced._consume_custom_metrics() == {"invalid_utf8_rows_replaced": 1}
    assert any(path in r.getMessage() and "replaced" in r.getMessage() for r in caplog.records)

    skipped = ParquetReaderStage(invalid_utf8="skip")
    batch = skipped.process(_task([path]))
    assert batch.data.column("text").to_pylist() == ["good one", "good two"]
    assert batch.data.column("id").to_pylist() == [1, 3]
    assert skipped._consume_custom_metrics() == {"invalid_utf8_rows_skipped": 1}
    with pytest.raises(ValueError, match="invalid_utf8 must be one of"):
        ParquetReaderStage(invalid_utf8="ignore")


def test_binary_columns_are_left_alone(tmp_path: Path) -> None:
    """Only the string column's bad row counts; binary bytes pass as they are."""
    raw = [b"\xff\x00", b"\xc3", None]
    table = pa.table({"blob": pa.array(raw, pa.binary()), "text": _strings(TEXTS)})
    path = _write(tmp_path / "bin.parquet", table)
    stage = ParquetReaderStage(invalid_utf8="skip")
    data = stage.process(_task([path])).data
    assert data.column("blob").to_pylist() == [raw[0], raw[2]]
    assert data.column("text").to_pylist() == ["good one", "good two"]
    assert stage._consume_custom_metrics() == {"invalid_utf8_rows_skipped": 1}
    valid = _write(tmp_path / "valid.parquet",
                   table.set_column(1, "text", pa.array(["a", "ü", None])))
    data = stage.process(_task([valid])).data
    assert data.column("blob").to_pylist() == raw and data.num_rows == 3
    assert stage._consume_custom_metrics() == {}


def test_rows_are_counted_in_the_file_across_row_groups_and_columns(tmp_path: Path) -> None:
    """Bad rows in the third row group and in two columns; a value that ends in a cut sequence
    is bad even when the next value's bytes would complete it."""
    text = [b"a", b"b", b"c", b"d", b"\xc3", b"\xa9", b"g"]
    title = [b"t", b"t", b"t", b"t", b"t", b"t", b"\xe2\x82"]
    path = _write(tmp_path / "groups.parquet",
                  pa.table({"text": _strings(text), "title": _strings(title)}), row_group_size=2)
    assert pq.ParquetFile(path).num_row_groups == 4
    with pytest.raises(InvalidUtf8Error) as info:
        ParquetReaderStage().process(_task([path]))
    assert f"{path}, column 'text', row 4 (counted from 0) (3 rows in all, in columns " \
           "['text', 'title'])" in str(info.value)

    skipped = ParquetReaderStage(invalid_utf8="skip")
    assert skipped.process(_task([path])).data.column("text").to_pylist() == list("abcd")
    assert skipped._consume_custom_metrics() == {"invalid_utf8_rows_skipped": 3}
    replaced = ParquetReaderStage(invalid_utf8="replace", fields=["title", "text"])
    data = replaced.process(_task([path])).data
    assert data.column_names == ["title", "text"]
    assert data.column("text").to_pylist() == [_replace(v) for v in text]
    assert data.column("title").to_pylist() == [_replace(v) for v in title]
    assert replaced._consume_custom_metrics() == {"invalid_utf8_rows_replaced": 3}


# --------------------------------------------------------------------------------------------
# 2. Other string layouts: wide and view strings, lists, structs, maps, dictionaries
# --------------------------------------------------------------------------------------------


def _nested_cases() -> dict[str, tuple[pa.Array, list, list[int]]]:
    """name -> (column, what "replace" must give, the bad rows)."""
    fffd = "\ufffd"
    words = _strings([b"a", b"\xff", b"c", b"d", b"\xfe"])
    return {
        "large_string": (_strings([b"a", b"\xff", None], pa.large_binary(), pa.large_string()),
                         ["a", fffd, None], [1]),
        "string_view": (_strings([b"a", b"x" * 20 + b"\xff"], pa.binary_view(),
                                 pa.string_view()), ["a", "x" * 20 + fffd], [1]),
        "list": (pa.ListArray.from_arrays(pa.array([0, 1, 3, 4, 5], pa.int32()), words,
                                          mask=pa.array([False, False, False, True])),
                 [["a"], [fffd, "c"], ["d"], None], [1]),
        "fixed_size_list": (pa.FixedSizeListArray.from_arrays(words.slice(0, 4), 2),
                            [["a", fffd], ["c", "d"]], [0]),
        "struct": (pa.StructArray.from_arrays([words.slice(2, 3), pa.array([1, 2, 3])],
                                              ["s", "n"]),
                   [{"s": "c", "n": 1}, {"s": "d", "n": 2}, {"s": fffd, "n": 3}], [2]),
        "map": (pa.MapArray.from_arrays(pa.array([0, 1, 2], pa.int32()),
                                        _strings([b"k", b"\xffk"]), _strings([b"\xfe", b"v"])),
                [[("k", fffd)], [(f"{fffd}k", "v")]], [0, 1]),
    }


@pytest.mark.parametrize("kind", list(_nested_cases()))
def test_nested_and_other_string_types_in_all_modes(tmp_path: Path, kind: str) -> None:
    column, expected, bad_rows = _nested_cases()[kind]
    n = len(column)
    path = _write(tmp_path / f"{kind}.parquet", pa.table({"col": column, "i": range(n)}))
    assert pq.read_table(path).column("col").type == column.type  # Arrow's schema kept it
    with pytest.raises(InvalidUtf8Error, match=f"column 'col', row {bad_rows[0]} "):
        ParquetReaderStage().process(_task([path]))
    replaced = ParquetReaderStage(invalid_utf8="replace")
    data = replaced.process(_task([path])).data
    assert data.column("col").type == column.type
    assert data.column("col").to_pylist() == expected
    assert replaced._consume_custom_metrics() == {"invalid_utf8_rows_replaced": len(bad_rows)}
    skipped = ParquetReaderStage(invalid_utf8="skip", allow_empty=True)
    data = skipped.process(_task([path])).data
    assert data.column("i").to_pylist() == [i for i in range(n) if i not in bad_rows]


@pytest.mark.parametrize("mode", ["error", "replace", "skip"])
def test_dictionary_column_is_refused_naming_the_file(tmp_path: Path, mode: str) -> None:
    """Arrow's reader checks a dictionary (pandas category) column itself and cannot be told
    not to, so no mode can read it: the error says so and names the file."""
    column = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0]), _strings([b"a", b"\xff"]))
    path = _write(tmp_path / "dict.parquet", pa.table({"col": column, "i": [0, 1, 2]}))
    stage = ParquetReaderStage(**({} if mode == "error" else {"invalid_utf8": mode}))
    with pytest.raises(InvalidUtf8Error, match=f"Invalid UTF-8 in {re.escape(path)}: .*dictionary"):
        stage.process(_task([path]))
    data = ParquetReaderStage(fields=["i"]).process(_task([path])).data
    assert data.column("i").to_pylist() == [0, 1, 2]


values = st.lists(st.one_of(st.none(), st.binary(max_size=6),
                            st.sampled_from([b"\xc3", b"\xa9", b"\xed\xa0\x80", b"\xf4\x90\x80",
                                             b"\xc0\xaf", "é✓".encode()])), max_size=40)


@settings(max_examples=200, deadline=None)
@given(values=values, start=st.integers(0, 40), wide=st.booleans())
def test_bad_rows_and_replacement_match_python_decoding(values: list, start: int,
                                                        wide: bool) -> None:
    """Exact agreement with ``bytes.decode`` value by value, on any slice of the array."""
    from curator_dask.stages.text.io.reader.parquet import _bad_rows, _replaced

    binary, string = (pa.large_binary(), pa.large_string()) if wide else (pa.binary(), pa.string())
    arr = _strings(values, binary, string).slice(min(start, len(values)))
    kept = values[min(start, len(values)):]
    expected = []
    for row, value in enumerate(kept):
        try:
            value is None or value.decode("utf-8")
        except UnicodeDecodeError:
            expected.append(row)
    rows = _bad_rows(arr)
    assert rows.tolist() == expected
    fixed = _replaced(arr, rows)
    fixed.validate(full=True)
    assert fixed.to_pylist() == [_replace(v) for v in kept]


# --------------------------------------------------------------------------------------------
# 3. The composite passes the option on; a real run
# --------------------------------------------------------------------------------------------


def test_parquet_reader_passes_invalid_utf8_on() -> None:
    for mode in ("error", "replace", "skip"):
        stage = ParquetReader(file_paths="x/", invalid_utf8=mode).decompose()[1]
        assert isinstance(stage, ParquetReaderStage) and stage.invalid_utf8 == mode
    with pytest.raises(ValueError, match="invalid_utf8 must be one of .* got 'drop'"):
        ParquetReader(file_paths="x/", invalid_utf8="drop").decompose()


def _pipeline(reader: ParquetReader, out: Path) -> Pipeline:
    return Pipeline(name="parquet-utf8").add_stage(reader).add_stage(JsonlWriter(path=str(out)))


@pytest.mark.slow
def test_run_fails_naming_the_file_or_writes_replaced_and_skipped_jsonl(tmp_path: Path,
                                                                        executor) -> None:
    path = _text_file(tmp_path / "in" / "bad.parquet")
    out = tmp_path / "out-error"
    expected_error = f"InvalidUtf8Error: Invalid UTF-8 in {path}, column 'text', row 1 "
    with pytest.raises(StageError, match=re.escape(expected_error)):
        _pipeline(ParquetReader(file_paths=str(tmp_path / "in")), out).run(executor=executor)
    assert not out.exists() or not list(out.iterdir())

    for mode, expected in (("replace", ["good one", "ok \ufffd\ufffd bad", "good two"]),
                           ("skip", ["good one", "good two"])):
        out = tmp_path / f"out-{mode}"
        result = _pipeline(ParquetReader(file_paths=str(tmp_path / "in"), invalid_utf8=mode),
                           out).run(executor=executor)
        (written,) = out.iterdir()
        lines = written.read_bytes().decode("utf-8").splitlines()  # strict: fails on bad bytes
        assert [json.loads(line)["text"] for line in lines] == expected
        (reader_count,) = [c for name, c in result.stage_counts if name == "parquet_reader"]
        assert reader_count.items_out == len(expected)
        metrics = {k: v for task in result for perf in task._stage_perf
                   for k, v in perf.custom_metrics.items()}
        done = "replaced" if mode == "replace" else "skipped"
        assert metrics == {f"invalid_utf8_rows_{done}": 1}
