"""Stage checkpoint storage as Data-Juicer's ``intermediate_storage`` configures it: every format
and compression round-trips a typed table through the real store (local files and memory://)
with its integrity checks, JSONL gets its types back from the schema in the manifest, and the
CLI options map onto the settings. (``cleanup_all`` in real runs: test_stage_checkpoints.py.)
"""

from __future__ import annotations

import datetime
import decimal
import gzip
import json

import pandas as pd
import pyarrow as pa
import pytest

from curator_dask.cli.common import UsageError
from curator_dask.cli.main import build_parser
from curator_dask.cli.run_command import checkpoint_kwargs
from curator_dask.resumability.stage_checkpoints import (
    COMPRESSIONS,
    MANIFEST,
    SUBDIR,
    CheckpointUnusable,
    StageCheckpoints,
    StageCheckpointStore,
)
from curator_dask.tasks import DocumentBatch

EVERY_FORMAT_AND_COMPRESSION = [(f, c) for f, cs in COMPRESSIONS.items() for c in cs]


def typed_table() -> pa.Table:
    """Strings (escapes, newlines, non-ASCII), ints of several widths, floats (NaN, infinities,
    -0.0, a float32 denormal), bools, an all-null column, lists; and the types JSON has no
    own form for (timestamps with a zone, dates, decimals, durations, dictionaries, structs,
    fixed-size lists)."""
    return pa.table({
        "text": ["plain", 'quote " backslash \\ newline \n tab \t', None, "é 中 \u2028 \x01", ""],
        "i8": pa.array([1, -128, None, 127, 0], pa.int8()),
        "i64": [2**62, -(2**63), None, 0, 7],
        "u64": pa.array([2**64 - 1, 0, None, 1, 2], pa.uint64()),
        "f64": [1.5, float("nan"), None, float("inf"), -0.0],
        "f32": pa.array([0.1, 3.4e38, None, float("-inf"), 1e-45], pa.float32()),
        "flag": [True, False, None, True, False],
        "nothing": pa.nulls(5),
        "ints": [[1, None], [], None, [2**40], [0]],
        "words": [["a"], [None, "b"], None, [], ["\n"]],
        "when": pa.array([0, 1_700_000_000_123_456_789, None, -1, 5],
                         pa.timestamp("ns", tz="Europe/Paris")),
        "day": pa.array([0, 19_000, None, -1, 3], pa.date32()),
        "price": pa.array([decimal.Decimal("1.25"), None, decimal.Decimal("-3.00"),
                           decimal.Decimal("0.01"), decimal.Decimal("999.99")],
                          pa.decimal128(5, 2)),
        "took": pa.array([5, None, 7, 0, -2], pa.duration("ms")),
        "lang": pa.array(["en", "de", None, "en", "fr"]).dictionary_encode(),
        "meta": pa.array([{"k": 1, "at": datetime.datetime(2020, 1, 1)}, None,
                          {"k": None, "at": None}, {"k": -1, "at": None}, {"k": 2, "at": None}],
                         pa.struct([("k", pa.int16()), ("at", pa.timestamp("us"))])),
        "pair": pa.array([[1, 2], [3, 4], None, [5, 6], [7, 8]], pa.list_(pa.int32(), 2)),
    })


def task(task_id: str, data) -> DocumentBatch:
    t = DocumentBatch(dataset_name="d", data=data, _metadata={"source_files": ["a.jsonl"]})
    t.task_id, t._source_id = task_id, "s"
    return t


@pytest.fixture(params=["local", "memory"])
def store_url(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "ckpt")
    return f"memory://scf-{tmp_path.name}/ckpt"


@pytest.mark.parametrize(("fmt", "compression"), EVERY_FORMAT_AND_COMPRESSION)
def test_every_format_and_compression_restores_the_same_tables(store_url, fmt, compression):
    table = typed_table()
    frame = pd.DataFrame({"text": ["x", "y"], "n": [1.5, 2.0]}, index=[10, 20])  # an index
    store = StageCheckpointStore(store_url, fmt=fmt, compression=compression)
    name, _ = store.save("s", 2, "fp", "cheap", [[task("0_s_0", table)], [task("0_s_1", frame)]],
                         [("0_s_0", "s", 1)], "in1")
    manifest = json.loads(store.fs.cat_file(store._path(name, MANIFEST)))
    suffix = "jsonl.gz" if compression == "gzip" and fmt == "jsonl" else fmt
    assert [(f["file"], f["format"], f["compression"]) for f in manifest["files"]] == [
        (f"part-{i:05d}.{suffix}", fmt, compression) for i in range(2)]

    (restored,), (pandas_task,) = store.load(name, "fp", "in1")[0]
    got = restored.data
    assert got.schema.equals(table.schema, check_metadata=True)  # types, not only values
    assert str(got.to_pylist()) == str(table.to_pylist())  # str: NaN equals NaN
    pd.testing.assert_frame_equal(pandas_task.data, frame)

    # the integrity checks hold for every format and compression: one byte flipped, same size
    path = store._path(name, manifest["files"][0]["file"])
    raw = bytearray(store.fs.cat_file(path))
    raw[len(raw) // 2] ^= 0x20
    store.fs.pipe_file(path, bytes(raw))
    with pytest.raises(CheckpointUnusable, match="does not match the sha256 digest"):
        store.load(name, "fp", "in1")


def test_jsonl_is_json_lines_any_tool_reads(tmp_path):
    store = StageCheckpointStore(str(tmp_path / "ckpt"), fmt="jsonl", compression="gzip")
    name, _ = store.save("s", 1, "fp", "a", [[task("0_s_0", typed_table())]], [], None)
    # bytes.splitlines: only \n and \r end a line (str.splitlines also splits at U+2028)
    lines = gzip.decompress((tmp_path / "ckpt" / SUBDIR / name / "part-00000.jsonl.gz")
                            .read_bytes()).splitlines()
    rows = [json.loads(line) for line in lines]
    assert len(rows) == 5 and rows[0]["text"] == "plain" and rows[1]["lang"] == "de"
    assert rows[0]["when"] == "1970-01-01 01:00:00.000000000+0100"  # ISO text, zone kept


def test_jsonl_refuses_a_type_it_cannot_hold_naming_the_formats_that_can(tmp_path):
    store = StageCheckpointStore(str(tmp_path / "ckpt"), fmt="jsonl")
    table = pa.table({"text": ["a"], "payload": [b"\x00\xff"]})
    with pytest.raises(ValueError, match="cannot hold 'payload' of type binary without loss; "
                                         "use format arrow or parquet"):
        store.save("s", 1, "fp", "a", [[task("0_s_0", table)]], [], None)


def test_compression_defaults_per_format_and_the_fingerprint_of_older_jobs():
    assert [StageCheckpoints(format=f).compression for f in COMPRESSIONS] == [
        "none", "snappy", "none"]
    settings = StageCheckpoints.coerce({"strategy": "every_stage", "n": None, "stages": [],
                                        "format": "parquet", "compression": None,
                                        "retention": "cleanup_all"})  # the config section
    assert settings.to_dict() == {"strategy": "every_stage", "n": None, "stages": [],
                                  "format": "parquet", "compression": "snappy",
                                  "retention": "cleanup_all"}
    # a format's default compression is left out of what strict resume compares, so a job
    # recorded before compression existed resumes; another compression is compared
    assert "compression" not in settings.fingerprint()
    assert StageCheckpoints(format="parquet", compression="gzip").fingerprint()[
        "compression"] == "gzip"


def parse(*argv: str):
    return build_parser().parse_args(["run", "p.yaml", "--stage-checkpoints", "every_stage",
                                      *argv])


def test_cli_options():
    sc = checkpoint_kwargs(parse("--checkpoint-format", "jsonl", "--checkpoint-compression",
                                 "gzip", "--checkpoint-retention", "cleanup_all"))
    got = sc["stage_checkpoints"]
    assert (got.format, got.compression, got.retention) == ("jsonl", "gzip", "cleanup_all")
    assert checkpoint_kwargs(parse("--checkpoint-format", "parquet"))[
        "stage_checkpoints"].compression == "snappy"
    with pytest.raises(UsageError, match="compression 'snappy' does not go with format 'jsonl':"
                                         " its compressions are none, gzip"):
        checkpoint_kwargs(parse("--checkpoint-format", "jsonl",
                                "--checkpoint-compression", "snappy"))
