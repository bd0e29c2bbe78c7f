"""A run as one shard of a SLURM array: its sources, ``run.json``, the marker or the manifest.

``ArrayShardRun`` is an observer of the run (``backends/dask/run.py: DaskRun`` makes it from the
run's options): it filters the shard's sources on the driver, and when the run ends leaves
NeMo's failed-task marker (a ``FailedTask`` was seen) or the shard's completion manifest.
Follows NeMo Curator 1.4's ``Pipeline.run`` (``docs/design/contract.md §5.10``) with two fixes:

- whether the shard saw a ``FailedTask`` is decided from this run's counts (the completion
  plugin's and the stages', ``RunEnd.failed_task_seen``), not from a marker file that workers
  write only if the right environment variable reached them;
- the failed-task directory is computed per attempt (job, array task, restart count, shard)
  and never inherited from ``NEMO_CURATOR_FAILED_TASKS_DIR`` set by an earlier run in the same
  process, so a retry in the same process can complete. The empty ``failed_tasks.json``
  marker is still written there for tools that look for it.

Under NeMo Curator's own ``Pipeline.run`` (the plain call, ``RunOptions.plain``) NeMo writes
``run.json`` and the manifest itself; the shard then filters the sources and leaves the marker
in NeMo's folder (``NEMO_CURATOR_FAILED_TASKS_DIR``) only.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from curator_dask.backends.base import NullObserver, RunEnd
from curator_dask.slurm.array import (
    SlurmArrayConfig,
    filter_slurm_array_source_tasks,
    is_slurm_array_driver_process,
)
from curator_dask.slurm.completion import build_slurm_array_completion_manifest
from curator_dask.slurm.failed_tasks import record_failed_tasks, slurm_array_failed_task_dir
from curator_dask.utils.files import is_remote_url

logger = logging.getLogger(__name__)


class ArrayShardRun(NullObserver):
    """Driver-side bookkeeping of one array shard, as an observer of its run.

    Args:
        config: the shard (``None``: every source, for a plain call that only names NeMo's
            failed-task folder).
        checkpoint_path: the run's checkpoint; with ``manifest``, ``run.json`` is created or
            checked next to it now, and the manifest written after a run that completed.
        environ: the environment the attempt is named from (default ``os.environ``).
        failed_task_dir: where the marker goes (NeMo's folder); default: per attempt under
            the checkpoint (with ``manifest``), else nowhere.
        manifest: whether this run writes ``run.json`` and the completion manifest.

    Example:
        >>> import tempfile
        >>> shard = ArrayShardRun(SlurmArrayConfig(1, 2), tempfile.mkdtemp(), environ={})
        >>> shard.manifest.path.name
        'completed_slurm_array_7387b780ed68dd31.json'
    """

    def __init__(
        self,
        config: SlurmArrayConfig | None,
        checkpoint_path: str | None,
        environ: Mapping[str, str] | None = None,
        *,
        failed_task_dir: str | None = None,
        manifest: bool = True,
    ) -> None:
        self.config = config.validate() if config is not None else None
        env = os.environ if environ is None else environ
        # Under SLURMRunner the pipeline runs on rank 1, whatever node that is: it says so.
        self.is_driver = (env.get("CURATOR_DASK_SLURM_DRIVER") == "1"
                          or is_slurm_array_driver_process(env))
        self.failed_dir: Path | None = Path(failed_task_dir) if failed_task_dir else None
        self.manifest = None
        if not manifest or config is None or checkpoint_path is None:
            return
        if is_remote_url(checkpoint_path):
            msg = (
                f"SLURM array runs keep run.json and completion manifests next to the "
                f"checkpoint, which must be a shared POSIX path; got {checkpoint_path!r}"
            )
            raise ValueError(msg)
        self.failed_dir = self.failed_dir or slurm_array_failed_task_dir(
            checkpoint_path, config.shard_index, environ)
        self.manifest = build_slurm_array_completion_manifest(
            checkpoint_path if self.is_driver else None,
            config.shard_index, config.total_shards, config.minimum_shard_index,
        )

    @classmethod
    def for_run(cls, options: Any) -> ArrayShardRun | None:
        """The shard of a run with these ``RunOptions``, or ``None`` when the run is no shard
        and names no failed-task folder."""
        if options.slurm_array is None and not options.failed_task_dir:
            return None
        return cls(options.slurm_array, options.checkpoint_path,
                   failed_task_dir=options.failed_task_dir, manifest=options.array_manifest)

    def select(self, sources: list[Any], source_stage: str) -> list[Any]:
        """The shard's sources among every source (in their order), on the driver."""
        if self.config is None:
            return sources
        return filter_slurm_array_source_tasks(sources, self.config, source_stage)

    def run_finished(self, end: RunEnd) -> None:
        """The marker whenever a ``FailedTask`` was seen (however the run ended); after a run
        that raised nothing, the manifest unless a task failed."""
        if end.failed_task_seen and self.failed_dir:
            record_failed_tasks(self.failed_dir)
        if self.manifest is None or not end.completed:
            return
        if end.failed_task_seen:
            logger.warning(
                "Pipeline completed without raising, but a FailedTask manifest exists. The "
                "shard remains incomplete and will be selected for retry."
            )
            return
        path = self.manifest.mark_completed()
        logger.info("Wrote Slurm array completion manifest to %s", path)
