"""Job ids, job directories and strict resume checks."""

from __future__ import annotations

import datetime
import os
import re
from dataclasses import dataclass

import pytest

from curator_dask import JsonlReader, JsonlWriter, Pipeline, ProcessingStage
from curator_dask.jobs.job import (
    JobDirectory,
    ResumeMismatchError,
    new_job_id,
    validate_job_id,
)
from curator_dask.resumability.fingerprint import config_fingerprint, input_fingerprints


@dataclass
class Threshold(ProcessingStage):
    min_chars: int = 50
    name: str = "threshold"

    def process(self, task):
        return task


def fingerprints(tmp_path, min_chars=50, content=False):
    p = Pipeline(name="job").add_stage(JsonlReader(file_paths=str(tmp_path / "in")))
    p.add_stage(Threshold(min_chars=min_chars)).add_stage(JsonlWriter(path=str(tmp_path / "o")))
    p.build()
    files = sorted(str(f) for f in (tmp_path / "in").iterdir())
    return config_fingerprint(p.stages), input_fingerprints(files, content=content)


@pytest.fixture
def inputs(tmp_path):
    (tmp_path / "in").mkdir()
    for i in range(3):
        (tmp_path / "in" / f"p{i}.jsonl").write_text(f'{{"text": "doc {i}"}}\n')
    return tmp_path


def test_job_ids():
    job_id = new_job_id(datetime.datetime(2026, 11, 29, 12, 0, 1))
    assert re.fullmatch(r"20261129_120001_[0-9a-f]{6}", job_id)
    assert re.fullmatch(r"\d{8}_\d{6}_[0-9a-f]{6}", new_job_id())
    assert validate_job_id("my-run.v2") == "my-run.v2"
    for bad in ("../x", "a/b", ".hidden", "", "x" * 200, "-flag"):
        with pytest.raises(ValueError, match="plain token"):
            validate_job_id(bad)


def test_unchanged_resume_passes(inputs):
    job = JobDirectory(str(inputs / "work"), "job1")
    job.create(*fingerprints(inputs), plan={"stages": ["a"]})
    assert job.exists()
    assert sorted(os.listdir(job.path)) == ["config_fingerprint.json",
                                            "dag_execution_plan.json",
                                            "input_fingerprints.json", "logs"]
    job.verify_resume(*fingerprints(inputs))
    with pytest.raises(FileExistsError, match="--resume job1"):
        job.create(*fingerprints(inputs))


def test_changed_parameter_is_named_and_nothing_is_deleted(inputs):
    job = JobDirectory(str(inputs / "work"), "job2")
    job.create(*fingerprints(inputs))
    before = sorted(os.listdir(job.path))
    with pytest.raises(ResumeMismatchError) as info:
        job.verify_resume(*fingerprints(inputs, min_chars=80))
    text = str(info.value)
    assert "stages[2] (threshold).params.min_chars: 50 -> 80" in text
    assert "Nothing was deleted" in text
    assert sorted(os.listdir(job.path)) == before
    assert sorted(os.listdir(inputs / "in")) == ["p0.jsonl", "p1.jsonl", "p2.jsonl"]


def test_modified_input_file_is_named(inputs):
    job = JobDirectory(str(inputs / "work"), "job3")
    job.create(*fingerprints(inputs))
    (inputs / "in" / "p1.jsonl").write_text('{"text": "a longer replacement document"}\n')
    with pytest.raises(ResumeMismatchError, match=r"modified: .*p1\.jsonl \(") as info:
        job.verify_resume(*fingerprints(inputs))
    assert "p0.jsonl" not in str(info.value) and "p2.jsonl" not in str(info.value)


def test_missing_job(inputs):
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        JobDirectory(str(inputs / "work"), "nope").verify_resume(*fingerprints(inputs))
