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

import pyarrow as pa

from curator_dask.data_juicer import io as dj_io
from curator_dask.data_juicer.job_folder import DJJobFolder, partition_metadata
from curator_dask.data_juicer.ops import (
    DEDUP,
    built_op,
    op_kind,
    op_name,
    rows_of,
    run_per_row,
)
from curator_dask.data_juicer.partitions import balanced_bounds, partition_count
from curator_dask.data_juicer.recipe import RecipeError
from curator_dask.errors import CuratorDaskError, RunStopped

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


# ---- worker tasks (module level: they travel by reference) ---------------------------------

def _count_file(path: str, text_keys: list[str]) -> tuple[int, int]:
    table = dj_io.read_file(path, text_keys)
    return table.num_rows, table.nbytes


def _load_partition(pieces: list[tuple[str, int, int]], text_keys: list[str]) -> pa.Table:
    tables = [dj_io.read_file(path, text_keys).slice(start, end - start)
              for path, start, end in pieces]
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="default")


def _hashes(table: pa.Table) -> dict[str, Any]:
    from curator_dask.data_juicer.job_folder import table_hashes

    return dict(table_hashes(table))


def _read_checkpoint(path: str) -> pa.Table:
    import pyarrow.parquet as pq

    return pq.read_table(path)


def _write_checkpoint(table: pa.Table, path: str) -> None:
    import pyarrow.parquet as pq

    tmp = f"{path}.tmp-{os.getpid()}"
    pq.write_table(table, tmp)
    os.replace(tmp, path)  # a checkpoint file is whole or absent


def _run_segment(table: pa.Table, entries: list[tuple[int, dict[str, Any]]],
                 checkpoints: dict[int, str], fast: bool
                 ) -> tuple[pa.Table, list[tuple[int, int, int, float]]]:
    """Consecutive Mappers and Filters over one partition in one task: the columns go from
    one operator to the next without materialising, and become a table again where a
    checkpoint is asked for and at the end."""
    from curator_dask.data_juicer.fast_ops import fast_equivalent

    cols, json_cols = dj_io.columns_of(table)
    counts = []
    for index, entry in entries:
        op = built_op(entry)
        equivalent = fast_equivalent(op) if fast else None
        before = rows_of(cols)
        start = time.perf_counter()
        cols = run_per_row(op, cols, equivalent, json_cols)
        counts.append((index, before, rows_of(cols), time.perf_counter() - start))
        if index in checkpoints:
            _write_checkpoint(_table(cols, json_cols, table), checkpoints[index])
    return _table(cols, json_cols, table), counts


def _table(cols: dict[str, list[Any]], json_cols: set[str], like: pa.Table) -> pa.Table:
    if not cols or not rows_of(cols):
        return like.slice(0, 0)
    return dj_io.table_of(cols, json_cols)


def _export_part(table: pa.Table, path: str, stats_path: str | None, suffix: str,
                 keep_stats: bool, keep_hashes: bool) -> tuple[int, int, int]:
    if stats_path is not None:
        columns = [c for c in (dj_io.STATS, dj_io.META) if c in table.column_names]
        dj_io.write_part(table.select(columns), stats_path, "jsonl")
    result = dj_io.export_columns(table, keep_stats, keep_hashes)
    return result.num_rows, dj_io.write_part(result, path, suffix), result.nbytes


def _has_columns(table: pa.Table, names: tuple[str, ...]) -> bool:
    return any(n in table.column_names for n in names)


# ---- the executor ------------------------------------------------------------------------

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
        if self.executor_type != "dask":
            logger.warning("executor_type %s: this recipe runs on Dask (curator_dask)",
                           self.executor_type)
        started = time.time()
        files = dj_io.dataset_files(str(self.cfg.dataset_path), os.getcwd())
        checkpoints = self._checkpoint_ops()
        resumed = self.resume is not None and os.path.isdir(self.folder.checkpoint_dir)
        client = self._client()
        previous = self._install_stop()
        try:
            counts = client.gather(client.map(_count_file, files, text_keys=self.text_keys,
                                              pure=False))
            total = sum(c[0] for c in counts)
            total_bytes = sum(c[1] for c in counts)
            n_parts = partition_count(self.cfg.get("partition"), total, total_bytes,
                                      int(self.cfg.get("np") or 1))
            self.folder.start(_job_config(self.cfg, self.executor_type), len(self.process),
                              total_partitions=n_parts, resuming=resumed,
                              resumption_command=self.command)
            if self.announce and not resumed and checkpoints:
                print(self.folder.resume_token_line(), flush=True)
            bounds = balanced_bounds(total, n_parts)
            pieces = _pieces(files, [c[0] for c in counts], bounds)
            parts = [client.submit(_load_partition, p, self.text_keys, pure=False)
                     for p in pieces]
            hashes = client.gather(client.map(_hashes, parts, pure=False))
            latest = self.folder.latest_checkpoints() if resumed else {}
            if resumed:
                self._check_unchanged(hashes, bounds, latest)
            self.folder.record_partitions(
                [partition_metadata(p, b[0], b[1], hashes[p]) for p, b in enumerate(bounds)],
                total, str(self.cfg.get("dataset_path")))
            self.folder.write_dag_plan([op_name(e) for e in self.process], n_parts,
                                       [i for i, k in enumerate(self._kinds) if k == DEDUP])
            state, next_op = self._resume_state(client, parts, latest, n_parts)
            op_counts = [OpCount(op_name(e)) for e in self.process]
            for p in range(n_parts):
                self.folder.partition_start(p, n_parts, latest.get(p))
            for kind, indices in _stages(self._kinds):
                self._check_stop()
                if kind == DEDUP:
                    state, next_op = self._dedup(client, indices[0], state, next_op,
                                                 checkpoints, op_counts)
                    continue
                futures = {}
                for p in range(n_parts):
                    todo = [(i, self.process[i]) for i in indices if i >= next_op[p]]
                    if not todo:
                        continue
                    ck = {i: self.folder.checkpoint_path(i, p) for i, _ in todo
                          if i in checkpoints}
                    futures[p] = client.submit(_run_segment, state[p], todo, ck,
                                               self.fast_ops, pure=False)
                    for i, _ in todo:
                        self.folder.op_start(p, op_name(self.process[i]), i)
                self._collect(client, futures, state, next_op, op_counts, checkpoints,
                              indices[-1] + 1)
            result = self._export(client, state, op_counts, total, n_parts, latest)
            for p in range(n_parts):
                self.folder.partition_complete(p, n_parts)
            self.folder.complete(time.time() - started, self.export_path)
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

    def _collect(self, client: Any, futures: dict[int, Any], state: list[Any],
                 next_op: list[int], op_counts: list[OpCount], checkpoints: set[int],
                 after: int) -> None:
        from distributed import as_completed

        order = {f.key: p for p, f in futures.items()}
        for future in as_completed(list(futures.values())):
            self._check_stop()
            p = order[future.key]
            table_future = client.submit(_first, future, pure=False)
            counts = client.submit(_second, future, pure=False).result()
            for index, rows_in, rows_out, seconds in counts:
                c = op_counts[index]
                c.rows_in += rows_in
                c.rows_out += rows_out
                c.seconds += seconds
                saved = index in checkpoints
                self.folder.op_complete(p, c.name, index, seconds, rows_in, rows_out,
                                        self.folder.checkpoint_path(index, p) if saved else None)
                if saved:
                    self.folder.checkpoint_saved(p, c.name, index)
            state[p] = table_future
            next_op[p] = after

    def _dedup(self, client: Any, index: int, state: list[Any], next_op: list[int],
               checkpoints: set[int], op_counts: list[OpCount]) -> tuple[list[Any], list[int]]:
        from curator_dask.data_juicer.dedup import equivalent_entry, run_deduplicator

        if all(n > index for n in next_op):
            return state, next_op  # every partition's checkpoint is past it
        state = list(state)
        for p, n in enumerate(next_op):
            if n > index:  # this partition's state is past the dedup: its input again
                path = self.folder.checkpoint_path(index - 1, p)
                state[p] = client.submit(_read_checkpoint, path, pure=False)
        entry = equivalent_entry(self.process[index])
        start = time.perf_counter()
        rows_in = sum(client.gather(client.map(_num_rows, state, pure=False)))
        for p in range(len(state)):
            self.folder.op_start(p, op_name(self.process[index]), index)
        out = run_deduplicator(client, entry, state)
        if index in checkpoints:
            paths = [self.folder.checkpoint_path(index, p) for p in range(len(out))]
            client.gather(client.map(_write_checkpoint, out, paths, pure=False))
        sizes = client.gather(client.map(_num_rows, out, pure=False))
        seconds = time.perf_counter() - start
        c = op_counts[index]
        c.rows_in += rows_in
        c.rows_out += sum(sizes)
        c.seconds += seconds
        for p, size in enumerate(sizes):
            self.folder.op_complete(p, c.name, index, seconds, None, size,
                                    self.folder.checkpoint_path(index, p)
                                    if index in checkpoints else None)
        return list(out), [index + 1] * len(out)

    def _resume_state(self, client: Any, parts: list[Any], latest: dict[int, int],
                      n_parts: int) -> tuple[list[Any], list[int]]:
        state = list(parts)
        next_op = [0] * n_parts
        for p, op_index in latest.items():
            if p < n_parts and op_index < len(self.process):
                state[p] = client.submit(_read_checkpoint,
                                         self.folder.checkpoint_path(op_index, p), pure=False)
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
        if len(recorded) != len(bounds) and latest:
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

    def _export(self, client: Any, state: list[Any], op_counts: list[OpCount], total: int,
                n_parts: int, latest: dict[int, int]) -> DataJuicerRunResult:
        keep_stats = bool(self.cfg.get("keep_stats_in_res_ds", False))
        keep_hashes = bool(self.cfg.get("keep_hashes_in_res_ds", False))
        base = os.path.dirname(os.path.abspath(self.export_path))
        parts_dir = os.path.join(base, f".{os.path.basename(self.export_path)}.parts-"
                                       f"{self.job_id}")
        os.makedirs(parts_dir, exist_ok=True)
        paths = [os.path.join(parts_dir, f"part-{p:05d}.{self.suffix}") for p in range(n_parts)]
        has_stats = client.gather(client.map(_has_columns, state,
                                             names=(dj_io.STATS, dj_io.META), pure=False))
        export_stats = any(has_stats)
        stats_paths = [os.path.join(parts_dir, f"stats-{p:05d}.jsonl") if export_stats else None
                       for p in range(n_parts)]
        written = client.gather(client.map(
            _export_part, state, paths, stats_paths, suffix=self.suffix,
            keep_stats=keep_stats, keep_hashes=keep_hashes, pure=False))
        shard_size = int(self.cfg.get("export_shard_size") or 0)
        if shard_size > 0:
            from curator_dask.data_juicer.shards import export_shards

            export_shards(paths, [w[0] for w in written], self.export_path, self.suffix,
                          shard_size, sum(w[2] for w in written))
        else:
            dj_io.join_parts(paths, self.export_path, self.suffix)
        if export_stats:
            stats_file = self.export_path.replace("." + self.suffix, "_stats.jsonl")
            dj_io.join_parts([s for s in stats_paths if s], stats_file, "jsonl")
        shutil.rmtree(parts_dir, ignore_errors=True)
        rows_out = sum(w[0] for w in written)
        from curator_dask.data_juicer.fast_ops import FAST_OPS

        return DataJuicerRunResult(
            job_id=self.job_id, export_path=self.export_path, rows_in=total,
            rows_out=rows_out, partitions=n_parts, ops=op_counts,
            resumed_partitions=dict(latest),
            fast_ops=sorted({c.name for c in op_counts} & FAST_OPS) if self.fast_ops else [])

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


def _first(pair: tuple[Any, Any]) -> Any:
    return pair[0]


def _second(pair: tuple[Any, Any]) -> Any:
    return pair[1]


def _num_rows(table: pa.Table) -> int:
    return int(table.num_rows)


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
