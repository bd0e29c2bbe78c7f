"""``partitioning_info.json`` and strict resume from it, without a cluster: the source stage is
given the checkpoint as the run gives it (``use_partition_record``), then makes its tasks.
Completions are real LMDB writer files (``CompletionStore``)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curator_dask.errors import PartitionContentChangedError, PartitionRecordError
from curator_dask.lineage import get_deterministic_hash, row_range_id
from curator_dask.resumability.layout import PARTITION_INFO_PATH
from curator_dask.resumability.store import CompletionStore
from curator_dask.stages.file_partitioning import FilePartitioningStage
from curator_dask.tasks import EmptyTask
from tests.helpers import moto_s3

AUTO3 = {"mode": "auto", "max_rows": 3}


def make_input(folder: Path, files: int = 2, lines: int = 8) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        (folder / f"part-{f}.jsonl").write_bytes(b"".join(
            json.dumps({"id": f"{f}-{i}", "text": f"document {i} of file {f}"}).encode() + b"\n"
            for i in range(lines)))
    return folder


def run(folder: Path, ckpt: Path | None, partition=AUTO3, *, strict: bool = False, **kw):
    """The source stage's tasks as a run makes them: settled against ``ckpt``, then process."""
    stage = FilePartitioningStage(str(folder), partition=partition, **kw)
    stage.use_partition_record(None if ckpt is None else str(ckpt), None, strict=strict)
    return stage.process(EmptyTask())


def record_of(ckpt: Path) -> dict:
    return json.loads((ckpt / PARTITION_INFO_PATH).read_text())


def snapshot(ckpt: Path) -> dict[str, bytes]:
    return {str(p.relative_to(ckpt)): p.read_bytes() for p in sorted(ckpt.rglob("*"))
            if p.is_file()}


def complete(ckpt: Path, ids) -> None:
    store = CompletionStore(str(ckpt), writer_id="earlier-run")
    store.add(list(ids))
    store.close()


def test_the_first_checkpointed_run_records_boundaries_and_hashes(tmp_path):
    data = make_input(tmp_path / "in")
    tasks = run(data, tmp_path / "ckpt")
    rec = record_of(tmp_path / "ckpt")
    assert rec["version"] == 1 and rec["num_partitions"] == len(tasks) == 6
    assert rec["parameters"]["partition"] == {"mode": "auto", "target_size_mb": 256,
                                              "size": 10000, "max_size_mb": 256, "max_rows": 3}
    assert [p["id"] for p in rec["partitions"]] == [t.get_deterministic_id() for t in tasks]
    assert [f["path"] for f in rec["files"]] == [str(data / "part-0.jsonl"),
                                                 str(data / "part-1.jsonl")]
    for part in rec["partitions"]:
        (piece,) = part["pieces"]
        raw = Path(piece["path"]).read_bytes()[piece["start_byte"]:piece["end_byte"]]
        assert part["sha256"] == hashlib.sha256(raw).hexdigest()
        assert part["hash_algorithm"] == "sha256:bytes"
        assert part["rows"] == piece["end_row"] - piece["start_row"] == raw.count(b"\n")
    assert [p["rows"] for p in rec["partitions"]] == [3, 3, 2, 3, 3, 2]
    # no checkpoint: boundaries only, nothing recorded anywhere
    assert [t.pieces for t in run(data, None)] == [t.pieces for t in tasks]


def test_a_rerun_rebuilds_the_recorded_partitions_not_a_new_plan(tmp_path):
    data, ckpt = make_input(tmp_path / "in"), tmp_path / "ckpt"
    recorded = run(data, ckpt, {"mode": "auto", "max_rows": 5})
    rec = record_of(ckpt)
    rec["parameters"]["partition"]["max_rows"] = 3  # as if 3 had cut them this way
    (ckpt / PARTITION_INFO_PATH).write_text(json.dumps(rec))
    again = run(data, ckpt, AUTO3)
    assert [t.pieces for t in again] == [t.pieces for t in recorded]
    assert [t.num_rows for t in again] == [5, 3, 5, 3]  # max_rows=3 would give 3, 3, 2, ...


def test_one_changed_byte_in_a_partition_is_refused_naming_it(tmp_path):
    data, ckpt = make_input(tmp_path / "in"), tmp_path / "ckpt"
    tasks = run(data, ckpt)
    complete(ckpt, [t.get_deterministic_id() for t in tasks[:2]])
    before = snapshot(ckpt)
    path = data / "part-1.jsonl"
    raw = bytearray(path.read_bytes())
    at = raw.index(b"document 4")  # row 4 of part-1: partition rows 3-6
    raw[at] = ord("D")
    path.write_bytes(bytes(raw))
    with pytest.raises(PartitionContentChangedError) as info:
        run(data, ckpt, strict=True)
    (changed,) = [t for t in tasks if t.data == [str(path)] and t.pieces[0]["start_row"] == 3]
    piece = changed.pieces[0]
    text = str(info.value)
    assert text.startswith(f"the input of 1 of the 6 partitions recorded in checkpoint {ckpt} "
                           f"changed since it was made: partition {changed.get_deterministic_id()}"
                           f" ({path} rows 3-6, bytes {piece['start_byte']}-{piece['end_byte']})"
                           ": sha256 ")
    assert "Nothing was processed and nothing was deleted" in text
    assert snapshot(ckpt) == before


def test_a_resized_or_missing_file_is_refused(tmp_path):
    data, ckpt = make_input(tmp_path / "in"), tmp_path / "ckpt"
    run(data, ckpt)
    before = snapshot(ckpt)
    with open(data / "part-0.jsonl", "ab") as f:
        f.write(b'{"id": "new"}\n')
    size = (data / "part-0.jsonl").stat().st_size
    with pytest.raises(PartitionContentChangedError,
                       match=rf"3 of the 6 .*part-0\.jsonl rows 0-3, .*: the file is {size} bytes"):
        run(data, ckpt)
    (data / "part-0.jsonl").unlink()
    with pytest.raises(PartitionContentChangedError, match="the file is no longer in the input"):
        run(data, ckpt)
    assert snapshot(ckpt) == before


def _shift_line_boundary(rec: dict, data: Path) -> None:
    """Move the cut between the first two partitions one byte back, hashes recomputed."""
    a, b = rec["partitions"][0]["pieces"][0], rec["partitions"][1]["pieces"][0]
    a["end_byte"] -= 1
    b["start_byte"] -= 1
    raw = (data / "part-0.jsonl").read_bytes()
    for part, piece in zip(rec["partitions"][:2], (a, b), strict=True):
        part["sha256"] = hashlib.sha256(raw[piece["start_byte"]:piece["end_byte"]]).hexdigest()


def _edit_rows(first: int, last: int):
    def edit(rec: dict, data: Path) -> None:
        rec["partitions"][0]["pieces"][0]["end_row"] += last
        rec["partitions"][1]["pieces"][0]["start_row"] += first
        for part in rec["partitions"][:2]:
            part["id"] = row_range_id((p["path"], p["start_row"], p["end_row"])
                                      for p in part["pieces"])
    return edit


def _negative(rec: dict, data: Path) -> None:
    rec["partitions"][0]["pieces"][0]["start_row"] = -1


def _past_the_end(rec: dict, data: Path) -> None:
    last = rec["partitions"][2]["pieces"][0]
    last["end_row"] += 4
    rec["partitions"][2]["id"] = row_range_id([(last["path"], last["start_row"],
                                                last["end_row"])])


def _bytes_past_the_end(rec: dict, data: Path) -> None:
    rec["partitions"][2]["pieces"][0]["end_byte"] += 10


@pytest.mark.parametrize(("edit", "error"), [
    (_edit_rows(-1, 0), "overlaps the piece before it"),
    (_edit_rows(1, 0), "leaves rows 3-4 in no partition"),
    (_negative, "rows -1-3 of .* are not a range of rows"),
    (_past_the_end, "end at row 12, but the file has 8 rows"),
    (_bytes_past_the_end, "past or short of the end of the file"),
    (_shift_line_boundary, "are not on line boundaries"),
    (lambda rec, data: rec["partitions"][0].update(id="0123456789ab"),
     "is named '0123456789ab', but its pieces"),
], ids=["overlap", "gap", "negative", "past-end", "bytes-past-end", "not-on-a-line", "wrong-id"])
def test_illegal_boundaries_are_refused_and_the_record_kept(tmp_path, edit, error):
    data, ckpt = make_input(tmp_path / "in"), tmp_path / "ckpt"
    run(data, ckpt)
    rec = record_of(ckpt)
    edit(rec, data)
    (ckpt / PARTITION_INFO_PATH).write_text(json.dumps(rec))
    before = snapshot(ckpt)
    with pytest.raises(PartitionRecordError, match=error) as info:
        run(data, ckpt, strict=True)
    assert not isinstance(info.value, PartitionContentChangedError)
    assert snapshot(ckpt) == before


@pytest.mark.parametrize("strict", [True, False], ids=["resume", "rerun"])
def test_an_older_record_without_boundaries_is_refused_and_kept(tmp_path, strict):
    data, ckpt = make_input(tmp_path / "in"), tmp_path / "ckpt"
    (ckpt / PARTITION_INFO_PATH).parent.mkdir(parents=True)
    (ckpt / PARTITION_INFO_PATH).write_text(json.dumps(
        {"version": 0, "partitions": [{"id": "abc", "rows": 10, "sha256": "00"}]}))
    before = snapshot(ckpt)
    with pytest.raises(PartitionRecordError, match="is of version 0 and holds no row boundaries"):
        run(data, ckpt, strict=strict)
    assert snapshot(ckpt) == before


def test_a_record_of_the_previous_version_without_kind_is_resumed_from(tmp_path):
    """Checkpoints written before records named their kind hold no ``kind`` field."""
    data, ckpt = make_input(tmp_path / "in"), tmp_path / "ckpt"
    tasks = run(data, ckpt)
    rec = record_of(ckpt)
    assert rec["kind"] == "partitioning_info"
    del rec["kind"]
    (ckpt / PARTITION_INFO_PATH).write_text(json.dumps(rec))
    complete(ckpt, [tasks[0].get_deterministic_id()])
    again = run(data, ckpt, strict=True)
    assert [t.pieces for t in again] == [t.pieces for t in tasks]


@pytest.mark.parametrize(("text", "error"), [
    (json.dumps({"kind": "partitioning_info", "version": 2, "partitions": []}),
     r"is of version 2, newer than this curator_dask reads \(up to 1\).*run that newer "
     r"curator_dask, or use a new checkpoint path and a new output folder"),
    ('{"version": 1, "partitions": [{"id": ', r"cannot be used: it is not valid JSON"),
    (json.dumps({"kind": "partitioning", "version": 1, "groups": {}}),
     r"is a record of kind 'partitioning', not the partition record"),
], ids=["newer", "torn", "foreign"])
def test_a_newer_torn_or_foreign_record_is_refused_and_kept(tmp_path, text, error):
    data, ckpt = make_input(tmp_path / "in"), tmp_path / "ckpt"
    (ckpt / PARTITION_INFO_PATH).parent.mkdir(parents=True)
    (ckpt / PARTITION_INFO_PATH).write_text(text)
    before = snapshot(ckpt)
    with pytest.raises(PartitionRecordError, match=error):
        run(data, ckpt)
    assert snapshot(ckpt) == before


def test_other_parameters_are_refused_when_partitions_are_complete(tmp_path):
    data, ckpt = make_input(tmp_path / "in"), tmp_path / "ckpt"
    run(data, ckpt)
    before = snapshot(ckpt)
    # nothing complete: planned again under the new parameters, and recorded
    assert len(run(data, ckpt, {"mode": "manual", "num_of_partitions": 2})) == 2
    assert record_of(ckpt)["parameters"]["partition"]["mode"] == "manual"
    complete(ckpt, [run(data, ckpt, {"mode": "manual", "num_of_partitions": 2})[0]
                    .get_deterministic_id()])
    before = snapshot(ckpt)
    with pytest.raises(PartitionRecordError) as info:
        run(data, ckpt, AUTO3)
    assert ("partition was {'mode': 'manual', 'num_of_partitions': 2}, now {'mode': 'auto', "
            "'target_size_mb': 256, 'size': 10000, 'max_size_mb': 256, 'max_rows': 3}. 1 "
            "partitions are complete") in str(info.value)
    with pytest.raises(PartitionRecordError, match="partition was .*, now None"):
        run(data, ckpt, None)  # back to whole files
    assert snapshot(ckpt) == before


def test_a_missing_record_with_completions(tmp_path, caplog):
    data, ckpt = make_input(tmp_path / "in"), tmp_path / "ckpt"
    tasks = run(data, ckpt)
    (ckpt / PARTITION_INFO_PATH).unlink()
    complete(ckpt, [tasks[0].get_deterministic_id()])
    before = snapshot(ckpt)
    with pytest.raises(PartitionRecordError, match=r"cannot resume: the checkpoint records 1 "
                       r"completed partitions but has no partition record \(.*is missing\)"):
        run(data, ckpt, strict=True)
    assert snapshot(ckpt) == before
    with caplog.at_level(logging.WARNING, logger="curator_dask.partitions.resume"):
        again = run(data, ckpt)  # not a resume: planned again (the same ids), recorded
    assert [t.pieces for t in again] == [t.pieces for t in tasks]
    assert "1 completed partitions but no partition record" in caplog.text
    assert (ckpt / PARTITION_INFO_PATH).exists()


def test_files_completed_whole_are_not_cut_into_ranges(tmp_path):
    data, ckpt = make_input(tmp_path / "in"), tmp_path / "ckpt"
    complete(ckpt, [get_deterministic_hash([str(data / "part-1.jsonl")])])
    with pytest.raises(PartitionRecordError, match=r"1 input file\(s\) were completed as "
                       r"whole-file partitions .*part-1\.jsonl"):
        run(data, ckpt)
    assert not (ckpt / PARTITION_INFO_PATH).exists()


def test_an_added_file_is_planned_alone_in_auto_mode_and_refused_in_manual(tmp_path):
    data, ckpt = make_input(tmp_path / "in"), tmp_path / "ckpt"
    first = run(data, ckpt)
    make_input(tmp_path / "more", files=1, lines=4)
    os.replace(tmp_path / "more" / "part-0.jsonl", data / "part-00.jsonl")
    second = run(data, ckpt)
    assert [t.pieces for t in second][:6] == [t.pieces for t in first]
    assert [t.data for t in second[6:]] == [[str(data / "part-00.jsonl")]] * 2
    assert record_of(ckpt)["num_partitions"] == 8
    manual = {"mode": "manual", "num_of_partitions": 3}
    ckpt2 = tmp_path / "ckpt2"
    run(data, ckpt2, manual)
    (data / "part-9.jsonl").write_bytes(b'{"id": 9}\n')
    with pytest.raises(PartitionRecordError, match=r"1 input file\(s\) were added .*manual"):
        run(data, ckpt2, manual)


def test_parquet_partitions_are_hashed_from_their_rows(tmp_path):
    data, ckpt = tmp_path / "in", tmp_path / "ckpt"
    data.mkdir()
    pq.write_table(pa.table({"id": list(range(50)), "v": [str(i) for i in range(50)]}),
                   data / "p.parquet", row_group_size=10)
    spec = {"mode": "auto", "max_rows": 20}
    tasks = run(data, ckpt, spec)
    rec = record_of(ckpt)
    assert [p["hash_algorithm"] for p in rec["partitions"]] == ["sha256:arrow-ipc-65536"] * 3
    assert [t.get_deterministic_id() for t in run(data, ckpt, spec)] == [
        t.get_deterministic_id() for t in tasks]  # verified, unchanged
    rec["partitions"][1]["sha256"] = "0" * 64
    (ckpt / PARTITION_INFO_PATH).write_text(json.dumps(rec))
    with pytest.raises(PartitionContentChangedError,
                       match=r"p\.parquet rows 20-40\): sha256 [0-9a-f]{64} where 0{64} was"):
        run(data, ckpt, spec)


@pytest.fixture
def s3():
    with moto_s3("ranges") as found:
        yield found


def test_range_reads_and_the_record_on_s3(s3):
    """moto's S3 server on 127.0.0.1: byte-range requests for the scan, the hashes and the
    reads; the record uploaded next to the checkpoint."""
    from curator_dask.stages.text.io.reader import JsonlReaderStage

    fs, options = s3
    lines = [json.dumps({"id": i, "text": "s3 row"}) for i in range(10)]
    fs.pipe("ranges/in/a.jsonl", ("\n".join(lines) + "\n").encode())

    def tasks():
        stage = FilePartitioningStage("s3://ranges/in", storage_options=options, partition={
            "mode": "manual", "num_of_partitions": 3})
        stage.use_partition_record("s3://ranges/ckpt", options, strict=True)
        return stage.process(EmptyTask())

    first = tasks()
    record = json.loads(fs.cat(f"ranges/ckpt/{PARTITION_INFO_PATH}"))
    assert [p["rows"] for p in record["partitions"]] == [3, 3, 4]
    reader = JsonlReaderStage(read_kwargs={"storage_options": options})
    assert [reader.process(t).to_pyarrow()["id"].to_pylist() for t in first] == [
        [0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    assert [t.pieces for t in tasks()] == [t.pieces for t in first]  # rebuilt and verified
    fs.pipe("ranges/in/a.jsonl", ("\n".join(lines).replace('"id": 5', '"id": 6') + "\n").encode())
    with pytest.raises(PartitionContentChangedError, match=r"a\.jsonl rows 3-6, bytes"):
        tasks()
