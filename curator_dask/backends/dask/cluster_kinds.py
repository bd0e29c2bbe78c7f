"""The registry of cluster kinds: one table from a kind's name to how a run gets its cluster.

Like fsspec's ``known_implementations``, each :class:`ClusterKind` names its builder by import
path (``"module:function"``), imported only when a run starts that kind, so dask-jobqueue is
imported by a SLURM run alone. ``DaskExecutor(cluster=...)`` and its checks, the ``--cluster``
choices and checks of ``run`` and ``dedup``, their help and their error messages read this
table: a new kind is its builder in a module of its own plus one :func:`register_cluster_kind`
(a built-in one: a row of ``_BUILT_IN``). This module is the only one that spells a kind's name;
the SLURM wing, which is about one kind, uses the constants below.

Example:
    >>> cluster_kind("slurm").extra
    'slurm'
    >>> [kind.name for kind in user_kinds()]
    ['local', 'slurm', 'slurm-runner']
    >>> implied_kind(None, address="tcp://10.0.0.5:8786", client=None)
    'address'
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.util
from collections.abc import Callable
from typing import Any

from curator_dask.errors import CuratorDaskError

LOCAL = "local"
ADDRESS = "address"
CLIENT = "client"
SLURM = "slurm"
SLURM_RUNNER = "slurm-runner"
DEFAULT_KIND = LOCAL


class UnknownClusterKindError(ValueError, CuratorDaskError):
    """A cluster kind that is not in the registry, or one chosen by an argument of its own
    (``address=``, ``client=``) rather than by name.

    Example:
        >>> try:
        ...     cluster_kind("slrum", by_name=True)
        ... except UnknownClusterKindError as exc:
        ...     for part in str(exc).split("; "):
        ...         print(part)
        cluster='slrum' is not a cluster kind
        pass one of 'local', 'slurm', 'slurm-runner'
        did you mean 'slurm'?
    """


@dataclasses.dataclass(frozen=True)
class ClusterKind:
    """One kind of cluster: its name, its builder and what goes with it.

    Args:
        name: what ``cluster=`` and ``--cluster`` say.
        builder: ``"module:function"``; the function takes ``(spec, stack)`` (a
            ``ClusterSpec`` and the ``ExitStack`` that closes what it starts) and returns a
            ``Provisioned`` (``backends/dask/clusters.py``).
        description: one line for ``--cluster``'s help and the docs.
        implied_by: the ``DaskExecutor`` argument that chooses this kind (``"address"``);
            ``None`` for a kind chosen by name.
        options: the ``DaskExecutor`` arguments that go with this kind only (``"jobs"``).
        requires: ``(module, distribution)`` pairs the builder imports.
        extra: the package extra that installs ``requires``.
        embedded: its workers come from this process's forkserver (started ahead by
            ``DaskExecutor.prepare_workers``, let go of by any other kind).
        full_size_known: the started cluster's ``max_threads`` counts every worker it will
            have before they join, and sizes ``max_in_flight``.
        starts_in_every_rank: every rank of a launch runs the command and only the driver
            rank's ``start()`` returns, so the CLI starts it before making the job folder.

    Example:
        >>> kind = ClusterKind("fake", "mymodule:start", "a fake for a test")
        >>> kind.implied_by is None, kind.missing_requirement()
        (True, None)
    """

    name: str
    builder: str
    description: str
    implied_by: str | None = None
    options: tuple[str, ...] = ()
    requires: tuple[tuple[str, str], ...] = ()
    extra: str | None = None
    embedded: bool = False
    full_size_known: bool = False
    starts_in_every_rank: bool = False

    def missing_requirement(self) -> str | None:
        """``"needs dask-jobqueue: pip install 'curator_dask[slurm]'"`` when a module the
        builder imports is not installed, else ``None``."""
        for module, distribution in self.requires:
            if importlib.util.find_spec(module) is None:
                fix = f"pip install 'curator_dask[{self.extra}]'" if self.extra else (
                    f"pip install {distribution}")
                return f"needs {distribution}: {fix}"
        return None

    def build_function(self) -> Callable[..., Any]:
        """The builder, imported now; an ``ImportError`` names the missing package and its
        extra."""
        missing = self.missing_requirement()
        if missing:
            msg = f"cluster={self.name!r} {missing}"
            raise ImportError(msg)
        module, _, function = self.builder.partition(":")
        return getattr(importlib.import_module(module), function)


_CLUSTERS = "curator_dask.backends.dask.clusters"
_JOBQUEUE = (("dask_jobqueue", "dask-jobqueue"),)

_BUILT_IN = (
    ClusterKind(LOCAL, f"{_CLUSTERS}:start_embedded",
                "an embedded LocalCluster on this machine (the default)", embedded=True),
    ClusterKind(ADDRESS, f"{_CLUSTERS}:connect_address", "a running scheduler at an address",
                implied_by="address"),
    ClusterKind(CLIENT, f"{_CLUSTERS}:use_client", "a Client the caller made and closes",
                implied_by="client"),
    ClusterKind(SLURM, f"{_CLUSTERS}:start_slurm",
                "start a dask-jobqueue SLURMCluster of worker jobs (jobqueue.slurm config)",
                options=("jobs", "adapt", "tls"), requires=_JOBQUEUE, extra="slurm",
                full_size_known=True),
    ClusterKind(SLURM_RUNNER, f"{_CLUSTERS}:start_slurm_runner",
                "inside `srun` with 3+ tasks, rank 0 runs the scheduler, rank 1 this "
                "pipeline, the others workers", options=("scheduler_file",),
                requires=_JOBQUEUE, extra="slurm", starts_in_every_rank=True),
)

known_cluster_kinds: dict[str, ClusterKind] = {kind.name: kind for kind in _BUILT_IN}


def register_cluster_kind(kind: ClusterKind, clobber: bool = False) -> None:
    """Add ``kind`` to the registry (fsspec's ``register_implementation``); a name already
    there is refused unless ``clobber``.

    Example:
        >>> try:
        ...     register_cluster_kind(cluster_kind("local"))
        ... except ValueError as exc:
        ...     print(str(exc).split("; ")[-1])
        pass clobber=True to replace it
    """
    if kind.name in known_cluster_kinds and not clobber:
        msg = (f"cluster kind {kind.name!r} is already registered "
               f"({known_cluster_kinds[kind.name].builder}); pass clobber=True to replace it")
        raise ValueError(msg)
    known_cluster_kinds[kind.name] = kind


def user_kinds() -> list[ClusterKind]:
    """The kinds ``cluster=`` and ``--cluster`` may name, in registration order."""
    return [kind for kind in known_cluster_kinds.values() if kind.implied_by is None]


def kinds_with(option: str) -> list[ClusterKind]:
    """The kinds that ``option`` (a ``DaskExecutor`` argument, ``"adapt"``) goes with."""
    return [kind for kind in known_cluster_kinds.values() if option in kind.options]


def cluster_kind(name: str, *, by_name: bool = False) -> ClusterKind:
    """The kind called ``name``; with ``by_name``, only a kind that ``cluster=`` may name.

    Raises:
        UnknownClusterKindError: naming the kinds there are and the closest one.
    """
    kind = known_cluster_kinds.get(name) if isinstance(name, str) else None
    if kind is not None and kind.implied_by is not None and by_name:
        msg = (f"cluster={name!r} is chosen by {kind.implied_by}= alone: pass "
               f"{kind.implied_by}=... instead of cluster=")
        raise UnknownClusterKindError(msg)
    if kind is None:
        names = [k.name for k in (user_kinds() if by_name else known_cluster_kinds.values())]
        close = difflib.get_close_matches(str(name), names, n=1)
        msg = (f"cluster={name!r} is not a cluster kind; pass one of "
               + ", ".join(repr(n) for n in names)
               + (f"; did you mean {close[0]!r}?" if close else ""))
        raise UnknownClusterKindError(msg)
    return kind


def implied_kind(cluster: str | None, **arguments: Any) -> str:
    """The kind a ``DaskExecutor`` runs on: the one an argument given implies (``address=``,
    ``client=``), else ``cluster``, else the default."""
    for kind in known_cluster_kinds.values():
        if kind.implied_by is not None and arguments.get(kind.implied_by) is not None:
            return kind.name
    return cluster or DEFAULT_KIND
