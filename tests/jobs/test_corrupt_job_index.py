"""A corrupt per-user job index (issue 19, item 8) reads as empty with one warning naming the
file, in real `run` and `status` processes, and the next write rewrites it whole. Before, a
deeply nested file ('[' * 100000) made every `run` and `status` exit 1 with RecursionError."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from curator_dask.jobs.index import ENV_VAR, read_index, record_job
from curator_dask.sample_data import generate_jsonl
from tests.helpers import cli

CORRUPT = {
    "deeply nested": b"[" * 100_000,
    "deeply nested object": b'{"jobs": ' + b"[" * 100_000,
    "truncated": b'{"version": 1, "jobs": [{"job_id": "j", "path": "/x", "sta',
    "not JSON": b"jobs:\n  - j\n",
    "wrong shape (a list)": b'[{"job_id": "j", "path": "/x"}]',
    "wrong shape (jobs not a list)": b'{"version": 1, "jobs": {"j": "/x"}}',
    "binary garbage": bytes(range(256)) * 8,
    "empty": b"",
}

PIPELINE = """\
stages:
  - _target_: curator_dask.stages.text.io.reader.JsonlReader
    file_paths: input
    files_per_partition: 1
  - _target_: curator_dask.stages.text.io.writer.JsonlWriter
    path: output
"""


def warnings_about(stderr: str, index: Path) -> list[str]:
    return [line for line in stderr.splitlines() if "WARNING" in line and str(index) in line]


@pytest.mark.parametrize("kind", sorted(CORRUPT))
def test_a_corrupt_index_reads_as_empty_with_one_warning(kind, tmp_path, caplog):
    index = tmp_path / "jobs.json"
    index.write_bytes(CORRUPT[kind])
    with caplog.at_level(logging.WARNING, logger="curator_dask.jobs.index"):
        assert read_index(str(index)) == []
        assert read_index(str(index)) == []  # read again: no second warning
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and str(index) in warned[0] and "reading it as empty" in warned[0]
    assert record_job("j2", str(tmp_path / "jobs" / "j2"), str(index))
    data = json.loads(index.read_text())  # rewritten whole: valid JSON of the right shape
    assert data["version"] == 1 and [e["job_id"] for e in data["jobs"]] == ["j2"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["deeply nested", "binary garbage", "wrong shape (a list)"])
def test_status_with_a_corrupt_index_exits_0_with_one_warning(kind, tmp_path):
    index = tmp_path / "state" / "jobs.json"
    index.parent.mkdir()
    index.write_bytes(CORRUPT[kind])
    status = cli("status", cwd=tmp_path, env={ENV_VAR: str(index)})
    assert status.returncode == 0, status.stderr
    assert "RecursionError" not in status.stderr and "Traceback" not in status.stderr
    assert len(warnings_about(status.stderr, index)) == 1, status.stderr
    assert f"no jobs in {tmp_path / 'curator-dask-jobs'} or in the job index {index}" in (
        status.stdout)


@pytest.mark.slow
def test_run_and_status_with_a_deeply_nested_index(tmp_path):
    """`run` warns once, runs, and rewrites the index; `status` then lists the job."""
    index = tmp_path / "state" / "jobs.json"
    index.parent.mkdir()
    index.write_bytes(CORRUPT["deeply nested"])
    generate_jsonl(str(tmp_path / "input"), files=2, docs_per_file=2, seed=5)
    (tmp_path / "p.yaml").write_text(PIPELINE)
    env = {ENV_VAR: str(index)}
    before = cli("status", cwd=tmp_path, env=env)
    assert before.returncode == 0, before.stderr
    assert len(warnings_about(before.stderr, index)) == 1, before.stderr
    run = cli("run", "p.yaml", "--workers", "1", "--no-progress", "--job-id", "after-corrupt",
              cwd=tmp_path, env=env, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(warnings_about(run.stderr, index)) == 1, run.stderr
    data = json.loads(index.read_text())
    assert [e["job_id"] for e in data["jobs"]] == ["after-corrupt"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    after = cli("status", "--all", cwd=elsewhere, env=env)  # a finished job of another dir
    assert after.returncode == 0, after.stderr
    assert warnings_about(after.stderr, index) == []  # the index is valid again
    assert "after-corrupt" in after.stdout
