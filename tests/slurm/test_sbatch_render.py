"""The rendered sbatch array script, line by line (pure: nothing is submitted)."""

from __future__ import annotations

import subprocess

import pytest

from curator_dask.slurm.sbatch import ArrayJobSpec, render_array_script
from tests.helpers import cli


def lines(**kw) -> list[str]:
    spec = ArrayJobSpec(pipeline="pipe.yaml", array="0-19", checkpoint_path="/ckpt",
                        workdir="/work dir", python="/venv/bin/python", **kw)
    return render_array_script(spec).splitlines()


def test_defaults_mirror_submit_array_sh():
    script = lines()
    assert script[0] == "#!/usr/bin/env bash"
    for line in ("#SBATCH --job-name=curator-array", "#SBATCH --array=0-19",
                 "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1",
                 "#SBATCH --cpus-per-task=16", "#SBATCH --time=01:00:00",
                 "#SBATCH --output=array_%A_%a.log", "#SBATCH --error=array_%A_%a.log",
                 "#SBATCH --signal=B:USR1@120", "cd '/work dir'",
                 'SHARD_INDEX_OFFSET="${SHARD_INDEX_OFFSET:-0}"',
                 'SHARD_INDEX="${SHARD_INDEX:-$((SLURM_ARRAY_TASK_ID + SHARD_INDEX_OFFSET))}"',
                 'TOTAL_SHARDS="${TOTAL_SHARDS:-${SLURM_ARRAY_TASK_COUNT}}"',
                 'MINIMUM_SHARD_INDEX="${MINIMUM_SHARD_INDEX:-0}"',
                 'export NEMO_CURATOR_SLURM_ARRAY_SHARD_INDEX="${SHARD_INDEX}"',
                 'export NEMO_CURATOR_SLURM_ARRAY_TOTAL_SHARDS="${TOTAL_SHARDS}"',
                 'export NEMO_CURATOR_SLURM_ARRAY_MINIMUM_SHARD_INDEX="${MINIMUM_SHARD_INDEX}"'):
        assert line in script, line
    assert not any(x.startswith(("#SBATCH --partition", "#SBATCH --mem", "#SBATCH --requeue"))
                   for x in script)
    assert script[-1] == ("exec /venv/bin/python -m curator_dask run pipe.yaml --checkpoint-path "
                          '/ckpt --no-progress --workers "${WORKERS}"')


def test_options_offsets_and_runner():
    script = lines(total_shards=10000, shard_index_offset=1000, minimum_shard_index=0,
                   partition="debug", mem="8G", requeue=True, signal_grace=300, nodes=2,
                   dask_runner_tasks=6)
    assert 'TOTAL_SHARDS="${TOTAL_SHARDS:-10000}"' in script
    assert 'SHARD_INDEX_OFFSET="${SHARD_INDEX_OFFSET:-1000}"' in script
    for line in ("#SBATCH --partition=debug", "#SBATCH --mem=8G", "#SBATCH --requeue",
                 "#SBATCH --signal=B:USR1@300", "#SBATCH --nodes=2", "#SBATCH --ntasks=6"):
        assert line in script
    assert script[-1].startswith("exec srun /venv/bin/python -m curator_dask run pipe.yaml")
    assert script[-1].endswith("--cluster slurm-runner")


@pytest.mark.parametrize(("kw", "message"), [
    ({"array": "0-x"}, "not a SLURM array expression"),
    ({"shard_index_offset": -1}, "shard_index_offset must be non-negative"),
    ({"total_shards": 0}, "total_shards must be greater than 0"),
    ({"dask_runner_tasks": 2}, "at least 3"),
])
def test_invalid_specs(kw, message):
    base = {"pipeline": "p.yaml", "array": "0-3", "checkpoint_path": "/c"}
    with pytest.raises(ValueError, match=message):
        render_array_script(ArrayJobSpec(**{**base, **kw}))


def test_the_script_is_valid_bash():
    spec = ArrayJobSpec(pipeline="p.yaml", array="1,3,5-7%2", checkpoint_path="/c")
    proc = subprocess.run(["bash", "-n"], input=render_array_script(spec), text=True,
                          capture_output=True)
    assert proc.returncode == 0, proc.stderr


def test_dry_run_cli_prints_the_script(tmp_path):
    out = cli("slurm", "submit", "p.yaml", "--array", "0-3", "--checkpoint-path", "ckpt",
              "--dry-run", cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "#SBATCH --array=0-3" in out.stdout
    assert f"--checkpoint-path {tmp_path / 'ckpt'}" in out.stdout


def test_requests_are_fitted_to_the_partition_nodes():
    from curator_dask.slurm.partition import (
        PartitionNodes,
        RequestRefused,
        check_fits,
        default_cpus_per_task,
    )

    small, mixed = PartitionNodes("debug", (4,)), PartitionNodes("mixed", (64, 8, 8))
    assert default_cpus_per_task(small) == 4
    assert default_cpus_per_task(mixed) == 16  # at most 16 when not asked for
    assert default_cpus_per_task(mixed, nodes=2) == 8  # two nodes must each hold a task
    assert default_cpus_per_task(small, ntasks=3) == 1  # three srun ranks on one 4-CPU node
    assert default_cpus_per_task(small, ntasks=5) == 1  # cannot fit: check_fits says so
    check_fits(small, 4)
    check_fits(mixed, 8, nodes=3)
    with pytest.raises(RequestRefused, match=r"--cpus-per-task 16 needs 16 CPUs on a node, and "
                       r"the largest node of partition debug has 4; pass --cpus-per-task 4 or "
                       r"less"):
        check_fits(small, 16)
    with pytest.raises(RequestRefused, match=r"--nodes 2 .* partition mixed has 1; pass "
                       r"--nodes 1 or less"):
        check_fits(mixed, 16, nodes=2)
    with pytest.raises(RequestRefused, match=r"× 5 tasks per node .* pass more --nodes"):
        check_fits(small, 1, ntasks=5)


def test_dry_run_asks_slurm_nothing(tmp_path):
    """No SLURM command on PATH: --dry-run still prints the script (16 CPUs per task)."""
    (tmp_path / "bin").mkdir()
    out = cli("slurm", "submit", "p.yaml", "--array", "0-3", "--checkpoint-path", "ckpt",
              "--dry-run", cwd=tmp_path, timeout=60, env={"PATH": str(tmp_path / "bin")})
    assert out.returncode == 0, out.stderr
    assert "#SBATCH --cpus-per-task=16" in out.stdout
    assert "--dry-run asks SLURM nothing: 16 CPUs per task" in out.stderr


def test_submission_without_slurm_commands_fails_and_says_how_to_skip_the_check(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "p.yaml").write_text("stages: []\n")
    args = ("slurm", "submit", "p.yaml", "--array", "0-3", "--checkpoint-path", "ckpt")
    env = {"PATH": str(tmp_path / "bin")}
    out = cli(*args, cwd=tmp_path, timeout=60, env=env)
    assert out.returncode == 1, out.stderr
    assert "cannot check the request against the partition: sinfo not found" in out.stderr
    assert "--no-check skips it" in out.stderr
    unchecked = cli(*args, "--no-check", cwd=tmp_path, timeout=60, env=env)
    assert unchecked.returncode == 1 and "sbatch not found" in unchecked.stderr
    missing = cli("slurm", "submit", "nope.yaml", *args[3:], cwd=tmp_path, timeout=60, env=env)
    assert missing.returncode == 2 and "nope.yaml: no such file" in missing.stderr
