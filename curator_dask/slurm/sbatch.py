"""Render and submit SLURM array scripts that run a pipeline as array shards.

The script exports the shard variables exactly as NeMo Curator's ``submit_array.sh`` does
(docs/design/contract.md §5.16), so ``SHARD_INDEX_OFFSET`` windows and retries work the same
way, and asks SLURM for ``--signal=B:USR1@<grace>`` so the driver can drain before the time
limit. It exports ``PYTHONHASHSEED`` (unless the job's environment has one) before the driver,
and with ``--dask-runner-tasks`` every rank of its ``srun`` step, starts: the driver and its
workers hash strings alike (:mod:`curator_dask.utils.hash_seed`).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field

from curator_dask import config as _config
from curator_dask.backends.dask.cluster_kinds import SLURM_RUNNER
from curator_dask.errors import CuratorDaskError
from curator_dask.utils.hash_seed import CONFIG_KEY as HASH_SEED_KEY
from curator_dask.utils.hash_seed import ENV as HASH_SEED_ENV
from curator_dask.utils.hash_seed import check_hash_seed, worker_hash_seed

_ARRAY_RE = re.compile(r"^\d+(-\d+)?(:\d+)?(,\d+(-\d+)?(:\d+)?)*(%\d+)?$")


class SbatchError(RuntimeError, CuratorDaskError):
    """``sbatch`` failed; the message carries the command, exit code, stdout and stderr."""


@dataclass(frozen=True)
class ArrayJobSpec:
    """What to submit: the pipeline, the array, the shard layout and SLURM resources.

    Example:
        >>> spec = ArrayJobSpec(pipeline="p.yaml", array="0-3", checkpoint_path="/ckpt")
        >>> "#SBATCH --array=0-3" in render_array_script(spec)
        True
    """

    pipeline: str
    array: str
    checkpoint_path: str
    total_shards: int | None = None
    shard_index_offset: int = 0
    minimum_shard_index: int = 0
    job_name: str = "curator-array"
    partition: str | None = None
    time: str = "01:00:00"
    cpus_per_task: int = 16
    mem: str | None = None
    nodes: int = 1
    requeue: bool = False
    signal_grace: int = 120
    output: str = "array_%A_%a.log"
    dask_runner_tasks: int | None = None
    workdir: str = field(default_factory=os.getcwd)
    python: str = field(default_factory=lambda: sys.executable)
    extra_run_args: tuple[str, ...] = ()
    # PYTHONHASHSEED of the job's processes unless its environment has one; None: not set
    python_hash_seed: str | None = field(
        default_factory=lambda: worker_hash_seed(_config.get(HASH_SEED_KEY)))

    def validate(self) -> ArrayJobSpec:
        if not _ARRAY_RE.match(self.array):
            msg = (f"--array {self.array!r} is not a SLURM array expression such as 0-19, "
                   "1,3,5-7 or 0-99%10")
            raise ValueError(msg)
        for name in ("shard_index_offset", "minimum_shard_index"):
            if getattr(self, name) < 0:
                msg = f"{name} must be non-negative, got {getattr(self, name)}"
                raise ValueError(msg)
        if self.total_shards is not None and self.total_shards <= 0:
            msg = f"total_shards must be greater than 0, got {self.total_shards}"
            raise ValueError(msg)
        if self.cpus_per_task < 1 or self.nodes < 1:
            msg = "cpus_per_task and nodes must be at least 1"
            raise ValueError(msg)
        if self.dask_runner_tasks is not None and self.dask_runner_tasks < 3:
            msg = (f"dask_runner_tasks must be at least 3 (scheduler, driver, one worker), "
                   f"got {self.dask_runner_tasks}")
            raise ValueError(msg)
        check_hash_seed(self.python_hash_seed, given="python_hash_seed")
        return self


def render_array_script(spec: ArrayJobSpec) -> str:
    """The sbatch script text for ``spec``."""
    spec.validate()
    q = shlex.quote
    lines = [
        "#!/usr/bin/env bash",
        f"#SBATCH --job-name={spec.job_name}",
        f"#SBATCH --array={spec.array}",
        f"#SBATCH --nodes={spec.nodes}",
        ("#SBATCH --ntasks-per-node=1" if spec.dask_runner_tasks is None
         else f"#SBATCH --ntasks={spec.dask_runner_tasks}"),
        f"#SBATCH --cpus-per-task={spec.cpus_per_task}",
        f"#SBATCH --time={spec.time}",
        f"#SBATCH --output={spec.output}",
        f"#SBATCH --error={spec.output}",
        f"#SBATCH --signal=B:USR1@{spec.signal_grace}",
    ]
    if spec.partition:
        lines.append(f"#SBATCH --partition={spec.partition}")
    if spec.mem:
        lines.append(f"#SBATCH --mem={spec.mem}")
    if spec.requeue:
        lines.append("#SBATCH --requeue")
    total = str(spec.total_shards) if spec.total_shards is not None else "${SLURM_ARRAY_TASK_COUNT}"
    run_args = [spec.pipeline, "--checkpoint-path", spec.checkpoint_path, "--no-progress",
                *spec.extra_run_args]
    lines += [
        "set -euo pipefail",
        f"cd {q(spec.workdir)}",
        f'SHARD_INDEX_OFFSET="${{SHARD_INDEX_OFFSET:-{spec.shard_index_offset}}}"',
        'SHARD_INDEX="${SHARD_INDEX:-$((SLURM_ARRAY_TASK_ID + SHARD_INDEX_OFFSET))}"',
        f'TOTAL_SHARDS="${{TOTAL_SHARDS:-{total}}}"',
        f'MINIMUM_SHARD_INDEX="${{MINIMUM_SHARD_INDEX:-{spec.minimum_shard_index}}}"',
        'export NEMO_CURATOR_SLURM_ARRAY_SHARD_INDEX="${SHARD_INDEX}"',
        'export NEMO_CURATOR_SLURM_ARRAY_TOTAL_SHARDS="${TOTAL_SHARDS}"',
        'export NEMO_CURATOR_SLURM_ARRAY_MINIMUM_SHARD_INDEX="${MINIMUM_SHARD_INDEX}"',
        "export SHARD_INDEX_OFFSET SHARD_INDEX TOTAL_SHARDS MINIMUM_SHARD_INDEX",
    ]
    seed = check_hash_seed(spec.python_hash_seed, given="python_hash_seed")
    if seed is not None:
        # read at interpreter start only: the driver and every srun rank inherit it
        lines.append(f'export {HASH_SEED_ENV}="${{{HASH_SEED_ENV}:-{seed}}}"')
    if spec.dask_runner_tasks is None:
        lines += [
            'WORKERS="${SLURM_CPUS_PER_TASK:-1}"',
            # exec: the batch shell becomes the driver, so SLURM's USR1 reaches it directly.
            f"exec {q(spec.python)} -m curator_dask run "
            + " ".join(q(a) for a in run_args) + ' --workers "${WORKERS}"',
        ]
    else:
        # Several tasks (nodes): one Dask cluster from one srun step (dask-jobqueue SLURMRunner).
        lines.append(
            f"exec srun {q(spec.python)} -m curator_dask run "
            + " ".join(q(a) for a in run_args) + f" --cluster {SLURM_RUNNER}"
        )
    return "\n".join(lines) + "\n"


def submit_script(script: str, *, extra_args: list[str] | None = None,
                  environ: dict[str, str] | None = None) -> str:
    """Submit ``script`` with ``sbatch --parsable``; returns the job id."""
    command = ["sbatch", "--parsable", *(extra_args or [])]
    try:
        proc = subprocess.run(command, input=script, capture_output=True, text=True,
                              env=environ, timeout=60)
    except FileNotFoundError:
        msg = f"sbatch not found: {' '.join(command)}; is this a SLURM login node?"
        raise SbatchError(msg) from None
    if proc.returncode != 0:
        msg = (f"{' '.join(command)} exited with {proc.returncode}\n"
               f"stdout: {proc.stdout.strip()}\nstderr: {proc.stderr.strip()}")
        raise SbatchError(msg)
    return proc.stdout.strip().split(";")[0]
