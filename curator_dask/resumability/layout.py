"""Names of the folders and files a checkpoint path holds: the one home of the layout.

Pure constants (no imports), shared by the completion store, the stage checkpoints, the input
fingerprints and the SLURM array files::

    <checkpoint>/
        .nemo_curator_metadata/                 # NeMo Curator 1.4's own layout, byte for byte
            <host>-<pid>-<token>.mdb            # completed source ids (LMDB), one per run
            .slurm_array_completion/
                run.json                        # the array run's shard range
                completed_slurm_array_<digest>.json
            .failed_tasks/slurm_job_<id>/array_task_<id>/restart_<n>/shard_<i>/
                failed_tasks.json               # empty marker: the shard saw a FailedTask
        .curator_dask/                          # this project's additions
            stage_checkpoints/<entry>/          # see resumability/stage_checkpoints
            input_fingerprints/<host>-<pid>-<run>.json
            partitioning.json                   # whole-file groups (partitions/record.py)
            partitioning_info.json              # row-range partitions (partitions/record.py)

The names under ``.nemo_curator_metadata`` must not change: NeMo Curator's ``retry`` tools read
them (``docs/design/contract.md §5``).

Example:
    >>> STAGE_CHECKPOINTS_SUBDIR
    '.curator_dask/stage_checkpoints'
"""

from __future__ import annotations

METADATA_DIRNAME = ".nemo_curator_metadata"
SLURM_ARRAY_COMPLETION_DIRNAME = ".slurm_array_completion"
SLURM_ARRAY_RUN_CONFIG_FILENAME = "run.json"
FAILED_TASKS_DIRNAME = ".failed_tasks"
FAILED_TASK_MANIFEST_FILENAME = "failed_tasks.json"

CURATOR_DASK_DIRNAME = ".curator_dask"
STAGE_CHECKPOINTS_DIRNAME = "stage_checkpoints"
INPUT_FINGERPRINTS_DIRNAME = "input_fingerprints"
STAGE_CHECKPOINTS_SUBDIR = f"{CURATOR_DASK_DIRNAME}/{STAGE_CHECKPOINTS_DIRNAME}"
INPUT_FINGERPRINTS_SUBDIR = f"{CURATOR_DASK_DIRNAME}/{INPUT_FINGERPRINTS_DIRNAME}"
PARTITIONING_RECORD_FILENAME = "partitioning.json"
PARTITIONING_RECORD_PATH = f"{CURATOR_DASK_DIRNAME}/{PARTITIONING_RECORD_FILENAME}"
PARTITION_INFO_FILENAME = "partitioning_info.json"
PARTITION_INFO_PATH = f"{CURATOR_DASK_DIRNAME}/{PARTITION_INFO_FILENAME}"
ID_GENERATOR_FILENAME = "id_generator.json"  # NeMo's id generator JSON of a run with ids
ID_GENERATOR_PATH = f"{CURATOR_DASK_DIRNAME}/{ID_GENERATOR_FILENAME}"
