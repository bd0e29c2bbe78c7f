"""What cannot run on the Dask executor is refused before anything runs, naming the stage and
why: stages that need Ray (and readers with ids on a NeMo Curator version whose id generator
:mod:`.ids` does not redirect), and NeMo writers whose ``mode="overwrite"`` would lose the
outputs of sources the checkpoint skips."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from curator_dask.classes import class_named, is_nemo
from curator_dask.errors import CuratorDaskError

# ray_stage_spec() flags of NeMo stages that need Ray actors talking to each other.
_RAY_ONLY = {
    "is_raft_actor": "it runs as a RAFT actor group (Ray-only GPU deduplication)",
    "is_lsh_stage": "it is the LSH shuffle of NeMo's Ray-only fuzzy deduplication",
    "is_shuffle_stage": "it is a shuffle between Ray actors (Ray-only deduplication)",
}


class RayOnlyStageError(ValueError, CuratorDaskError):
    """A stage that needs a Ray cluster was given to the Dask executor."""


def ray_only_reason(stage: Any) -> str | None:
    """Why a NeMo stage cannot run on Dask, or ``None`` when it can.

    Example:
        >>> class Plain: name = "plain"
        >>> ray_only_reason(Plain()) is None
        True
    """
    if not is_nemo(stage):
        return None
    from curator_dask.nemo import ids

    if ids.uses_ids(stage):  # NeMo's Ray IdGenerator, redirected to Dask where supported
        reason = ids.unsupported_reason()
        if reason is not None:
            return reason
    spec_of = getattr(stage, "ray_stage_spec", None)
    spec = spec_of() if callable(spec_of) else {}
    for key, why in _RAY_ONLY.items():
        if any(str(getattr(k, "value", k)) == key for k, on in spec.items() if on):
            return why
    return None


def refuse_ray_only(stages: Sequence[Any]) -> None:
    """Raise :class:`RayOnlyStageError` for the first stage that needs Ray (one line)."""
    for stage in stages:
        reason = ray_only_reason(stage)
        if reason is not None:
            msg = (f"stage {stage.name!r} ({type(stage).__name__}) cannot run on the Dask "
                   f"executor: {reason}")
            raise RayOnlyStageError(msg)


def refuse_overwrite_with_checkpoint(stages: Sequence[Any], options: Any) -> None:
    """Refuse a NeMo writer with ``mode="overwrite"`` in a checkpointed run (one line).

    NeMo's writers empty their folder when they are built (``check_output_mode`` in their
    ``__post_init__``), before curator_dask sees the pipeline; the run would then skip every
    source the checkpoint records as complete and end with their outputs gone. The refusal is
    the one curator_dask's own writers give (``overwrite_refused``), also for a checkpoint with
    no completions yet: the next run on it would be a resume. ``options`` is the run's
    ``RunOptions`` (its ``checkpoint_path`` and ``checkpoint_storage_options``).

    Raises:
        OverwriteWithCheckpointError: naming the writer, the checkpoint and the fixes, and,
            when the checkpoint records completed sources, that their outputs are gone.
    """
    checkpoint = options.checkpoint_path
    if checkpoint is None:
        return
    for stage in stages:
        if not (is_nemo(stage) and class_named(stage, "BaseWriter")
                and str(getattr(stage, "mode", "")).strip().lower() == "overwrite"):
            continue
        from curator_dask.stages.text.io.writer.base import overwrite_refused

        done = completed_count(checkpoint, options.checkpoint_storage_options)
        lost = ""
        if done:
            aside = set_completions_aside(checkpoint, options.checkpoint_storage_options)
            lost = (f"NeMo's {type(stage).__name__}(mode='overwrite') already emptied "
                    f"{stage.path} when it was constructed: the outputs of the {done} sources "
                    "the checkpoint records as complete are gone, so their completions were "
                    f"set aside (moved to {aside}) and the next run on this checkpoint redoes "
                    "them")
        raise overwrite_refused(stage, checkpoint, lost)


def set_completions_aside(checkpoint: str, storage_options: dict | None = None) -> str:
    """Move the checkpoint's completion records (its ``.nemo_curator_metadata`` folder) to a
    dated folder beside them, kept, not deleted: the sources they name lost their outputs
    (issue 32, item 6), so no later run may skip them. Returns the new folder's path."""
    import time

    import fsspec

    from curator_dask.resumability.layout import METADATA_DIRNAME

    fs, root = fsspec.core.url_to_fs(checkpoint, **(storage_options or {}))
    source = f"{root.rstrip('/')}/{METADATA_DIRNAME}"
    target = f"{source}.outputs-lost-{time.strftime('%Y%m%dT%H%M%S')}"
    fs.mv(source, target, recursive=True)
    return target if "://" not in checkpoint else fs.unstrip_protocol(target)


def completed_count(checkpoint: str, storage_options: dict | None = None) -> int:
    """How many sources ``checkpoint`` records as complete (read only; 0 when unreadable: the
    run is refused either way, only the wording depends on it)."""
    from curator_dask.resumability.inspect import inspect_checkpoint

    try:
        return len(inspect_checkpoint(checkpoint, storage_options).completed)
    except Exception:  # noqa: BLE001 (an unreadable checkpoint fails the run that opens it)
        return 0
