"""What ``slurm submit`` and ``slurm retry`` tell a person (issue 32, item 13): the job id alone
on stdout, for scripts, and on stderr where the logs are, how to follow the job and how to
retry it; ``slurm retry`` with nothing to retry says so on stderr, stdout staying empty.

The submit test runs against the project's real local SLURM (``local_slurm.py``; skipped,
with the reason, where it does not run); the text of the retry command is also checked by
``retry_command``'s and ``follow_hint``'s doctests (``curator_dask/cli/slurm.py``).
"""

from __future__ import annotations

import pytest

from tests.helpers import cli, wait_for_job
from tests.slurm.local_slurm import local_slurm
from tests.slurm.test_retry_cli import make_run, retry


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
    assert f"submitted array job {job_id} (array tasks 0); each task logs to " in out.stderr
    # the retry command takes again the job options given that are not at their defaults
    assert (f"python -m curator_dask slurm retry --checkpoint-path {tmp_path / 'ckpt'} "
            f"--submit {tmp_path / 'p.yaml'} --time 00:05:00 --cpus-per-task 1") in out.stderr
