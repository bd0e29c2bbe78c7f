"""What ``slurm submit`` and ``slurm retry`` tell a person (issue 32, item 13): the job id alone
on stdout, for scripts, and on stderr where the logs are, how to follow the job and how to
retry it; ``slurm retry`` with nothing to retry says so on stderr, stdout staying empty.

The submit test runs the real command with a STAND-IN ``sbatch`` on ``PATH`` (a shell script
that keeps the script it is given and answers a job id as ``sbatch --parsable`` does): this
machine may have no SLURM, and only the project's local SLURM may be submitted to
(``local_slurm.py``). ``--no-check`` keeps ``sinfo`` and ``sbatch --test-only`` out of it.
The last test does the same against the real local SLURM, when there is one.
"""

from __future__ import annotations

import os
import stat

import pytest

from tests.helpers import cli, wait_for_job
from tests.slurm.local_slurm import local_slurm
from tests.slurm.test_retry_cli import make_run, retry

STAND_IN_SBATCH = """#!/bin/sh
cat > "$(dirname "$0")/submitted.sh"
echo "4242;cluster"
"""


def stand_in_sbatch(tmp_path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(STAND_IN_SBATCH)
    sbatch.chmod(sbatch.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_submit_prints_the_id_alone_and_says_where_the_logs_are(tmp_path):
    (tmp_path / "p.yaml").write_text("stages: []\n")
    out = cli("slurm", "submit", "p.yaml", "--array", "2-5", "--checkpoint-path", "ckpt",
              "--no-check", "--time", "00:10:00", "--cpus-per-task", "2", cwd=tmp_path,
              timeout=60, env=stand_in_sbatch(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout == "4242\n"  # JOB=$(python -m curator_dask slurm submit ...) still works
    assert (tmp_path / "bin" / "submitted.sh").read_text().startswith("#!/usr/bin/env bash")
    log = tmp_path / "array_4242_<task>.log"
    assert f"submitted array job 4242 (array tasks 2-5); each task logs to {log}" in out.stderr
    assert f"squeue -j 4242; tail -f {tmp_path / 'array_4242_2.log'}" in out.stderr
    assert (f"python -m curator_dask slurm retry --checkpoint-path {tmp_path / 'ckpt'} "
            f"--submit {tmp_path / 'p.yaml'} --time 00:10:00 --cpus-per-task 2 --no-check"
            ) in out.stderr


def test_retry_with_every_shard_complete_says_so(tmp_path):
    make_run(tmp_path, 3, 0, (0, 1, 2))
    for extra in ((), ("--format", "fields"), ("--submit", "p.yaml")):
        result = retry("--checkpoint-path", str(tmp_path), *extra)
        assert result.returncode == 0, result.stderr
        assert result.stdout == ""
        what = "resubmit" if extra[:1] == ("--submit",) else "retry"
        assert result.stderr == (f"python -m curator_dask slurm retry: every shard of the array "
                                 f"run in {tmp_path} wrote its completion manifest: nothing to "
                                 f"{what}\n")


_slurm = local_slurm()


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.skipif(_slurm is not None, reason=_slurm or "")
def test_submit_on_real_slurm_names_the_log_it_writes(tmp_path):
    (tmp_path / "input").mkdir()
    (tmp_path / "input" / "a.jsonl").write_text('{"id": "a", "text": "x"}\n')
    (tmp_path / "p.yaml").write_text("stages:\n  - _target_: curator_dask.JsonlReader\n"
                                     "    file_paths: input\n"
                                     "  - _target_: curator_dask.JsonlWriter\n"
                                     "    path: output\n")
    out = cli("slurm", "submit", "p.yaml", "--array", "0", "--checkpoint-path", "ckpt",
              "--cpus-per-task", "1", "--time", "00:05:00", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    job_id = out.stdout.strip()
    assert job_id.isdigit()
    wait_for_job(job_id)
    assert (tmp_path / f"array_{job_id}_0.log").exists(), out.stderr
    assert f"tail -f {tmp_path / f'array_{job_id}_0.log'}" in out.stderr
