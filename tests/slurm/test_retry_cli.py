"""``python -m curator_dask slurm retry``: the retry_array.py behaviours.

See docs/design/contract.md §5.14. Each test runs the real command in a subprocess against a
checkpoint written with the real manifest builder. The program name differs from upstream's
``retry_array.py``, so errors are compared on the text after ``error: ``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from curator_dask.slurm.completion import (
    CompletionManifest,
    build_slurm_array_completion_manifest,
)
from curator_dask.slurm.run_config import ensure_slurm_array_run_config, run_config_path
from tests.helpers import REPO_ROOT, cli


def retry(*args: str) -> subprocess.CompletedProcess[str]:
    return cli("slurm", "retry", *args, cwd=REPO_ROOT, timeout=120,
               drop_env_prefixes=("SLURM_", "NEMO_CURATOR_"))


def error_message(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if "error: " in line]
    assert len(lines) == 1, stderr
    return lines[0].split("error: ", 1)[1]


def make_run(ckpt: Path, total: int, minimum: int, completed: tuple[int, ...]) -> None:
    ensure_slurm_array_run_config(ckpt, total, minimum)
    for shard in completed:
        manifest = build_slurm_array_completion_manifest(ckpt, shard, total, minimum)
        assert manifest is not None
        manifest.mark_completed()


@pytest.fixture(scope="module")
def ckpt_2000(tmp_path_factory) -> Path:
    """t=2000, m=0, shards 0, 3 and 4 complete (the observed example of §5.14)."""
    ckpt = tmp_path_factory.mktemp("retry_cli") / "ckpt"
    make_run(ckpt, 2000, 0, (0, 3, 4))
    return ckpt


def test_observed_array_format(ckpt_2000):
    result = retry("--checkpoint-path", str(ckpt_2000))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "1-2,5-1999\n"


def test_observed_explicit_array_format(ckpt_2000):
    result = retry("--checkpoint-path", str(ckpt_2000), "--format", "array")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "1-2,5-1999\n"


def test_observed_fields_format(ckpt_2000):
    result = retry("--checkpoint-path", str(ckpt_2000), "--format", "fields")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "1-2,5-1999 0 0 2000\n"


def test_observed_fields_with_max_array_size(ckpt_2000):
    result = retry("--checkpoint-path", str(ckpt_2000), "--format", "fields",
                   "--max-array-size", "1000")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["1-2,5-999 0 0 2000", "0-999 1000 0 2000"]
    assert result.stdout == "1-2,5-999 0 0 2000\n0-999 1000 0 2000\n"


def test_fields_with_minimum_shard_index_and_windows(tmp_path):
    # Offsets are idx // N * N and ignore minimum_shard_index; the minimum is still printed.
    make_run(tmp_path, 3, 1, ())
    result = retry("--checkpoint-path", str(tmp_path), "--format", "fields",
                   "--max-array-size", "2")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "1 0 1 3\n0-1 2 1 3\n"
    unlimited = retry("--checkpoint-path", str(tmp_path), "--format", "fields")
    assert unlimited.stdout == "1-3 0 1 3\n"


def test_complete_run_prints_nothing(tmp_path):
    make_run(tmp_path, 3, 1, (1, 2, 3))
    for extra in ((), ("--format", "fields"), ("--format", "fields", "--max-array-size", "2")):
        result = retry("--checkpoint-path", str(tmp_path), *extra)
        assert result.returncode == 0, result.stderr
        assert result.stdout == ""


@pytest.mark.parametrize("value", ["0", "-5"])
def test_max_array_size_must_be_positive(ckpt_2000, value):
    result = retry("--checkpoint-path", str(ckpt_2000), "--format", "fields",
                   "--max-array-size", value)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "usage:" in result.stderr
    assert error_message(result.stderr) == "--max-array-size must be greater than 0."


@pytest.mark.parametrize("fmt", [(), ("--format", "array")])
def test_max_array_size_requires_fields(ckpt_2000, fmt):
    result = retry("--checkpoint-path", str(ckpt_2000), *fmt, "--max-array-size", "1000")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "usage:" in result.stderr
    assert error_message(result.stderr) == (
        "--max-array-size requires --format fields so each derived offset is included."
    )


def test_missing_run_configuration(tmp_path):
    for ckpt in (tmp_path, tmp_path / "never-created"):
        result = retry("--checkpoint-path", str(ckpt))
        assert result.returncode == 2
        assert result.stdout == ""
        assert "usage:" in result.stderr
        assert error_message(result.stderr) == (
            "Slurm array run configuration was not found. Use the same checkpoint path as the "
            "original array run."
        )


def test_discovery_errors_fail_the_command(tmp_path):
    # Upstream lets the ValueError escape as a traceback (exit 1); the message must surface.
    manifest = build_slurm_array_completion_manifest(tmp_path, 0, 2, 0)
    assert manifest is not None
    manifest.mark_completed()
    run_config_path(tmp_path).unlink()
    result = retry("--checkpoint-path", str(tmp_path))
    assert result.returncode == 1
    assert result.stdout == ""
    assert "ValueError: Slurm array completion manifests exist without run.json" in result.stderr


def test_discovery_type_errors_fail_the_command(tmp_path):
    ensure_slurm_array_run_config(tmp_path, 2, 0)
    run_config_path(tmp_path).write_text('{"minimum_shard_index":0,"total_shards":"2"}\n')
    result = retry("--checkpoint-path", str(tmp_path))
    assert result.returncode == 1
    assert (
        f"TypeError: Slurm array manifest {run_config_path(tmp_path)} must contain an integer "
        "total_shards"
    ) in result.stderr


def test_without_limit_at_most_one_line(tmp_path):
    make_run(tmp_path, 5000, 0, (1, 2500))
    result = retry("--checkpoint-path", str(tmp_path), "--format", "fields")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "0,2-2499,2501-4999 0 0 5000\n"


def test_other_namespaces_do_not_count_as_completed(tmp_path):
    make_run(tmp_path, 2, 0, ())
    CompletionManifest(tmp_path, namespace="other", identity={"shard_index": 0},
                       completion_dirname=".slurm_array_completion").mark_completed()
    result = retry("--checkpoint-path", str(tmp_path))
    assert result.stdout == "0-1\n"
