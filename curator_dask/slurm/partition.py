"""Fit an array job's request to its SLURM partition before it is submitted.

A request no node of the partition can satisfy (``--cpus-per-task 16`` on 4-CPU nodes) is
accepted by ``sbatch`` and then pends forever with reason ``PartitionConfig``. ``slurm submit``
therefore asks ``sinfo`` for the CPUs of each node of the partition (:func:`partition_nodes`),
picks a default ``--cpus-per-task`` that fits (:func:`default_cpus_per_task`), refuses a
request that cannot fit (:func:`check_fits`) and lets ``sbatch --test-only`` judge the rest
(memory, time, partition limits: :func:`sbatch_test_only`). Nothing here submits a job.
"""

from __future__ import annotations

import math
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from curator_dask.errors import CuratorDaskError

DEFAULT_CPUS_PER_TASK = 16  # the most a task asks for when --cpus-per-task is not given


class RequestRefused(ValueError, CuratorDaskError):
    """The request cannot run in the partition; the message names the request, the partition's
    limit and the option to change."""


class SlurmQueryError(RuntimeError, CuratorDaskError):
    """``sinfo`` or ``sbatch --test-only`` could not be asked (not installed, no controller)."""


@dataclass(frozen=True)
class PartitionNodes:
    """The CPUs of each node of a partition, as ``sinfo -N`` lists them.

    Example:
        >>> nodes = PartitionNodes("debug", (4, 8, 8))
        >>> nodes.max_cpus, len(nodes.cpus)
        (8, 3)
    """

    name: str
    cpus: tuple[int, ...]

    @property
    def max_cpus(self) -> int:
        """The CPUs of the partition's largest node."""
        return max(self.cpus)


def _run(command: list[str], environ: Mapping[str, str] | None,
         stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a SLURM client command, output captured; :class:`SlurmQueryError` when it is not
    installed or does not answer in 60 s."""
    try:
        return subprocess.run(command, input=stdin, capture_output=True, text=True,
                              env=None if environ is None else dict(environ), timeout=60)
    except FileNotFoundError:
        msg = f"{command[0]} not found: is this a SLURM login node?"
        raise SlurmQueryError(msg) from None
    except subprocess.TimeoutExpired:
        msg = f"{' '.join(command)} did not answer in 60 s"
        raise SlurmQueryError(msg) from None


def partition_nodes(partition: str | None = None,
                    environ: Mapping[str, str] | None = None) -> PartitionNodes:
    """The nodes of ``partition`` (default: ``$SBATCH_PARTITION``, else the cluster's default
    partition) from ``sinfo -h -N -o '%P %c'``.

    Raises:
        SlurmQueryError: ``sinfo`` is missing or failed.
        RequestRefused: no such partition (the message lists the partitions there are).
    """
    env = os.environ if environ is None else environ
    partition = partition or env.get("SBATCH_PARTITION") or None
    proc = _run(["sinfo", "-h", "-N", "-o", "%P %c"], environ)
    if proc.returncode != 0:
        msg = f"sinfo exited with {proc.returncode}: {proc.stderr.strip()}"
        raise SlurmQueryError(msg)
    rows = [line.split() for line in proc.stdout.splitlines() if len(line.split()) == 2]
    default = next((p.rstrip("*") for p, _ in rows if p.endswith("*")), None)
    name = partition or default
    cpus = tuple(int(c.rstrip("+")) for p, c in rows if p.rstrip("*") == name)
    if not cpus or name is None:  # no name matches no row: no cpus
        known = ", ".join(sorted({p.rstrip("*") for p, _ in rows})) or "none"
        what = (f"partition {name!r} does not exist or has no nodes" if name
                else "there is no default partition")
        msg = f"{what} (partitions: {known}); choose one with --partition"
        raise RequestRefused(msg)
    return PartitionNodes(name, cpus)


def tasks_per_node(nodes: int, ntasks: int | None) -> int:
    """Tasks SLURM places on the busiest node: 1 (``--ntasks-per-node=1``), or
    ``ceil(ntasks / nodes)`` for a ``--dask-runner-tasks`` step.

    Example:
        >>> tasks_per_node(1, None), tasks_per_node(2, 5)
        (1, 3)
    """
    return 1 if ntasks is None else math.ceil(ntasks / max(nodes, 1))


def default_cpus_per_task(part: PartitionNodes, nodes: int = 1,
                          ntasks: int | None = None) -> int:
    """The most CPUs per task (at most 16) with which ``nodes`` nodes of the partition can each
    hold their tasks; at least 1 (:func:`check_fits` then says when even that cannot run).

    Example:
        >>> default_cpus_per_task(PartitionNodes("debug", (4,)))
        4
        >>> default_cpus_per_task(PartitionNodes("big", (64, 32)), nodes=2, ntasks=6)
        10
    """
    ranked = sorted(part.cpus, reverse=True)
    nth = ranked[min(nodes, len(ranked)) - 1]  # the nodes-th largest node must fit
    return max(1, min(DEFAULT_CPUS_PER_TASK, nth // tasks_per_node(nodes, ntasks)))


def check_fits(part: PartitionNodes, cpus_per_task: int, nodes: int = 1,
               ntasks: int | None = None) -> None:
    """Raise :class:`RequestRefused` when fewer than ``nodes`` nodes of the partition have the
    CPUs the request puts on one node (``cpus_per_task`` × tasks per node).

    Example:
        >>> try:
        ...     check_fits(PartitionNodes("debug", (4,)), 16)
        ... except RequestRefused as exc:
        ...     print(str(exc).split(",")[0])
        --cpus-per-task 16 needs 16 CPUs on a node
    """
    per_node = tasks_per_node(nodes, ntasks)
    need = cpus_per_task * per_node
    request = f"--cpus-per-task {cpus_per_task}" + (
        f" × {per_node} tasks per node (--dask-runner-tasks {ntasks} on --nodes {nodes})"
        if ntasks is not None else "")
    if need > part.max_cpus:
        fits = part.max_cpus // per_node
        change = (f"pass --cpus-per-task {fits} or less" if fits >= 1
                  else "pass more --nodes or fewer --dask-runner-tasks")
        msg = (f"{request} needs {need} CPUs on a node, and the largest node of partition "
               f"{part.name} has {part.max_cpus}; {change}, or choose another --partition")
        raise RequestRefused(msg)
    enough = sum(c >= need for c in part.cpus)
    if enough < nodes:
        msg = (f"--nodes {nodes} with {request} needs {nodes} nodes with {need} CPUs each, "
               f"and partition {part.name} has {enough}; pass --nodes {enough} or less, or "
               "choose another --partition")
        raise RequestRefused(msg)


def sbatch_test_only(script: str, extra_args: list[str] | None = None,
              environ: Mapping[str, str] | None = None) -> str | None:
    """Ask ``sbatch --test-only`` whether SLURM would accept and could start ``script``
    (nothing is queued). ``None`` when it would, else SLURM's reason.

    Raises:
        SlurmQueryError: ``sbatch`` is not installed.
    """
    proc = _run(["sbatch", "--test-only", *(extra_args or [])], environ, stdin=script)
    if proc.returncode == 0:
        return None
    lines = [line.strip() for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
    return "; ".join(lines) or f"sbatch --test-only exited with {proc.returncode}"
