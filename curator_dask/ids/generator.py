"""NeMo Curator's document-id generator, on Dask instead of a Ray actor.

NeMo's readers with ``_generate_ids=True`` ask a detached Ray actor for a contiguous range of
ids per file group (``register_batch``); with ``_assign_ids=True`` they look a range up again
(``get_batch_range``). Here the same registry (:class:`IdGeneratorBase`, NeMo's semantics and
JSON) lives:

- **on the driver** between runs (this module's driver functions, which need no cluster);
- **on the run's Dask scheduler** while a run whose stages generate or assign ids is in
  progress (a scheduler extension, :mod:`.plugin`), installed before any source
  runs and brought back when the run ends, also after a failure (:mod:`.run`);
- **in the checkpoint** of a checkpointed run (``<checkpoint>/.curator_dask/id_generator.json``,
  NeMo's format), saved before any completion whose ids it holds is recorded, restored when the
  run is resumed.

Workers reach it from inside a Dask task with one scheduler RPC per partition
(:func:`register_batch`, :func:`get_batch_range`). See docs/deduplication.md ("Document ids on
Dask") and docs/design/architecture.md ("The id generator").

Example:
    >>> gen = IdGeneratorBase()
    >>> gen.register_batch(["a.jsonl"], 3), gen.register_batch(["b.jsonl"], 2)
    (0, 3)
    >>> gen.register_batch(["a.jsonl"], 3), gen.get_batch_range(["b.jsonl"], None)
    (0, (3, 4))
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import TYPE_CHECKING, Any

from curator_dask.errors import CuratorDaskError

if TYPE_CHECKING:
    from curator_dask.ids.run import RunIdRegistry

CURATOR_DEDUP_ID_STR = "_curator_dedup_id"

__all__ = [
    "CURATOR_DEDUP_ID_STR",
    "IdGeneratorBase",
    "UnknownBatchError",
    "create_id_generator_actor",
    "current_id_generator",
    "get_batch_range",
    "id_generator_exists",
    "kill_id_generator_actor",
    "register_batch",
    "write_id_generator_to_disk",
]


class UnknownBatchError(KeyError, CuratorDaskError):
    """``get_batch_range`` for a file group that was never registered (NeMo raises a bare
    ``KeyError``; this is one, with a message that says what to do)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class IdGeneratorBase:
    """NeMo Curator's ``IdGeneratorBase``: a contiguous range of ids per file group.

    ``register_batch(files, count)`` gives the group ``count`` ids from ``next_id`` on and
    returns the first; the same files again return the same first id. Groups are keyed by
    ``uuid5(NAMESPACE_URL, ";".join(files))``. ``to_disk`` writes NeMo's JSON
    (``{"next_id": N, "batch_registry": {key: [min, max]}}``, byte for byte what NeMo's
    ``to_disk`` writes for the same state), atomically; ``from_disk`` reads NeMo's or ours.

    Example:
        >>> gen = IdGeneratorBase(start_id=10)
        >>> gen.register_batch("x.parquet", 5), gen.next_id
        (10, 15)
    """

    def __init__(self, start_id: int = 0,
                 batch_registry: dict[str, tuple[int, int]] | None = None) -> None:
        self.next_id = int(start_id)
        # {batch hash: (min id, max id)}, in registration order (the JSON keeps it)
        self.batch_registry: dict[str, tuple[int, int]] = {
            str(k): (int(v[0]), int(v[1])) for k, v in (batch_registry or {}).items()}

    def register_batch(self, files: str | list[str], count: int) -> int:
        """The first id of ``files``' range, registering ``count`` ids for them if new."""
        return self.register_key(self.hash_files(files), count)

    def register_key(self, key: str, count: int) -> int:
        """:meth:`register_batch` by the group's key (a row-range partition's deterministic
        id, as NeMo keys a task that is not a file group)."""
        known = self.batch_registry.get(key)
        if known is not None:
            return known[0]
        first = self.next_id
        self.next_id += int(count)
        self.batch_registry[key] = (first, self.next_id - 1)
        return first

    def hash_files(self, filepath: str | list[str]) -> str:
        """NeMo's key of a file group: ``uuid5(NAMESPACE_URL, ";".join(files))``."""
        paths = [filepath] if isinstance(filepath, str) else [str(p) for p in filepath]
        return str(uuid.uuid5(uuid.NAMESPACE_URL, ";".join(paths)))

    def record_file_range(self, path: str, first: int, last: int) -> None:
        """Record one file's own ids inside a registered group, no new ids: a reader that
        groups the files otherwise (another blocksize, files_per_partition) finds them. The
        entry is NeMo's (``hash_files([path])``), so NeMo's ``IdGeneratorBase`` reads it too;
        a group of that one file, registered already, keeps its entry (the same range)."""
        self.batch_registry.setdefault(self.hash_files([path]), (int(first), int(last)))

    def get_batch_range(self, files: str | list[str] | None,
                        key: str | None = None) -> tuple[int, int]:
        """``(min_id, max_id)`` (inclusive) of a registered group, by its files or its key.

        Files grouped otherwise than when the ids were registered resolve through the files'
        own entries (:meth:`record_file_range`) when their ranges follow each other in the
        group's order, as they do for consecutive files of one listing."""
        if files is not None and key is None:
            key = self.hash_files(files)
        elif files is not None or key is None:
            msg = "Either files or key must be provided"  # NeMo's message
            raise ValueError(msg)
        found = self.batch_registry.get(key)
        if found is None and files is not None and not isinstance(files, str):
            found = self._range_of_files([str(f) for f in files])
        if found is None:
            what = f"files {files!r}" if files is not None else f"key {key!r}"
            msg = (f"no ids are registered for {what} (key {key}): assign ids with the id "
                   f"generator state of the run that generated them (create_id_generator_actor("
                   f"filepath=<its JSON>)), read with the same file grouping (blocksize, "
                   f"files_per_partition), or generate them with _generate_ids=True")
            raise UnknownBatchError(msg)
        return found

    def _range_of_files(self, files: list[str]) -> tuple[int, int] | None:
        """The range of ``files`` from each file's own entry, when each starts where the one
        before it ended; ``None`` otherwise."""
        ranges = [self.batch_registry.get(self.hash_files([f])) for f in files]
        if len(files) < 2 or any(r is None for r in ranges):
            return None
        known = [r for r in ranges if r is not None]
        if any(b[0] != a[1] + 1 for a, b in zip(known, known[1:], strict=False)):
            return None
        return known[0][0], known[-1][1]

    def state(self) -> dict[str, Any]:
        """NeMo's JSON document of this state (tuples as lists, as ``json.dump`` writes)."""
        return {"next_id": self.next_id,
                "batch_registry": {k: [a, b] for k, (a, b) in self.batch_registry.items()}}

    def to_json(self) -> str:
        """The text NeMo's ``to_disk`` writes: ``json.dump`` with its default separators."""
        return json.dumps({"next_id": self.next_id, "batch_registry": self.batch_registry})

    def copy(self) -> IdGeneratorBase:
        return type(self)(self.next_id, dict(self.batch_registry))

    def to_disk(self, filepath: str, storage_options: dict[str, Any] | None = None) -> None:
        """Write NeMo's JSON to ``filepath`` (any fsspec URL), replacing it atomically."""
        import fsspec

        from curator_dask.utils.atomic import write_atomic

        fs, path = fsspec.core.url_to_fs(str(filepath), **(storage_options or {}))
        parent = fs._parent(path)
        if parent:
            fs.makedirs(parent, exist_ok=True)  # as NeMo's fsspec.open(mode="w") does
        data = self.to_json().encode("utf-8")
        write_atomic(fs, path, lambda f: f.write(data))

    @classmethod
    def from_disk(cls, filepath: str,
                  storage_options: dict[str, Any] | None = None) -> IdGeneratorBase:
        """Read NeMo's JSON (written by NeMo or by :meth:`to_disk`)."""
        import fsspec

        with fsspec.open(str(filepath), mode="r", **(storage_options or {})) as f:
            data = json.load(f)
        return cls.from_state(data, source=str(filepath))

    @classmethod
    def from_state(cls, data: Any, source: str = "the id generator state") -> IdGeneratorBase:
        """From NeMo's JSON document (``{"next_id", "batch_registry"}``), checked."""
        if not (isinstance(data, dict) and "next_id" in data and "batch_registry" in data):
            msg = (f"{source} is not an id generator state: NeMo's format is "
                   '{"next_id": N, "batch_registry": {key: [min_id, max_id]}}')
            raise ValueError(msg)
        return cls(start_id=data["next_id"], batch_registry=data["batch_registry"])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IdGeneratorBase):
            return NotImplemented
        return (self.next_id == other.next_id
                and list(self.batch_registry.items()) == list(other.batch_registry.items()))

    __hash__ = None  # type: ignore[assignment]  # mutable, so unhashable; typeshed: a method

    def __repr__(self) -> str:
        return f"IdGeneratorBase(next_id={self.next_id}, batches={len(self.batch_registry)})"


# -- the driver's generator (what NeMo's named, detached actor is) ----------------------------
class _Driver:
    """The process's one id generator, and the run that holds it on its scheduler."""

    lock = threading.RLock()
    generator: IdGeneratorBase | None = None
    holder: RunIdRegistry | None = None


def id_generator_exists() -> bool:
    """Whether an id generator was created in this process (and not killed)."""
    return _Driver.generator is not None


def create_id_generator_actor(filepath: str | None = None,
                              storage_options: dict[str, Any] | None = None) -> None:
    """Create this process's id generator, empty or from NeMo's JSON at ``filepath``.

    No Ray: the state stays on the driver and goes to the scheduler of each run that needs
    it. Works with or without a started ``DaskExecutor``.

    Raises:
        ValueError: one exists already (as Ray refuses a second actor of the same name).

    Example:
        >>> create_id_generator_actor(); id_generator_exists()
        True
        >>> kill_id_generator_actor()
    """
    with _Driver.lock:
        if _Driver.generator is not None:
            msg = ("an id generator exists already in this process: call "
                   "kill_id_generator_actor() first (after write_id_generator_to_disk(path) "
                   "to keep its state)")
            raise ValueError(msg)
        _Driver.generator = (IdGeneratorBase() if filepath is None
                             else IdGeneratorBase.from_disk(filepath, storage_options))


def write_id_generator_to_disk(filepath: str,
                               storage_options: dict[str, Any] | None = None) -> None:
    """Write the id generator's state as NeMo's JSON (during a run: its live state, read
    from the run's scheduler)."""
    current_id_generator().to_disk(filepath, storage_options)


def kill_id_generator_actor() -> None:
    """Forget this process's id generator (its state is lost unless written to disk).

    Raises:
        ValueError: there is none.
        RuntimeError: a run in progress uses it.
    """
    with _Driver.lock:
        _require("kill_id_generator_actor")
        if _Driver.holder is not None:
            msg = ("kill_id_generator_actor(): a run in progress uses the id generator; call "
                   "it after the run ends")
            raise RuntimeError(msg)
        _Driver.generator = None


def current_id_generator() -> IdGeneratorBase:
    """A copy of the id generator's state now (from the scheduler while a run holds it)."""
    with _Driver.lock:
        generator = _require("write_id_generator_to_disk")
        holder = _Driver.holder
    if holder is not None:
        return holder.live_state()
    return generator.copy()


def _require(caller: str) -> IdGeneratorBase:
    if _Driver.generator is None:
        msg = (f"{caller}(): no id generator exists in this process: call "
               "create_id_generator_actor() (or create_id_generator_actor(filepath=<json>)) "
               "first")
        raise ValueError(msg)
    return _Driver.generator


# -- worker side (inside a Dask task of a curator_dask run) ------------------------------------
def register_batch(files: str | list[str], count: int) -> int:
    """The first id of ``files``' range in the run's id generator (registered if new).

    Called from a stage inside a Dask task of a run whose stages generate ids: one scheduler
    RPC. Outside a Dask worker it uses the driver's generator directly.
    """
    return int(_call("register", files=_paths(files), count=int(count)))


def get_batch_range(files: str | list[str] | None,
                    key: str | None = None) -> tuple[int, int]:
    """``(min_id, max_id)`` of a registered file group in the run's id generator (inside a
    Dask task: one scheduler RPC; outside a worker: the driver's generator)."""
    if (files is None) == (key is None):
        msg = "Either files or key must be provided"
        raise ValueError(msg)
    low, high = _call("range", files=None if files is None else _paths(files), batch_key=key)
    return int(low), int(high)


def _paths(files: str | list[str]) -> str | list[str]:
    return files if isinstance(files, str) else [str(f) for f in files]


def _call(action: str, **kwargs: Any) -> Any:
    from curator_dask.ids.plugin import call_from_worker, serve

    worker = _current_worker()
    if worker is not None:
        return call_from_worker(worker, action, **kwargs)
    with _Driver.lock:  # in the driver (or a test): the generator itself, or the run's
        holder = _Driver.holder
        if holder is None:
            caller = "register_batch" if action == "register" else "get_batch_range"
            return serve(_require(caller), action, **kwargs)
    return holder.call(action, **kwargs)


def _current_worker() -> Any:
    try:
        from distributed import get_worker

        return get_worker()
    except (ImportError, ValueError):
        return None
