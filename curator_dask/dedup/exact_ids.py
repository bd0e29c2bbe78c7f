"""The two phases of exact deduplication after reading: the per-partition hash and the
whole-corpus grouping that writes NeMo Curator's ``ExactDuplicateIds``.

Phase 1 (:class:`ExactHash`, run by :func:`curator_dask.dedup.phases.run_phase1`) gives every
document the MD5 of its (normalised) text (NeMo's ``_exact_duplicate_group``), stored as two
64-bit words, ``_md5_hi`` and ``_md5_lo``: numbers sort, group and shuffle several times
faster than NeMo's 32-character hex strings, and the cache is not a NeMo format.

Phase 2 (:func:`write_duplicate_ids`) shuffles ``(id, hash)`` rows by ``_md5_hi`` with Dask's
P2P shuffle (which spills to disk) into ``total_nparts`` partitions, keeps the smallest id of
each hash (both words equal) and writes the others, sorted, to
``ExactDuplicateIds/part.<i>.parquet``. Rows that fit in the workers' memory
(``dedup.exact-in-memory-fraction`` of their limits, :func:`grouping_plan`) skip the P2P
shuffle, whose fixed costs dominated below tens of millions of documents: each row's part is
``_md5_hi mod total_nparts``, Dask's task shuffle (in memory) puts the rows of each part into
one of as many partitions as the workers have threads, and each of those writes its parts.
Either way: one file per part, empty ones included, the id
column named as NeMo names it (the ``id_field``; ``_curator_dedup_id`` for assigned ids). The
phase commits last, by the deduplication phases' rule (``dedup/commits.py``): with a
checkpoint, its record (``<cache>/ExactDuplicateIds.committed.json``) holds its key (a digest
of its parameters), parameters and parts; a rerun whose record has that key and whose part
files are all there skips the phase, anything else redoes it from an empty folder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import posixpath
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar

import fsspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from curator_dask import config as _config
from curator_dask.dedup.commits import PhaseRecord, parameters_key, run_phase
from curator_dask.dedup.phases import ID_COLUMN
from curator_dask.dedup.progress import compute_partitions
from curator_dask.dedup.text import normalize_text, text_md5_words
from curator_dask.errors import CuratorDaskError
from curator_dask.utils import private_api
from curator_dask.utils.atomic import write_atomic

logger = logging.getLogger(__name__)

EXACT_DUPLICATE_GROUP_FIELD = "_exact_duplicate_group"  # NeMo's name (its hex MD5)
HASH_FIELDS = ("_md5_hi", "_md5_lo")  # the MD5's two 64-bit words (as int64), in the cache
DUPLICATE_IDS_DIR = "ExactDuplicateIds"
_STATS_META = pd.DataFrame({"partition_index": pd.Series([], dtype="int64"),
                            "num_groups": pd.Series([], dtype="int64"),
                            "num_removal_ids": pd.Series([], dtype="int64"),
                            "path": pd.Series([], dtype=object)})


@dataclass(frozen=True)
class ExactHash:
    """Phase 1's signature: the MD5 of each document's text, normalised first when
    ``normalize`` is set (:func:`~curator_dask.dedup.text.normalize_text`).

    Example:
        >>> import pandas as pd
        >>> table = ExactHash("text", normalize=True)(pd.DataFrame({"text": ["A  b", "a b"]}))
        >>> table.num_rows, len(set(zip(*table.to_pydict().values())))  # one hash
        (2, 1)
    """

    text_field: str = "text"
    normalize: bool = False

    accepts_arrow: ClassVar[bool] = True  # phase 1 hands over the Arrow table as read

    def __call__(self, frame: pd.DataFrame | pa.Table) -> pa.Table:
        text = (frame.column(self.text_field) if isinstance(frame, pa.Table)
                else frame[self.text_field])
        if self.normalize:
            text = normalize_text(text)
        words = text_md5_words(text).view(np.int64)
        return pa.table({HASH_FIELDS[0]: words[:, 0], HASH_FIELDS[1]: words[:, 1]})


@dataclass(frozen=True)
class DuplicateIdsPlan:
    """Where and how phase 2 writes: the ``ExactDuplicateIds`` folder (a local path or an
    fsspec URL), the id column's name there, the number of parts, the Parquet options, and the
    phase's committed record (``None``: no checkpoint, never skip)."""

    out_dir: str
    id_name: str
    nparts: int
    storage_options: dict[str, Any] = field(default_factory=dict)
    write_kwargs: dict[str, Any] = field(default_factory=dict)
    marker: str | None = None
    rows: int | None = None  # the documents phase 1 hashed (None: not known, P2P)


@dataclass(frozen=True)
class DuplicateIdsResult:
    """What phase 2 wrote: one row per part (``partition_index``, ``num_groups``,
    ``num_removal_ids``, ``path``), and whether a committed earlier run was reused."""

    parts: list[dict[str, Any]]
    reused: bool = False

    @property
    def num_duplicates(self) -> int:
        return sum(int(p["num_removal_ids"]) for p in self.parts)


class NonUniqueIdsError(ValueError, CuratorDaskError):
    """The corpus's own ids (``assign_id=False``) name several documents: removing by id would
    remove documents that have no duplicate."""


def check_unique_ids(client: Any, frame: Any, id_field: str, nparts: int) -> None:
    """Refuse own ids that are not unique across the corpus (shuffled by id with Dask's P2P
    shuffle, each partition's shared ids counted).

    Raises:
        NonUniqueIdsError: names an id, how many documents share it, and the fix.
    """
    ids = frame[[ID_COLUMN]]
    meta = private_api.dataframe_meta(ids).assign(count=pd.Series([], dtype="int64"),
                                                  shared=pd.Series([], dtype="int64"),
                                                  part=pd.Series([], dtype="object"))
    shuffled = ids.shuffle(on=ID_COLUMN, npartitions=nparts, shuffle_method="p2p")
    found = client.compute(shuffled.map_partitions(_shared_ids, meta=meta)).result()
    if found.empty:
        return
    first = found.sort_values("count", ascending=False).iloc[0]
    total = int(found.groupby("part")["shared"].first().sum())  # each partition's, once
    msg = (f"the corpus's ids are not unique (id_field {id_field!r}): id "
           f"{first[ID_COLUMN]!r} is shared by {int(first['count'])} documents, and "
           f"{total} ids in all are shared; removing by id would also remove documents that "
           "have no duplicate. Make the ids unique, or let the workflow assign ids "
           "(assign_id=True, without id_field)")
    raise NonUniqueIdsError(msg)


def _shared_ids(part: pd.DataFrame) -> pd.DataFrame:
    """Up to five ids of ``part`` held by several rows, with their counts, the number of such
    ids in the partition and a token naming the partition (its number is counted once)."""
    counts = part[ID_COLUMN].value_counts()
    shared = counts[counts > 1]
    top = shared.head(5)
    return pd.DataFrame({ID_COLUMN: pd.Series(top.index.to_list(), dtype=part[ID_COLUMN].dtype),
                         "count": top.to_numpy(dtype="int64"),
                         "shared": pd.Series([len(shared)] * len(top), dtype="int64"),
                         "part": pd.Series([uuid.uuid4().hex] * len(top), dtype="object")})


def ids_key(plan: DuplicateIdsPlan, fingerprint: dict[str, Any]) -> str:
    """A digest of what the ids phase 2 writes depend on (the key its record holds)."""
    return parameters_key(_parameters(plan, fingerprint))


def write_duplicate_ids(client: Any, frame: Any, plan: DuplicateIdsPlan,
                        fingerprint: dict[str, Any], progress: Any = None) -> DuplicateIdsResult:
    """Phase 2 on ``client``: ``frame`` (a dask DataFrame of ``_curator_dedup_id`` and
    ``_exact_duplicate_group``) grouped by hash across the whole corpus; see the module
    docstring. ``fingerprint`` names what the ids depend on (part of the record's key);
    ``progress`` (``dedup/progress.py``) counts the documents of each part written."""
    parameters = _parameters(plan, fingerprint)
    record = (None if plan.marker is None
              else PhaseRecord(plan.marker, plan.storage_options, phase="duplicate_ids"))
    counts, reused = run_phase(
        record, parameters_key(parameters), [(plan.out_dir, plan.storage_options)],
        lambda: {"parts": _write_parts(client, frame, plan, progress)},
        present=lambda counts: _parts_present(plan, counts.get("parts") or []),
        details={"parameters": parameters})
    parts = [dict(p) for p in counts.get("parts") or []]
    if reused:
        logger.info("exact dedup: %s already committed (%d ids); not redone", plan.out_dir,
                    sum(int(p["num_removal_ids"]) for p in parts))
    return DuplicateIdsResult(parts, reused=reused)


def _write_parts(client: Any, frame: Any, plan: DuplicateIdsPlan,
                 progress: Any = None) -> list[dict[str, Any]]:
    """Phase 2's work, into the empty ``plan.out_dir``: one row per part written."""
    if progress is not None:
        progress.start()
    empty = private_api.dataframe_meta(frame)[[ID_COLUMN]]
    id_type = pa.Schema.from_pandas(empty, preserve_index=False).field(ID_COLUMN).type
    writer = _PartWriter(out_dir=plan.out_dir, id_name=plan.id_name, id_type=id_type,
                         storage_options=plan.storage_options,
                         write_kwargs=dict(plan.write_kwargs))
    rows = frame[[ID_COLUMN, *HASH_FIELDS]]
    in_memory = grouping_plan(client, plan, id_type)
    logger.info("exact dedup: grouping %s documents' hashes into %d parts %s",
                "the" if plan.rows is None else f"{plan.rows:,}", plan.nparts,
                "with Dask's P2P shuffle" if in_memory is None else
                f"in memory (Dask's task shuffle into {in_memory} partitions)")
    if in_memory is None:
        shuffled = rows.shuffle(on=HASH_FIELDS[0], npartitions=plan.nparts,
                                shuffle_method="p2p")
        stats = shuffled.map_partitions(writer, partition_info=True, meta=_STATS_META)
    else:
        nparts = plan.nparts
        keyed = rows.map_partitions(_with_part, nparts,
                                    meta=private_api.dataframe_meta(rows).assign(
                                        **{_PART: pd.Series([], dtype="int64")}))
        shuffled = keyed.shuffle(on=_PART, npartitions=in_memory, shuffle_method="tasks")
        stats = shuffled.map_partitions(_PartsWriter(writer), meta=_STATS_META)
    table = compute_partitions(  # a part's documents: its groups and the ids it removes
        client, stats, progress,
        lambda part: int(part["num_groups"].sum() + part["num_removal_ids"].sum()))
    written = table.to_dict("records")
    if in_memory is not None:  # the parts no row fell into, written empty
        have = {int(p["partition_index"]) for p in written}
        empty = private_api.dataframe_meta(rows)
        written += [writer(empty, {"number": i}).to_dict("records")[0]
                    for i in range(plan.nparts) if i not in have]
    parts = sorted(written, key=lambda p: p["partition_index"])
    return [{k: (int(v) if k != "path" else str(v)) for k, v in p.items()} for p in parts]


_PART = "_part"  # a row's part in the in-memory grouping: _md5_hi mod total_nparts


def grouping_plan(client: Any, plan: DuplicateIdsPlan, id_type: pa.DataType) -> int | None:
    """How phase 2 groups: ``None`` for Dask's P2P shuffle into ``plan.nparts`` partitions, or
    the partitions of the in-memory task shuffle (the workers' threads) when ``plan.rows``
    rows of id, hash words and part take at most ``dedup.exact-in-memory-fraction`` of the
    workers' memory limits together (a worker without a limit counts its machine's memory).

    Example:
        >>> grouping_plan(None, DuplicateIdsPlan("out", "id", 4, rows=None), pa.int64()) is None
        True
    """
    fraction = float(_config.get("dedup.exact-in-memory-fraction") or 0)
    if not plan.rows or fraction <= 0:
        return None
    workers = client.scheduler_info(n_workers=-1)["workers"].values()
    limit = sum(int(w.get("memory_limit") or _machine_memory()) for w in workers)
    row_bytes = 8 * (len(HASH_FIELDS) + 1) + (id_type.byte_width if pa.types.is_integer(
        id_type) else 64)  # an own id of another type: a guess of its size
    if not workers or plan.rows * row_bytes > fraction * limit:
        return None
    return max(1, sum(int(w.get("nthreads") or 1) for w in workers))


def _machine_memory() -> int:
    from distributed.system import MEMORY_LIMIT

    return int(MEMORY_LIMIT)


def _with_part(frame: pd.DataFrame, nparts: int) -> pd.DataFrame:
    """``frame`` with each row's part (:data:`_PART`): its ``_md5_hi`` mod ``nparts``."""
    hi = frame[HASH_FIELDS[0]].to_numpy().view(np.uint64)
    return frame.assign(**{_PART: (hi % np.uint64(nparts)).astype(np.int64)})


@dataclass(frozen=True)
class _PartsWriter:
    """Writes every part present in one partition of the in-memory grouping: the rows of a
    part are all in one partition (the task shuffle keyed on :data:`_PART`)."""

    writer: _PartWriter

    def __call__(self, frame: pd.DataFrame) -> pd.DataFrame:
        if frame.empty:
            return _STATS_META.copy()
        rows = frame.drop(columns=[_PART])
        return pd.concat([self.writer(rows.iloc[index], {"number": int(number)})
                          for number, index in rows.groupby(frame[_PART]).indices.items()],
                         ignore_index=True)


@dataclass(frozen=True)
class _PartWriter:
    """Writes one shuffled partition's ids to remove (all but the smallest id per hash)."""

    out_dir: str
    id_name: str
    id_type: pa.DataType
    storage_options: dict[str, Any]
    write_kwargs: dict[str, Any]

    def __call__(self, part: pd.DataFrame, partition_info: dict[str, Any] | None = None
                 ) -> pd.DataFrame:
        number = int((partition_info or {}).get("number", 0))
        hi, lo = (part[f].to_numpy() for f in HASH_FIELDS)
        own = part[ID_COLUMN].to_numpy()
        # by hash, then id: the first row of each hash is its smallest id, the one kept (ids
        # that are not numbers sort by their rank)
        rank = own if own.dtype.kind in "iu" else np.argsort(np.argsort(own, kind="stable"),
                                                             kind="stable")
        order = np.lexsort((rank, lo, hi))
        hi, lo = hi[order], lo[order]
        duplicate = np.zeros(len(order), dtype=bool)
        duplicate[1:] = (hi[1:] == hi[:-1]) & (lo[1:] == lo[:-1])
        ids = np.sort(own[order][duplicate])
        num_groups = int(len(order) - duplicate.sum())
        table = pa.table({self.id_name: pa.array(ids, type=self.id_type)})
        fs, root = fsspec.core.url_to_fs(self.out_dir, **self.storage_options)
        path = posixpath.join(root, f"part.{number}.parquet")
        kwargs = _parquet_kwargs(self.write_kwargs, len(ids))
        write_atomic(fs, path, lambda f: pq.write_table(table, f, **kwargs))
        shown = fs.unstrip_protocol(path) if _remote(self.out_dir) else path
        return pd.DataFrame({"partition_index": [number], "num_groups": [num_groups],
                             "num_removal_ids": [len(ids)], "path": [shown]})


def _parquet_kwargs(write_kwargs: dict[str, Any], rows: int) -> dict[str, Any]:
    """NeMo's ``write_kwargs`` for cudf's ``to_parquet`` as pyarrow's: ``index`` has no
    meaning for a table, ``row_group_size_rows`` is ``row_group_size`` (NeMo's default: a tenth
    of the rows, between 1,000 and 1,000,000)."""
    kwargs = {k: v for k, v in write_kwargs.items() if k not in ("storage_options", "index")}
    size = kwargs.pop("row_group_size_rows", None)
    kwargs.setdefault("row_group_size", size or max(1000, min(rows // 10, 1_000_000)))
    return kwargs


def _remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _parameters(plan: DuplicateIdsPlan, fingerprint: dict[str, Any]) -> dict[str, Any]:
    kwargs = {k: repr(v) for k, v in sorted(plan.write_kwargs.items())
              if k != "storage_options"}  # credentials stay out of the marker
    return {"out_dir": plan.out_dir, "id_name": plan.id_name, "nparts": plan.nparts,
            "write_kwargs": kwargs, **fingerprint}


def _parts_present(plan: DuplicateIdsPlan, parts: list[dict[str, Any]]) -> bool:
    """Whether every part file of a committed phase is still there (one deleted since: the
    phase is redone)."""
    fs, root = fsspec.core.url_to_fs(plan.out_dir, **plan.storage_options)
    return len(parts) == plan.nparts and all(
        fs.exists(posixpath.join(root, f"part.{p['partition_index']}.parquet")) for p in parts)


def groups_fingerprint(groups: list[Any]) -> str:
    """A digest of phase 1's groups (files, rows, first id, the writing of their hash file):
    the ids phase 2 writes depend on them, and a group reprocessed since (its input changed)
    has a new hash file."""
    digest = hashlib.sha256()
    for g in groups:
        digest.update(json.dumps([list(g.files), g.rows, g.first_id, g.version]).encode())
    return digest.hexdigest()


__all__ = ["DUPLICATE_IDS_DIR", "EXACT_DUPLICATE_GROUP_FIELD", "HASH_FIELDS", "DuplicateIdsPlan",
           "DuplicateIdsResult", "ExactHash", "NonUniqueIdsError", "check_unique_ids",
           "groups_fingerprint", "ids_key", "write_duplicate_ids"]
