"""run.json, completion manifests, failed-task markers, retry plans, windows and the --array
formatter (docs/design/contract.md §5.1, §5.7-5.13).

Mirrors upstream ``tests/utils/test_atomic_io.py``, ``tests/utils/test_retry_manifest.py``,
``tests/backends/test_failed_task_markers.py`` and the manifest/retry parts of
``tests/backends/test_slurm_array.py``. Everything is written to real files under tmp_path.
Failures that cannot be produced for real on this machine (a directory fsync error, a temp
cleanup error after a successful link, a concurrent writer winning a race, an unreadable file
while running as root) are injected with monkeypatch; those tests end in ``_simulated``.
"""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
import io
import json
import os
import re
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curator_dask.resumability.layout import (
    FAILED_TASK_MANIFEST_FILENAME,
    METADATA_DIRNAME,
    SLURM_ARRAY_COMPLETION_DIRNAME,
    SLURM_ARRAY_RUN_CONFIG_FILENAME,
)
from curator_dask.slurm import run_config as manifests
from curator_dask.slurm.completion import (
    SLURM_ARRAY_COMPLETION_MANIFEST_NAMESPACE,
    CompletionManifest,
    CompletionManifestRecord,
    build_slurm_array_completion_manifest,
    read_completion_manifests,
)
from curator_dask.slurm.failed_tasks import (
    FAILED_TASKS_DIR_ENV_VAR,
    record_failed_tasks,
    slurm_array_failed_task_dir,
)
from curator_dask.slurm.retry import (
    SlurmArrayRetryPlan,
    SlurmArrayRetrySubmission,
    build_slurm_array_retry_submissions,
    find_slurm_array_retries,
    format_slurm_array_indices,
)
from curator_dask.slurm.run_config import ensure_slurm_array_run_config, run_config_path
from curator_dask.utils.atomic import write_json_atomically, write_json_atomically_if_absent

COMPACT = (",", ":")


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def temp_leftovers(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f".{path.name}.*.tmp"))


def completion_dir(ckpt: Path) -> Path:
    return ckpt / METADATA_DIRNAME / SLURM_ARRAY_COMPLETION_DIRNAME


def json_error_text(text: str) -> str:
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return str(exc)
    raise AssertionError("expected invalid JSON")


def write_run_json(ckpt: Path, text: str) -> Path:
    path = completion_dir(ckpt) / "run.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def write_manifest(ckpt: Path, payload: dict, name: str) -> Path:
    path = completion_dir(ckpt) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))
    return path


def complete(ckpt: Path, shard: int, total: int, minimum: int = 0) -> Path:
    manifest = build_slurm_array_completion_manifest(ckpt, shard, total, minimum)
    assert manifest is not None
    path = manifest.mark_completed()
    assert path is not None
    return path


# -- §5.1 constants ------------------------------------------------------------------------------
def test_constants():
    assert SLURM_ARRAY_COMPLETION_MANIFEST_NAMESPACE == "slurm_array"
    assert SLURM_ARRAY_COMPLETION_DIRNAME == ".slurm_array_completion"
    assert SLURM_ARRAY_RUN_CONFIG_FILENAME == "run.json"
    assert METADATA_DIRNAME == ".nemo_curator_metadata"
    assert FAILED_TASKS_DIR_ENV_VAR == "NEMO_CURATOR_FAILED_TASKS_DIR"
    assert FAILED_TASK_MANIFEST_FILENAME == "failed_tasks.json"


# -- atomic IO (upstream tests/utils/test_atomic_io.py) --------------------------------------
def test_write_json_atomically_creates_parents_and_writes_sorted_compact_json(tmp_path):
    # Contract §8 vector: no sort_keys argument is passed, yet the keys come out sorted.
    output = tmp_path / "nested" / "deeper" / "payload.json"
    write_json_atomically(output, {"b": 2, "a": 1}, separators=COMPACT)
    assert output.read_text() == '{"a":1,"b":2}\n'
    assert json.loads(output.read_text()) == {"a": 1, "b": 2}


def test_write_json_atomically_with_sort_keys_bytes_and_mode(tmp_path):
    output = tmp_path / "nested" / "payload.json"
    write_json_atomically(output, {"b": 2, "a": [1, "x"]}, separators=COMPACT, sort_keys=True)
    assert output.read_bytes() == b'{"a":[1,"x"],"b":2}\n'
    assert mode_of(output) == 0o600
    assert temp_leftovers(output) == []


def test_write_json_atomically_replaces_existing_file(tmp_path):
    output = tmp_path / "payload.json"
    output.write_text("old contents")
    output.chmod(0o644)
    write_json_atomically(output, {"status": "completed"}, separators=COMPACT)
    assert output.read_text() == '{"status":"completed"}\n'
    assert mode_of(output) == 0o600  # the temp file's mode survives os.replace
    assert temp_leftovers(output) == []


def test_write_json_atomically_serialisation_failure_leaves_nothing(tmp_path):
    output = tmp_path / "nested" / "payload.json"
    with pytest.raises(TypeError):
        write_json_atomically(output, {"bad": object()})
    assert not output.exists()
    assert temp_leftovers(output) == []


def test_write_json_atomically_serialisation_failure_keeps_existing_file(tmp_path):
    output = tmp_path / "payload.json"
    output.write_text('{"kept":true}\n')
    with pytest.raises(TypeError):
        write_json_atomically(output, {"bad": {1, 2}})
    assert output.read_text() == '{"kept":true}\n'
    assert temp_leftovers(output) == []


def _failing_directory_fsync(monkeypatch) -> list[int]:
    real_fsync = os.fsync
    directory_calls: list[int] = []

    def fsync(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            directory_calls.append(fd)
            raise OSError("directory fsync unsupported")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return directory_calls


def test_write_json_atomically_tolerates_directory_fsync_error_simulated(tmp_path, monkeypatch):
    # A filesystem that rejects fsync on a directory descriptor is not available here.
    directory_calls = _failing_directory_fsync(monkeypatch)
    output = tmp_path / "payload.json"
    write_json_atomically(output, {"status": "completed"}, separators=COMPACT)
    assert directory_calls, "the parent directory was never fsynced"
    assert output.read_text() == '{"status":"completed"}\n'
    assert temp_leftovers(output) == []


def test_if_absent_tolerates_directory_fsync_error_simulated(tmp_path, monkeypatch):
    # A filesystem that rejects fsync on a directory descriptor is not available here.
    directory_calls = _failing_directory_fsync(monkeypatch)
    output = tmp_path / "payload.json"
    assert write_json_atomically_if_absent(output, {"writer": 1}, separators=COMPACT) is True
    assert directory_calls, "the parent directory was never fsynced"
    assert output.read_text() == '{"writer":1}\n'
    assert temp_leftovers(output) == []


def test_if_absent_creates_then_refuses_and_keeps_first(tmp_path):
    output = tmp_path / "nested" / "payload.json"
    assert write_json_atomically_if_absent(output, {"writer": 1}, separators=COMPACT) is True
    assert write_json_atomically_if_absent(output, {"writer": 2}, separators=COMPACT) is False
    assert output.read_text() == '{"writer":1}\n'
    assert json.loads(output.read_text()) == {"writer": 1}
    assert temp_leftovers(output) == []
    assert output.stat().st_nlink == 1  # the temp link was removed after os.link
    assert mode_of(output) == 0o600


def test_if_absent_serialisation_failure_leaves_nothing(tmp_path):
    output = tmp_path / "payload.json"
    with pytest.raises(TypeError):
        write_json_atomically_if_absent(output, {"bad": object()})
    assert not output.exists()
    assert temp_leftovers(output) == []


def test_if_absent_temp_cleanup_error_after_link_still_true_simulated(tmp_path, monkeypatch):
    # Removing our own temp file cannot be made to fail for real (we run as root).
    output = tmp_path / "payload.json"
    real_unlink = os.unlink
    refused: list[str] = []

    def unlink(path, *args, **kwargs):
        name = os.path.basename(os.fspath(path))
        if name.startswith(".payload.json.") and name.endswith(".tmp"):
            refused.append(name)
            raise OSError("simulated cleanup failure")
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    assert write_json_atomically_if_absent(output, {"writer": 1}, separators=COMPACT) is True
    monkeypatch.undo()
    assert refused, "the temp file cleanup was never attempted"
    assert output.read_text() == '{"writer":1}\n'


def test_if_absent_concurrent_writer_wins_simulated(tmp_path, monkeypatch):
    # Two processes racing on os.link cannot be scheduled deterministically here: the
    # competitor's file is created just before our real os.link, which then really fails.
    output = tmp_path / "payload.json"
    real_link = os.link

    def link(src, dst, *args, **kwargs):
        Path(dst).write_text('{"writer":"other"}\n')
        return real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "link", link)
    assert write_json_atomically_if_absent(output, {"writer": 1}, separators=COMPACT) is False
    assert output.read_text() == '{"writer":"other"}\n'
    assert temp_leftovers(output) == []


# -- §5.7 run.json -----------------------------------------------------------------------------
def test_run_config_path(tmp_path):
    assert run_config_path(tmp_path) == completion_dir(tmp_path) / "run.json"
    assert run_config_path(str(tmp_path)) == completion_dir(tmp_path) / "run.json"


def test_run_config_path_is_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = run_config_path("ckpt")
    assert path.is_absolute()
    assert path == tmp_path / "ckpt" / METADATA_DIRNAME / ".slurm_array_completion" / "run.json"


def test_ensure_run_config_exact_bytes_and_mode(tmp_path):
    ckpt = tmp_path / "ckpt"
    path = ensure_slurm_array_run_config(ckpt, 2000, 0)
    assert path == completion_dir(ckpt) / "run.json"
    assert path.read_bytes() == b'{"minimum_shard_index":0,"total_shards":2000}\n'
    assert len(path.read_bytes()) == 46
    assert mode_of(path) == 0o600
    assert temp_leftovers(path) == []
    assert sorted(p.name for p in path.parent.iterdir()) == ["run.json"]


def test_ensure_run_config_relative_checkpoint_is_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = ensure_slurm_array_run_config("ckpt", 11, 1)
    assert path.is_absolute()
    assert path == tmp_path / "ckpt" / METADATA_DIRNAME / ".slurm_array_completion" / "run.json"
    assert path.read_text() == '{"minimum_shard_index":1,"total_shards":11}\n'


def test_ensure_run_config_same_config_is_accepted_and_untouched(tmp_path):
    path = ensure_slurm_array_run_config(tmp_path, 10, 0)
    inode = path.stat().st_ino
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    assert ensure_slurm_array_run_config(tmp_path, 10, 0) == path
    assert path.stat().st_ino == inode
    assert path.stat().st_mtime_ns == 1_000_000_000
    assert path.read_text() == '{"minimum_shard_index":0,"total_shards":10}\n'


def test_ensure_run_config_mismatch_message(tmp_path):
    path = ensure_slurm_array_run_config(tmp_path, 10, 0)
    with pytest.raises(ValueError) as exc_info:
        ensure_slurm_array_run_config(tmp_path, 20, 0)
    assert str(exc_info.value) == (
        f"Slurm array run configuration at {path} is "
        "{'minimum_shard_index': 0, 'total_shards': 10}, expected "
        "{'minimum_shard_index': 0, 'total_shards': 20}; "
        "use a separate checkpoint path for each logical run"
    )
    assert path.read_text() == '{"minimum_shard_index":0,"total_shards":10}\n'


def test_ensure_run_config_minimum_mismatch(tmp_path):
    ensure_slurm_array_run_config(tmp_path, 10, 0)
    with pytest.raises(ValueError, match="use a separate checkpoint path for each logical run"):
        ensure_slurm_array_run_config(tmp_path, 10, 1)


def test_ensure_run_config_uses_dict_equality(tmp_path):
    # Other key order, whitespace and an equal float are accepted; the file is not rewritten.
    path = write_run_json(tmp_path, '{ "total_shards": 10.0,  "minimum_shard_index": 0 }')
    assert ensure_slurm_array_run_config(tmp_path, 10, 0) == path
    assert path.read_text() == '{ "total_shards": 10.0,  "minimum_shard_index": 0 }'


def test_ensure_run_config_extra_key_is_a_mismatch(tmp_path):
    path = write_run_json(tmp_path, '{"minimum_shard_index":0,"total_shards":10,"x":1}\n')
    with pytest.raises(ValueError) as exc_info:
        ensure_slurm_array_run_config(tmp_path, 10, 0)
    assert str(exc_info.value) == (
        f"Slurm array run configuration at {path} is "
        "{'minimum_shard_index': 0, 'total_shards': 10, 'x': 1}, expected "
        "{'minimum_shard_index': 0, 'total_shards': 10}; "
        "use a separate checkpoint path for each logical run"
    )


def test_ensure_run_config_invalid_json(tmp_path):
    text = '{"minimum_shard_index":0,'
    path = write_run_json(tmp_path, text)
    with pytest.raises(ValueError) as exc_info:
        ensure_slurm_array_run_config(tmp_path, 10, 0)
    assert str(exc_info.value) == (
        f"Failed to read Slurm array run configuration {path}: {json_error_text(text)}"
    )


def test_ensure_run_config_read_oserror_simulated(tmp_path, monkeypatch):
    # An unreadable run.json cannot be made for real: the tests run as root.
    path = write_run_json(tmp_path, '{"minimum_shard_index":0,"total_shards":10}\n')
    real_open = builtins.open
    error = PermissionError(13, "Permission denied", str(path))

    def guarded_open(file, *args, **kwargs):
        if isinstance(file, str | os.PathLike) and Path(file) == path:
            raise error
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    monkeypatch.setattr(io, "open", guarded_open)
    with pytest.raises(ValueError) as exc_info:
        ensure_slurm_array_run_config(tmp_path, 10, 0)
    monkeypatch.undo()
    assert str(exc_info.value) == f"Failed to read Slurm array run configuration {path}: {error}"


def test_ensure_run_config_not_an_object(tmp_path):
    path = write_run_json(tmp_path, "[0, 10]\n")
    with pytest.raises(TypeError) as exc_info:
        ensure_slurm_array_run_config(tmp_path, 10, 0)
    assert str(exc_info.value) == (
        f"Slurm array run configuration must contain a JSON object: {path}"
    )


def test_ensure_run_config_concurrent_writer_mismatch_simulated(tmp_path, monkeypatch):
    # Another array task creating run.json between our existence check and our os.link cannot
    # be scheduled deterministically; it is injected just before the real os.link.
    real_link = os.link
    path = run_config_path(tmp_path)

    def link(src, dst, *args, **kwargs):
        Path(dst).write_text('{"minimum_shard_index":0,"total_shards":20}\n')
        return real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "link", link)
    with pytest.raises(ValueError) as exc_info:
        ensure_slurm_array_run_config(tmp_path, 10, 0)
    assert str(exc_info.value) == (
        f"Slurm array run configuration at {path} is "
        "{'minimum_shard_index': 0, 'total_shards': 20}, expected "
        "{'minimum_shard_index': 0, 'total_shards': 10}; "
        "use a separate checkpoint path for each logical run"
    )
    assert temp_leftovers(path) == []


def test_ensure_run_config_concurrent_writer_same_config_simulated(tmp_path, monkeypatch):
    # As above (a race that cannot be scheduled for real): the winner wrote the same config.
    real_link = os.link

    def link(src, dst, *args, **kwargs):
        Path(dst).write_text('{"total_shards":10,"minimum_shard_index":0}\n')
        return real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "link", link)
    path = ensure_slurm_array_run_config(tmp_path, 10, 0)
    assert path.read_text() == '{"total_shards":10,"minimum_shard_index":0}\n'


def test_builder_concurrent_writer_mismatch_simulated(tmp_path, monkeypatch):
    # Upstream's test: the if-absent write loses to a writer of {m:0, t:20} (not reproducible
    # for real here), and the builder must then reject the mismatching configuration.
    def competing_writer(path, _payload, **_kwargs):
        write_json_atomically(path, {"minimum_shard_index": 0, "total_shards": 20},
                              separators=COMPACT, sort_keys=True)
        return False

    monkeypatch.setattr(manifests, "write_json_atomically_if_absent", competing_writer)
    with pytest.raises(ValueError, match="use a separate checkpoint path"):
        build_slurm_array_completion_manifest(tmp_path, 1, 10, 0)


def test_ensure_run_config_disappeared_simulated(tmp_path, monkeypatch):
    # A run.json that is created by someone else and deleted again before we re-read it cannot
    # be produced deterministically: os.link reports FileExistsError without creating it.
    def link(src, dst, *args, **kwargs):
        raise FileExistsError(17, "File exists", str(dst))

    monkeypatch.setattr(os, "link", link)
    path = run_config_path(tmp_path)
    with pytest.raises(RuntimeError) as exc_info:
        ensure_slurm_array_run_config(tmp_path, 10, 0)
    assert str(exc_info.value) == (
        f"Slurm array run configuration disappeared while initializing {path}"
    )
    assert temp_leftovers(path) == []


def test_builder_writes_run_json_at_build_time(tmp_path):
    manifest = build_slurm_array_completion_manifest(tmp_path, 1, 2, 0)
    assert manifest is not None
    assert run_config_path(tmp_path).read_text() == '{"minimum_shard_index":0,"total_shards":2}\n'
    assert not manifest.path.exists()  # completion is written only by mark_completed()
    assert sorted(p.name for p in completion_dir(tmp_path).iterdir()) == ["run.json"]


def test_builder_rejects_mixed_logical_runs(tmp_path):
    assert build_slurm_array_completion_manifest(tmp_path, 1, 10, 0) is not None
    with pytest.raises(ValueError, match="use a separate checkpoint path"):
        build_slurm_array_completion_manifest(tmp_path, 2, 20, 0)


# -- §5.8 completion manifests -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("minimum", "shard", "total", "name"),
    [
        (0, 7, 11, "completed_slurm_array_c9993fa2e04029b2.json"),
        (1, 7, 11, "completed_slurm_array_e97ad6a7dd6d969a.json"),
        (0, 0, 3, "completed_slurm_array_3800bd4ecff9e7f6.json"),
        (0, 1, 2, "completed_slurm_array_7387b780ed68dd31.json"),
    ],
)
def test_completion_filename_vectors(tmp_path, minimum, shard, total, name):
    direct = CompletionManifest(
        tmp_path, namespace="slurm_array",
        identity={"minimum_shard_index": minimum, "shard_index": shard, "total_shards": total},
        completion_dirname=".slurm_array_completion", flatten_identity=True,
    )
    assert direct.path == completion_dir(tmp_path) / name
    built = build_slurm_array_completion_manifest(tmp_path / str(shard), shard, total, minimum)
    assert built is not None
    assert built.mark_completed() == completion_dir(tmp_path / str(shard)) / name


def test_completion_manifest_exact_text_mode_and_directory(tmp_path):
    path = complete(tmp_path, 7, 11, 0)
    assert path.parent == completion_dir(tmp_path)
    assert path.name == "completed_slurm_array_c9993fa2e04029b2.json"
    assert path.read_text() == (
        '{"minimum_shard_index":0,"shard_index":7,"status":"completed","total_shards":11}\n'
    )
    assert mode_of(path) == 0o600
    assert temp_leftovers(path) == []


def test_builder_shard_7_of_11_minimum_1(tmp_path):
    manifest = build_slurm_array_completion_manifest(str(tmp_path), 7, 11, 1)
    assert manifest is not None
    path = manifest.mark_completed()
    assert path is not None
    assert path.parent == tmp_path / METADATA_DIRNAME / ".slurm_array_completion"
    assert json.loads(path.read_text()) == {
        "minimum_shard_index": 1, "shard_index": 7, "status": "completed", "total_shards": 11,
    }
    assert path.read_text() == (
        '{"minimum_shard_index":1,"shard_index":7,"status":"completed","total_shards":11}\n'
    )
    run_json = path.parent / "run.json"
    assert json.loads(run_json.read_text()) == {"minimum_shard_index": 1, "total_shards": 11}
    assert run_json.read_text() == '{"minimum_shard_index":1,"total_shards":11}\n'


def test_builder_none_checkpoint_returns_none_before_validation():
    assert build_slurm_array_completion_manifest(None, 7, 11, 1) is None
    assert build_slurm_array_completion_manifest(None, -1, 0, -1) is None


@pytest.mark.parametrize(
    ("shard", "total", "minimum", "message"),
    [
        (0, 0, 0, "total_shards must be greater than 0, got 0"),
        (-1, -3, -1, "total_shards must be greater than 0, got -3"),
        (0, 3, -1, "minimum_shard_index must be non-negative, got -1"),
        (-2, 3, -1, "minimum_shard_index must be non-negative, got -1"),
        (-2, 3, 0, "shard_index must be non-negative, got -2"),
        (0, 10, 1, "shard_index 0 is outside the shard range [1, 10]"),
        (11, 10, 1, "shard_index 11 is outside the shard range [1, 10]"),
        (3, 3, 0, "shard_index 3 is outside the shard range [0, 2]"),
    ],
)
def test_builder_validation_errors(tmp_path, shard, total, minimum, message):
    with pytest.raises(ValueError) as exc_info:
        build_slurm_array_completion_manifest(tmp_path, shard, total, minimum)
    assert str(exc_info.value) == message
    assert not (tmp_path / METADATA_DIRNAME).exists()


def test_builder_accepts_range_edges(tmp_path):
    for shard in (1, 10):
        manifest = build_slurm_array_completion_manifest(tmp_path, shard, 10, 1)
        assert manifest.identity == {"minimum_shard_index": 1, "shard_index": shard,
                                     "total_shards": 10}


def test_empty_metadata_is_omitted(tmp_path):
    path = CompletionManifest(tmp_path, namespace="example", identity={"p": 1}).mark_completed()
    assert path.read_text() == '{"identity":{"p":1},"status":"completed"}\n'


def test_safe_token_namespace_and_digest_default_str(tmp_path):
    manifest = CompletionManifest(
        tmp_path, namespace="my ns/v1", identity={"where": Path("/x"), "n": 1}
    )
    digest = hashlib.sha256(b'{"n":1,"where":"/x"}').hexdigest()[:16]
    assert manifest.path == tmp_path / METADATA_DIRNAME / ".my_ns_v1_completion" / (
        f"completed_my_ns_v1_{digest}.json"
    )


def test_relative_checkpoint_gives_absolute_manifest_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    manifest = CompletionManifest("ckpt", namespace="example", identity={"p": 1})
    assert manifest.path.is_absolute()
    assert manifest.path.parent == tmp_path / "ckpt" / METADATA_DIRNAME / ".example_completion"


def test_same_identity_writes_same_single_file(tmp_path):
    identity = {"minimum_shard_index": 0, "shard_index": 7, "total_shards": 11}
    first = CompletionManifest(tmp_path, namespace="slurm_array", identity=identity,
                               completion_dirname=".slurm_array_completion",
                               flatten_identity=True)
    second = CompletionManifest(tmp_path, namespace="slurm_array", identity=dict(identity),
                                completion_dirname=".slurm_array_completion",
                                flatten_identity=True)
    path_one = first.mark_completed(extra={"attempt": 1})
    path_two = second.mark_completed()
    assert path_one == path_two
    assert sorted(p.name for p in path_one.parent.iterdir()) == [
        "completed_slurm_array_c9993fa2e04029b2.json"
    ]
    assert path_two.read_text() == (
        '{"minimum_shard_index":0,"shard_index":7,"status":"completed","total_shards":11}\n'
    )
    assert mode_of(path_two) == 0o600


# -- reading completion manifests ---------------------------------------------------------------
def test_read_missing_directory_is_empty(tmp_path):
    assert read_completion_manifests(tmp_path, namespace="slurm_array") == []
    assert read_completion_manifests(tmp_path / "absent", namespace="slurm_array",
                                     completion_dirname=".slurm_array_completion") == []


def test_read_returns_sorted_records(tmp_path):
    paths = [complete(tmp_path, shard, 3) for shard in (2, 0, 1)]
    records = read_completion_manifests(tmp_path, namespace="slurm_array",
                                        completion_dirname=".slurm_array_completion")
    assert [r.path for r in records] == sorted(paths)
    assert all(isinstance(r, CompletionManifestRecord) for r in records)
    by_shard = {r.payload["shard_index"]: r for r in records}
    assert by_shard[1].payload == {
        "minimum_shard_index": 0, "shard_index": 1, "status": "completed", "total_shards": 3,
    }


def test_read_default_directory_from_namespace(tmp_path):
    path = CompletionManifest(tmp_path, namespace="my ns", identity={"p": 1}).mark_completed()
    records = read_completion_manifests(tmp_path, namespace="my ns")
    assert records == [CompletionManifestRecord(path=path, payload={"identity": {"p": 1},
                                                                    "status": "completed"})]


def test_read_ignores_other_namespaces_and_other_files(tmp_path):
    mine = CompletionManifest(tmp_path, namespace="alpha", identity={"p": 1},
                              completion_dirname=".shared").mark_completed()
    CompletionManifest(tmp_path, namespace="beta", identity={"p": 1},
                       completion_dirname=".shared").mark_completed()
    CompletionManifest(tmp_path, namespace="alpha", identity={"p": 2}).mark_completed()
    shared = tmp_path / METADATA_DIRNAME / ".shared"
    (shared / "run.json").write_text("not json")
    (shared / "completed_alpha_x.txt").write_text("not json")
    (shared / "completed_alpha_dir.json").mkdir()  # not a plain file: skipped
    records = read_completion_manifests(tmp_path, namespace="alpha",
                                        completion_dirname=".shared")
    assert [r.path for r in records] == [mine]
    digest = hashlib.sha256(b'{"p":1}').hexdigest()[:16]
    beta = read_completion_manifests(tmp_path, namespace="beta", completion_dirname=".shared")
    assert [r.path.name for r in beta] == [f"completed_beta_{digest}.json"]


def test_read_invalid_json(tmp_path):
    path = write_manifest(tmp_path, {}, "completed_slurm_array_bad.json")
    path.write_text("{not json")
    with pytest.raises(ValueError) as exc_info:
        read_completion_manifests(tmp_path, namespace="slurm_array",
                                  completion_dirname=".slurm_array_completion")
    assert str(exc_info.value) == (
        f"Failed to read completion manifest {path}: {json_error_text('{not json')}"
    )


def test_read_not_an_object(tmp_path):
    path = completion_dir(tmp_path) / "completed_slurm_array_list.json"
    path.parent.mkdir(parents=True)
    path.write_text('["completed"]')
    with pytest.raises(TypeError) as exc_info:
        read_completion_manifests(tmp_path, namespace="slurm_array",
                                  completion_dirname=".slurm_array_completion")
    assert str(exc_info.value) == f"Completion manifest must contain a JSON object: {path}"


@pytest.mark.parametrize("payload", [{"shard_index": 1}, {"status": 1}, {"status": None}])
def test_read_non_string_status(tmp_path, payload):
    path = write_manifest(tmp_path, payload, "completed_slurm_array_x.json")
    with pytest.raises(TypeError) as exc_info:
        read_completion_manifests(tmp_path, namespace="slurm_array",
                                  completion_dirname=".slurm_array_completion")
    assert str(exc_info.value) == f"Completion manifest must contain a string status: {path}"


def test_read_status_not_completed(tmp_path):
    path = write_manifest(tmp_path, {"status": "failed"}, "completed_slurm_array_x.json")
    with pytest.raises(ValueError) as exc_info:
        read_completion_manifests(tmp_path, namespace="slurm_array",
                                  completion_dirname=".slurm_array_completion")
    assert str(exc_info.value) == f"Completion manifest must have status 'completed': {path}"


# -- §5.9 failed-task markers ------------------------------------------------------------------
def test_slurm_failed_task_dir_from_slurm_variables(tmp_path):
    env = {"SLURM_JOB_ID": "123", "SLURM_ARRAY_TASK_ID": "7", "SLURM_RESTART_COUNT": "2"}
    result = slurm_array_failed_task_dir(tmp_path, 9, env)
    expected = (tmp_path / ".nemo_curator_metadata" / ".failed_tasks" / "slurm_job_123"
                / "array_task_7" / "restart_2" / "shard_9")
    assert Path(result) == expected
    assert str(result) == str(expected)
    assert not expected.exists()  # configuring creates nothing


def test_slurm_failed_task_dir_local_fallbacks(tmp_path):
    env: dict[str, str] = {}
    result = slurm_array_failed_task_dir(tmp_path, 3, env)
    expected = (tmp_path / METADATA_DIRNAME / ".failed_tasks" / f"slurm_job_local_{os.getpid()}"
                / "array_task_local" / "restart_0" / "shard_3")
    assert Path(result) == expected
    assert slurm_array_failed_task_dir(tmp_path, 3, {}) == expected


def test_slurm_failed_task_dir_is_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = {"SLURM_JOB_ID": "5", "SLURM_ARRAY_TASK_ID": "1"}
    result = slurm_array_failed_task_dir("ckpt", 1, env)
    assert Path(result).is_absolute()
    assert Path(result) == (tmp_path / "ckpt" / METADATA_DIRNAME / ".failed_tasks"
                            / "slurm_job_5" / "array_task_1" / "restart_0" / "shard_1")


def test_slurm_failed_task_dir_through_os_environ(tmp_path, monkeypatch):
    monkeypatch.setenv(FAILED_TASKS_DIR_ENV_VAR, "")
    monkeypatch.setenv("SLURM_JOB_ID", "123")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "7")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    result = slurm_array_failed_task_dir(tmp_path, 9)
    expected = (tmp_path / METADATA_DIRNAME / ".failed_tasks" / "slurm_job_123" / "array_task_7"
                / "restart_2" / "shard_9")
    assert Path(result) == expected


def test_record_failed_tasks_writes_single_empty_marker(tmp_path):
    directory = tmp_path / "failed-tasks" / "attempt"
    env = {FAILED_TASKS_DIR_ENV_VAR: str(directory)}
    record_failed_tasks(environ=env)
    assert list(directory.glob("*.json")) == [directory / FAILED_TASK_MANIFEST_FILENAME]
    assert (directory / "failed_tasks.json").read_bytes() == b""


def test_record_failed_tasks_second_call_changes_nothing(tmp_path):
    directory = tmp_path / "failed-tasks"
    env = {FAILED_TASKS_DIR_ENV_VAR: str(directory)}
    record_failed_tasks(environ=env)
    marker = directory / FAILED_TASK_MANIFEST_FILENAME
    os.utime(marker, ns=(1_000_000_000, 1_000_000_000))
    record_failed_tasks(environ=env)
    assert sorted(p.name for p in directory.iterdir()) == ["failed_tasks.json"]
    assert marker.stat().st_mtime_ns == 1_000_000_000  # not touched again
    assert marker.read_bytes() == b""


def test_record_failed_tasks_explicit_directory(tmp_path):
    record_failed_tasks(tmp_path / "explicit", environ={})
    assert (tmp_path / "explicit" / "failed_tasks.json").is_file()


def test_record_failed_tasks_through_os_environ(tmp_path, monkeypatch):
    monkeypatch.setenv(FAILED_TASKS_DIR_ENV_VAR, str(tmp_path / "from-env"))
    record_failed_tasks()
    assert (tmp_path / "from-env" / "failed_tasks.json").read_bytes() == b""


@pytest.mark.parametrize("env", [{}, {FAILED_TASKS_DIR_ENV_VAR: ""}])
def test_record_failed_tasks_without_directory_is_a_noop(tmp_path, monkeypatch, env):
    monkeypatch.chdir(tmp_path)
    record_failed_tasks(environ=env)
    assert list(tmp_path.iterdir()) == []


def test_record_failed_tasks_without_os_environ_variable_is_a_noop(tmp_path, monkeypatch):
    monkeypatch.setenv(FAILED_TASKS_DIR_ENV_VAR, "placeholder")
    monkeypatch.delenv(FAILED_TASKS_DIR_ENV_VAR)
    monkeypatch.chdir(tmp_path)
    record_failed_tasks()
    assert list(tmp_path.iterdir()) == []


def test_record_failed_tasks_touch_oserror_propagates_simulated(tmp_path, monkeypatch):
    # A storage failure on touch cannot be produced for real (root ignores permissions).
    def touch(self, *args, **kwargs):
        raise OSError("storage unavailable")

    monkeypatch.setattr(Path, "touch", touch)
    with pytest.raises(OSError, match="storage unavailable"):
        record_failed_tasks(environ={FAILED_TASKS_DIR_ENV_VAR: str(tmp_path / "d")})


def test_record_failed_tasks_mkdir_oserror_propagates(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(OSError):
        record_failed_tasks(environ={FAILED_TASKS_DIR_ENV_VAR: str(blocker / "attempt")})


# -- §5.11 retry discovery -----------------------------------------------------------------------
def test_retries_for_missing_shards(tmp_path):
    complete(tmp_path, 1, 4, 1)
    complete(tmp_path, 3, 4, 1)
    assert find_slurm_array_retries(tmp_path) == SlurmArrayRetryPlan(
        shard_indices=(2, 4), total_shards=4, minimum_shard_index=1
    )


def test_retries_all_shards_when_none_completed(tmp_path):
    build_slurm_array_completion_manifest(str(tmp_path), 1, 3, 1)  # writes run.json only
    plan = find_slurm_array_retries(str(tmp_path))
    assert plan == SlurmArrayRetryPlan(shard_indices=(1, 2, 3), total_shards=3,
                                       minimum_shard_index=1)
    assert isinstance(plan.shard_indices, tuple)


def test_retries_empty_when_all_completed(tmp_path):
    for shard in range(3):
        complete(tmp_path, shard, 3, 0)
    assert find_slurm_array_retries(tmp_path) == SlurmArrayRetryPlan(
        shard_indices=(), total_shards=3, minimum_shard_index=0
    )


def test_retry_plan_and_submission_are_frozen():
    plan = SlurmArrayRetryPlan(shard_indices=(1,), total_shards=2, minimum_shard_index=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.total_shards = 3  # type: ignore[misc]
    submission = SlurmArrayRetrySubmission(array_indices=(1,), shard_index_offset=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        submission.shard_index_offset = 5  # type: ignore[misc]


def test_retries_none_without_run_json(tmp_path):
    assert find_slurm_array_retries(tmp_path) is None
    assert find_slurm_array_retries(tmp_path / "does-not-exist") is None
    completion_dir(tmp_path).mkdir(parents=True)
    assert find_slurm_array_retries(tmp_path) is None


def test_retries_manifests_without_run_json(tmp_path):
    complete(tmp_path, 0, 2)
    run_config_path(tmp_path).unlink()
    with pytest.raises(ValueError) as exc_info:
        find_slurm_array_retries(tmp_path)
    assert str(exc_info.value) == "Slurm array completion manifests exist without run.json"


def test_retries_reads_manifests_before_run_json(tmp_path):
    path = write_manifest(tmp_path, {}, "completed_slurm_array_bad.json")
    path.write_text("")
    with pytest.raises(ValueError, match="^Failed to read completion manifest "):
        find_slurm_array_retries(tmp_path)


def test_retries_run_json_invalid(tmp_path):
    path = write_run_json(tmp_path, "{")
    with pytest.raises(ValueError) as exc_info:
        find_slurm_array_retries(tmp_path)
    assert str(exc_info.value) == (
        f"Failed to read Slurm array run configuration {path}: {json_error_text('{')}"
    )


def test_retries_run_json_not_an_object(tmp_path):
    path = write_run_json(tmp_path, '"run"')
    with pytest.raises(TypeError) as exc_info:
        find_slurm_array_retries(tmp_path)
    assert str(exc_info.value) == (
        f"Slurm array run configuration must contain a JSON object: {path}"
    )


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"minimum_shard_index":0,"total_shards":"3"}', "total_shards"),
        ('{"minimum_shard_index":0,"total_shards":true}', "total_shards"),
        ('{"minimum_shard_index":0,"total_shards":3.0}', "total_shards"),
        ('{"minimum_shard_index":0}', "total_shards"),
        ('{"minimum_shard_index":null,"total_shards":3}', "minimum_shard_index"),
        ('{"minimum_shard_index":false,"total_shards":3}', "minimum_shard_index"),
        ('{"total_shards":3}', "minimum_shard_index"),
    ],
)
def test_retries_run_json_fields_must_be_ints(tmp_path, text, field):
    path = write_run_json(tmp_path, text)
    with pytest.raises(TypeError) as exc_info:
        find_slurm_array_retries(tmp_path)
    assert str(exc_info.value) == f"Slurm array manifest {path} must contain an integer {field}"


def test_retries_run_json_total_not_positive(tmp_path):
    write_run_json(tmp_path, '{"minimum_shard_index":0,"total_shards":0}\n')
    with pytest.raises(ValueError, match="total_shards greater than 0") as exc_info:
        find_slurm_array_retries(tmp_path)
    assert str(exc_info.value) == (
        "Slurm array run configuration must have total_shards greater than 0, got 0"
    )


def test_retries_run_json_negative_minimum(tmp_path):
    write_run_json(tmp_path, '{"minimum_shard_index":-1,"total_shards":3}\n')
    with pytest.raises(ValueError, match="non-negative minimum_shard_index") as exc_info:
        find_slurm_array_retries(tmp_path)
    assert str(exc_info.value) == (
        "Slurm array run configuration must have a non-negative minimum_shard_index, got -1"
    )


@pytest.mark.parametrize(
    "payload",
    [
        {"minimum_shard_index": 1, "shard_index": 2, "status": "completed", "total_shards": 5},
        {"minimum_shard_index": 0, "shard_index": 2, "status": "completed", "total_shards": 4},
        {"minimum_shard_index": 1, "shard_index": 2, "status": "completed", "total_shards": "4"},
        {"minimum_shard_index": True, "shard_index": 2, "status": "completed",
         "total_shards": 4},
        {"shard_index": 2, "status": "completed", "total_shards": 4},
    ],
)
def test_retries_record_must_match_run_config(tmp_path, payload):
    ensure_slurm_array_run_config(tmp_path, 4, 1)
    complete(tmp_path, 1, 4, 1)
    path = write_manifest(tmp_path, payload, "completed_slurm_array_zz_mismatch.json")
    with pytest.raises(ValueError) as exc_info:
        find_slurm_array_retries(tmp_path)
    assert str(exc_info.value) == (
        f"Slurm array completion manifest {path} does not match the run configuration"
    )


def test_retries_completed_outside_range(tmp_path):
    ensure_slurm_array_run_config(tmp_path, 3, 1)
    for shard in (5, 0, 2):
        CompletionManifest(
            tmp_path, namespace="slurm_array",
            identity={"minimum_shard_index": 1, "shard_index": shard, "total_shards": 3},
            completion_dirname=".slurm_array_completion", flatten_identity=True,
        ).mark_completed()
    with pytest.raises(ValueError, match="outside the original shard range") as exc_info:
        find_slurm_array_retries(tmp_path)
    assert str(exc_info.value) == (
        "Completed Slurm array shard indices [0, 5] are outside the original shard range [1, 3]"
    )


def test_retries_ignore_other_namespaces(tmp_path):
    ensure_slurm_array_run_config(tmp_path, 2, 0)
    CompletionManifest(tmp_path, namespace="other", identity={"shard_index": 0},
                       completion_dirname=".slurm_array_completion").mark_completed()
    assert find_slurm_array_retries(tmp_path) == SlurmArrayRetryPlan((0, 1), 2, 0)


# -- §5.12 windows -------------------------------------------------------------------------------
def test_submissions_without_limit_keep_logical_indices():
    plan = SlurmArrayRetryPlan(shard_indices=(1, 1001), total_shards=2000, minimum_shard_index=0)
    assert build_slurm_array_retry_submissions(plan) == (
        SlurmArrayRetrySubmission(array_indices=(1, 1001), shard_index_offset=0),
    )
    assert build_slurm_array_retry_submissions(plan, None) == (
        SlurmArrayRetrySubmission(array_indices=(1, 1001), shard_index_offset=0),
    )


def test_submissions_windows_vector():
    plan = SlurmArrayRetryPlan(shard_indices=(1, 2, 1005, 1006, 2999), total_shards=3000,
                               minimum_shard_index=0)
    assert build_slurm_array_retry_submissions(plan, max_array_size=1000) == (
        SlurmArrayRetrySubmission(array_indices=(1, 2), shard_index_offset=0),
        SlurmArrayRetrySubmission(array_indices=(5, 6), shard_index_offset=1000),
        SlurmArrayRetrySubmission(array_indices=(999,), shard_index_offset=2000),
    )


def test_submissions_offset_ignores_minimum_shard_index():
    plan = SlurmArrayRetryPlan(shard_indices=(1, 2, 3), total_shards=3, minimum_shard_index=1)
    assert build_slurm_array_retry_submissions(plan, 2) == (
        SlurmArrayRetrySubmission(array_indices=(1,), shard_index_offset=0),
        SlurmArrayRetrySubmission(array_indices=(0, 1), shard_index_offset=2),
    )


def test_submissions_window_of_one():
    plan = SlurmArrayRetryPlan(shard_indices=(0, 4), total_shards=5, minimum_shard_index=0)
    assert build_slurm_array_retry_submissions(plan, 1) == (
        SlurmArrayRetrySubmission(array_indices=(0,), shard_index_offset=0),
        SlurmArrayRetrySubmission(array_indices=(0,), shard_index_offset=4),
    )


@pytest.mark.parametrize("limit", [None, 1, 1000])
def test_submissions_empty_plan(limit):
    plan = SlurmArrayRetryPlan(shard_indices=(), total_shards=3, minimum_shard_index=0)
    assert build_slurm_array_retry_submissions(plan, limit) == ()


@pytest.mark.parametrize("limit", [None, 10])
def test_submissions_reject_negative_indices(limit):
    plan = SlurmArrayRetryPlan(shard_indices=(-1, 0), total_shards=2, minimum_shard_index=-1)
    with pytest.raises(ValueError, match="must be non-negative") as exc_info:
        build_slurm_array_retry_submissions(plan, limit)
    assert str(exc_info.value) == "Slurm array shard indices must be non-negative"


@pytest.mark.parametrize("limit", [True, False, 1.5, 1000.0, "1000"])
def test_submissions_max_array_size_must_be_an_int(limit):
    plan = SlurmArrayRetryPlan(shard_indices=(1,), total_shards=2, minimum_shard_index=0)
    with pytest.raises(TypeError) as exc_info:
        build_slurm_array_retry_submissions(plan, limit)
    assert str(exc_info.value) == "max_array_size must be an integer"


@pytest.mark.parametrize("limit", [0, -1])
def test_submissions_max_array_size_must_be_positive(limit):
    plan = SlurmArrayRetryPlan(shard_indices=(1,), total_shards=2, minimum_shard_index=0)
    with pytest.raises(ValueError) as exc_info:
        build_slurm_array_retry_submissions(plan, limit)
    assert str(exc_info.value) == "max_array_size must be greater than 0"


def test_submissions_checks_apply_to_an_empty_plan():
    plan = SlurmArrayRetryPlan(shard_indices=(), total_shards=3, minimum_shard_index=0)
    with pytest.raises(ValueError, match="^max_array_size must be greater than 0$"):
        build_slurm_array_retry_submissions(plan, 0)
    with pytest.raises(TypeError, match="^max_array_size must be an integer$"):
        build_slurm_array_retry_submissions(plan, True)


@settings(max_examples=100, deadline=None)
@given(
    indices=st.sets(st.integers(min_value=0, max_value=5000), max_size=60),
    limit=st.one_of(st.none(), st.integers(min_value=1, max_value=1200)),
)
def test_property_windows_cover_exactly_the_plan(indices, limit):
    plan = SlurmArrayRetryPlan(shard_indices=tuple(sorted(indices)), total_shards=5001,
                               minimum_shard_index=0)
    submissions = build_slurm_array_retry_submissions(plan, limit)
    covered = [s.shard_index_offset + a for s in submissions for a in s.array_indices]
    assert covered == list(plan.shard_indices)  # exactly, in order, without duplicates
    offsets = [s.shard_index_offset for s in submissions]
    assert offsets == sorted(set(offsets))
    if limit is None:
        assert len(submissions) == (1 if indices else 0)
        assert offsets in ([], [0])
    else:
        for s in submissions:
            assert s.shard_index_offset % limit == 0
            assert s.array_indices  # no empty window
            assert all(0 <= a < limit for a in s.array_indices)


# -- §5.13 --array formatter -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("indices", "expected"),
    [
        ([], ""),
        ([7], "7"),
        ([1, 2, 5, 6, 7, 99], "1-2,5-7,99"),
        ([7, 5, 6, 5], "5-7"),
        ([3, 1, 2, 9, 10, 12], "1-3,9-10,12"),
        ([0], "0"),
        ([0, 1], "0-1"),
        ((4, 2), "2,4"),
    ],
)
def test_format_vectors(indices, expected):
    assert format_slurm_array_indices(indices) == expected


def test_format_accepts_any_iterable():
    assert format_slurm_array_indices(i for i in (3, 4, 5, 9)) == "3-5,9"
    assert format_slurm_array_indices(range(1, 2000)) == "1-1999"


@pytest.mark.parametrize("bad", [[True], [1, False], [1.0], ["3"], [None], [2, 3.5]])
def test_format_rejects_non_integers(bad):
    with pytest.raises(TypeError) as exc_info:
        format_slurm_array_indices(bad)
    assert str(exc_info.value) == "Slurm array indices must be integers"


@pytest.mark.parametrize("bad", [[-1], [3, -2, 4]])
def test_format_rejects_negatives(bad):
    with pytest.raises(ValueError) as exc_info:
        format_slurm_array_indices(bad)
    assert str(exc_info.value) == "Slurm array indices must be non-negative integers"


def parse_array_expression(expr: str) -> list[int]:
    values: list[int] = []
    if not expr:
        return values
    for part in expr.split(","):
        assert re.fullmatch(r"\d+(-\d+)?", part), part
        if "-" in part:
            low, high = (int(x) for x in part.split("-"))
            assert low < high
            values.extend(range(low, high + 1))
        else:
            values.append(int(part))
    return values


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=300), max_size=80))
def test_property_format_round_trips(indices):
    expr = format_slurm_array_indices(indices)
    parsed = parse_array_expression(expr)
    assert parsed == sorted(set(indices))
    # Runs are maximal: two adjacent parts never touch.
    parts = [parse_array_expression(p) for p in expr.split(",")] if expr else []
    for left, right in zip(parts, parts[1:], strict=False):
        assert right[0] > left[-1] + 1
