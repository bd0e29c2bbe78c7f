"""Row-range partitions in real runs: a 2-worker LocalCluster (real LMDB, real files), and the
command line killed with SIGKILL and resumed, then refused (exit 2) once a completed
partition's input changed. (NeMo Curator's stages after curator_dask's row-range reader:
tests/nemo/test_row_range_reader.py.)"""

from __future__ import annotations

import json
import os
import signal
import textwrap
from pathlib import Path

import lmdb
import pytest

from curator_dask import Pipeline
from curator_dask.errors import PartialRunWarning
from curator_dask.resumability.layout import PARTITION_INFO_PATH
from curator_dask.stages.text.io.reader import JsonlReader
from curator_dask.stages.text.io.writer import JsonlWriter
from tests.helpers import cli, completed_ids, poll_for, start_cli
from tests.resumability.resume_test_stages import FailSoftOn

pytestmark = pytest.mark.slow
MANUAL6 = {"mode": "manual", "num_of_partitions": 6}


def write_input(folder: Path, files: int = 2, lines: int = 11) -> list[str]:
    """JSONL files with CRLF endings, a blank line and no final newline (``lines`` + 1 lines
    each)."""
    folder.mkdir(parents=True, exist_ok=True)
    ids = []
    for f in range(files):
        rows = [json.dumps({"id": f"{f}-{i}", "text": f"row {i} of a file"}) for i in range(lines)]
        ids += [f"{f}-{i}" for i in range(lines)]
        (folder / f"part-{f}.jsonl").write_bytes(
            ("\r\n".join(rows[:4]) + "\r\n\r\n" + "\n".join(rows[4:])).encode())
    return ids


def output_ids(folder: Path) -> list[str]:
    return sorted(json.loads(line)["id"] for p in folder.glob("*.jsonl")
                  for line in p.read_text().splitlines() if line)


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_partitions_complete_one_by_one_and_write_a_file_each(executor, tmp_path):
    ids = write_input(tmp_path / "in", lines=9)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"

    def pipeline(bad=()):
        return (Pipeline(name="ranges")
                .add_stage(JsonlReader(str(tmp_path / "in"),
                                       partition={"mode": "manual", "num_of_partitions": 4}))
                .add_stage(FailSoftOn(bad_ids=bad)).add_stage(JsonlWriter(str(out))))

    with pytest.warns(PartialRunWarning, match="3 of 4 sources completed, 1 failed"):
        first = pipeline(bad=("0-4",)).run(executor=executor, checkpoint_path=str(ckpt))
    parts = json.loads((ckpt / PARTITION_INFO_PATH).read_text())["partitions"]
    # 20 lines (10 a file, with the blank one) in 4 ranges of 5: two partitions of each file
    assert [[(p["path"][-7:], p["start_row"], p["end_row"]) for p in x["pieces"]]
            for x in parts] == [[("0.jsonl", 0, 5)], [("0.jsonl", 5, 10)],
                                [("1.jsonl", 0, 5)], [("1.jsonl", 5, 10)]]
    assert (first.num_sources, len(first)) == (4, 3)  # the range from row 0-4 saw a FailedTask
    assert completed_ids(ckpt) == {x["id"] for x in parts} - {parts[1]["id"]}
    again = pipeline().run(executor=executor, checkpoint_path=str(ckpt))
    assert (again.skipped_sources, len(again)) == (3, 1)
    assert completed_ids(ckpt) == {x["id"] for x in parts}
    assert len(list(out.glob("*.jsonl"))) == 4  # one output file per partition
    assert output_ids(out) == sorted(ids)


PIPELINE = textwrap.dedent("""
    import os
    import time
    from dataclasses import dataclass
    from curator_dask import JsonlReader, JsonlWriter, Pipeline, ProcessingStage

    @dataclass
    class Hold(ProcessingStage):
        \"\"\"Holds the partition with row 1-10 while the file ``hold`` exists.\"\"\"
        hold: str = ""
        name: str = "hold"
        def process(self, task):
            while "1-10" in task.to_pyarrow()["id"].to_pylist() and os.path.exists(self.hold):
                time.sleep(0.05)
            return task

    def build():
        return (Pipeline(name="ranges-kill")
                .add_stage(JsonlReader(file_paths="input",
                                       partition={"mode": "manual", "num_of_partitions": 6}))
                .add_stage(Hold(hold=os.path.abspath("hold")))
                .add_stage(JsonlWriter(path="output")))
""")
# two threads: the held partition never keeps the others from running
RUN = ("run", "pipe.py:build", "--workers", "1", "--threads-per-worker", "2", "--no-progress")


def test_killed_run_resumes_then_a_changed_byte_is_refused(executor, tmp_path):
    (tmp_path / "pipe.py").write_text(PIPELINE)
    ids = write_input(tmp_path / "input")
    ckpt = tmp_path / "curator-dask-jobs" / "ranges" / "checkpoint"

    (tmp_path / "hold").touch()  # the last partition waits: the run is killed in the middle
    proc = start_cli(*RUN, "--job-id", "ranges", cwd=tmp_path, start_new_session=True)
    try:
        poll_for(lambda: completed_ids(ckpt), 120, "no partition completed", interval=0.1,
                 ignore=(FileNotFoundError, lmdb.Error, UnicodeDecodeError))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver (scheduler inside) and its workers
        proc.communicate(timeout=60)
    finished = completed_ids(ckpt)
    record = json.loads((ckpt / PARTITION_INFO_PATH).read_text())
    assert len(record["partitions"]) == 6 and 1 <= len(finished) <= 5
    assert record["partitions"][-1]["id"] not in finished  # the held one: killed mid-run
    (tmp_path / "hold").unlink()

    resumed = cli(*RUN, "--resume", "ranges", cwd=tmp_path, timeout=180)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (f"6 source partitions: {len(finished)} already complete (skipped), "
            f"{6 - len(finished)} to process") in resumed.stderr
    assert json.loads((ckpt / PARTITION_INFO_PATH).read_text()) == record  # rebuilt, unchanged

    # a clean run over the same files (same ids, so the same output names): byte for byte
    (Pipeline(name="clean")
     .add_stage(JsonlReader(str(tmp_path / "input"), partition=MANUAL6))
     .add_stage(FailSoftOn()).add_stage(JsonlWriter(str(tmp_path / "clean")))).run(
         executor=executor)
    assert files_of(tmp_path / "output") == files_of(tmp_path / "clean")
    assert output_ids(tmp_path / "output") == sorted(ids)

    # one byte inside a completed partition, same size and modification time: only the
    # partition's content hash can tell
    part = next(p for p in record["partitions"] if p["id"] in finished)
    piece = part["pieces"][0]
    path = Path(piece["path"])
    stat = path.stat()
    raw = bytearray(path.read_bytes())
    at = raw.index(b"row", piece["start_byte"])
    raw[at] = ord("R")
    path.write_bytes(bytes(raw))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    before, outputs = files_of(ckpt), files_of(tmp_path / "output")
    refused = cli(*RUN, "--resume", "ranges", cwd=tmp_path, timeout=120)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert (f"partition {part['id']} ({path} rows {piece['start_row']}-{piece['end_row']}, "
            f"bytes {piece['start_byte']}-{piece['end_byte']}): sha256 ") in refused.stderr
    assert "Nothing was processed and nothing was deleted" in refused.stderr
    assert files_of(ckpt) == before and files_of(tmp_path / "output") == outputs
    events = (tmp_path / "curator-dask-jobs" / "ranges" / "events.jsonl").read_text()
    last = events.strip().splitlines()[-1]
    assert json.loads(last)["type"] == "job_failed"
    assert events.count('"sources_planned"') == 2  # the killed run and the resume: not this one
