"""One run's hold on the id generator: checked when the run is made, installed on the run's
scheduler before any source runs, brought back to the driver when the run ends.

``DaskRun`` (``backends/dask/run.py``) calls, in order:

1. :meth:`RunIdRegistry.for_run` when the run is made: ``None`` when no stage generates or
   assigns ids; a run that needs ids without a generator fails here, before the cluster starts.
2. :meth:`RunIdRegistry.install` once the cluster is connected, before the checkpoint is
   opened: a resumed checkpointed run first takes the registry saved in the checkpoint
   (``<checkpoint>/.curator_dask/id_generator.json``), so its ids equal the first run's.
3. :meth:`RunIdRegistry.bring_back` at the end, whatever ended the run (after the completion
   plugin closed, so the checkpoint's copy is final): the driver's generator becomes the
   scheduler's final state.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from curator_dask.errors import CuratorDaskError
from curator_dask.ids.generator import IdGeneratorBase, _Driver
from curator_dask.resumability.layout import ID_GENERATOR_PATH

logger = logging.getLogger(__name__)


class IdGeneratorMissingError(RuntimeError, CuratorDaskError):
    """A run's stages generate or assign ids, but no id generator exists in the driver."""


def stages_using_ids(stages: Sequence[Any]) -> list[Any]:
    """The stages that generate or assign ids (NeMo's readers and ours alike)."""
    return [s for s in stages
            if getattr(s, "_generate_ids", False) or getattr(s, "_assign_ids", False)]


def checkpoint_file(checkpoint: str) -> str:
    """Where a checkpoint keeps its run's id registry (NeMo's JSON)."""
    return f"{str(checkpoint).rstrip('/')}/{ID_GENERATOR_PATH}"


def saved_in_checkpoint(checkpoint: str, storage_options: dict | None) -> IdGeneratorBase | None:
    """The registry a checkpoint holds, or ``None`` (no file yet)."""
    import fsspec

    path = checkpoint_file(checkpoint)
    fs, fs_path = fsspec.core.url_to_fs(path, **(storage_options or {}))
    if not fs.exists(fs_path):
        return None
    return IdGeneratorBase.from_disk(path, storage_options)


def resumed_state(driver: IdGeneratorBase, saved: IdGeneratorBase | None,
                  where: str) -> IdGeneratorBase:
    """The state a run starts from: the driver's, or the checkpoint's when that one extends
    it (a resumed run). Each must be a prefix of the other: same range for every group both
    hold."""
    if saved is None:
        return driver.copy()
    if _extends(saved, driver):
        return saved.copy()
    if _extends(driver, saved):
        return driver.copy()
    clash = sorted(k for k, r in driver.batch_registry.items()
                   if saved.batch_registry.get(k, r) != r)
    only = len(set(driver.batch_registry) - set(saved.batch_registry))
    msg = (f"the id generator of this process and the one saved in the checkpoint ({where}) "
           f"disagree: {len(clash)} file groups have other ranges and {only} are only in this "
           f"process's (next_id {driver.next_id} vs {saved.next_id}); a resumed run must start "
           "from the state the first run started from (create_id_generator_actor(filepath=...) "
           "with the same JSON, or an empty one), or use another checkpoint path")
    raise ValueError(msg)


def _extends(big: IdGeneratorBase, small: IdGeneratorBase) -> bool:
    return big.next_id >= small.next_id and all(
        big.batch_registry.get(k) == r for k, r in small.batch_registry.items())


class RunIdRegistry:
    """The id generator of one run on its scheduler (see the module docstring).

    Example:
        >>> RunIdRegistry.for_run([], None, "0123456789ab") is None
        True
    """

    def __init__(self, run_id: str, users: list[str], checkpoint: str | None,
                 storage_options: dict | None) -> None:
        self.run_id = run_id
        self.users = users
        self.checkpoint = checkpoint
        self.storage_options = storage_options
        self.client: Any = None
        self.before: IdGeneratorBase | None = None

    @classmethod
    def for_run(cls, stages: Sequence[Any], options: Any, run_id: str) -> RunIdRegistry | None:
        """``None`` when no stage needs ids; else the run's registry, checked.

        Raises:
            IdGeneratorMissingError: a stage needs ids and no generator exists.
        """
        users = [s.name for s in stages_using_ids(stages)]
        if not users:
            return None
        if _Driver.generator is None:
            msg = (f"stage {users[0]!r} generates or assigns document ids (_generate_ids / "
                   "_assign_ids), but there is no id generator: call create_id_generator_actor() "
                   "(curator_dask.dedup, or NeMo's) before Pipeline.run, or "
                   "create_id_generator_actor(filepath=<json>) to assign the ids a run wrote")
            raise IdGeneratorMissingError(msg)
        checkpoint = getattr(options, "checkpoint_path", None)
        return cls(run_id, users, checkpoint,
                   getattr(options, "checkpoint_storage_options", None))

    def install(self, client: Any) -> None:
        """Put the state on the scheduler (before any source runs)."""
        saved = (saved_in_checkpoint(self.checkpoint, self.storage_options)
                 if self.checkpoint is not None else None)
        with _Driver.lock:
            driver = _Driver.generator
            if driver is None:
                msg = (f"the id generator was killed before run {self.run_id} started; call "
                       "create_id_generator_actor() again")
                raise IdGeneratorMissingError(msg)
            if _Driver.holder is not None:
                msg = (f"another run in progress ({_Driver.holder.run_id}) uses this process's "
                       "id generator; run the pipelines that generate or assign ids one after "
                       "the other")
                raise RuntimeError(msg)
            where = checkpoint_file(self.checkpoint) if self.checkpoint else ""
            start = resumed_state(driver, saved, where)
            self.before = start
            _Driver.holder = self
        from curator_dask.ids.plugin import IdGeneratorPlugin, to_wire

        plugin = IdGeneratorPlugin(
            self.run_id, to_wire(start),
            checkpoint_file=checkpoint_file(self.checkpoint) if self.checkpoint else None,
            storage_options=self.storage_options, owner=getattr(client, "id", None))
        try:
            client.register_plugin(plugin, name=plugin.name)
        except BaseException:
            with _Driver.lock:
                _Driver.holder = None
            raise
        self.client = client
        if (self.checkpoint is not None and saved is not None and start == saved
                and saved.batch_registry):
            logger.info("ids: %d file groups restored from %s", len(saved.batch_registry),
                        checkpoint_file(self.checkpoint))

    def call(self, action: str, **kwargs: Any) -> Any:
        """A request from the driver during the run, answered by the scheduler."""
        from curator_dask.ids.plugin import HANDLER

        method = getattr(self.client.scheduler, HANDLER)
        return self.client.sync(method, action=action, run=self.run_id, **kwargs)

    def live_state(self) -> IdGeneratorBase:
        """The scheduler's state now; while :meth:`install` is still registering the plugin,
        the state it installs (no source has run yet)."""
        from curator_dask.ids.plugin import from_wire

        if self.client is None:
            return (self.before or IdGeneratorBase()).copy()
        return from_wire(self.call("state"))

    def bring_back(self, scheduler_lost: bool = False) -> None:
        """The scheduler's final state becomes the driver's (also after a failure)."""
        if self.client is None:
            return  # never installed
        final = None if scheduler_lost else self._closed_state()
        if final is None:
            final = self._fallback()
        with _Driver.lock:
            _Driver.generator = final
            if _Driver.holder is self:
                _Driver.holder = None

    def _closed_state(self) -> IdGeneratorBase | None:
        from curator_dask.ids.plugin import close_handler_name, from_wire

        try:
            state = self.client.sync(getattr(self.client.scheduler,
                                             close_handler_name(self.run_id)))
        except Exception as exc:  # noqa: BLE001 (the run's own error matters more)
            logger.error("ids: could not bring run %s's id generator back from the "
                         "scheduler: %s", self.run_id, exc)
            return None
        if state is None:  # the plugin had gone (its owner disconnected)
            return None
        for error in state.get("errors") or ():
            logger.error("ids: saving the id generator to the checkpoint failed: %s", error)
        return from_wire(state)

    def _fallback(self) -> IdGeneratorBase:
        """Without the scheduler's state: the checkpoint's copy, else the state before."""
        before = self.before if self.before is not None else IdGeneratorBase()
        if self.checkpoint is not None:
            try:
                saved = saved_in_checkpoint(self.checkpoint, self.storage_options)
                return resumed_state(before, saved, checkpoint_file(self.checkpoint))
            except Exception as exc:  # noqa: BLE001 (fall back to the state before)
                logger.error("ids: could not read %s: %s", checkpoint_file(self.checkpoint),
                             exc)
        logger.warning("ids: the id generator is back to its state before run %s (the ranges "
                       "the run registered were lost with its scheduler)", self.run_id)
        return before


class NoRunIds:
    """A run whose stages use no ids: nothing to install or bring back (like ``NullObserver``)."""

    def install(self, client: Any) -> None:
        """Nothing to install."""

    def bring_back(self, scheduler_lost: bool = False) -> None:
        """Nothing to bring back."""


def ids_for_run(stages: Sequence[Any], options: Any, run_id: str) -> RunIdRegistry | NoRunIds:
    """What ``DaskRun`` holds: the run's :class:`RunIdRegistry`, or :class:`NoRunIds`.

    Raises:
        IdGeneratorMissingError: a stage needs ids and no generator exists (before the
            cluster starts).
    """
    return RunIdRegistry.for_run(stages, options, run_id) or NoRunIds()
