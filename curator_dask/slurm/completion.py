"""Completion manifests: one file per array shard that says "this shard completed".

Byte-for-byte NeMo Curator 1.4 (``docs/design/contract.md §5.8``): the file name is a digest of
the shard's identity and the bytes are the same compact, key-sorted JSON, so ``retry`` tools of
either project read the other's checkpoints. Pure (no Dask, no LMDB).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from curator_dask.resumability.layout import METADATA_DIRNAME, SLURM_ARRAY_COMPLETION_DIRNAME
from curator_dask.slurm.array import SlurmArrayConfig
from curator_dask.slurm.run_config import (
    COMPACT,
    ensure_slurm_array_run_config,
    read_json_object,
)
from curator_dask.utils.atomic import write_json_atomically

SLURM_ARRAY_COMPLETION_MANIFEST_NAMESPACE = "slurm_array"


def _safe_token(value: object) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in str(value))


def _mapping_digest(mapping: Mapping[str, Any]) -> str:
    text = json.dumps(mapping, default=str, separators=COMPACT, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _directory(checkpoint_path: str | os.PathLike, namespace: str,
               completion_dirname: str | None) -> Path:
    dirname = completion_dirname or f".{_safe_token(namespace)}_completion"
    return Path(checkpoint_path, METADATA_DIRNAME, dirname).absolute()


@dataclass(frozen=True)
class CompletionManifestRecord:
    """One completion manifest read back: its path and its JSON object."""

    path: Path
    payload: dict


class CompletionManifest:
    """A file that says "this unit of work completed", named from its identity.

    The payload is the identity (flattened, as SLURM array shards write it, or under
    ``"identity"``), then ``extra``, then ``"status": "completed"``.

    Example:
        >>> import tempfile
        >>> m = CompletionManifest(tempfile.mkdtemp(), namespace="slurm_array",
        ...     identity={"minimum_shard_index": 0, "shard_index": 7, "total_shards": 11},
        ...     completion_dirname=".slurm_array_completion", flatten_identity=True)
        >>> m.path.name
        'completed_slurm_array_c9993fa2e04029b2.json'
        >>> m.mark_completed().read_text()
        '{"minimum_shard_index":0,"shard_index":7,"status":"completed","total_shards":11}\\n'
    """

    def __init__(
        self,
        checkpoint_path: str | os.PathLike,
        *,
        namespace: str,
        identity: Mapping[str, Any],
        completion_dirname: str | None = None,
        flatten_identity: bool = False,
    ) -> None:
        self.namespace = namespace
        self.identity = dict(identity)
        self.flatten_identity = flatten_identity
        self.directory = _directory(checkpoint_path, namespace, completion_dirname)
        name = f"completed_{_safe_token(namespace)}_{_mapping_digest(self.identity)}.json"
        self.path = self.directory / name

    def mark_completed(self, extra: Mapping[str, Any] | None = None) -> Path:
        """Write the manifest atomically (mode 0600); returns its path."""
        payload: dict[str, Any] = (
            dict(self.identity) if self.flatten_identity else {"identity": dict(self.identity)}
        )
        payload.update(extra or {})
        payload["status"] = "completed"
        return write_json_atomically(self.path, payload, separators=COMPACT, sort_keys=True)


def read_completion_manifests(
    checkpoint_path: str | os.PathLike, *, namespace: str, completion_dirname: str | None = None
) -> list[CompletionManifestRecord]:
    """Every manifest of ``namespace``, sorted by path; raises for one that is not completed."""
    directory = _directory(checkpoint_path, namespace, completion_dirname)
    if not directory.is_dir():
        return []
    records = []
    for path in sorted(directory.glob(f"completed_{_safe_token(namespace)}_*.json")):
        if not path.is_file():
            continue
        payload = read_json_object(path, "completion manifest", "Completion manifest")
        status = payload.get("status")
        if not isinstance(status, str):
            msg = f"Completion manifest must contain a string status: {path}"
            raise TypeError(msg)
        if status != "completed":
            msg = f"Completion manifest must have status 'completed': {path}"
            raise ValueError(msg)
        records.append(CompletionManifestRecord(path=path, payload=payload))
    return records


def build_slurm_array_completion_manifest(
    checkpoint_path: str | os.PathLike | None,
    shard_index: int,
    total_shards: int,
    minimum_shard_index: int = 0,
) -> CompletionManifest | None:
    """The shard's manifest (``None`` without a checkpoint); creates or checks ``run.json``."""
    if checkpoint_path is None:
        return None
    config = SlurmArrayConfig(shard_index, total_shards, minimum_shard_index).check_values()
    maximum = config.maximum_shard_index
    if not minimum_shard_index <= shard_index <= maximum:
        msg = (f"shard_index {shard_index} is outside the shard range "
               f"[{minimum_shard_index}, {maximum}]")
        raise ValueError(msg)
    ensure_slurm_array_run_config(checkpoint_path, total_shards, minimum_shard_index)
    return CompletionManifest(
        checkpoint_path,
        namespace=SLURM_ARRAY_COMPLETION_MANIFEST_NAMESPACE,
        identity={"minimum_shard_index": minimum_shard_index, "shard_index": shard_index,
                  "total_shards": total_shards},
        completion_dirname=SLURM_ARRAY_COMPLETION_DIRNAME,
        flatten_identity=True,
    )
