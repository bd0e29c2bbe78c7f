"""``ExecutionPlan``: where each stage runs and which stages share a Dask task.

Stages up to and including the source are the "head": they make the source tasks. Started from
the implicit ``EmptyTask`` (file discovery), the head runs on the driver; given initial tasks
(``Pipeline.run(initial_tasks=...)``: URLs, archives, file groups), it runs on the cluster, one
Dask task per batch of initial tasks, with its resources checked like any group's. The rest are
split into fusion groups: consecutive stages with equal Dask resources become one Dask task per
source chain. Fusion changes no id and no count, because ids are still assigned at every stage
boundary inside the group.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from curator_dask.stages.base import ProcessingStage
from curator_dask.stages.model import dask_resources


@dataclass(frozen=True)
class FusionGroup:
    """Consecutive stages run in one Dask task, with the Dask resources they all need."""

    index: int
    stage_indices: tuple[int, ...]
    stage_names: tuple[str, ...]
    resources: tuple[tuple[str, float], ...]

    @property
    def label(self) -> str:
        """A key prefix for the dashboard, e.g. ``jsonl_reader+jsonl_writer``."""
        return "+".join(self.stage_names).replace("-", "_")

    @property
    def resource_dict(self) -> dict[str, float]:
        return dict(self.resources)


@dataclass(frozen=True)
class ExecutionPlan:
    """The head (driver) stages and the fusion groups of a built pipeline.

    Example:
        >>> from curator_dask.stages.base import ProcessingStage
        >>> class S(ProcessingStage):
        ...     def __init__(self, name): self.name = name
        >>> stages = [S("src"), S("a"), S("b")]
        >>> stages[0].is_source_stage = True
        >>> plan = build_plan(stages, fuse=True)
        >>> plan.head, [g.stage_indices for g in plan.groups]
        ((0,), [(1, 2)])
    """

    stage_names: tuple[str, ...]
    head: tuple[int, ...]
    groups: tuple[FusionGroup, ...]
    fuse: bool
    boundaries: tuple[int, ...] = ()
    # the head as one group run on the cluster (given initial tasks), or None: on the driver
    head_group: FusionGroup | None = None

    @property
    def cluster_groups(self) -> tuple[FusionGroup, ...]:
        """Every group that runs on the cluster (the head's first, when it does)."""
        return ((self.head_group,) if self.head_group is not None else ()) + self.groups

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)


def _resource_key(stage: ProcessingStage) -> tuple[tuple[str, float], ...]:
    return tuple(sorted(dask_resources(stage.resources).items()))


def build_plan(
    stages: Sequence[ProcessingStage], *, fuse: bool, boundaries: Sequence[int] = (),
    head_on_cluster: bool = False,
) -> ExecutionPlan:
    """Split built ``stages`` into the head and fusion groups.

    A stage index in ``boundaries`` (a stage checkpoint) ends its fusion group. With
    ``head_on_cluster`` the head is one group (``head_group``, index -1) whose Dask resources
    are the most any head stage needs.
    """
    source = next((i for i, s in enumerate(stages) if s.is_source_stage), 0)
    head = tuple(range(source + 1))
    head_group = None
    if head_on_cluster:
        need: dict[str, float] = {}
        for i in head:
            for k, v in dask_resources(stages[i].resources).items():
                need[k] = max(need.get(k, 0), v)
        head_group = FusionGroup(index=-1, stage_indices=head,
                                 stage_names=tuple(stages[i].name for i in head),
                                 resources=tuple(sorted(need.items())))
    ends = set(boundaries)
    groups: list[list[int]] = []
    for i in range(source + 1, len(stages)):
        if (fuse and groups and groups[-1][-1] not in ends
                and _resource_key(stages[groups[-1][-1]]) == _resource_key(stages[i])):
            groups[-1].append(i)
        else:
            groups.append([i])
    return ExecutionPlan(
        stage_names=tuple(s.name for s in stages),
        head=head,
        groups=tuple(
            FusionGroup(
                index=n,
                stage_indices=tuple(g),
                stage_names=tuple(stages[i].name for i in g),
                resources=_resource_key(stages[g[0]]),
            )
            for n, g in enumerate(groups)
        ),
        fuse=fuse,
        boundaries=tuple(sorted(ends)),
        head_group=head_group,
    )


def plan_document(
    stages: Sequence[ProcessingStage], plan: ExecutionPlan, stage_checkpoints: dict | None = None,
    max_concurrent_partitions: int | str = "auto",
) -> dict:
    """``dag_execution_plan.json``: stages with roles, resources and batch sizes, the fusion
    groups, the cap on source partitions in flight, and the stage checkpoint settings
    (strategy, format, compression, retention) with their boundaries."""
    role = {i: "head" if plan.head_group is None else "head (cluster)" for i in plan.head}
    for g in plan.groups:
        role.update(dict.fromkeys(g.stage_indices, f"group {g.index}"))
    return {
        "stages": [
            {"index": i, "name": s.name, "class": f"{type(s).__module__}.{type(s).__qualname__}",
             "source": bool(s.is_source_stage), "sink": bool(s.is_sink_stage),
             "runs_in": role.get(i), "batch_size": s.batch_size,
             "resources": dask_resources(s.resources), "checkpoint_after": i in plan.boundaries}
            for i, s in enumerate(stages)
        ],
        "head": list(plan.head),
        "head_runs_on": "driver" if plan.head_group is None else "cluster",
        "fusion_groups": [{"index": g.index, "stages": list(g.stage_names),
                           "stage_indices": list(g.stage_indices), "key_prefix": g.label,
                           "resources": g.resource_dict} for g in plan.groups],
        "fuse": plan.fuse,
        "max_concurrent_partitions": max_concurrent_partitions,
        "stage_checkpoints": {**(stage_checkpoints or {"strategy": "disabled"}),
                              "boundaries": [stages[i].name for i in plan.boundaries]},
    }
