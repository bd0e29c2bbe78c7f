"""Stage checkpoints: a chosen stage boundary memoizes each source's outputs (ARCHITECTURE §8).

A checkpointed boundary ends a fusion group. When the group finishes a source, the outputs it
produced for that source are stored under ``(source id, fingerprint of the stage chain up to the
boundary)``: one Arrow IPC (or Parquet) file per tabular task, the task shells (ids, metadata,
non-tabular payloads) in one pickle, and, written last and atomically, ``manifest.json`` with
rows, schemas, sizes and digests, the chain and input fingerprints, and the completion deltas
the chain emitted for the source. A source that is replayed later resumes from its deepest
checkpoint that still verifies; a checkpoint that does not (missing manifest, truncated file,
changed stage or input) is skipped with a warning and the next shallower one, or the source
itself, is used. No stage is ever skipped: the deltas stored with a checkpoint are replayed, so
task ids and completion counts are identical with and without checkpoints.

Layout (flat, so one listing finds everything)::

    <checkpoint>/.curator_dask/stage_checkpoints/<source id>--<stage index:03d>-<chain fp>/
        manifest.json      # written last: its presence is the commit
        tasks.pkl          # task shells (data removed for tabular tasks)
        part-00000.arrow   # one file per tabular task (.parquet with format="parquet")
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import io
import json
import logging
import re
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

import fsspec

from curator_dask.resumability.fingerprint import input_fingerprints, stage_fingerprint

logger = logging.getLogger(__name__)

STRATEGIES = ("disabled", "every_stage", "every_n_stages", "manual")
RETENTIONS = ("cleanup_on_complete", "keep_all", "keep_failed_only")
FORMATS = ("arrow", "parquet")
SUBDIR = ".curator_dask/stage_checkpoints"
MANIFEST = "manifest.json"
FORMAT_VERSION = 1
_PLAIN = re.compile(r"^[A-Za-z0-9.]+$")


class CheckpointUnusable(Exception):
    """A stage checkpoint that cannot be used (the message says why)."""


@dataclasses.dataclass(frozen=True)
class StageCheckpoints:
    """Which stage boundaries memoize their outputs, in which format, and for how long.

    Args:
        strategy: ``disabled`` (default), ``every_stage``, ``every_n_stages`` (with ``n``),
            or ``manual`` (with ``stages``: stage names).
        n: for ``every_n_stages``: checkpoint after every n-th stage after the source.
        stages: for ``manual``: names of the stages after which to checkpoint.
        format: ``arrow`` (Arrow IPC, default: fastest to write and read) or ``parquet``
            (smaller on disk).
        retention: ``cleanup_on_complete`` (default: a source's checkpoints are deleted as
            soon as it completes), ``keep_failed_only`` (kept until the run ends, then deleted
            for every source that completed), or ``keep_all``.

    The sink is never a boundary (its output is the result), nor is the source (it only lists
    files). Unknown values are rejected, naming the valid ones.

    Example:
        >>> StageCheckpoints("every_n_stages", n=2).strategy
        'every_n_stages'
        >>> StageCheckpoints("every_op")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: stage checkpoint strategy 'every_op' is not one of disabled, every_stage, ...
    """

    strategy: str = "disabled"
    n: int | None = None
    stages: tuple[str, ...] = ()
    format: str = "arrow"
    retention: str = "cleanup_on_complete"

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            msg = (f"stage checkpoint strategy {self.strategy!r} is not one of "
                   f"{', '.join(STRATEGIES)}")
            raise ValueError(msg)
        if self.retention not in RETENTIONS:
            msg = (f"stage checkpoint retention {self.retention!r} is not one of "
                   f"{', '.join(RETENTIONS)}")
            raise ValueError(msg)
        if self.format not in FORMATS:
            msg = f"stage checkpoint format {self.format!r} is not one of {', '.join(FORMATS)}"
            raise ValueError(msg)
        if self.strategy == "every_n_stages":
            if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n < 1:
                msg = f"every_n_stages needs n, a whole number of at least 1 (got {self.n!r})"
                raise ValueError(msg)
        elif self.n is not None:
            msg = f"n={self.n!r} is only used with strategy every_n_stages, not {self.strategy!r}"
            raise ValueError(msg)
        object.__setattr__(self, "stages", tuple(self.stages or ()))
        if self.strategy == "manual" and not self.stages:
            msg = "the manual strategy needs stages=[...]: the stage names to checkpoint after"
            raise ValueError(msg)
        if self.strategy != "manual" and self.stages:
            msg = f"stages={list(self.stages)} is only used with strategy manual"
            raise ValueError(msg)

    @classmethod
    def coerce(cls, value: Any) -> StageCheckpoints:
        """From ``None``, a strategy name, a mapping of the fields, or an instance."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            return cls(strategy=value)
        if isinstance(value, dict):
            unknown = sorted(set(value) - {f.name for f in dataclasses.fields(cls)})
            if unknown:
                msg = (f"unknown stage checkpoint settings {unknown}; known: strategy, n, "
                       "stages, format, retention")
                raise ValueError(msg)
            return cls(**value)
        msg = (f"stage_checkpoints must be a strategy name, a dict or StageCheckpoints, "
               f"got {value!r}")
        raise TypeError(msg)

    @property
    def enabled(self) -> bool:
        return self.strategy != "disabled"

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "n": self.n, "stages": list(self.stages),
                "format": self.format, "retention": self.retention}

    def boundaries(self, stages: Sequence[Any]) -> tuple[int, ...]:
        """Indices of the built ``stages`` after which outputs are checkpointed."""
        if not self.enabled:
            return ()
        source = next((i for i, s in enumerate(stages) if s.is_source_stage), 0)
        candidates = [i for i in range(source + 1, len(stages)) if not stages[i].is_sink_stage]
        if self.strategy == "every_stage":
            return tuple(candidates)
        if self.strategy == "every_n_stages":
            return tuple(i for i in candidates if (i - source) % self.n == 0)
        names = {s.name: i for i, s in enumerate(stages)}
        unknown = [n for n in self.stages if n not in names]
        if unknown:
            msg = (f"stage checkpoints: no stage named {unknown} in this pipeline; its stages "
                   f"are {[s.name for s in stages]}")
            raise ValueError(msg)
        chosen = sorted({names[n] for n in self.stages})
        bad = [stages[i].name for i in chosen if i not in candidates]
        if bad:
            msg = (f"stage checkpoints: {bad} cannot be checkpointed: the source stage and the "
                   "stages before it run on the driver, and the sink's output is the result "
                   "itself; choose stages in between")
            raise ValueError(msg)
        return tuple(chosen)


def chain_fingerprint(stages: Sequence[Any], upto: int) -> str:
    """A digest of every stage up to and including ``stages[upto]`` (classes and parameters)."""
    body = [stage_fingerprint(s) for s in stages[: upto + 1]]
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def source_input_digest(task: Any) -> str | None:
    """A digest of a source's input files (path, size, mtime or ETag); ``None`` if not files."""
    from curator_dask.tasks import FileGroupTask

    if not isinstance(task, FileGroupTask) or not task.data:
        return None
    options = (task.reader_config or {}).get("storage_options")
    try:
        prints = input_fingerprints(task.data, storage_options=options)
    except (OSError, ValueError):
        return None
    text = json.dumps(prints, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _entry_source(source_id: str) -> str:
    if _PLAIN.match(source_id):
        return source_id
    return "h" + hashlib.sha256(source_id.encode()).hexdigest()[:32]


def entry_name(source_id: str, stage_index: int, fingerprint: str) -> str:
    """``<source id>--<stage index:03d>-<chain fingerprint>`` (ids that are not plain tokens
    are hashed, so no id can leave the folder)."""
    return f"{_entry_source(source_id)}--{stage_index:03d}-{fingerprint}"


def parse_entry_name(name: str) -> tuple[str, int, str] | None:
    head, sep, rest = name.rpartition("--")
    index, dash, fingerprint = rest.partition("-")
    if not sep or not dash or not index.isdigit() or not head:
        return None
    return head, int(index), fingerprint


def _tabular(task: Any) -> str | None:
    """``"arrow"``/``"pandas"`` for a task whose data is a table, else ``None``."""
    import pyarrow as pa

    data = getattr(task, "data", None)
    if isinstance(data, pa.Table):
        return "arrow"
    pd = sys.modules.get("pandas")  # a DataFrame implies pandas is already imported
    if pd is not None and isinstance(data, pd.DataFrame):
        return "pandas"
    return None


class StageCheckpointStore:
    """Saves, lists, verifies, loads and deletes stage checkpoints under one checkpoint path.

    Example:
        >>> import pyarrow as pa
        >>> from curator_dask.tasks import DocumentBatch
        >>> store = StageCheckpointStore("memory://sc-doc/ckpt")
        >>> t = DocumentBatch(dataset_name="d", data=pa.table({"text": ["a", "b"]}))
        >>> t.task_id, t._source_id = "0_s_0", "s"
        >>> name, size = store.save("s", 1, "f00d", "reader", [[t]], [("0_s_0", "s", 0)], None)
        >>> batches, deltas = store.load(name, "f00d", None)
        >>> batches[0][0].task_id, batches[0][0].data.num_rows, deltas
        ('0_s_0', 2, [('0_s_0', 's', 0)])
    """

    def __init__(self, checkpoint_url: str, storage_options: dict | None = None,
                 fmt: str = "arrow") -> None:
        self.url = f"{checkpoint_url.rstrip('/')}/{SUBDIR}"
        self.storage_options = dict(storage_options or {})
        self.format = fmt
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **self.storage_options)

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "storage_options": self.storage_options, "format": self.format}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **self.storage_options)

    def _path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    # -- listing ----------------------------------------------------------------------------
    def listing(self) -> dict[str, list[tuple[int, str, str]]]:
        """``{entry source: [(stage index, fingerprint, entry name), ...]}`` of every entry."""
        try:
            names = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return {}
        found: dict[str, list[tuple[int, str, str]]] = {}
        for path in names:
            name = path.rstrip("/").rsplit("/", 1)[-1]
            parsed = parse_entry_name(name)
            if parsed is not None:
                found.setdefault(parsed[0], []).append((parsed[1], parsed[2], name))
        return found

    # -- save -------------------------------------------------------------------------------
    def save(
        self,
        source_id: str,
        stage_index: int,
        fingerprint: str,
        stage_name: str,
        batches: list[list[Any]],
        deltas: Iterable[tuple[str, str, int]],
        input_digest: str | None,
    ) -> tuple[str, int]:
        """Store one source's outputs at a boundary; returns the entry name and its bytes.

        Data files first, the manifest last (atomically): a crash leaves no manifest, and an
        entry without one is never used.
        """
        import cloudpickle
        import pyarrow as pa

        from curator_dask.utils.atomic import write_atomic

        name = entry_name(source_id, stage_index, fingerprint)
        directory = self._path(name)
        self.fs.makedirs(directory, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._path(name, MANIFEST))  # an older entry stops counting now
        shells, files = [], []
        for i, task in enumerate(t for batch in batches for t in batch):
            kind = _tabular(task)
            if kind is None:
                shells.append((None, task))
                continue
            table = task.data if kind == "arrow" else pa.Table.from_pandas(task.data)
            file = f"part-{i:05d}.{'arrow' if self.format == 'arrow' else 'parquet'}"
            buf = io.BytesIO()
            if self.format == "arrow":
                with pa.ipc.new_file(buf, table.schema) as writer:
                    writer.write_table(table)
            else:
                import pyarrow.parquet as pq

                pq.write_table(table, buf)
            data = buf.getvalue()
            write_atomic(self.fs, self._path(name, file), lambda f, d=data: f.write(d),
                         fsync=False)
            files.append({"file": file, "task_id": task.task_id, "rows": table.num_rows,
                          "bytes": len(data), "kind": kind, "schema": str(table.schema)})
            shell = copy.copy(task)  # no __init__: validation would refuse data=None
            shell.data = None
            shells.append((file, shell))
        pickled = cloudpickle.dumps({"shells": shells,
                                     "sizes": [len(b) for b in batches]})
        write_atomic(self.fs, self._path(name, "tasks.pkl"), lambda f: f.write(pickled),
                     fsync=False)
        manifest = {
            "format_version": FORMAT_VERSION,
            "source_id": source_id,
            "stage_index": stage_index,
            "stage": stage_name,
            "chain_fingerprint": fingerprint,
            "input_fingerprint": input_digest,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "rows": sum(f["rows"] for f in files),
            "files": files,
            "tasks": {"file": "tasks.pkl", "bytes": len(pickled),
                      "sha256": hashlib.sha256(pickled).hexdigest()},
            "deltas": [list(d) for d in deltas],
        }
        text = json.dumps(manifest, indent=1).encode()
        write_atomic(self.fs, self._path(name, MANIFEST), lambda f: f.write(text), fsync=False)
        return name, len(text) + len(pickled) + sum(f["bytes"] for f in files)

    # -- load -------------------------------------------------------------------------------
    def load(self, name: str, fingerprint: str, input_digest: str | None
             ) -> tuple[list[list[Any]], list[tuple[str, str, int]]]:
        """Verify and read an entry: ``(batches, deltas)``; raises :class:`CheckpointUnusable`."""
        import cloudpickle
        import pyarrow as pa

        try:
            manifest = json.loads(self.fs.cat_file(self._path(name, MANIFEST)))
        except FileNotFoundError as exc:
            raise CheckpointUnusable("no manifest (the save never committed)") from exc
        except (OSError, ValueError) as exc:
            raise CheckpointUnusable(f"unreadable manifest: {exc}") from exc
        if manifest.get("format_version") != FORMAT_VERSION:
            raise CheckpointUnusable(f"format version {manifest.get('format_version')!r}")
        if manifest.get("chain_fingerprint") != fingerprint:
            raise CheckpointUnusable("made by a different stage chain")
        if manifest.get("input_fingerprint") != input_digest:
            raise CheckpointUnusable("the source's input files changed since it was saved")
        try:
            pickled = self.fs.cat_file(self._path(name, manifest["tasks"]["file"]))
        except OSError as exc:
            raise CheckpointUnusable(f"task file unreadable: {exc}") from exc
        if hashlib.sha256(pickled).hexdigest() != manifest["tasks"]["sha256"]:
            raise CheckpointUnusable(
                f"tasks.pkl has {len(pickled)} bytes and a different digest than the manifest's "
                f"({manifest['tasks']['bytes']} bytes)")
        try:
            payload = cloudpickle.loads(pickled)
        except Exception as exc:  # noqa: BLE001 (any unpickling failure makes it unusable)
            raise CheckpointUnusable(f"task file does not unpickle: {exc!r}") from exc
        by_file = {f["file"]: f for f in manifest["files"]}
        tasks = []
        for file, shell in payload["shells"]:
            if file is None:
                tasks.append(shell)
                continue
            meta = by_file[file]
            path = self._path(name, file)
            try:
                raw = self.fs.cat_file(path)
            except OSError as exc:
                raise CheckpointUnusable(f"{file} unreadable: {exc}") from exc
            if len(raw) != meta["bytes"]:
                raise CheckpointUnusable(
                    f"{file} has {len(raw)} bytes, the manifest says {meta['bytes']}")
            try:
                if file.endswith(".arrow"):
                    table = pa.ipc.open_file(pa.BufferReader(raw)).read_all()
                else:
                    import pyarrow.parquet as pq

                    table = pq.read_table(pa.BufferReader(raw))
            except (pa.ArrowException, OSError) as exc:
                raise CheckpointUnusable(f"{file} does not read: {exc}") from exc
            if table.num_rows != meta["rows"]:
                raise CheckpointUnusable(
                    f"{file} has {table.num_rows} rows, the manifest says {meta['rows']}")
            shell.data = table if meta["kind"] == "arrow" else table.to_pandas()
            tasks.append(shell)
        batches, start = [], 0
        for size in payload["sizes"]:
            batches.append(tasks[start:start + size])
            start += size
        deltas = [(str(t), str(s), int(d)) for t, s, d in manifest["deltas"]]
        return batches, deltas

    # -- delete -----------------------------------------------------------------------------
    def delete(self, names: Iterable[str]) -> int:
        """Remove entries (manifest first, so a half-deleted entry is never used)."""
        removed = 0
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(self._path(name, MANIFEST))
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(self._path(name), recursive=True)
                removed += 1
        return removed


@dataclasses.dataclass
class CheckpointRuntime:
    """What a worker needs: the store and, per fusion group index, its boundary (if any)."""

    store: StageCheckpointStore
    boundaries: dict[int, tuple[int, str, str]]  # group index -> (stage index, fp, stage name)


class CheckpointPlanner:
    """The driver's side: which entries each source may resume from, retention, totals.

    Example:
        >>> # planner = CheckpointPlanner(config, stages, plan, "/ckpt")
        >>> # planner.prepare(done_source_ids)        # one listing; stale entries removed
        >>> # planner.candidates("a1b2")               # [(group, stage, fp, entry name)]
        >>> # planner.source_finished(["a1b2"], failed=set())
        >>> # planner.close()
    """

    def __init__(self, config: StageCheckpoints, stages: Sequence[Any], plan: Any,
                 checkpoint_url: str, storage_options: dict | None = None) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.config = config
        self.store = StageCheckpointStore(checkpoint_url, storage_options, config.format)
        bounds: dict[int, tuple[int, str, str]] = {}
        for group in plan.groups:
            last = group.stage_indices[-1]
            if last in plan.boundaries:
                bounds[group.index] = (last, chain_fingerprint(stages, last), stages[last].name)
        self.runtime = CheckpointRuntime(self.store, bounds)
        self._valid = {(stage, fp): g for g, (stage, fp, _) in bounds.items()}
        self._listing: dict[str, list[tuple[int, str, str]]] = {}
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="curator-dask-ckpt-cleanup")
        self._futures: list[Any] = []
        self._finished: list[str] = []

    def prepare(self, done_source_ids: Iterable[str]) -> None:
        """List the store once; drop entries of sources already complete (unless keep_all)."""
        self._listing = self.store.listing()
        if self.config.retention != "keep_all":
            # Only what the listing found: a source complete before this run made nothing now.
            self._delete(done_source_ids, made=False)

    def candidates(self, source_id: str) -> list[tuple[int, int, str, str]]:
        """``[(group index, stage index, fingerprint, entry)]`` made by this stage chain."""
        return [(self._valid[(stage, fp)], stage, fp, name)
                for stage, fp, name in self._listing.get(_entry_source(source_id), ())
                if (stage, fp) in self._valid]

    def _names(self, source_id: str, *, made: bool = True) -> list[str]:
        """Entries the listing found for the source, plus (``made``) those this run may have
        saved."""
        names = {name for _, _, name in self._listing.get(_entry_source(source_id), ())}
        if made:
            names.update(entry_name(source_id, stage, fp)
                         for stage, fp, _ in self.runtime.boundaries.values())
        return sorted(names)

    def _delete(self, source_ids: Iterable[str], *, made: bool = True) -> None:
        names = [n for sid in source_ids for n in self._names(sid, made=made)]
        if names:
            self._futures.append(self._pool.submit(self.store.delete, names))

    def sources_finished(self, source_ids: Iterable[str], failed: set[str]) -> None:
        """Sources whose chain ended; those without a FailedTask are complete."""
        done = [sid for sid in source_ids if sid not in failed]
        if self.config.retention == "cleanup_on_complete":
            self._delete(done)
        elif self.config.retention == "keep_failed_only":
            self._finished.extend(done)

    def close(self, *, run_completed: bool) -> None:
        """Apply ``keep_failed_only`` at the end of a completed run; wait for deletions."""
        if run_completed and self.config.retention == "keep_failed_only":
            self._delete(self._finished)
        deleted = 0
        for future in self._futures:
            try:
                deleted += future.result()
            except Exception as exc:  # noqa: BLE001 (a leftover entry is only disk space)
                logger.warning("could not delete stage checkpoints: %s", exc)
        self._pool.shutdown()
        logger.debug("stage checkpoints: %d entries deleted", deleted)
