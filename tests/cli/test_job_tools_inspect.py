"""``checkpoint inspect`` of a checkpoint whose partitions are row ranges of one big file
(issue 32, item 4): it reads the partition record (``partitioning_info.json``) and lists the
ranges, complete and pending, rather than the file as one pending partition."""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.helpers import cli, completed_ids

pytestmark = pytest.mark.slow

ROWS, RANGES = 1600, 16  # 100 rows a range
FAILING_ROW = 450  # in rows 400-500: a stage returns FailedTask there, so that range stays pending

PIPELINE = textwrap.dedent(f"""
    from dataclasses import dataclass
    from curator_dask import FailedTask, JsonlReader, JsonlWriter, Pipeline, ProcessingStage

    @dataclass
    class FailOneRange(ProcessingStage):
        name: str = "fail_one_range"
        def process(self, task):
            return FailedTask() if {FAILING_ROW} in set(task.to_pandas()["n"]) else task

    def build():
        return (Pipeline(name="big-file")
                .add_stage(JsonlReader("big.jsonl", partition={{"mode": "manual",
                                                                "num_of_partitions": {RANGES}}}))
                .add_stage(FailOneRange())
                .add_stage(JsonlWriter("out")))
""")


@pytest.fixture(scope="module")
def big_file_checkpoint(tmp_path_factory):
    """A real run over one JSONL file cut into 16 row ranges: 15 complete, one pending."""
    root = tmp_path_factory.mktemp("big")
    (root / "big.jsonl").write_text("".join(
        json.dumps({"n": n, "text": f"document {n} " + "word " * 20}) + "\n"
        for n in range(ROWS)))
    (root / "pipe.py").write_text(PIPELINE)
    run = cli("run", "pipe.py:build", "--workers", "1", "--no-progress", "--no-job",
              "--checkpoint-path", "ckpt", cwd=root, timeout=180)
    assert run.returncode == 5, run.stderr[-3000:]  # completed with one failed source
    return root


def test_inspect_lists_the_row_ranges_of_the_partition_record(big_file_checkpoint):
    root = big_file_checkpoint
    out = cli("checkpoint", "inspect", "ckpt", "--input", "big.jsonl", cwd=root, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"input: {RANGES} partitions: {RANGES - 1} complete, 1 pending" in out.stdout, out.stdout
    big = str(root / "big.jsonl")
    for start in range(0, ROWS, ROWS // RANGES):
        state = "pending " if start == 400 else "complete"
        assert any(line.lstrip().startswith(state) and line.endswith(
            f"{big} rows {start}-{start + ROWS // RANGES}")
                   for line in out.stdout.splitlines()), (start, out.stdout)
    assert "partitioning_info.json" in out.stdout


def test_inspect_json_names_each_range_and_agrees_with_the_checkpoint(big_file_checkpoint):
    root = big_file_checkpoint
    for args in (("--input", "big.jsonl"), ()):  # the record is read without --input too
        out = cli("checkpoint", "inspect", "ckpt", *args, "--json", cwd=root, timeout=60)
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        record = json.loads((root / "ckpt" / ".curator_dask" / "partitioning_info.json"
                             ).read_text())
        parts = report["partitions"]
        assert [p["source_id"] for p in parts] == [p["id"] for p in record["partitions"]]
        assert {p["source_id"] for p in parts if p["complete"]} == completed_ids(root / "ckpt")
        assert sum(p["complete"] for p in parts) == RANGES - 1
        assert [p["pieces"] for p in parts][4] == [
            {"path": str(root / "big.jsonl"), "start_row": 400, "end_row": 500}]


def test_a_file_of_input_the_record_does_not_hold_is_pending(big_file_checkpoint):
    root = big_file_checkpoint
    extra = root / "extra.jsonl"
    extra.write_text('{"n": 1, "text": "x"}\n')
    try:
        out = cli("checkpoint", "inspect", "ckpt", "--input", "*.jsonl", cwd=root, timeout=60)
    finally:
        extra.unlink()
    assert out.returncode == 0, out.stderr
    assert f"input: {RANGES + 1} partitions: {RANGES - 1} complete, 2 pending" in out.stdout, (
        out.stdout)
    assert any(line.lstrip().startswith("pending ") and line.endswith(
        f"{extra} (not in the partition record: the next run plans it)")
        for line in out.stdout.splitlines()), out.stdout
