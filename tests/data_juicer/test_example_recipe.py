"""examples/dj_text_recipe.yaml runs as its header says (from examples/, on the demo data
of generate_sample_data.py) and gives, byte for byte, what Data-Juicer's default executor
gives for the same recipe with ``executor_type: default``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.data_juicer.helpers import run_cli, run_dj_default, same_files

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_example_recipe_equals_data_juicer_default(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    recipe = ours / "dj_text_recipe.yaml"
    shutil.copy(EXAMPLES / "dj_text_recipe.yaml", recipe)
    subprocess.run([sys.executable, str(EXAMPLES / "generate_sample_data.py")], cwd=ours,
                   check=True, capture_output=True)
    shutil.copytree(ours, theirs)
    text = recipe.read_text(encoding="utf-8")
    assert "\nexecutor_type: dask " in text
    (theirs / recipe.name).write_text(
        text.replace("\nexecutor_type: dask ", "\nexecutor_type: default "), encoding="utf-8")

    proc = run_cli(recipe)
    assert "800 rows in, 545 rows out, 4 partitions" in proc.stdout, proc.stdout
    run_dj_default(theirs / recipe.name)
    for name in ("result.jsonl", "result_stats.jsonl"):
        same_files(ours / "output-dj" / name, theirs / "output-dj" / name)
    stats = [json.loads(line) for line in
             (ours / "output-dj" / "result_stats.jsonl").read_text("utf-8").splitlines()]
    assert len(stats) == 545 and min(s["__dj__stats__"]["num_words"] for s in stats) >= 15
