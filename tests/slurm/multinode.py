"""A private multi-node SLURM test cluster for one test: ``tools/local-slurm/start.sh --nodes N``
with its own configuration file, controller port, runtime folder, bridge and namespaces, so a
test can lose a node or preempt its jobs without touching the shared cluster that ``.ci/run``
started (and that the other tests use at the same time).

Each node is a ``slurmd`` in its own network, UTS, PID and mount namespace (hostname
``node1``..``nodeN``, address ``<net>.11``.. on the bridge), sharing this machine's file system;
the controller and the test (the login side) stay in the root namespace. The commands of the
SLURM client read ``SLURM_CONF`` from :attr:`PrivateCluster.env`.

Example:
    >>> # with private_cluster(tmp_path, nodes=3) as cluster:
    >>> #     subprocess.run(["sbatch", ...], env=cluster.env)
    >>> #     cluster.lose_node(3)          # every process of node3, SIGKILLed at once
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.slurm.local_slurm import local_slurm

REPO = Path(__file__).resolve().parents[2]
START = REPO / "tools" / "local-slurm" / "start.sh"
STOP = REPO / "tools" / "local-slurm" / "stop.sh"


def _slot() -> int:
    """0, 1, ... for the pytest-xdist worker (gw0, gw1, ...): its own names, port and subnet."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker[2:]) if worker[2:].isdigit() else 0


@dataclass
class PrivateCluster:
    """What :func:`private_cluster` started (see the module docstring)."""

    root: Path
    nodes: int
    name: str
    net: str
    env: dict[str, str] = field(default_factory=dict)

    @property
    def conf(self) -> str:
        return self.env["SLURM_CONF"]

    @property
    def bridge(self) -> str:
        return f"{self.name}0"

    @property
    def controller_address(self) -> str:
        return f"{self.net}.1"

    def address(self, node: int) -> str:
        return f"{self.net}.{10 + node}"

    def init_pid(self, node: int) -> int:
        """The root-namespace pid of node ``node``'s namespace init (its PID 1)."""
        return int((self.root / "run" / f"node{node}.init").read_text())

    def node_command(self, node: int, *command: str) -> list[str]:
        """``command`` as run inside node ``node``: its network, UTS, PID and mount
        namespaces (as a process of that host)."""
        pid = self.init_pid(node)
        return ["nsenter", "-t", str(pid), "--net", "--uts", "--pid", "--mount", "--", *command]

    def run_on(self, node: int, *command: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(self.node_command(node, *command), capture_output=True, text=True,
                              timeout=timeout, env=self.env)

    def slurm(self, *command: str, timeout: float = 30) -> str:
        """A SLURM client command against this cluster; its stdout (raises on failure)."""
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env=self.env)
        if proc.returncode != 0:
            msg = f"{' '.join(command)} failed ({proc.returncode}): {proc.stderr.strip()}"
            raise RuntimeError(msg)
        return proc.stdout

    def lose_node(self, node: int) -> None:
        """SIGKILL node ``node``'s namespace init: the kernel kills every process of the node
        at once (its slurmd, its jobs' steps and everything they started), as when a host
        loses power. Its network namespace stays, with nothing listening."""
        os.kill(self.init_pid(node), 9)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{self.init_pid(node)}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] in "ZX":
                        return
            except FileNotFoundError:
                return
            time.sleep(0.1)
        msg = f"node{node}'s namespace init outlived SIGKILL for 30 s"
        raise RuntimeError(msg)


def _script_env(root: Path, name: str, net: str, port: int, cpus: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(SLURM_LOCAL_DIR=str(root), SLURM_CONF=str(root / "slurm.conf"),
               SLURM_CTLD_PORT=str(port), SLURM_LOCAL_NAME=name, SLURM_NET=net,
               SLURM_CPUS=str(cpus), SLURM_START_TIMEOUT="60")
    return env


@contextlib.contextmanager
def private_cluster(tmp_path: Path, nodes: int = 3, cpus: int = 2,
                    extra_env: dict[str, str] | None = None) -> Iterator[PrivateCluster]:
    """Start a private ``nodes``-node test cluster (its runtime folder in ``/tmp``, its logs
    copied to ``tmp_path`` at the end); stop it at the end (``stop.sh``, which removes its
    namespaces, links and bridge). Skips the test where the
    project's local SLURM is not installed and running (it shares munge with it)."""
    reason = local_slurm()
    if reason is not None:
        pytest.skip(reason)
    slot = _slot()
    name, net, port = f"cdpt{slot}", f"10.77.{100 + slot}", 6917 + 10 * slot
    # slurmd's spool folder holds its unix sockets, whose paths may not exceed 108 bytes: a
    # short folder of its own, not under pytest's (long) tmp_path
    root = Path(tempfile.mkdtemp(prefix=f"{name}-", dir="/tmp"))
    env = _script_env(root, name, net, port, cpus)
    env.update(extra_env or {})
    started = subprocess.run(["bash", str(START), "--nodes", str(nodes)], env=env,
                             capture_output=True, text=True, timeout=180)
    try:
        if started.returncode != 0:
            msg = f"start.sh --nodes {nodes} failed:\n{started.stderr[-3000:]}"
            raise RuntimeError(msg)
        client_env = dict(os.environ, SLURM_CONF=env["SLURM_CONF"])
        yield PrivateCluster(root=root, nodes=nodes, name=name, net=net, env=client_env)
    finally:
        subprocess.run(["bash", str(STOP)], env=env, capture_output=True, text=True,
                       timeout=180)
        logs = tmp_path / "slurm-private-logs"  # kept with the test's files, for a failure
        if (root / "log").is_dir():
            shutil.copytree(root / "log", logs, dirs_exist_ok=True)
        shutil.rmtree(root, ignore_errors=True)
