"""What cannot run without Ray is refused before anything runs, naming the stage and why."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from curator_dask.models import is_nemo

# ray_stage_spec() flags of NeMo stages that need Ray actors talking to each other.
_RAY_ONLY = {
    "is_raft_actor": "it runs as a RAFT actor group (Ray-only GPU deduplication)",
    "is_lsh_stage": "it is the LSH shuffle of NeMo's Ray-only fuzzy deduplication",
    "is_shuffle_stage": "it is a shuffle between Ray actors (Ray-only deduplication)",
}


class RayOnlyStageError(ValueError):
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
    if getattr(stage, "_generate_ids", False) or getattr(stage, "_assign_ids", False):
        return ("it generates ids through NeMo's Ray IdGenerator actor (_generate_ids / "
                "_assign_ids); use AddId for deterministic ids instead")
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
