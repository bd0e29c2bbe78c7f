"""A recipe's input read as Data-Juicer's default executor reads it, and its output written
as Data-Juicer's exporter writes it.

Input: the files of ``dataset_path`` in Data-Juicer's order (its ``find_files_with_suffix``:
a folder in ``Path.rglob`` order, grouped by suffix in the order the suffixes are met), read
with Arrow as ``datasets``' JSON and Parquet builders read them, rows whose text is ``None``
dropped (its ``unify_format``). The first row met of a duplicate group is the one kept, so this
order is the contract.

Output: JSONL rows as ``Exporter._write_jsonl_utf8`` writes them (``json.dumps(row,
ensure_ascii=False)``), stats in ``{export}_stats.jsonl``, ``__dj__stats__``/``__dj__meta__``
and the hash columns dropped unless kept by ``keep_stats_in_res_ds``/``keep_hashes_in_res_ds``;
Parquet through Arrow. Each partition is written to a part file by a worker, the parts are
joined in order into the export path under a temporary name, then renamed: the export path
holds a whole result or nothing.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import shutil
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

STATS = "__dj__stats__"
META = "__dj__meta__"
HASH_COLUMNS = ("__dj__hash", "__dj__minhash", "__dj__simhash", "__dj__imagehash",
                "__dj__videohash")
READ_SUFFIXES = (".jsonl", ".json", ".parquet", ".jsonl.gz", ".json.gz")


def dataset_files(dataset_path: str, base: str) -> list[str]:
    """The files of ``dataset_path`` in Data-Juicer's order: a file or a folder, or several
    of them separated by spaces (quoted as a shell quotes them), each maybe after its weight,
    as Data-Juicer's ``parse_cli_datapath`` splits them; without ``max_sample_num`` the weights
    sample nothing and the datasets follow one another. A glob (which ``dj-process`` refuses)
    is taken in sorted order."""
    import shlex

    from curator_dask.data_juicer.recipe import RecipeError

    files: list[str] = []
    for item in shlex.split(str(dataset_path)):
        try:
            float(item)
            continue  # a mixture's weight
        except ValueError:
            pass
        path = item if os.path.isabs(item) else os.path.join(base, item)
        matches = sorted(glob.glob(path)) if glob.has_magic(path) else [path]
        if not matches or not all(os.path.exists(m) for m in matches):
            msg = (f"dataset_path {item!r} does not exist (looked in {base}): give an existing "
                   "file, folder or glob")
            raise RecipeError(msg)
        for match in matches:
            files.extend(_files_in(match))
    if not files:
        msg = (f"dataset_path {dataset_path!r} holds no file to read "
               f"({', '.join(READ_SUFFIXES)})")
        raise RecipeError(msg)
    return files


def _suffix(name: str) -> str:
    lower = name.lower()
    for suffix in (".jsonl.gz", ".json.gz"):
        if lower.endswith(suffix):
            return suffix
    return os.path.splitext(lower)[1]


def _files_in(path: str) -> list[str]:
    """Data-Juicer's ``find_files_with_suffix`` with its formatter's suffixes: grouped by
    suffix in the order met, each group in ``rglob`` order."""
    from pathlib import Path

    p = Path(path)
    found = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()]
    groups: dict[str, list[str]] = {}
    for f in found:
        suffix = _suffix(f.name)
        if suffix in READ_SUFFIXES:
            groups.setdefault(suffix, []).append(str(f))
    return [f for group in groups.values() for f in group]


def read_file(path: str, text_keys: Sequence[str]) -> pa.Table:
    """One input file as an Arrow table, rows with a ``None`` text dropped."""
    import pyarrow.compute as pc

    suffix = _suffix(path)
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
    else:
        table = _read_json(path)
    for key in text_keys:
        if key not in table.column_names:
            from curator_dask.data_juicer.recipe import RecipeError

            msg = (f"{path}: there is no key {key!r} in the dataset (columns: "
                   f"{', '.join(table.column_names)}); set text_keys: to the text column")
            raise RecipeError(msg)
        column = table.column(key)
        if column.null_count:
            table = table.filter(pc.is_valid(column))
    return table


def _read_json(path: str) -> pa.Table:
    import pyarrow.json as paj

    opener: Any = gzip.open if path.lower().endswith(".gz") else open
    with opener(path, "rb") as f:
        head = f.read(1)
        while head in (b" ", b"\n", b"\r", b"\t"):
            head = f.read(1)
    if head == b"[":  # a JSON array file, as datasets' json builder reads it
        with opener(path, "rt", encoding="utf-8") as f:
            return pa.Table.from_pylist(json.load(f))
    try:
        return paj.read_json(path, read_options=paj.ReadOptions(block_size=32 << 20))
    except pa.ArrowInvalid:
        # datasets falls back to pandas for what Arrow's reader refuses (mixed types)
        with opener(path, "rt", encoding="utf-8") as f:
            return pa.Table.from_pylist([json.loads(line) for line in f if line.strip()])


def columns_of(table: pa.Table) -> tuple[dict[str, list[Any]], set[str]]:
    """A table as Python columns, as ``datasets`` hands rows to a map: a ``Json`` column
    (Arrow's ``json_`` type) decoded with ``datasets``' own ``ujson_loads``; returns the
    columns and the names of the ``Json`` ones."""
    cols = table.to_pydict()
    json_cols = {f.name for f in table.schema if f.type == pa.json_()}
    if json_cols:
        from datasets.utils.json import ujson_loads

        for name in json_cols:
            cols[name] = [None if v is None else ujson_loads(v) for v in cols[name]]
    return cols, json_cols


def reencode(cols: dict[str, list[Any]], json_cols: set[str]) -> None:
    """What a map's output does to a ``Json`` column in ``datasets``: each value encoded with
    its ``ujson_dumps`` (10 significant decimals) and decoded when read again, in place."""
    if not json_cols:
        return
    from datasets.utils.json import ujson_dumps, ujson_loads

    for name in json_cols & cols.keys():
        cols[name] = [None if v is None else ujson_loads(ujson_dumps(v)) for v in cols[name]]


def table_of(cols: dict[str, list[Any]], json_cols: set[str] | frozenset[str] = frozenset()
             ) -> pa.Table:
    """Columns back to an Arrow table: a ``Json`` column as ``datasets`` stores it (the
    ``ujson_dumps`` text, Arrow's ``json_`` type), the others with types inferred over the
    whole partition."""
    arrays = {}
    for name, values in cols.items():
        if name in json_cols:
            from datasets.utils.json import ujson_dumps

            arrays[name] = pa.array([None if v is None else ujson_dumps(v) for v in values],
                                    pa.json_())  # an empty partition keeps the column's type
        else:
            arrays[name] = pa.array(values) if values else pa.array([], pa.null())
    return pa.Table.from_pydict(arrays)


def export_columns(table: pa.Table, keep_stats: bool, keep_hashes: bool) -> pa.Table:
    drop = [] if keep_stats else [c for c in (STATS, META) if c in table.column_names]
    if not keep_hashes:
        drop += [c for c in HASH_COLUMNS if c in table.column_names]
    return table.drop_columns(drop) if drop else table


def _json_lines(table: pa.Table) -> Iterable[str]:
    """Rows as ``Exporter._write_jsonl_utf8`` writes them (a ``Json`` column decoded)."""
    from data_juicer.core.exporter import Exporter

    for start in range(0, table.num_rows, 1000):
        cols, _ = columns_of(table.slice(start, 1000))
        keys = list(cols)
        for i in range(len(cols[keys[0]]) if keys else 0):
            row = {k: cols[k][i] for k in keys}
            yield json.dumps(Exporter._row_to_json_serializable(row), ensure_ascii=False) + "\n"


def write_part(table: pa.Table, path: str, suffix: str) -> int:
    """One partition's rows to ``path`` in the export format; returns the bytes written."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if suffix == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, path)
    else:
        with open(path, "w", encoding="utf-8") as f:
            if suffix == "json":
                cols, _ = columns_of(table)
                rows = [dict(zip(cols, values, strict=True)) for values in zip(*cols.values(),
                                                                                strict=True)]
                f.write(json.dumps(rows, ensure_ascii=False))
            else:
                for line in _json_lines(table):
                    f.write(line)
    return os.path.getsize(path)


def join_parts(parts: Sequence[str], target: str, suffix: str) -> None:
    """The part files concatenated in order into ``target``, atomically (a temporary name in
    the same folder, then ``os.replace``)."""
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    tmp = f"{target}.curator-dask-tmp"
    if suffix == "parquet":
        import pyarrow.parquet as pq

        # one schema for all parts (an empty partition's columns are of the null type)
        schema = pa.unify_schemas([pq.read_schema(p) for p in parts],
                                  promote_options="permissive") if parts else pa.schema([])
        with pq.ParquetWriter(tmp, schema) as writer:
            for part in parts:
                pf = pq.ParquetFile(part)
                for i in range(pf.num_row_groups):
                    writer.write_table(pf.read_row_group(i).cast(schema))
    else:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
    os.replace(tmp, target)
