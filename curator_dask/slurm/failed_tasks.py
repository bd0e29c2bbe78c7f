"""Failed-task markers: an empty ``failed_tasks.json`` per array attempt that saw a FailedTask.

The same paths and (empty) bytes as NeMo Curator 1.4 (``docs/design/contract.md §5.9``), for
tools that look for them. Pure (no Dask, no LMDB).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from curator_dask.resumability.layout import (
    FAILED_TASK_MANIFEST_FILENAME,
    FAILED_TASKS_DIRNAME,
    METADATA_DIRNAME,
)

FAILED_TASKS_DIR_ENV_VAR = "NEMO_CURATOR_FAILED_TASKS_DIR"


def slurm_array_failed_task_dir(
    checkpoint_path: str | os.PathLike, shard_index: int,
    environ: Mapping[str, str] | None = None,
) -> Path:
    """``.failed_tasks/slurm_job_<id>/array_task_<id>/restart_<n>/shard_<i>`` for this attempt.

    Example:
        >>> env = {"SLURM_JOB_ID": "12", "SLURM_ARRAY_TASK_ID": "3"}
        >>> slurm_array_failed_task_dir("/ckpt", 3, env).as_posix()
        '/ckpt/.nemo_curator_metadata/.failed_tasks/slurm_job_12/array_task_3/restart_0/shard_3'
    """
    env = os.environ if environ is None else environ
    job = env.get("SLURM_JOB_ID") or f"local_{os.getpid()}"
    task = env.get("SLURM_ARRAY_TASK_ID") or "local"
    restart = env.get("SLURM_RESTART_COUNT") or "0"
    return Path(checkpoint_path, METADATA_DIRNAME, FAILED_TASKS_DIRNAME, f"slurm_job_{job}",
                f"array_task_{task}", f"restart_{restart}", f"shard_{shard_index}").absolute()


def record_failed_tasks(directory: str | os.PathLike | None = None,
                        environ: Mapping[str, str] | None = None) -> None:
    """Touch the (empty) ``failed_tasks.json`` marker once; no-op without a directory.

    Without ``directory``, NeMo Curator's ``NEMO_CURATOR_FAILED_TASKS_DIR`` names it.
    """
    env = os.environ if environ is None else environ
    directory = directory or env.get(FAILED_TASKS_DIR_ENV_VAR)
    if not directory:
        return
    marker = Path(directory, FAILED_TASK_MANIFEST_FILENAME)
    if marker.is_file():
        return
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch(exist_ok=True)
