"""Data-Juicer's operators, built and called as Data-Juicer builds and calls them.

An operator travels to the workers as its recipe entry (``{name: params}``, the form of
Data-Juicer's ``cfg.process`` after its config parser filled in the global keys) and is built
there with Data-Juicer's own ``load_ops``, once per process and entry (:func:`built_op`), so
models, word lists and compiled patterns are made once per worker, not once per partition.
"""

from __future__ import annotations

import json
import threading
from typing import Any

_BUILT: dict[str, Any] = {}
_LOCK = threading.Lock()


def op_key(op_cfg: dict[str, Any]) -> str:
    """A stable key of one recipe entry (``{name: params}``)."""
    return json.dumps(op_cfg, sort_keys=True, default=repr)


def op_name(op_cfg: dict[str, Any]) -> str:
    """The registered name of one recipe entry."""
    return next(iter(op_cfg))


def built_op(op_cfg: dict[str, Any]) -> Any:
    """The Data-Juicer operator of ``op_cfg`` (``{name: params}``), built by Data-Juicer's
    ``load_ops`` once per process and entry and kept."""
    key = op_key(op_cfg)
    op = _BUILT.get(key)
    if op is not None:
        return op
    with _LOCK:
        op = _BUILT.get(key)
        if op is None:
            from data_juicer.ops import load_ops

            op = load_ops([op_cfg])[0]
            _BUILT[key] = op
    return op


# ---- the kinds of operators and how a recipe's list is cut --------------------------------

PER_ROW = "per_row"  # Mappers and Filters: run per partition, fused
DEDUP = "dedup"  # Deduplicators: convergence points over the whole dataset
REFUSED = "refused"  # Selectors, Groupers, Aggregators, Pipelines: refused before anything runs


def op_kind(op: Any) -> str:
    """How the engine runs ``op`` (a built Data-Juicer operator): :data:`PER_ROW`,
    :data:`DEDUP` or :data:`REFUSED`."""
    from data_juicer.ops.base_op import Deduplicator, Filter, Mapper

    if isinstance(op, Mapper | Filter):
        return PER_ROW
    if isinstance(op, Deduplicator):
        return DEDUP
    return REFUSED


# ---- running Mappers and Filters on one partition, as Data-Juicer's dataset.map does ------

Columns = dict[str, list[Any]]


def _nested(batch: Columns) -> Any:
    """The batch as Data-Juicer's ``NestedDataset.map`` hands it to an operator (its
    ``wrap_func_with_nested_access``: a ``NestedQueryDict``, so ``meta.date`` keys resolve)."""
    from data_juicer.core.data.dj_dataset import nested_obj_factory

    return nested_obj_factory(batch)


def _batch_size(op: Any) -> int:
    """Rows per call, as ``NestedDataset.update_args`` chooses them: the operator's
    ``batch_size`` for a batched one, else 1 (its per-sample wrapper then unpacks the row)."""
    if op.is_batched_op():
        return max(1, int(op.batch_size or 1))
    return 1


def _slices(n: int, size: int) -> Any:
    return ((start, min(start + size, n)) for start in range(0, n, size))


def _add_column(cols: Columns, name: str, n: int) -> None:
    """``add_same_content_to_new_column`` with ``{}``: one new dict a row."""
    if name not in cols:
        cols[name] = [{} for _ in range(n)]


def _prepare(op: Any, cols: Columns, n: int, json_cols: set[str]) -> None:
    """The columns Data-Juicer's ``OP.run`` adds before the operator: ``__dj__meta__`` for a
    tagging operator, ``__dj__stats__`` for a Filter that computes stats. A column of empty
    dicts is a ``Json`` column in ``datasets`` (so are they ever after)."""
    from data_juicer.ops.base_op import NON_STATS_FILTERS, TAGGING_OPS, Filter
    from data_juicer.utils.constant import Fields

    if op._name in TAGGING_OPS.modules and Fields.meta not in cols:
        _add_column(cols, Fields.meta, n)
        json_cols.add(Fields.meta)
    if (isinstance(op, Filter) and op._name not in NON_STATS_FILTERS.modules
            and Fields.stats not in cols):
        _add_column(cols, Fields.stats, n)
        json_cols.add(Fields.stats)


def _run_map(fn: Any, op: Any, cols: Columns, n: int) -> Columns:
    size = _batch_size(op)
    parts: list[Columns] = []
    for start, end in _slices(n, size):
        batch = {k: v[start:end] for k, v in cols.items()}
        result = fn(_nested(batch))
        result = dict(result)
        rows = len(next(iter(result.values()))) if result else 0
        if rows == end - start:
            merged = dict(batch)
            merged.update(result)
            parts.append(merged)
        else:
            # a batch that changed its row count keeps only the columns that have rows
            parts.append({k: list(v) for k, v in result.items() if k in cols or len(v) == rows})
    return _concat(parts, cols)


def _concat(parts: list[Columns], cols: Columns) -> Columns:
    keys: list[str] = list(cols)
    for part in parts:
        keys.extend(k for k in part if k not in keys)
    out: Columns = {k: [] for k in keys}
    for part in parts:
        rows = len(next(iter(part.values()))) if part else 0
        for k in keys:
            out[k].extend(part[k] if k in part else [None] * rows)
    return out


def rows_of(cols: Columns) -> int:
    return len(next(iter(cols.values()))) if cols else 0


def run_per_row(op: Any, cols: Columns, fast: Any = None,
                json_cols: set[str] | None = None) -> Columns:
    """One Mapper or Filter over a partition's columns, as Data-Juicer's ``op.run`` maps it
    over a dataset (same batches, same wrappers, same added columns, and each map's output
    of a ``Json`` column re-encoded as ``datasets`` stores it); ``fast`` is the operator's
    equivalent from ``fast_ops`` (or None); ``json_cols`` (updated in place) names the
    ``Json`` columns."""
    from data_juicer.ops.base_op import Filter

    from curator_dask.data_juicer.io import reencode

    json_cols = set() if json_cols is None else json_cols
    n = rows_of(cols)
    if n == 0:
        return cols
    cols = dict(cols)
    _prepare(op, cols, n, json_cols)
    if isinstance(op, Filter):
        if fast is not None:
            cols = _fast_batches(fast.compute_stats, cols, n)
        else:
            cols = _run_map(op.compute_stats, op, cols, n)
        reencode(cols, json_cols)
        return _run_filter_keep(op, cols)
    if fast is not None:
        cols = _fast_batches(fast.process, cols, n)
    else:
        cols = _run_map(op.process, op, cols, n)
    reencode(cols, json_cols)
    return cols


def _fast_batches(fn: Any, cols: Columns, n: int, size: int = 1000) -> Columns:
    parts = []
    for start, end in _slices(n, size):
        batch = {k: v[start:end] for k, v in cols.items()}
        merged = dict(batch)
        merged.update(fn(batch))
        parts.append(merged)
    return _concat(parts, cols)


def _run_filter_keep(op: Any, cols: Columns) -> Columns:
    n = rows_of(cols)
    size = _batch_size(op)
    keep: list[bool] = []
    for start, end in _slices(n, size):
        batch = {k: v[start:end] for k, v in cols.items()}
        keep.extend(bool(x) for x in op.process(_nested(batch)))
    return {k: [v for v, kept in zip(values, keep, strict=True) if kept]
            for k, values in cols.items()}
