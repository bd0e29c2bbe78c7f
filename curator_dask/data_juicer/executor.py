"""``DataJuicerDaskExecutor``: the Dask executor Data-Juicer lacks.

Built from Data-Juicer's own config object, ``run()`` as its executors' ``run``. One run:

1. the input files in Data-Juicer's order (``io.py``), their rows counted on the workers;
2. partitions drawn over the whole dataset (``partitions.py``), each read by a worker, its
   ``content_hash`` recorded in ``checkpoints/partitioning_info.json`` (Data-Juicer's schema,
   ``job_folder.py``); a resume first checks that the rows of every partition with a
   checkpoint are unchanged, else stops naming the partition and its rows;
3. the operators cut at the deduplicators: each run of consecutive Mappers and Filters is one
   Dask task per partition (``ops.run_per_row``: Data-Juicer's own operators, batches and
   wrappers, or an exact equivalent of ``fast_ops``), each deduplicator a convergence point
   over the whole dataset on the cluster (``dedup.run_deduplicator``); checkpoints
   ``checkpoint_op_XXXX_partition_YYYY.parquet`` after the operators the strategy names, and
   always before and after a deduplicator (it needs every partition), so a resume starts
   each partition after its last checkpoint;
4. the export: each partition's part written by a worker, the parts joined in order into the
   export path under a temporary name, then renamed;
5. Data-Juicer's job folder all along: events, ``job_summary.json``, the DAG plan, the
   "Resume token" line.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from curator_dask.data_juicer import io as dj_io
from curator_dask.data_juicer.job_folder import DJJobFolder, partition_metadata
from curator_dask.data_juicer.ops import (
    DEDUP,
    built_op,
    op_kind,
    op_name,
)
from curator_dask.data_juicer.partitions import balanced_bounds, partition_count
from curator_dask.data_juicer.recipe import RecipeError
from curator_dask.data_juicer.tasks import (
    ExportSpec,
    Source,
    count_file,
    export_file,
    partition_hashes,
    run_segment,
)
from curator_dask.errors import CuratorDaskError, RunStopped
from curator_dask.jobs.index import record_job

logger = logging.getLogger(__name__)


class PartitionChangedError(ValueError, CuratorDaskError):
    """``--resume`` of a recipe job whose input rows changed inside a partition that has a
    checkpoint: names the partition and its rows; the checkpoints are kept."""


@dataclass
class OpCount:
    """What one operator did over the whole run (the partitions it ran on in this run)."""

    name: str
    rows_in: int = 0
    rows_out: int = 0
    seconds: float = 0.0


@dataclass
class DataJuicerRunResult:
    """What ``run()`` returns: where the result went and the per-operator counts."""

    job_id: str
    export_path: str
    rows_in: int
    rows_out: int
    partitions: int
    ops: list[OpCount] = field(default_factory=list)
    resumed_partitions: dict[int, int] = field(default_factory=dict)
    fast_ops: list[str] = field(default_factory=list)


class DataJuicerDaskExecutor:
    """Runs a Data-Juicer recipe on Dask: Data-Juicer's executor interface (built from its
    config object, ``run()``), so a Data-Juicer Python user swaps one class::

        from data_juicer.config import init_configs
        from curator_dask.data_juicer import DataJuicerDaskExecutor

        cfg = init_configs(["--config", "recipe.yaml"])
        DataJuicerDaskExecutor(cfg).run()

    Args:
        cfg: Data-Juicer's config object (``init_configs``), or the path of a recipe.
        executor: the curator_dask ``DaskExecutor`` whose cluster runs the recipe (default:
            an embedded ``LocalCluster`` of ``np`` workers, one thread each, closed at the
            end of ``run``).
        fast_ops: use curator_dask's exact equivalents of Data-Juicer's hottest text
            operators (``fast_ops.py``); ``False`` runs Data-Juicer's own code everywhere.
        resume: a job id to resume (``--resume``): its partitions restart after their last
            checkpoint.
        announce: print the "Resume token" line as Data-Juicer's partitioned executor does
            (a new job with checkpoints).
        executor_type: the recipe's ``executor_type`` (all run on Dask; it is recorded).
        command: the command line that resumes the job (``job_summary.json``'s
            ``resumption_command``; default ``python -m curator_dask run RECIPE --resume ID``).
    """

    def __init__(self, cfg: Any, *, executor: Any = None, fast_ops: bool = True,
                 resume: str | None = None, announce: bool = False,
                 executor_type: str | None = None, command: str | None = None) -> None:
        if isinstance(cfg, str):
            from curator_dask.data_juicer.recipe import load_recipe

            recipe = load_recipe(cfg)
            cfg, executor_type = recipe.cfg, recipe.executor_type
        self.cfg = cfg
        self.executor_type = executor_type or str(getattr(cfg, "executor_type", "default"))
        self.fast_ops = fast_ops
        self.command = command
        self.resume = resume or getattr(cfg, "resume", None)
        self.announce = announce
        self._own_executor = executor is None
        self._executor = executor
        self.process: list[dict[str, Any]] = list(cfg.process or [])
        self.text_keys = _text_keys(cfg)
        self.job_id = str(cfg.job_id)
        self.job_dir = str(cfg.work_dir)
        self.export_path = str(cfg.export_path)
        self.suffix = (cfg.get("export_type") or self.export_path.rsplit(".", 1)[-1]).lower()
        self.folder = DJJobFolder(os.path.dirname(self.job_dir), os.path.basename(self.job_dir))
        self._stop = False

    # -- cluster ---------------------------------------------------------------------------
    def _client(self) -> Any:
        if self._executor is None:
            from curator_dask.backends.dask import DaskExecutor

            self._executor = DaskExecutor(n_workers=max(1, int(self.cfg.get("np") or 1)),
                                          threads_per_worker=1, progress=False)
        return self._executor.start()

    # -- checkpoints -----------------------------------------------------------------------
    def _checkpoint_ops(self) -> set[int]:
        """The operator indices after which a partition is checkpointed: the strategy's, plus
        before and after each deduplicator (a convergence point needs every partition)."""
        ck = self.cfg.get("checkpoint")
        enabled = bool(getattr(ck, "enabled", True)) if ck is not None else True
        strategy = str(getattr(ck, "strategy", "every_n_ops") or "every_n_ops")
        if not enabled or strategy == "disabled":
            return set()
        names = set(getattr(ck, "op_names", None) or [])
        n_ops = int(getattr(ck, "n_ops", 5) or 5)
        chosen: set[int] = set()
        for i, entry in enumerate(self.process):
            if (strategy == "every_op" or (strategy == "every_n_ops" and (i + 1) % n_ops == 0)
                    or (strategy == "manual" and op_name(entry) in names)):
                chosen.add(i)
            if self._kinds[i] == DEDUP:
                chosen.update({i - 1, i} - {-1})
        return chosen

    # -- the run ---------------------------------------------------------------------------
    def run(self) -> DataJuicerRunResult:
        """Run the recipe; returns what it did. Raises :class:`PartitionChangedError` (before
        any operator runs) when resuming over changed input rows, ``RunStopped`` when
        Data-Juicer's stopper or a signal stopped it."""
        self._kinds = [DEDUP if _is_dedup(e) else op_kind(built_op(e)) for e in self.process]
        if self.executor_type != "dask" and not self.announce:  # the command says it itself
            logger.warning("executor_type %s: this recipe runs on Dask (curator_dask's "
                           "Data-Juicer executor)", self.executor_type)
        started = time.time()
        files = dj_io.dataset_files(str(self.cfg.dataset_path), os.getcwd())
        checkpoints = self._checkpoint_ops()
        resumed = self.resume is not None and os.path.isdir(self.folder.checkpoint_dir)
        client = self._client()
        previous = self._install_stop()
        try:
            counts = client.gather(client.map(count_file, files, text_keys=self.text_keys,
                                              pure=False))
            total = sum(c[0] for c in counts)
            n_parts = partition_count(self.cfg.get("partition"), total,
                                      sum(c[1] for c in counts), int(self.cfg.get("np") or 1))
            self.folder.start(_job_config(self.cfg, self.executor_type), len(self.process),
                              total_partitions=n_parts, resuming=resumed,
                              resumption_command=self.command)
            # in curator_dask's per-user job index: `status`, `stop`, `report` find it anywhere
            record_job(self.job_id, self.folder.root)
            if self.announce and not resumed and checkpoints:
                print(self.folder.resume_token_line(), flush=True)
            bounds = balanced_bounds(total, n_parts)
            inputs: list[Source] = [("pieces", p)
                                    for p in _pieces(files, [c[0] for c in counts], bounds)]
            hashes = self._map(client, partition_hashes, inputs, self.text_keys)
            latest = self.folder.latest_checkpoints() if resumed else {}
            latest = {p: i for p, i in latest.items() if p < n_parts and i < len(self.process)}
            if resumed:
                self._check_unchanged(hashes, bounds, latest)
            self.folder.record_partitions(
                [partition_metadata(p, b[0], b[1], hashes[p]) for p, b in enumerate(bounds)],
                total, str(self.cfg.get("dataset_path")))
            self.folder.write_dag_plan([op_name(e) for e in self.process], n_parts,
                                       [i for i, k in enumerate(self._kinds) if k == DEDUP])
            state, next_op = self._resume_state(inputs, latest)
            self._ops = [OpCount(op_name(e)) for e in self.process]
            for p in range(n_parts):
                self.folder.partition_start(p, n_parts, latest.get(p))
            specs = self._export_specs(n_parts)
            exported: list[tuple[int, int, int, bool] | None] = [None] * n_parts
            stages = _stages(self._kinds)
            for number, (kind, indices) in enumerate(stages):
                self._check_stop()
                if kind == DEDUP:
                    self._dedup(client, indices[0], state, next_op, checkpoints)
                    continue
                last = number == len(stages) - 1
                jobs = {}
                for p in range(n_parts):
                    todo = [(i, self.process[i]) for i in indices if i >= next_op[p]]
                    if not todo:
                        continue
                    ck = {i: self.folder.checkpoint_path(i, p) for i, _ in todo
                          if i in checkpoints}
                    out = None if last else self._stage_path(indices[-1], p, checkpoints)
                    jobs[p] = (state[p], self.text_keys, todo, ck, self.fast_ops, out,
                               specs[p] if last else None)
                    for i, _ in todo:
                        self.folder.op_start(p, op_name(self.process[i]), i)
                for p, result in self._bounded(client, run_segment, jobs):
                    self._record(p, result.counts, checkpoints)
                    if not last:
                        state[p] = ("file", self._stage_path(indices[-1], p, checkpoints))
                    next_op[p] = indices[-1] + 1
                    exported[p] = result.exported
            rest = {p: (state[p], self.text_keys, specs[p])
                    for p in range(n_parts) if exported[p] is None}
            for p, result in self._bounded(client, export_file, rest):
                exported[p] = result.exported
            result = self._join(specs, [e for e in exported if e is not None], total, n_parts,
                                latest)
            for p in range(n_parts):
                self.folder.partition_complete(p, n_parts)
            self.folder.complete(time.time() - started, self.export_path)
            shutil.rmtree(self._work_dir, ignore_errors=True)
            return result
        except RunStopped:
            self.folder.stopped()
            raise
        except BaseException as exc:
            self.folder.failed(f"{type(exc).__name__}: {exc}")
            raise
        finally:
            self._restore_stop(previous)
            if self._own_executor and self._executor is not None:
                self._executor.close()
                self._executor = None

    @property
    def _work_dir(self) -> str:
        """Stage files between operators that no checkpoint keeps (removed at the end)."""
        return os.path.join(self.job_dir, "work")

    def _stage_path(self, index: int, partition: int, checkpoints: set[int]) -> str:
        if index in checkpoints:
            return self.folder.checkpoint_path(index, partition)
        return os.path.join(self._work_dir, f"stage_op_{index:04d}_partition_{partition:04d}"
                                            ".parquet")

    def _max_in_flight(self) -> int | None:
        partition = self.cfg.get("partition")
        value = getattr(partition, "max_concurrent_partitions", "auto") if partition else "auto"
        if value in (None, "auto"):
            return None
        try:
            count = int(value)
        except (TypeError, ValueError):
            msg = (f"partition.max_concurrent_partitions {value!r} is not a positive integer "
                   "or auto")
            raise RecipeError(msg) from None
        if count < 1:
            msg = f"partition.max_concurrent_partitions must be at least 1, got {count}"
            raise RecipeError(msg)
        return count

    def _bounded(self, client: Any, fn: Any, jobs: dict[int, tuple[Any, ...]]) -> Any:
        """``fn(*jobs[p])`` for each partition ``p`` on the cluster, at most
        ``max_concurrent_partitions`` at once; yields ``(p, result)`` as they finish."""
        from distributed import as_completed

        limit = self._max_in_flight() or len(jobs) or 1
        waiting = list(jobs.items())
        running: dict[str, int] = {}
        pool = as_completed()
        while waiting or running:
            while waiting and len(running) < limit:
                p, args = waiting.pop(0)
                future = client.submit(fn, *args, pure=False)
                running[future.key] = p
                pool.add(future)
            future = next(pool)
            p = running.pop(future.key)
            self._check_stop()
            yield p, future.result()

    def _map(self, client: Any, fn: Any, items: list[Any], *args: Any) -> list[Any]:
        results: list[Any] = [None] * len(items)
        for p, value in self._bounded(client, fn, {p: (item, *args)
                                                   for p, item in enumerate(items)}):
            results[p] = value
        return results

    def _record(self, p: int, counts: list[tuple[int, int, int, float]],
                checkpoints: set[int]) -> None:
        for index, rows_in, rows_out, seconds in counts:
            c = self._ops[index]
            c.rows_in += rows_in
            c.rows_out += rows_out
            c.seconds += seconds
            saved = index in checkpoints
            self.folder.op_complete(p, c.name, index, seconds, rows_in, rows_out,
                                    self.folder.checkpoint_path(index, p) if saved else None)
            if saved:
                self.folder.checkpoint_saved(p, c.name, index)

    def _dedup(self, client: Any, index: int, state: list[Source], next_op: list[int],
               checkpoints: set[int]) -> None:
        """A deduplicator over every partition (a convergence point), file to file."""
        import pyarrow.parquet as pq

        from curator_dask.data_juicer.dedup import run_deduplicator_files

        if all(n > index for n in next_op):
            return  # every partition's checkpoint is past it
        n_parts = len(state)
        sources: list[str] = []
        for p in range(n_parts):
            if next_op[p] > index:  # past the dedup: its input again (the forced checkpoint)
                sources.append(self.folder.checkpoint_path(index - 1, p))
            elif state[p][0] == "file":
                sources.append(state[p][1])
            else:  # the recipe starts with a deduplicator: the input as a stage file
                path = self._stage_path(index - 1, p, set())
                client.submit(run_segment, state[p], self.text_keys, [], {}, False, path,
                              None, pure=False).result()
                sources.append(path)
        name = op_name(self.process[index])
        for p in range(n_parts):
            self.folder.op_start(p, name, index)
        start = time.perf_counter()
        os.makedirs(self._work_dir, exist_ok=True)
        hashed = [os.path.join(self._work_dir, f"hashed_op_{index:04d}_partition_{p:04d}"
                                               ".parquet") for p in range(n_parts)]
        outputs = [self._stage_path(index, p, checkpoints) for p in range(n_parts)]
        rows_in = [pq.ParquetFile(path).metadata.num_rows for path in sources]
        kept = run_deduplicator_files(client, self.process[index], sources, hashed, outputs)
        seconds = time.perf_counter() - start
        c = self._ops[index]
        c.rows_in += sum(rows_in)
        c.rows_out += sum(kept)
        c.seconds += seconds
        for p in range(n_parts):
            saved = index in checkpoints
            self.folder.op_complete(p, name, index, seconds, rows_in[p], kept[p],
                                    outputs[p] if saved else None)
            if saved:
                self.folder.checkpoint_saved(p, name, index)
            state[p] = ("file", outputs[p])
            next_op[p] = index + 1

    def _resume_state(self, inputs: list[Source], latest: dict[int, int]
                      ) -> tuple[list[Source], list[int]]:
        state = list(inputs)
        next_op = [0] * len(inputs)
        for p, op_index in latest.items():
            state[p] = ("file", self.folder.checkpoint_path(op_index, p))
            next_op[p] = op_index + 1
            self.folder.checkpoint_loaded(p, op_name(self.process[op_index]), op_index)
        return state, next_op

    def _check_unchanged(self, hashes: list[dict[str, Any]], bounds: list[tuple[int, int]],
                         latest: dict[int, int]) -> None:
        from curator_dask.data_juicer.job_folder import partition_mismatch, read_partitioning_info

        if not latest:
            return
        info = read_partitioning_info(self.folder.partitioning_info_path)
        recorded = {int(p["partition_id"]): p for p in info.get("partitions", [])}
        if len(recorded) != len(bounds):
            msg = (f"job {self.job_id}: the input now makes {len(bounds)} partitions, the "
                   f"checkpoints were made for {len(recorded)}; the checkpoints are kept: "
                   "restore the input, or start a new job without --resume")
            raise PartitionChangedError(msg)
        for p in sorted(latest):
            old = recorded.get(p)
            if old is None:
                continue
            why = partition_mismatch(old, hashes[p])
            if why is not None:
                msg = (f"job {self.job_id}: {why} since its checkpoint; the checkpoints are "
                       "kept: restore the input, or start a new job without --resume")
                raise PartitionChangedError(msg)

    def _export_specs(self, n_parts: int) -> list[ExportSpec]:
        base = os.path.dirname(os.path.abspath(self.export_path))
        self._parts_dir = os.path.join(
            base, f".{os.path.basename(self.export_path)}.parts-{self.job_id}")
        os.makedirs(self._parts_dir, exist_ok=True)
        keep_stats = bool(self.cfg.get("keep_stats_in_res_ds", False))
        keep_hashes = bool(self.cfg.get("keep_hashes_in_res_ds", False))
        return [ExportSpec(os.path.join(self._parts_dir, f"part-{p:05d}.{self.suffix}"),
                           os.path.join(self._parts_dir, f"stats-{p:05d}.jsonl"),
                           self.suffix, keep_stats, keep_hashes) for p in range(n_parts)]

    def _join(self, specs: list[ExportSpec], written: list[tuple[int, int, int, bool]],
              total: int, n_parts: int, latest: dict[int, int]) -> DataJuicerRunResult:
        """The parts joined in order into the export path (or cut into shards)."""
        shard_size = int(self.cfg.get("export_shard_size") or 0)
        paths = [spec.path for spec in specs]
        if shard_size > 0:
            from curator_dask.data_juicer.shards import export_shards

            export_shards(paths, [w[0] for w in written], self.export_path, self.suffix,
                          shard_size, sum(w[2] for w in written))
        else:
            dj_io.join_parts(paths, self.export_path, self.suffix)
        if any(w[3] for w in written):
            stats_file = self.export_path.replace("." + self.suffix, "_stats.jsonl")
            dj_io.join_parts([spec.stats_path for spec in specs
                              if os.path.exists(spec.stats_path)], stats_file, "jsonl")
        shutil.rmtree(self._parts_dir, ignore_errors=True)
        from curator_dask.data_juicer.fast_ops import FAST_OPS

        return DataJuicerRunResult(
            job_id=self.job_id, export_path=self.export_path, rows_in=total,
            rows_out=sum(w[0] for w in written), partitions=n_parts, ops=self._ops,
            resumed_partitions=dict(latest),
            fast_ops=sorted({c.name for c in self._ops} & FAST_OPS) if self.fast_ops else [])

    # -- stopping --------------------------------------------------------------------------
    def _install_stop(self) -> Any:
        """Data-Juicer's stopper sends SIGTERM to the job's process: the run stops between
        operators' results, marks the job stopped and keeps its checkpoints."""
        import threading

        if threading.current_thread() is not threading.main_thread():
            return None

        def stop(_signum: int, _frame: object) -> None:
            self._stop = True

        return signal.signal(signal.SIGTERM, stop)

    def _restore_stop(self, previous: Any) -> None:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)

    def _check_stop(self) -> None:
        if self._stop:
            msg = f"job {self.job_id} was asked to stop (SIGTERM); resume it with --resume"
            raise RunStopped(msg)


def _is_dedup(entry: dict[str, Any]) -> bool:
    from curator_dask.data_juicer.dedup import DEDUP_OPS

    return op_name(entry) in DEDUP_OPS


def _stages(kinds: list[str]) -> list[tuple[str, list[int]]]:
    """The operator indices in stages: runs of per-row operators, each dedup alone."""
    stages: list[tuple[str, list[int]]] = []
    for i, kind in enumerate(kinds):
        if kind == DEDUP:
            stages.append((DEDUP, [i]))
        elif stages and stages[-1][0] != DEDUP:
            stages[-1][1].append(i)
        else:
            stages.append((kind, [i]))
    return stages


def _pieces(files: list[str], rows: list[int], bounds: list[tuple[int, int]]
            ) -> list[list[tuple[str, int, int]]]:
    """Each partition's global row range as pieces of files ``(path, start, end)``."""
    out = []
    for start, end in bounds:
        pieces = []
        offset = 0
        for path, n in zip(files, rows, strict=True):
            lo, hi = max(start, offset), min(end, offset + n)
            if lo < hi:
                pieces.append((path, lo - offset, hi - offset))
            offset += n
        out.append(pieces or [(files[0], 0, 0)])
    return out


def _text_keys(cfg: Any) -> list[str]:
    keys = cfg.get("text_keys") or "text"
    return [keys] if isinstance(keys, str) else list(keys)


def _job_config(cfg: Any, executor_type: str) -> dict[str, Any]:
    def plain(value: Any) -> Any:
        return value.as_dict() if hasattr(value, "as_dict") else value

    config = cfg.get("config")
    return {"config": [str(c) for c in config] if config else None,
            "dataset_path": str(cfg.get("dataset_path")), "work_dir": str(cfg.work_dir),
            "export_path": str(cfg.export_path), "executor_type": "dask",
            "recipe_executor_type": executor_type, "np": cfg.get("np"),
            "partition": plain(cfg.get("partition")), "checkpoint": plain(cfg.get("checkpoint"))}


__all__ = ["DataJuicerDaskExecutor", "DataJuicerRunResult", "OpCount", "PartitionChangedError",
           "RecipeError"]
