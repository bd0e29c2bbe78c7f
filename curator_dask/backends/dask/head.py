"""The head of a run: the stages up to and including the source, which make the source tasks.

From the implicit ``EmptyTask`` (file discovery) the head runs in the driver (:func:`run_head`);
from user-given initial tasks (URLs, archives, file groups: real work) on the cluster
(:func:`run_head_on_cluster`). See docs/design/architecture.md ("One run, end to end", step 10).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

from curator_dask import config as _config
from curator_dask.backends.counts import StageCount
from curator_dask.backends.dask.adapter import StageAdapter, run_stages
from curator_dask.backends.dask.plan import ExecutionPlan
from curator_dask.backends.dask.source_feed import LazySourceTasks, process_source
from curator_dask.errors import RunStopped
from curator_dask.stages.model import model_of

logger = logging.getLogger(__name__)


def settle_source(stages: Sequence[Any], plan: ExecutionPlan, options: Any, *,
                  strict: bool) -> None:
    """Before the head runs, hand the source stage the run's checkpoint, if it asks for it
    (``use_partition_record``: row-range partitions rebuilt from the checkpoint's record and
    verified, or recorded; docs/partitions-inside-files.md). ``strict``: a job's resume."""
    use = getattr(stages[plan.head[-1]], "use_partition_record", None) if plan.head else None
    if callable(use):
        use(options.checkpoint_path, options.checkpoint_storage_options, strict=strict)


def run_head(stages: Sequence[Any], plan: ExecutionPlan, initial: list[Any],
             counts: dict[int, StageCount]) -> list[Any] | LazySourceTasks:
    """Run the stages up to the source on the driver; returns the source tasks: a list, or,
    when the head is the source stage alone and it gives an iterator (curator_dask's own
    model: ``process_iter``, or ``process`` returning a generator), a
    :class:`~curator_dask.backends.dask.source_feed.LazySourceTasks` that the run pulls from as
    its window frees (the stage is torn down when it is exhausted or closed)."""
    head = [stages[i] for i in plan.head]
    for stage in head:
        model = model_of(stage)
        stage.setup_on_node(model.node_info(node_id=socket.gethostname()),
                            model.worker_metadata(worker_id="driver"))
    for stage in head:
        stage.setup(model_of(stage).worker_metadata(worker_id="driver"))
    started = time.perf_counter()
    lazy = None
    try:
        if len(head) == 1 and len(initial) == 1:
            found = process_source(StageAdapter(head[0]), initial[0], counts[plan.head[0]])
            if isinstance(found, LazySourceTasks):
                lazy = found
                lazy.on_close = head[0].teardown
                return lazy
            return found
        batches, head_counts = run_stages([StageAdapter(s) for s in head], [list(initial)])
    finally:
        if lazy is None:
            for stage in head:
                stage.teardown()
    for i, c in zip(plan.head, head_counts, strict=True):
        counts[i].merge(c)
    sources = [t for group in batches for t in group]
    logger.debug("head: %d sources in %.3f s", len(sources), time.perf_counter() - started)
    return sources


def run_head_on_cluster(client: Any, stages: Sequence[Any], plan: ExecutionPlan,
                        initial: list[Any], counts: dict[int, StageCount], *, run_id: str,
                        window: int | None, stop: Any,
                        register: Callable[[Any, Any], None]) -> list[Any]:
    """The head over ``initial`` tasks on the cluster; returns the source tasks.

    One Dask task per slice of the first head stage's ``batch_size`` (the slices the driver's
    head makes, so ids are the same), at most ``window`` in flight (default: twice the worker
    threads). The source tasks come back in the order of the initial tasks. The head's stages
    live in a ``StageHost`` of their own (sent with ``register``), removed (its stages torn
    down) once the source tasks exist. A request on ``stop`` ends the head with ``RunStopped``.
    """
    from distributed import as_completed

    from curator_dask.backends.dask.streaming import SchedulerWatch, completed
    from curator_dask.backends.dask.worker import StageHost, run_head_batch
    from curator_dask.utils.run_keys import task_key

    group = plan.head_group
    if group is None:
        msg = "the plan runs the head on the driver (no head_group): call run_head instead"
        raise ValueError(msg)
    host = StageHost(run_id, list(stages), head=group.stage_indices)
    register(client, host)
    size = stages[group.stage_indices[0]].batch_size or 1
    pending = iter(enumerate(initial[i:i + size] for i in range(0, len(initial), size)))
    window = window or max(1, 2 * sum(client.nthreads().values()))
    watch = SchedulerWatch(client, float(_config.get("cluster.scheduler-lost-grace")))
    done, index, made = as_completed(with_results=True), {}, {}

    def submit() -> None:
        for n, batch in itertools.islice(pending, 1):
            future = client.submit(run_head_batch, host.name, batch, pure=False,
                                   key=task_key(group.label, run_id, batch),
                                   resources=group.resource_dict or None)
            index[future] = n
            done.add(future)

    def lost() -> str | None:
        if stop.requested:
            raise RunStopped(stop.reason)
        return watch.lost()

    logger.info("head on the cluster: %d initial tasks through %s", len(initial),
                "+".join(group.stage_names))
    try:
        for _ in range(window):
            submit()
        for future, result in completed(done, lost):
            n = index.pop(future)
            raised = future.status == "error"  # before release(), which makes it "cancelled"
            future.release()
            if raised:
                _, exc, tb = result
                raise exc.with_traceback(tb)
            made[n], head_counts = result
            for i, c in zip(group.stage_indices, head_counts, strict=True):
                counts[i].merge(c)
            submit()
    except BaseException:
        if index and client.status == "running":
            client.cancel(list(index), force=True)
        raise
    finally:
        with contextlib.suppress(Exception):  # teardown must not hide the run's error
            client.unregister_worker_plugin(host.name)
    return [t for n in sorted(made) for t in made[n]]
