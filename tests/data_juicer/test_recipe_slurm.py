"""A Data-Juicer recipe on the project's own local SLURM (tools/local-slurm): the workers are
SLURM jobs (dask-jobqueue's SLURMCluster, TLS), the result Data-Juicer's default executor's.

Only the project's local SLURM is used (tests/slurm/local_slurm.py checks the marks its
start.sh leaves); elsewhere the test is skipped with the reason and submits nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.data_juicer.helpers import (
    TWELVE_OPS,
    corpus,
    run_dj_default,
    run_in_process,
    same_files,
    write_recipe,
)
from tests.slurm.local_slurm import local_slurm, network_kwargs

_reason = local_slurm()
pytestmark = [pytest.mark.slurm, pytest.mark.slow,
              pytest.mark.skipif(_reason is not None, reason=_reason or "")]


def test_a_recipe_on_slurm_worker_jobs(tmp_path: Path) -> None:
    from curator_dask import DaskExecutor

    data = corpus(tmp_path, max_bytes=400_000)
    ref = write_recipe(tmp_path / "ref.yaml", data, tmp_path / "ref" / "result.jsonl",
                       TWELVE_OPS)
    run_dj_default(ref)
    ours = write_recipe(tmp_path / "ours.yaml", data, tmp_path / "ours" / "result.jsonl",
                        TWELVE_OPS, executor_type="dask")
    kwargs = {"cores": 1, "memory": "2GB", "processes": 1, "queue": "debug",
              "walltime": "00:10:00", **network_kwargs(dashboard_address=None),
              "log_directory": str(tmp_path / "logs"), "python": sys.executable}
    with DaskExecutor(cluster="slurm", jobs=2, progress=False,
                      cluster_kwargs=kwargs) as executor:
        executor.start().wait_for_workers(2, timeout=180)
        result = run_in_process(ours, executor, "--partition.mode", "manual",
                                "--partition.num_of_partitions", "3")
    assert result.partitions == 3
    same_files(tmp_path / "ref" / "result.jsonl", tmp_path / "ours" / "result.jsonl")
    same_files(tmp_path / "ref" / "result_stats.jsonl", tmp_path / "ours" / "result_stats.jsonl")
