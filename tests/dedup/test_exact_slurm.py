"""``ExactDeduplicationWorkflow`` on the project's local SLURM (tools/local-slurm/start.sh):
``DaskExecutor(cluster="slurm")`` runs both phases (the hash pipeline and the P2P shuffle) on
SLURM worker jobs, and the ids are a pandas reference's."""

from __future__ import annotations

import sys

import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests.dedup.exact_corpus import read_corpus, write_corpus
from tests.slurm.local_slurm import local_slurm, network_kwargs

_reason = local_slurm()
pytestmark = [pytest.mark.slurm, pytest.mark.slow,
              pytest.mark.skipif(_reason is not None, reason=_reason or "")]


def test_exact_dedup_on_a_slurm_cluster(tmp_path):
    from curator_dask import DaskExecutor
    from curator_dask.dedup import ExactDeduplicationWorkflow

    corpus = write_corpus(tmp_path / "in", files=4, docs=30)
    kwargs = {"cores": 1, "memory": "2GB", "processes": 1, "queue": "debug",
              "walltime": "00:10:00", **network_kwargs(dashboard_address=None),
              "log_directory": str(tmp_path / "logs"), "python": sys.executable}
    executor = DaskExecutor(cluster="slurm", jobs=1, progress=False, cluster_kwargs=kwargs)
    with executor:
        handle = executor.cluster
        executor.start().wait_for_workers(1, timeout=120)
        workers = executor.client.scheduler_info()["workers"]
        result = ExactDeduplicationWorkflow(
            output_path=str(tmp_path / "out"), input_path=str(corpus), input_filetype="jsonl",
            input_blocksize="1kB", assign_id=False, id_field="id", normalize_text=True,
            total_nparts=2).run(executor=executor)
        jobs = [job.job_id for job in handle.cluster.workers.values()]
    assert jobs and all(jobs) and workers  # the work ran in SLURM worker jobs
    removed = pq.read_table(tmp_path / "out" / "ExactDuplicateIds").column("id").to_pylist()
    rows = pd.DataFrame(read_corpus(corpus))
    kept = set(rows.groupby("key")["id"].min())
    assert sorted(removed) == sorted(set(rows["id"]) - kept)
    assert result.metadata["num_duplicates"] == len(removed) > 0
