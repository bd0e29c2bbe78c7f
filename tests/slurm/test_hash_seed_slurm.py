"""On a real SLURM, the worker processes curator_dask starts hash strings alike (issue 19,
item 12): a SLURMCluster worker job without a Nanny (its worker is the job's own interpreter),
and the worker ranks of a ``slurm-runner`` step the user started with ``srun`` without a seed.

Only the project's own local SLURM is used (tests/slurm/local_slurm.py).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

from curator_dask.sample_data import generate_jsonl
from tests.backends.test_hash_seed import hash_with_seed
from tests.helpers import REPO_ROOT, cli_env, wait_for_job
from tests.slurm.local_slurm import local_slurm, network_kwargs, node_cpus

_reason = local_slurm()
pytestmark = [pytest.mark.slurm, pytest.mark.slow,
              pytest.mark.skipif(_reason is not None, reason=_reason or "")]

PIPELINE = """
from curator_dask import JsonlReader, JsonlWriter, Pipeline
from tests.backends.process_stages import HashOfText

def build():
    return (Pipeline(name="hash-seed").add_stage(JsonlReader(file_paths="input"))
            .add_stage(HashOfText()).add_stage(JsonlWriter(path="output")))
"""


def test_a_worker_job_without_a_nanny_gets_the_seed(tmp_path, monkeypatch):
    """dask-jobqueue's job runs ``dask worker --no-nanny``: the worker is the interpreter the
    job script starts, so only the script's ``export`` gives it the seed."""
    pytest.importorskip("dask_jobqueue")
    from curator_dask import DaskExecutor

    # sbatch hands the submitting process's environment to the job: none here
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    kwargs = {"cores": 1, "memory": "1GB", "processes": 1, "queue": "debug", "nanny": False,
              "walltime": "00:10:00", **network_kwargs(dashboard_address=None),
              "log_directory": str(tmp_path / "logs"), "python": sys.executable}
    with DaskExecutor(cluster="slurm", jobs=1, progress=False, cluster_kwargs=kwargs) as ex:
        client = ex.start()
        client.wait_for_workers(1, timeout=120)
        found = client.run(lambda: [os.environ.get("PYTHONHASHSEED"), hash("curator_dask")])
    assert list(found.values()) == [["6640", *hash_with_seed("6640", ["curator_dask"])]]


def test_slurm_runner_worker_ranks_started_without_a_seed_start_again_with_it(tmp_path):
    tasks = 3  # scheduler, driver, one worker
    generate_jsonl(str(tmp_path / "input"), files=3, docs_per_file=4, seed=8)
    (tmp_path / "hash_pipe.py").write_text(PIPELINE)
    log = tmp_path / "runner.log"
    script = textwrap.dedent(f"""\
        #!/usr/bin/env bash
        #SBATCH --ntasks={tasks}
        #SBATCH --cpus-per-task=1
        #SBATCH --time=00:05:00
        #SBATCH --output={log}
        {"#SBATCH --overcommit" if node_cpus() < tasks else ""}
        set -euo pipefail
        cd {tmp_path}
        unset PYTHONHASHSEED  # as a user's own batch script may well leave it
        exec srun {sys.executable} -m curator_dask run hash_pipe.py:build \\
            --cluster slurm-runner --no-progress
        """)
    from curator_dask.slurm.sbatch import submit_script

    job = submit_script(script, environ=cli_env(pythonpath=[REPO_ROOT]))
    wait_for_job(job)
    text = log.read_text() if log.exists() else "no log"
    rows = [json.loads(line) for path in sorted((tmp_path / "output").glob("*.jsonl"))
            for line in path.read_text().splitlines()]
    assert len(rows) == 12, text[-4000:]
    assert [r["text_hash"] for r in rows] == hash_with_seed("6640", [r["text"] for r in rows])
    assert "worker rank 2: starting again with PYTHONHASHSEED=6640" in text, text[-4000:]
