"""The SLURM scripts curator_dask writes set the workers' PYTHONHASHSEED before Python starts
(issue 19, item 12): the array script (rendered, and run by bash), and dask-jobqueue's worker
job script. Nothing is submitted here (tests/slurm/test_hash_seed_slurm.py runs real jobs)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from curator_dask.slurm.sbatch import ArrayJobSpec, render_array_script
from tests.helpers import cli

EXPORT = 'export PYTHONHASHSEED="${PYTHONHASHSEED:-6640}"'


@pytest.fixture(autouse=True)
def _no_driver_seed(monkeypatch):
    """The driver's PYTHONHASHSEED would win; Dask's Nanny sets it in this process when an
    earlier test started an embedded cluster."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)


def _spec(tmp_path, **kw) -> ArrayJobSpec:
    return ArrayJobSpec(pipeline="pipe.yaml", array="0-3", checkpoint_path="/ckpt",
                        workdir=str(tmp_path), python=str(_fake_python(tmp_path)), **kw)


def _fake_python(tmp_path):
    """Stands in for the interpreter the script starts: prints the seed it would start with."""
    path = tmp_path / "python"
    path.write_text('#!/bin/sh\necho "seed=${PYTHONHASHSEED-unset}"\n')
    path.chmod(0o755)
    return path


def _run_script(script: str, tmp_path, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    base.update(SLURM_ARRAY_TASK_ID="0", SLURM_ARRAY_TASK_COUNT="4", SLURM_CPUS_PER_TASK="1")
    proc = subprocess.run(["bash", "-c", script], env={**base, **env}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.parametrize("runner", [None, 3])
def test_the_array_script_exports_the_seed_before_python_starts(tmp_path, runner):
    lines = render_array_script(_spec(tmp_path, dask_runner_tasks=runner)).splitlines()
    assert EXPORT in lines
    # before the driver (and, under srun, every rank) starts: it is read at start only
    assert lines.index(EXPORT) < len(lines) - 1 and lines[-1].startswith("exec ")


def test_the_rendered_script_starts_python_with_the_seed_unless_the_job_has_one(tmp_path):
    script = render_array_script(_spec(tmp_path))
    assert _run_script(script, tmp_path) == "seed=6640"
    assert _run_script(script, tmp_path, PYTHONHASHSEED="5") == "seed=5"  # the job's own


def test_the_seed_comes_from_the_config_or_the_driver_and_null_sets_none(tmp_path, monkeypatch):
    import dask.config

    with dask.config.set({"curator-dask.cluster.python-hash-seed": 99}):
        assert 'export PYTHONHASHSEED="${PYTHONHASHSEED:-99}"' in render_array_script(
            _spec(tmp_path)).splitlines()
    with dask.config.set({"curator-dask.cluster.python-hash-seed": None}):
        script = render_array_script(_spec(tmp_path))
        assert "PYTHONHASHSEED" not in script
        assert _run_script(script, tmp_path) == "seed=unset"
    monkeypatch.setenv("PYTHONHASHSEED", "31")  # the driver's (here: the submitting) process
    assert _run_script(render_array_script(_spec(tmp_path)), tmp_path) == "seed=31"
    with pytest.raises(ValueError, match="python_hash_seed='x' is not a PYTHONHASHSEED"):
        render_array_script(_spec(tmp_path, python_hash_seed="x"))


def test_slurm_submit_dry_run_shows_the_configured_seed(tmp_path):
    out = cli("slurm", "submit", "p.yaml", "--array", "0-3", "--checkpoint-path", "ckpt",
              "--dry-run", cwd=tmp_path, timeout=60, drop_env_prefixes=("PYTHONHASHSEED",),
              env={"DASK_CURATOR_DASK__CLUSTER__PYTHON_HASH_SEED": "4242"})
    assert out.returncode == 0, out.stderr
    assert 'export PYTHONHASHSEED="${PYTHONHASHSEED:-4242}"' in out.stdout.splitlines()


def _job_script(tmp_path, **kwargs) -> list[str]:
    """The worker job script of a real ``SlurmClusterHandle`` (its scheduler runs here; an
    adaptive minimum of 0 submits no job)."""
    pytest.importorskip("dask_jobqueue")
    from curator_dask.slurm.cluster import SlurmClusterHandle

    handle = SlurmClusterHandle(None, adapt=(0, 1), tls=False, cores=1, memory="1GB",
                                processes=1, python=sys.executable,
                                scheduler_options={"dashboard_address": "127.0.0.1:0"},
                                log_directory=str(tmp_path / "logs"), **kwargs)
    try:
        return handle.cluster.job_script().splitlines()
    finally:
        handle.close()


def test_the_worker_job_script_exports_the_seed_before_dask_worker(tmp_path):
    lines = _job_script(tmp_path, job_script_prologue=["echo the user's prologue"])
    worker = next(i for i, line in enumerate(lines) if "distributed.cli.dask_worker" in line)
    assert lines.index("export PYTHONHASHSEED=6640") < lines.index("echo the user's prologue")
    assert lines.index("echo the user's prologue") < worker
    # a prologue that sets the seed itself is left as it is
    lines = _job_script(tmp_path, job_script_prologue=["export PYTHONHASHSEED=1"])
    assert [line for line in lines if "PYTHONHASHSEED" in line] == ["export PYTHONHASHSEED=1"]
