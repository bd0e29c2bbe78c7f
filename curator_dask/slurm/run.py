"""A pipeline run as one shard of a SLURM array: run.json at start, manifest at the end.

Follows NeMo Curator 1.4's ``Pipeline.run`` (``docs/design/contract.md §5.10``) with two fixes:

- whether the shard saw a ``FailedTask`` is decided from this run's counts (the completion
  plugin's and the stages'), not from a marker file that workers write only if the right
  environment variable reached them;
- the failed-task directory is computed per attempt (job, array task, restart count, shard)
  and never inherited from ``NEMO_CURATOR_FAILED_TASKS_DIR`` set by an earlier run in the same
  process, so a retry in the same process can complete. The empty ``failed_tasks.json``
  marker is still written there for tools that look for it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from curator_dask.slurm.array import SlurmArrayConfig, is_slurm_array_driver_process
from curator_dask.slurm.completion import build_slurm_array_completion_manifest
from curator_dask.slurm.failed_tasks import record_failed_tasks, slurm_array_failed_task_dir
from curator_dask.utils.files import is_remote_url

logger = logging.getLogger(__name__)


class ArrayShardRun:
    """Driver-side bookkeeping of one array shard.

    Example:
        >>> import tempfile
        >>> shard = ArrayShardRun(SlurmArrayConfig(1, 2), tempfile.mkdtemp(), environ={})
        >>> shard.manifest.path.name
        'completed_slurm_array_7387b780ed68dd31.json'
    """

    def __init__(
        self,
        config: SlurmArrayConfig,
        checkpoint_path: str | None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config.validate()
        env = os.environ if environ is None else environ
        # Under SLURMRunner the pipeline runs on rank 1, whatever node that is: it says so.
        self.is_driver = (env.get("CURATOR_DASK_SLURM_DRIVER") == "1"
                          or is_slurm_array_driver_process(env))
        self.failed_dir: Path | None = None
        self.manifest = None
        if checkpoint_path is None:
            return
        if is_remote_url(checkpoint_path):
            msg = (
                f"SLURM array runs keep run.json and completion manifests next to the "
                f"checkpoint, which must be a shared POSIX path; got {checkpoint_path!r}"
            )
            raise ValueError(msg)
        self.failed_dir = slurm_array_failed_task_dir(checkpoint_path, config.shard_index,
                                                      environ)
        self.manifest = build_slurm_array_completion_manifest(
            checkpoint_path if self.is_driver else None,
            config.shard_index, config.total_shards, config.minimum_shard_index,
        )

    def finish(self, result: Any) -> None:
        """After a run that raised nothing: write the manifest unless a task failed."""
        summary = result.checkpoint or {}
        counts = result.stage_counts
        failed = bool(summary.get("failed_sources")) or any(c.failed for _, c in counts)
        if failed and self.failed_dir:
            record_failed_tasks(self.failed_dir)
        if self.manifest is None:
            return
        if failed:
            logger.warning(
                "Pipeline completed without raising, but a FailedTask manifest exists. The "
                "shard remains incomplete and will be selected for retry."
            )
            return
        path = self.manifest.mark_completed()
        logger.info("Wrote Slurm array completion manifest to %s", path)
