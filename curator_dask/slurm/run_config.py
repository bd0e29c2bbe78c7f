"""``run.json``: an array run's shard range, created once and checked by every shard.

Byte-for-byte NeMo Curator 1.4 (``docs/design/contract.md §5.7``): the same path, JSON bytes and
error messages, so ``retry`` tools of either project read the other's checkpoints. Pure (no
Dask, no LMDB).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from curator_dask.resumability.layout import (
    METADATA_DIRNAME,
    SLURM_ARRAY_COMPLETION_DIRNAME,
    SLURM_ARRAY_RUN_CONFIG_FILENAME,
)
from curator_dask.utils.atomic import write_json_atomically_if_absent

COMPACT = (",", ":")


def completion_dir(checkpoint_path: str | os.PathLike) -> Path:
    """``<checkpoint>/.nemo_curator_metadata/.slurm_array_completion``, absolute."""
    return Path(checkpoint_path, METADATA_DIRNAME, SLURM_ARRAY_COMPLETION_DIRNAME).absolute()


def run_config_path(checkpoint_path: str | os.PathLike) -> Path:
    """Where the array run's ``run.json`` lives.

    Example:
        >>> run_config_path("/ckpt").as_posix()
        '/ckpt/.nemo_curator_metadata/.slurm_array_completion/run.json'
    """
    return completion_dir(checkpoint_path) / SLURM_ARRAY_RUN_CONFIG_FILENAME


def read_json_object(path: Path, what: str, title: str) -> dict:
    """A JSON object from ``path``; errors name ``what`` as NeMo Curator's do."""
    try:
        with open(path, encoding="utf-8") as f:
            payload = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        msg = f"Failed to read {what} {path}: {exc}"
        raise ValueError(msg) from exc
    if not isinstance(payload, dict):
        msg = f"{title} must contain a JSON object: {path}"
        raise TypeError(msg)
    return payload


def read_run_config(path: Path) -> dict:
    """The JSON object in ``run.json`` (not yet checked field by field)."""
    return read_json_object(path, "Slurm array run configuration",
                            "Slurm array run configuration")


def ensure_slurm_array_run_config(
    checkpoint_path: str | os.PathLike, total_shards: int, minimum_shard_index: int
) -> Path:
    """Create ``run.json`` or check that it matches (one logical run per checkpoint path)."""
    path = run_config_path(checkpoint_path)
    expected = {"minimum_shard_index": minimum_shard_index, "total_shards": total_shards}

    def check(payload: dict) -> None:
        if payload != expected:
            msg = (
                f"Slurm array run configuration at {path} is {payload}, expected {expected}; "
                "use a separate checkpoint path for each logical run"
            )
            raise ValueError(msg)

    if path.exists():
        check(read_run_config(path))
        return path
    if write_json_atomically_if_absent(path, expected, separators=COMPACT, sort_keys=True):
        return path
    if not path.exists():
        msg = f"Slurm array run configuration disappeared while initializing {path}"
        raise RuntimeError(msg)
    check(read_run_config(path))
    return path
