"""Run configuration, completion manifests, failed-task markers, retry plans (CONTRACT §5.7-5.13).

Byte-for-byte NeMo Curator 1.4: the same paths, names, JSON bytes and error messages, so
``retry`` tools of either project read the other's checkpoints. Pure (no Dask, no LMDB).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from curator_dask.slurm.array import SlurmArrayConfig
from curator_dask.utils.atomic import fsync_dir

METADATA_DIRNAME = ".nemo_curator_metadata"
SLURM_ARRAY_COMPLETION_MANIFEST_NAMESPACE = "slurm_array"
SLURM_ARRAY_COMPLETION_DIRNAME = ".slurm_array_completion"
SLURM_ARRAY_RUN_CONFIG_FILENAME = "run.json"
FAILED_TASKS_DIR_ENV_VAR = "NEMO_CURATOR_FAILED_TASKS_DIR"
FAILED_TASK_MANIFEST_FILENAME = "failed_tasks.json"
_COMPACT = (",", ":")


# -- atomic JSON files (utils/atomic_io.py) --------------------------------------------------
def _write_temp_json(path: Path, payload: Any, **dump_kwargs: Any) -> Path:
    dump_kwargs.setdefault("sort_keys", True)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(mode="w", encoding="utf-8", dir=path.parent,
                                     prefix=f".{path.name}.", suffix=".tmp", delete=False) as f:
        tmp = Path(f.name)
        try:
            json.dump(payload, f, **dump_kwargs)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        except BaseException:
            f.close()
            tmp.unlink(missing_ok=True)
            raise
    return tmp


def write_json_atomically(path: str | os.PathLike, payload: Any, **dump_kwargs: Any) -> Path:
    """Write ``payload`` + newline to ``path`` via a temp file and ``os.replace`` (mode 0600)."""
    path = Path(path)
    tmp = _write_temp_json(path, payload, **dump_kwargs)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def write_json_atomically_if_absent(
    path: str | os.PathLike, payload: Any, **dump_kwargs: Any
) -> bool:
    """Create ``path`` with ``payload`` only if it does not exist (``os.link``); True if created."""
    path = Path(path)
    tmp = _write_temp_json(path, payload, **dump_kwargs)
    try:
        os.link(tmp, path)
    except FileExistsError:
        tmp.unlink(missing_ok=True)
        return False
    with contextlib.suppress(OSError):
        tmp.unlink()
    fsync_dir(path.parent)
    return True


# -- run.json ----------------------------------------------------------------------------------
def completion_dir(checkpoint_path: str | os.PathLike) -> Path:
    return Path(checkpoint_path, METADATA_DIRNAME, SLURM_ARRAY_COMPLETION_DIRNAME).absolute()


def run_config_path(checkpoint_path: str | os.PathLike) -> Path:
    return completion_dir(checkpoint_path) / SLURM_ARRAY_RUN_CONFIG_FILENAME


def _read_json_object(path: Path, what: str, title: str) -> dict:
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


def _read_run_config(path: Path) -> dict:
    return _read_json_object(path, "Slurm array run configuration",
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
        check(_read_run_config(path))
        return path
    if write_json_atomically_if_absent(path, expected, separators=_COMPACT, sort_keys=True):
        return path
    if not path.exists():
        msg = f"Slurm array run configuration disappeared while initializing {path}"
        raise RuntimeError(msg)
    check(_read_run_config(path))
    return path


# -- completion manifests (utils/retry_manifest.py) -------------------------------------------
def _safe_token(value: object) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in str(value))


def _mapping_digest(mapping: Mapping[str, Any]) -> str:
    text = json.dumps(mapping, default=str, separators=_COMPACT, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class CompletionManifestRecord:
    path: Path
    payload: dict


class CompletionManifest:
    """A file that says "this unit of work completed", named from its identity.

    Example:
        >>> import tempfile
        >>> m = CompletionManifest(tempfile.mkdtemp(), namespace="slurm_array",
        ...     identity={"minimum_shard_index": 0, "shard_index": 7, "total_shards": 11},
        ...     completion_dirname=".slurm_array_completion", flatten_identity=True)
        >>> m.path.name
        'completed_slurm_array_c9993fa2e04029b2.json'
    """

    def __init__(
        self,
        checkpoint_path: str | os.PathLike,
        *,
        namespace: str,
        identity: Mapping[str, Any],
        metadata: Mapping[str, Any] | None = None,
        completion_dirname: str | None = None,
        flatten_identity: bool = False,
        flatten_metadata: bool = False,
        enabled: bool = True,
    ) -> None:
        self.namespace = namespace
        self.identity = dict(identity)
        self.metadata = dict(metadata or {})
        self.flatten_identity = flatten_identity
        self.flatten_metadata = flatten_metadata
        self.enabled = enabled
        dirname = completion_dirname or f".{_safe_token(namespace)}_completion"
        self.directory = Path(checkpoint_path, METADATA_DIRNAME, dirname).absolute()
        name = f"completed_{_safe_token(namespace)}_{_mapping_digest(self.identity)}.json"
        self.path = self.directory / name

    def _payload(self, extra: Mapping[str, Any] | None) -> dict:
        payload: dict[str, Any] = (
            dict(self.identity) if self.flatten_identity else {"identity": dict(self.identity)}
        )
        if self.metadata:
            if self.flatten_metadata:
                payload.update(self.metadata)
            else:
                payload["metadata"] = dict(self.metadata)
        payload.update(extra or {})
        payload["status"] = "completed"
        return payload

    def mark_completed(self, extra: Mapping[str, Any] | None = None) -> Path | None:
        if not self.enabled:
            return None
        return write_json_atomically(self.path, self._payload(extra), separators=_COMPACT,
                                     sort_keys=True)

    def __enter__(self) -> CompletionManifest:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.mark_completed()


def read_completion_manifests(
    checkpoint_path: str | os.PathLike, *, namespace: str, completion_dirname: str | None = None
) -> list[CompletionManifestRecord]:
    dirname = completion_dirname or f".{_safe_token(namespace)}_completion"
    directory = Path(checkpoint_path, METADATA_DIRNAME, dirname).absolute()
    if not directory.is_dir():
        return []
    records = []
    for path in sorted(directory.glob(f"completed_{_safe_token(namespace)}_*.json")):
        if not path.is_file():
            continue
        payload = _read_json_object(path, "completion manifest", "Completion manifest")
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


# -- failed-task markers (backends/failed_task_markers.py) ------------------------------------
def slurm_array_failed_task_dir(
    checkpoint_path: str | os.PathLike, shard_index: int,
    environ: Mapping[str, str] | None = None,
) -> Path:
    """``.failed_tasks/slurm_job_<id>/array_task_<id>/restart_<n>/shard_<i>`` for this attempt."""
    env = os.environ if environ is None else environ
    job = env.get("SLURM_JOB_ID") or f"local_{os.getpid()}"
    task = env.get("SLURM_ARRAY_TASK_ID") or "local"
    restart = env.get("SLURM_RESTART_COUNT") or "0"
    return Path(checkpoint_path, METADATA_DIRNAME, ".failed_tasks", f"slurm_job_{job}",
                f"array_task_{task}", f"restart_{restart}", f"shard_{shard_index}").absolute()


def configure_slurm_array_failed_task_manifest_dir(
    checkpoint_path: str | os.PathLike, shard_index: int,
    environ: dict[str, str] | None = None,
) -> Path:
    """NeMo Curator's behaviour: reuse ``NEMO_CURATOR_FAILED_TASKS_DIR`` if set, else set it."""
    env = os.environ if environ is None else environ
    existing = env.get(FAILED_TASKS_DIR_ENV_VAR)
    if existing:
        return Path(existing)
    path = slurm_array_failed_task_dir(checkpoint_path, shard_index, env)
    env[FAILED_TASKS_DIR_ENV_VAR] = str(path)
    return path


def configure_failed_task_manifest_dir(
    checkpoint_path: str | os.PathLike, environ: dict[str, str] | None = None
) -> Path:
    env = os.environ if environ is None else environ
    path = Path(checkpoint_path, METADATA_DIRNAME, ".failed_tasks",
                f"local_attempt_{uuid.uuid4().hex}").absolute()
    env[FAILED_TASKS_DIR_ENV_VAR] = str(path)
    return path


def record_failed_tasks(directory: str | os.PathLike | None = None,
                        environ: Mapping[str, str] | None = None) -> None:
    """Touch the (empty) ``failed_tasks.json`` marker once; no-op without a directory."""
    env = os.environ if environ is None else environ
    directory = directory or env.get(FAILED_TASKS_DIR_ENV_VAR)
    if not directory:
        return
    marker = Path(directory, FAILED_TASK_MANIFEST_FILENAME)
    if marker.is_file():
        return
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch(exist_ok=True)


def failed_task_manifest_exists(directory: str | os.PathLike | None = None,
                                environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    directory = directory or env.get(FAILED_TASKS_DIR_ENV_VAR)
    if not directory:
        return False
    return Path(directory, FAILED_TASK_MANIFEST_FILENAME).is_file()


# -- retry discovery, windows and the --array formatter ---------------------------------------
@dataclass(frozen=True)
class SlurmArrayRetryPlan:
    shard_indices: tuple[int, ...]
    total_shards: int
    minimum_shard_index: int


@dataclass(frozen=True)
class SlurmArrayRetrySubmission:
    array_indices: tuple[int, ...]
    shard_index_offset: int


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def find_slurm_array_retries(checkpoint_path: str | os.PathLike) -> SlurmArrayRetryPlan | None:
    """The shards without a completion manifest, or ``None`` when there is no ``run.json``."""
    records = read_completion_manifests(
        checkpoint_path, namespace=SLURM_ARRAY_COMPLETION_MANIFEST_NAMESPACE,
        completion_dirname=SLURM_ARRAY_COMPLETION_DIRNAME,
    )
    path = run_config_path(checkpoint_path)
    if not path.exists():
        if records:
            msg = "Slurm array completion manifests exist without run.json"
            raise ValueError(msg)
        return None
    config = _read_run_config(path)
    for field_name in ("total_shards", "minimum_shard_index"):
        if not _is_int(config.get(field_name)):
            msg = f"Slurm array manifest {path} must contain an integer {field_name}"
            raise TypeError(msg)
    total, minimum = config["total_shards"], config["minimum_shard_index"]
    if total <= 0:
        msg = f"Slurm array run configuration must have total_shards greater than 0, got {total}"
        raise ValueError(msg)
    if minimum < 0:
        msg = ("Slurm array run configuration must have a non-negative minimum_shard_index, "
               f"got {minimum}")
        raise ValueError(msg)
    completed = set()
    for record in records:
        p = record.payload
        if not (_is_int(p.get("total_shards")) and _is_int(p.get("minimum_shard_index"))
                and p["total_shards"] == total and p["minimum_shard_index"] == minimum
                and _is_int(p.get("shard_index"))):
            msg = (f"Slurm array completion manifest {record.path} does not match the run "
                   "configuration")
            raise ValueError(msg)
        completed.add(p["shard_index"])
    maximum = minimum + total - 1
    outside = sorted(i for i in completed if not minimum <= i <= maximum)
    if outside:
        msg = (f"Completed Slurm array shard indices {outside} are outside the original shard "
               f"range [{minimum}, {maximum}]")
        raise ValueError(msg)
    expected = set(range(minimum, maximum + 1))
    return SlurmArrayRetryPlan(shard_indices=tuple(sorted(expected - completed)),
                               total_shards=total, minimum_shard_index=minimum)


def build_slurm_array_retry_submissions(
    plan: SlurmArrayRetryPlan, max_array_size: int | None = None
) -> tuple[SlurmArrayRetrySubmission, ...]:
    """Split a plan into ``sbatch --array`` submissions below ``max_array_size`` (§5.12)."""
    if max_array_size is not None:
        if not _is_int(max_array_size):
            msg = "max_array_size must be an integer"
            raise TypeError(msg)
        if max_array_size <= 0:
            msg = "max_array_size must be greater than 0"
            raise ValueError(msg)
    if any(i < 0 for i in plan.shard_indices):
        msg = "Slurm array shard indices must be non-negative"
        raise ValueError(msg)
    if not plan.shard_indices:
        return ()
    if max_array_size is None:
        return (SlurmArrayRetrySubmission(array_indices=tuple(plan.shard_indices),
                                          shard_index_offset=0),)
    groups: dict[int, list[int]] = {}
    for index in plan.shard_indices:
        offset = index // max_array_size * max_array_size
        groups.setdefault(offset, []).append(index - offset)
    return tuple(SlurmArrayRetrySubmission(array_indices=tuple(groups[o]), shard_index_offset=o)
                 for o in sorted(groups))


def format_slurm_array_indices(indices: Iterable[int]) -> str:
    """``[1, 2, 5, 6, 7, 99]`` → ``"1-2,5-7,99"`` (sorted, deduplicated)."""
    values = list(indices)
    if any(not _is_int(v) for v in values):
        msg = "Slurm array indices must be integers"
        raise TypeError(msg)
    if any(v < 0 for v in values):
        msg = "Slurm array indices must be non-negative integers"
        raise ValueError(msg)
    parts: list[str] = []
    ordered = sorted(set(values))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)
