"""A failing stage's error names the input files of the failing partition, the stage and the
exception, then the traceback as lines (issue 12, item 3)."""

from __future__ import annotations

import pickle
import textwrap

import pytest

from curator_dask.errors import StageError
from curator_dask.sample_data import generate_jsonl
from tests.helpers import cli

PIPELINE = textwrap.dedent("""
    from dataclasses import dataclass
    from curator_dask import JsonlReader, JsonlWriter, Pipeline, ProcessingStage

    @dataclass
    class Picky(ProcessingStage):
        name: str = "picky"
        def process(self, task):
            if "2-0" in task.to_pyarrow()["id"].to_pylist():
                raise ValueError("document 2-0 is not welcome")
            return task

    def build():
        return (Pipeline(name="picky").add_stage(JsonlReader(file_paths="input"))
                .add_stage(Picky()).add_stage(JsonlWriter(path="output")))
""")


def test_stage_error_names_files_and_survives_pickling():
    error = StageError("picky", ["0_abc"], "ValueError: no", "Traceback (most recent ...)\n",
                       source_files=["/data/a.jsonl", "/data/b.jsonl"])
    again = pickle.loads(pickle.dumps(error))
    assert again.source_files == ["/data/a.jsonl", "/data/b.jsonl"]
    assert str(again) == str(error)
    first = str(error).splitlines()[0]
    assert "'picky'" in first and "/data/a.jsonl" in first and "ValueError: no" in first


def test_a_long_traceback_is_cut_so_dask_keeps_the_error_type():
    error = StageError("s", ["t"], "KeyError: 'x'", "  frame\n" * 5000)
    # distributed replaces an exception whose text exceeds admin.max-error-length (10000)
    assert len(str(error)) < 10000 and str(error).rstrip().endswith("frame")


@pytest.mark.slow
def test_cli_leads_with_the_file_the_stage_and_the_exception(tmp_path):
    (tmp_path / "pipe.py").write_text(PIPELINE)
    paths = generate_jsonl(str(tmp_path / "input"), files=4, docs_per_file=2, seed=4)
    bad = paths[2]  # holds the document 2-0
    # without -v: one line, no traceback (issue 32, item 2)
    quiet = cli("run", "pipe.py:build", "--workers", "1", "--no-progress", "--no-job",
                cwd=tmp_path, timeout=120)
    assert quiet.returncode == 1 and "Traceback" not in quiet.stderr, quiet.stderr[-3000:]
    said = [line for line in quiet.stderr.splitlines() if "failed: StageError" in line]
    assert len(said) == 1 and bad in said[0] and "ValueError: document 2-0" in said[0]
    assert quiet.stderr.rstrip().endswith(said[0])
    # with -v: the traceback too
    out = cli("run", "pipe.py:build", "--workers", "1", "--no-progress", "--no-job", "-v",
              cwd=tmp_path, timeout=120)
    assert out.returncode == 1, out.stderr[-3000:]
    lines = out.stderr.splitlines()
    # the driver's own traceback first (-v), then the error line and the original traceback
    errors = [i for i, line in enumerate(lines) if "run: failed: StageError" in line]
    assert errors, out.stderr
    first = lines[errors[0]]
    assert bad in first and "'picky'" in first and "ValueError: document 2-0" in first, \
        out.stderr[-3000:]
    # the traceback comes as lines, ending in the stage's own frame and exception
    frame = next(i for i, line in enumerate(lines) if i > errors[0]
                 and line.strip().startswith("File ")
                 and "pipe.py" in line and line.rstrip().endswith("in process"))
    assert frame > errors[0]
    assert any(line.startswith("ValueError: document 2-0") for line in lines[frame:])
    assert "Compute Failed" not in out.stderr and "\\n" not in out.stderr, out.stderr[-3000:]
