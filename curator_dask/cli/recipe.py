"""Data-Juicer's recipe sections in a pipeline YAML, mapped onto curator_dask's options.

A pipeline file may carry, beside ``name``, ``description``, ``stages`` and ``config``, the
sections of Data-Juicer's partitioned executor (docs/recipes.md has the whole table)::

    partition:               # -> the source reader's partition=, and the run's
      mode: manual           #    max_concurrent_partitions
      num_of_partitions: 8
      max_concurrent_partitions: auto
    checkpoint:              # -> the run's stage checkpoints (StageCheckpoints)
      enabled: true
      strategy: every_n_ops  # every_op -> every_stage, every_n_ops -> every_n_stages (n_ops),
      n_ops: 5               # manual -> manual (op_names: stage names), disabled -> disabled
    intermediate_storage:    # -> the stage checkpoints' format, compression and retention
      format: parquet
      compression: snappy
      preserve_intermediate_data: true
      retention_policy: keep_all
    executor_type: ray_partitioned   # or dask: both run on Dask; anything else is refused

Every key is honoured or refused: an unknown key, a key the chosen mode or strategy does not
use, and settings that contradict each other are refused by name, with the valid ones (the
command's exit 2). What the sections set reaches the job's configuration fingerprint (the
partition as the source stage's parameter, the checkpoints as the run's ``stage_checkpoints``),
so a ``--resume`` with a changed section is refused; ``max_concurrent_partitions`` changes no
output and is not compared. The command line's own options override the recipe's.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from curator_dask.cli.targets import PipelineDefinitionError

logger = logging.getLogger(__name__)

SECTIONS = ("partition", "checkpoint", "intermediate_storage", "executor_type")
PARTITION_RUN_KEYS = ("max_concurrent_partitions",)
CHECKPOINT_KEYS = ("enabled", "strategy", "n_ops", "op_names")
STORAGE_KEYS = ("format", "compression", "preserve_intermediate_data", "retention_policy")
# Data-Juicer's strategy names -> StageCheckpoints' (an "op" is a stage here).
STRATEGIES = {"every_n_ops": "every_n_stages", "every_op": "every_stage", "manual": "manual",
              "disabled": "disabled"}
DEFAULT_STRATEGY = "every_n_ops"  # Data-Juicer's default, with its n_ops
DEFAULT_N_OPS = 5
EXECUTOR_TYPES = ("dask", "ray_partitioned")
# preserve_intermediate_data says whether checkpoints outlive the run: the retentions that agree.
PRESERVING = {True: ("keep_all", "keep_failed_only"),
              False: ("cleanup_all", "cleanup_on_complete")}


@dataclass(frozen=True)
class RecipeOptions:
    """What a pipeline file's recipe sections ask of the run.

    Attributes:
        partition: the source reader's ``partition=`` (``None``: whole files, as written).
        max_concurrent_partitions: the run's option (``None``: not set by the recipe).
        stage_checkpoints: the :class:`~curator_dask.resumability.stage_checkpoints.
            StageCheckpoints` fields the recipe sets (``strategy``, ``n``, ``stages``,
            ``format``, ``compression``, ``retention``); the others keep their configured
            defaults, and the command line's options win over all of them.

    Example:
        >>> options = recipe_options({"partition": {"mode": "manual", "num_of_partitions": 3},
        ...                           "checkpoint": {"strategy": "every_op"}}, "r.yaml")
        >>> options.partition, options.stage_checkpoints
        ({'mode': 'manual', 'num_of_partitions': 3}, {'strategy': 'every_stage'})
    """

    partition: dict[str, Any] | None = None
    max_concurrent_partitions: int | str | None = None
    stage_checkpoints: dict[str, Any] = field(default_factory=dict)

    def partition_kwargs(self) -> dict[str, Any]:
        """``max_concurrent_partitions`` for ``Pipeline.run`` (nothing when not set)."""
        if self.max_concurrent_partitions is None:
            return {}
        return {"max_concurrent_partitions": self.max_concurrent_partitions}

    def run_kwargs(self) -> dict[str, Any]:
        """The recipe's options for ``Pipeline.run`` from Python: :meth:`partition_kwargs`
        and the stage checkpoints, the recipe's fields over the configured defaults (the
        command merges its own options in between: ``run_command.checkpoint_kwargs``)."""
        kwargs = self.partition_kwargs()
        if self.stage_checkpoints:
            kwargs["stage_checkpoints"] = resolved_checkpoints(self.stage_checkpoints)
        return kwargs


def resolved_checkpoints(settings: dict[str, Any]) -> Any:
    """The ``StageCheckpoints`` of ``settings`` over config ``stage-checkpoints``
    (``n`` and ``stages`` kept only for the strategies that use them)."""
    from curator_dask import config
    from curator_dask.resumability.stage_checkpoints import StageCheckpoints

    merged = {**config.section("stage-checkpoints"), **settings}
    if merged["strategy"] != "every_n_stages":
        merged["n"] = None
    if merged["strategy"] != "manual":
        merged["stages"] = []
    return StageCheckpoints(**merged)


def _mapping(spec: dict, key: str, source: str, valid: Sequence[str]) -> dict[str, Any]:
    """Section ``key`` of ``spec`` ({} when absent), its keys checked against ``valid``."""
    if key not in spec:
        return {}
    section = spec[key]
    if not isinstance(section, dict):
        msg = (f"{source}: {key}: expected a mapping of {', '.join(valid)}, got {section!r} "
               f"(remove the section to keep the defaults)")
        raise PipelineDefinitionError(msg)
    unknown = sorted(set(section) - set(valid), key=str)
    if unknown:
        msg = f"{source}: {key}: unknown key(s) {unknown}; the valid keys are {list(valid)}"
        raise PipelineDefinitionError(msg)
    return section


def recipe_options(spec: dict, source: str) -> RecipeOptions:
    """The recipe sections of the parsed pipeline file ``spec``, checked (pure: the stages
    are not looked at; :func:`partition_target` and :func:`check_checkpoints` do that).

    Example:
        >>> recipe_options({"checkpoint": {"strategy": "every_n_ops", "n_ops": 2},
        ...                 "intermediate_storage": {"format": "parquet",
        ...                                          "preserve_intermediate_data": False}},
        ...                "r.yaml").stage_checkpoints
        {'strategy': 'every_n_stages', 'n': 2, 'format': 'parquet', 'retention': 'cleanup_all'}
        >>> recipe_options({"checkpoint": {"stratgy": "every_op"}}, "r.yaml")
        Traceback (most recent call last):
        ...
        curator_dask.cli.targets.PipelineDefinitionError: r.yaml: checkpoint: unknown key(s) \
['stratgy']; the valid keys are ['enabled', 'strategy', 'n_ops', 'op_names']
    """
    _executor_type(spec, source)
    partition, concurrency = _partition(spec, source)
    settings = {**_checkpoint(spec, source), **_storage(spec, source)}
    return RecipeOptions(partition=partition, max_concurrent_partitions=concurrency,
                         stage_checkpoints=settings)


def _executor_type(spec: dict, source: str) -> None:
    if "executor_type" not in spec:
        return
    value = spec["executor_type"]
    if value not in EXECUTOR_TYPES:
        msg = (f"{source}: executor_type {value!r}: curator_dask runs every pipeline on Dask "
               f"(run's --workers, --address or --cluster say where); the accepted values "
               f"are {list(EXECUTOR_TYPES)} (ray_partitioned: Data-Juicer's partitioned "
               "executor, whose partition:, checkpoint: and intermediate_storage: sections "
               "this file may carry), or remove the key")
        raise PipelineDefinitionError(msg)
    if value == "ray_partitioned":
        logger.info("%s: executor_type ray_partitioned runs on Dask here; its partition:, "
                    "checkpoint: and intermediate_storage: sections are applied", source)


def _partition(spec: dict, source: str) -> tuple[dict[str, Any] | None, int | str | None]:
    from curator_dask.backends.base import check_max_concurrent_partitions
    from curator_dask.partitions.spec import KEYS, PartitionSpec

    valid = list(dict.fromkeys([*KEYS["manual"], *KEYS["auto"], *PARTITION_RUN_KEYS]))
    section = dict(_mapping(spec, "partition", source, valid))
    concurrency = section.pop("max_concurrent_partitions", None)
    if concurrency is not None:
        try:
            concurrency = check_max_concurrent_partitions(
                concurrency, given="partition.max_concurrent_partitions")
        except ValueError as exc:
            raise PipelineDefinitionError(f"{source}: {exc}") from None
    if not section:
        return None, concurrency
    mode = section.get("mode")
    if mode is None:
        msg = (f"{source}: partition: {sorted(section)} need partition.mode: manual (with "
               "num_of_partitions) or auto (with target_size_mb, size, max_size_mb, max_rows); "
               "without mode the files stay whole partitions")
        raise PipelineDefinitionError(msg)
    unused = [k for k in section if mode in KEYS and k not in KEYS[mode]]
    if unused:
        other = "auto" if mode == "manual" else "manual"
        msg = (f"{source}: partition: {unused} belong to mode {other}, not {mode!r} (mode "
               f"{mode!r} takes {[k for k in KEYS[mode] if k != 'mode']}): remove them or set "
               f"mode: {other}")
        raise PipelineDefinitionError(msg)
    try:
        partition = PartitionSpec.coerce(section)  # a dict given: never None
        return (None if partition is None else partition.to_dict()), concurrency
    except (TypeError, ValueError) as exc:
        raise PipelineDefinitionError(f"{source}: partition: {exc}") from None


def _checkpoint(spec: dict, source: str) -> dict[str, Any]:
    if "checkpoint" not in spec:
        return {}
    section = _mapping(spec, "checkpoint", source, CHECKPOINT_KEYS)
    where = f"{source}: checkpoint"
    enabled = section.get("enabled", True)
    if not isinstance(enabled, bool):
        raise PipelineDefinitionError(f"{where}.enabled must be true or false, got {enabled!r}")
    strategy = section.get("strategy")
    if strategy is not None and strategy not in STRATEGIES:
        msg = (f"{where}.strategy {strategy!r} is not one of {list(STRATEGIES)} "
               f"(Data-Juicer's names; here an op is a stage)")
        raise PipelineDefinitionError(msg)
    if "enabled" in section and strategy is not None and (strategy == "disabled") == enabled:
        msg = (f"{where}: enabled: {str(enabled).lower()} and strategy: {strategy} contradict "
               "each other; remove one of them")
        raise PipelineDefinitionError(msg)
    strategy = strategy or (DEFAULT_STRATEGY if enabled else "disabled")
    for key, needs in (("n_ops", "every_n_ops"), ("op_names", "manual")):
        if key in section and strategy != needs:
            msg = (f"{where}.{key} is used by strategy {needs} only, and the strategy is "
                   f"{strategy}: remove {key} or set strategy: {needs}")
            raise PipelineDefinitionError(msg)
    settings: dict[str, Any] = {"strategy": STRATEGIES[strategy]}
    if strategy == "every_n_ops":
        n_ops = section.get("n_ops", DEFAULT_N_OPS)
        if isinstance(n_ops, bool) or not isinstance(n_ops, int) or n_ops < 1:
            msg = f"{where}.n_ops must be a whole number of at least 1, got {n_ops!r}"
            raise PipelineDefinitionError(msg)
        settings["n"] = n_ops
    if strategy == "manual":
        names = section.get("op_names")
        if (not isinstance(names, list) or not names
                or not all(isinstance(n, str) and n for n in names)):
            msg = (f"{where}: strategy manual needs op_names, a list of the stage names to "
                   f"checkpoint after, e.g. op_names: [keep_long_documents]; got {names!r}")
            raise PipelineDefinitionError(msg)
        settings["stages"] = list(names)
    return settings


def _storage(spec: dict, source: str) -> dict[str, Any]:
    from curator_dask import config
    from curator_dask.resumability.stage_checkpoints.formats import FORMATS, check_compression
    from curator_dask.resumability.stage_checkpoints.strategy import RETENTIONS

    section = _mapping(spec, "intermediate_storage", source, STORAGE_KEYS)
    where = f"{source}: intermediate_storage"
    settings: dict[str, Any] = {}
    if "format" in section:
        if section["format"] not in FORMATS:
            msg = f"{where}.format {section['format']!r} is not one of {list(FORMATS)}"
            raise PipelineDefinitionError(msg)
        settings["format"] = section["format"]
    if "compression" in section:
        fmt = settings.get("format") or config.get("stage-checkpoints.format")
        try:
            settings["compression"] = check_compression(fmt, section["compression"])
        except ValueError as exc:
            raise PipelineDefinitionError(f"{where}.compression: {exc}") from None
    retention = section.get("retention_policy")
    if retention is not None and retention not in RETENTIONS:
        msg = f"{where}.retention_policy {retention!r} is not one of {list(RETENTIONS)}"
        raise PipelineDefinitionError(msg)
    preserve = section.get("preserve_intermediate_data")
    if preserve is not None:
        if not isinstance(preserve, bool):
            msg = f"{where}.preserve_intermediate_data must be true or false, got {preserve!r}"
            raise PipelineDefinitionError(msg)
        if retention is None:
            retention = PRESERVING[preserve][0]
        elif retention not in PRESERVING[preserve]:
            msg = (f"{where}: preserve_intermediate_data: {str(preserve).lower()} and "
                   f"retention_policy: {retention} contradict each other (it goes with "
                   f"{' or '.join(PRESERVING[preserve])}); remove one of them")
            raise PipelineDefinitionError(msg)
    if retention is not None:
        settings["retention"] = retention
    return settings


def partition_target(stages: Sequence[Any], source: str) -> int:
    """The index in ``stages`` (as the file lists them) of the stage that holds the pipeline's
    source, which must take ``partition=``: curator_dask's ``JsonlReader``, ``ParquetReader``
    or ``FilePartitioningStage``."""
    from curator_dask.pipeline.pipeline import _decompose

    owners = [(i, sub) for i, stage in enumerate(stages) for sub in _decompose(stage)]
    marked = [i for i, sub in owners if getattr(sub, "is_source_stage", False)]
    index = marked[0] if marked else owners[0][0]  # the build's rule: else the first stage
    cls = type(stages[index])
    if "partition" not in inspect.signature(cls).parameters:
        msg = (f"{source}: partition: the pipeline's source, stages[{index}] "
               f"({cls.__module__}.{cls.__qualname__}), takes no partition= (row ranges inside "
               "files); make it curator_dask's reader, _target_: "
               "curator_dask.stages.text.io.reader.JsonlReader (or ParquetReader): NeMo "
               "Curator's other stages can follow it (docs/recipes.md)")
        raise PipelineDefinitionError(msg)
    return index


def check_checkpoints(options: RecipeOptions, stages: Sequence[Any], source: str) -> None:
    """Check the recipe's stage checkpoints against the pipeline's built ``stages`` (a
    ``manual`` strategy's ``op_names`` must name stages that can be boundaries), before any
    cluster starts; a strategy that checkpoints nothing here is said once."""
    if not options.stage_checkpoints:
        return
    try:
        checkpoints = resolved_checkpoints(options.stage_checkpoints)
        boundaries = checkpoints.boundaries(stages)
    except ValueError as exc:
        where = "checkpoint.op_names: " if options.stage_checkpoints.get("stages") else ""
        raise PipelineDefinitionError(f"{source}: {where}{exc}") from None
    settings = checkpoints.to_dict()
    if settings["strategy"] != "disabled" and not boundaries:
        first = next((i for i, s in enumerate(stages) if s.is_source_stage), 0)
        between = [s.name for s in stages[first + 1:] if not s.is_sink_stage]
        fix = (f"; lower checkpoint.n_ops to at most {len(between)}" if between
               and settings["strategy"] == "every_n_stages" else "")
        logger.warning("%s: checkpoint: strategy %s checkpoints no stage of this pipeline (the "
                       "stages between its source and its sink: %s)%s", source,
                       {v: k for k, v in STRATEGIES.items()}[settings["strategy"]], between, fix)
