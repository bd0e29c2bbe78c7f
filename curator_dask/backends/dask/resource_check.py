"""Fail fast when a fusion group needs Dask worker resources that no worker offers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from curator_dask.backends.dask.plan import ExecutionPlan
from curator_dask.errors import ResourceUnavailableError


def check_resources(client: Any, stages: Sequence[Any], plan: ExecutionPlan,
                    planned: Any = None) -> None:
    """Fail fast when a fusion group needs worker resources no worker offers.

    With no worker yet (an adaptive SLURM cluster of minimum 0), ``planned()`` (the resources
    its worker jobs will offer) is judged instead.
    """
    workers = client.scheduler_info(n_workers=-1)["workers"]
    offered = [w.get("resources") or {} for w in workers.values()]
    if not offered and planned is not None:
        offered = [planned()]
    for group in plan.cluster_groups:
        need = group.resource_dict
        if not need:
            continue
        if any(all(res.get(k, 0) >= v for k, v in need.items()) for res in offered):
            continue
        stage = stages[group.stage_indices[0]]
        msg = (
            f"Stage {stage.name!r} needs Dask worker resources {need}, but none of the "
            f"{len(offered)} workers offers them (worker resources: "
            f"{sorted({str(r) for r in offered})}). Start workers that have them, e.g. "
            "`dask worker ... --resources GPU=1` or DaskExecutor(cluster_kwargs="
            "{'resources': {'GPU': 1}}), or lower the stage's Resources."
        )
        raise ResourceUnavailableError(msg)
