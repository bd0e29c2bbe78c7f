"""The seed's resume_demo.py runs unchanged (imports renamed, a closing line added) as a plain
script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from curator_dask.sample_data import generate_jsonl

pytestmark = pytest.mark.slow

EXAMPLES = os.path.join(os.path.dirname(__file__), os.pardir, "examples")


def test_seed_resume_demo_runs_unchanged(tmp_path):
    script = tmp_path / "resume_demo.py"
    shutil.copy(os.path.join(EXAMPLES, "resume_demo.py"), script)
    code = [ln for ln in script.read_text().splitlines() if not ln.startswith("#")]
    # The script is the seed's, module-level pipeline.run() and all (no __main__ guard).
    assert not any("if __name__" in ln or "nemo_curator" in ln for ln in code)
    assert 'result = pipeline.run(checkpoint_path="./checkpoints/resume-demo")' in code
    paths = generate_jsonl(str(tmp_path / "input"), files=4, docs_per_file=10)
    proc = subprocess.run([sys.executable, "resume_demo.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    outputs = sorted(os.listdir(tmp_path / "output"))
    assert len(outputs) == len(paths)
    rows = [json.loads(line) for name in outputs
            for line in (tmp_path / "output" / name).read_text().splitlines()]
    assert len(rows) == 40 and all(set(r) == {"text"} for r in rows)
    # Workers did not re-run the script: one pipeline, so no second output set or error.
    assert "Traceback" not in proc.stderr
    # It ends by saying what it did, counting the files really there; a rerun skips them all.
    assert proc.stdout.splitlines()[-1] == (
        "Done: 4 source partitions, 4 output files in output/ (0 skipped as complete)")
    again = subprocess.run([sys.executable, "resume_demo.py"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=180)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.splitlines()[-1] == (
        "Done: 4 source partitions, 4 output files in output/ (4 skipped as complete)")


def test_generate_sample_data_if_missing(tmp_path):
    gen = os.path.join(EXAMPLES, "generate_sample_data.py")
    first = subprocess.run([sys.executable, gen, "--out", "in", "--files", "3", "--if-missing"],
                           cwd=tmp_path, capture_output=True, text=True, check=True)
    assert "wrote 3 files" in first.stdout
    second = subprocess.run([sys.executable, gen, "--out", "in", "--if-missing"],
                            cwd=tmp_path, capture_output=True, text=True, check=True)
    assert "already has input" in second.stdout
    assert len(os.listdir(tmp_path / "in")) == 3
