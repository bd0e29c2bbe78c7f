"""Cluster provisioning: every way a run gets a ``Client``, and how each is given back.

The builders of the built-in kinds, which the registry (:mod:`.cluster_kinds`) names:
an embedded ``LocalCluster``, a running scheduler, a ``Client`` the caller owns, dask-jobqueue
``SLURMCluster`` worker jobs and dask-jobqueue ``SLURMRunner`` inside one ``srun`` step.
:func:`provision` starts the kind a ``ClusterSpec`` names through the registry. Each builder
enters what it starts on one ``ExitStack``, so closing is the same for all of them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import logging
import os
from typing import Any

from curator_dask import config as _config
from curator_dask.backends.dask.cluster_kinds import DEFAULT_KIND, cluster_kind
from curator_dask.backends.dask.progress import interactive

logger = logging.getLogger(__name__)

# Set in the SLURMRunner rank that runs the pipeline: it alone writes array manifests.
DRIVER_ENV = "CURATOR_DASK_SLURM_DRIVER"


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
    """Where a run's cluster comes from, as plain values resolved on the client."""

    kind: str = DEFAULT_KIND
    address: str | None = None
    client: Any = None
    jobs: int | None = 1
    adapt: tuple[int, int] | None = None  # (minimum, maximum) SLURM worker jobs; jobs is None
    tls: bool = True
    n_workers: int = 1
    threads_per_worker: int | None = None
    dashboard_address: str | None = None
    dashboard_requested: bool = False
    scheduler_file: str | None = None
    cluster_kwargs: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Provisioned:
    """A connected client, the cluster object behind it (if we started one), and its closer."""

    client: Any
    cluster: Any
    stack: contextlib.ExitStack
    dashboard_on: bool | None = None


def provision(spec: ClusterSpec) -> Provisioned:
    """Start or connect the cluster ``spec`` names and wait for its first worker (not for an
    adaptive cluster of minimum 0: it asks for worker jobs once the run submits work)."""
    start = cluster_kind(spec.kind).build_function()
    stack = contextlib.ExitStack()
    try:
        found = start(spec, stack)
        bound_client_log(found.client)
        if spec.adapt is None or spec.adapt[0] > 0:
            timeout = _config.get("cluster.wait-for-workers-timeout")
            # a SLURM handle stops waiting once its worker jobs keep failing at start
            wait = getattr(found.cluster, "wait_for_first_worker", None)
            if wait is not None:
                wait(found.client, timeout)
            else:
                found.client.wait_for_workers(1, timeout=timeout)
        if found.dashboard_on is None:  # a cluster we did not start: ask its scheduler once
            found.dashboard_on = _has_dashboard(found.client)
    except BaseException:
        stack.close()
        raise
    return found


def bounded_message_logs() -> Any:
    """A ``dask.config`` context in which Dask keeps only ``cluster.message-log-length``
    messages of each comm (and scheduler events, transitions) for debugging, instead of
    1,000: a kept message holds every task it carried. Comms made meanwhile keep the bound.
    """
    import dask.config

    length = _config.get("cluster.message-log-length")
    if length is None:
        return contextlib.nullcontext()
    return dask.config.set({"distributed.admin.low-level-log-length": int(length)})


def bound_client_log(client: Any) -> None:
    """The same bound on a connected client's stream to its scheduler (made earlier)."""
    import collections

    length = _config.get("cluster.message-log-length")
    comm = getattr(client, "scheduler_comm", None)
    if length is not None and comm is not None and hasattr(comm, "recent_message_log"):
        comm.recent_message_log = collections.deque(comm.recent_message_log,
                                                    maxlen=int(length))


def start_embedded(spec: ClusterSpec, stack: contextlib.ExitStack) -> Provisioned:
    """An embedded ``LocalCluster`` whose workers come from the forkserver (``local.py``)."""
    from distributed import Client

    from curator_dask.backends.dask.local import embedded_cluster

    # the scheduler lives in this process: its comms to the workers keep few messages
    stack.enter_context(bounded_message_logs())

    dashboard = _config.get("local-cluster.dashboard")
    if dashboard is None:  # only where someone can look at it
        dashboard = interactive() or spec.dashboard_requested
    kwargs = {
        "n_workers": spec.n_workers,
        "threads_per_worker": spec.threads_per_worker,
        "processes": True,
        "host": _config.get("local-cluster.host"),
        "dashboard_address": spec.dashboard_address,
        **spec.cluster_kwargs,
    }
    if not dashboard:
        # No bokeh app; the scheduler's small HTTP server (health, metrics) stays on the
        # loopback address above instead of the default :8787.
        kwargs["scheduler_kwargs"] = {"dashboard": False, **kwargs.get("scheduler_kwargs", {})}
    if not kwargs["processes"] and "host" not in spec.cluster_kwargs:
        kwargs.pop("host")  # threads in this process talk in-process, not over TCP
    trim = _config.get("local-cluster.malloc-trim-threshold")
    cluster = stack.enter_context(embedded_cluster(malloc_trim_threshold=trim, **kwargs))
    client = _closing(stack, Client(cluster))
    on = bool(dashboard) and importlib.util.find_spec("bokeh") is not None
    return Provisioned(client, cluster, stack, dashboard_on=on)


def connect_address(spec: ClusterSpec, stack: contextlib.ExitStack) -> Provisioned:
    """A ``Client`` of the running scheduler at ``spec.address``."""
    from distributed import Client

    client = _closing(stack, Client(spec.address))
    # Remote workers do not share the driver's stderr: bring stage logs back.
    client.forward_logging("curator_dask")
    return Provisioned(client, None, stack)


def use_client(spec: ClusterSpec, stack: contextlib.ExitStack) -> Provisioned:
    """The caller's ``Client``, left open when the run's stack closes."""
    return Provisioned(spec.client, None, stack)  # the caller's: never closed here


def start_slurm(spec: ClusterSpec, stack: contextlib.ExitStack) -> Provisioned:
    """A dask-jobqueue ``SLURMCluster`` of worker jobs, with its watchdog (``slurm/``)."""
    from distributed import Client

    from curator_dask.slurm.cluster import SlurmClusterHandle

    handle = SlurmClusterHandle(spec.jobs, adapt=spec.adapt, tls=spec.tls,
                                **spec.cluster_kwargs)
    stack.callback(handle.close)
    client = _closing(stack, Client(handle.cluster))
    client.forward_logging("curator_dask")
    return Provisioned(client, handle, stack)


def start_slurm_runner(spec: ClusterSpec, stack: contextlib.ExitStack) -> Provisioned:
    """dask-jobqueue's SLURMRunner: rank 0 runs the scheduler, rank 1 returns from here and
    runs the pipeline (the driver), the other ranks run workers. The scheduler and worker
    ranks never return: they exit when the driver's client shuts the scheduler down."""
    from dask_jobqueue.slurm import SLURMRunner  # the registry checked it is installed
    from distributed import Client

    hash_seed_for_worker_rank()
    scheduler_file = spec.scheduler_file or os.path.join(
        os.getcwd(), ".curator-dask-scheduler-{job_id}.json")
    scheduler_net, worker_net = runner_network_options()
    runner = stack.enter_context(SLURMRunner(
        scheduler_file=scheduler_file, worker_options=worker_net,
        scheduler_options={"dashboard_address": None, **scheduler_net}))
    os.environ[DRIVER_ENV] = "1"
    client = _closing(stack, Client(runner))
    stack.callback(close_workers_first, client)  # runs before the client and the runner close
    client.wait_for_workers(runner.n_workers, timeout=300)
    return Provisioned(client, runner, stack, dashboard_on=False)


def close_workers_first(client: Any, timeout: float = 30.0) -> int:
    """Ask every worker to close while the scheduler still runs, and wait (up to ``timeout``
    seconds) until the scheduler has none; return how many were left.

    The ``slurm-runner`` step ends when the driver terminates the scheduler. Terminated first,
    the scheduler leaves the worker ranks on the other hosts heartbeating a closed port until
    its close message reaches them, and each logs distributed's "Failed to communicate with
    scheduler during heartbeat" with a traceback of 40 lines into the job's log, after a run
    that succeeded. Closed first, the workers' last heartbeats are answered and each worker
    leaves on its own; the scheduler then stops with no one left to tell.
    """
    import time

    try:
        client.run_on_scheduler(_close_every_worker)
        deadline = time.monotonic() + timeout
        while (left := client.run_on_scheduler(_worker_count)) and time.monotonic() < deadline:
            time.sleep(0.2)
    except Exception as error:  # noqa: BLE001 (the scheduler's own close still ends the step)
        logger.debug("workers not closed before the scheduler: %s", error)
        return -1
    return left


def _close_every_worker(dask_scheduler: Any) -> None:
    for address in list(dask_scheduler.workers):
        dask_scheduler.close_worker(address)


def _worker_count(dask_scheduler: Any) -> int:
    return len(dask_scheduler.workers)


def runner_network_options(environ: dict[str, str] | None = None,
                           interface: str | None = None) -> tuple[dict, dict]:
    """``(scheduler_options, worker_options)`` that put a ``slurm-runner`` step's scheduler on
    an address the other hosts of the step reach.

    With dask-jobqueue's ``jobqueue.slurm.interface`` set (``interface="ib0"``, as for
    ``--cluster slurm``; e.g. ``DASK_JOBQUEUE__SLURM__INTERFACE=ib0``) the scheduler and the
    workers listen on that interface. Without it the scheduler listens on the address of the
    node that launched the step (``SLURM_LAUNCH_NODE_IPADDR``, the batch host, where rank 0
    runs) when that address is this host's: Dask's own choice is the route to 8.8.8.8, and on
    compute nodes without one the address the host name resolves to, which is ``127.0.1.1``
    where ``/etc/hosts`` is written as Debian does, and no other host reaches it. Workers find
    their address by the route to the scheduler.

    Example:
        >>> runner_network_options({}, interface="ib0")
        ({'interface': 'ib0'}, {'interface': 'ib0'})
        >>> runner_network_options({"SLURM_LAUNCH_NODE_IPADDR": "127.0.0.1"})
        ({'host': '127.0.0.1'}, {})
        >>> runner_network_options({"SLURM_LAUNCH_NODE_IPADDR": "203.0.113.77"})  # not ours
        ({}, {})
    """
    env = os.environ if environ is None else environ
    if interface is None and environ is None:
        import dask.config

        interface = dask.config.get("jobqueue.slurm.interface", None)
    if interface:
        return {"interface": interface}, {"interface": interface}
    launch = env.get("SLURM_LAUNCH_NODE_IPADDR", "").strip()
    return ({"host": launch}, {}) if launch and _is_own_address(launch) else ({}, {})


def _is_own_address(address: str) -> bool:
    """Whether this host can listen on ``address`` (one of its own addresses)."""
    import socket

    try:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((address, 0))
    except (OSError, ValueError):
        return False
    return True


def hash_seed_for_worker_rank() -> None:
    """A ``slurm-runner`` worker rank (``SLURM_PROCID`` 2 and up) started without
    ``PYTHONHASHSEED`` runs its own command line again with it (``os.execve``: the same process
    id, so ``srun`` still tracks it), since an interpreter's hash secret is drawn at its start
    (:mod:`curator_dask.utils.hash_seed`). The ranks reach this before anything else: every
    rank calls ``executor.start()`` first. Where the command cannot run again (code read from
    stdin, an interactive interpreter) the rank keeps its own seed, with a warning."""
    import sys

    from curator_dask.utils.hash_seed import ENV, worker_hash_seed

    rank = os.environ.get("SLURM_PROCID", "0")
    if not rank.isdigit() or int(rank) < 2 or os.environ.get(ENV, "").strip():
        return
    seed = worker_hash_seed()
    if seed is None:
        return
    argv = list(getattr(sys, "orig_argv", ()))
    if len(argv) < 2 or argv[1] in ("-", "-i") or sys.flags.interactive:
        logger.warning("slurm-runner worker rank %s runs without %s, so strings hash unlike "
                       "in the other ranks; export %s=%s before srun", rank, ENV, ENV, seed)
        return
    logger.info("slurm-runner worker rank %s: starting again with %s=%s", rank, ENV, seed)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, {**os.environ, ENV: seed})


def _closing(stack: contextlib.ExitStack, client: Any) -> Any:
    """``client``, closed with ``stack``. Not entered as a context manager: ``Client.__enter__``
    makes it current in a ``ContextVar`` that only the same thread's context may reset, and an
    executor may be started in one thread and closed in another (a notebook's, a web server's).
    The client is the process's default client all the same (``set_as_default``)."""
    stack.callback(client.close)
    return client


def _has_dashboard(client: Any) -> bool:
    try:
        return "dashboard" in client.scheduler_info(n_workers=0).get("services", {})
    except Exception:  # noqa: BLE001 (informational only)
        return False
