"""The multi-node test bed itself (``tools/local-slurm/start.sh --nodes N``): separate hosts with
their own names, PID spaces and addresses, a network that reaches nothing outside, and a
``stop.sh`` that leaves no namespace, link, mount or process behind.

Run on a private cluster (tests/slurm/multinode.py), so the shared one is never stopped.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.slurm.local_slurm import local_slurm
from tests.slurm.multinode import STOP, private_cluster

_reason = local_slurm()
pytestmark = [pytest.mark.slurm, pytest.mark.multinode,
              pytest.mark.skipif(_reason is not None, reason=_reason or "")]

PROBE = r"""
import os, socket
out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    out.connect(("192.0.2.1", 9)); outside = "reached " + out.getsockname()[0]
except OSError as exc:
    outside = f"errno {exc.errno}"
print(socket.gethostname(), os.getpid(), socket.gethostbyname(socket.gethostname()), outside)
"""


def _leftovers(cluster) -> list[str]:
    """Everything of ``cluster`` still on this machine: namespaces, links, mounts, processes."""
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"netns {line.split()[0]}" for line in netns.splitlines()
              if line.startswith(f"{cluster.name}-")]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found += [f"link {m}" for m in re.findall(r"^\d+: ([^:@]+)", links, re.M)
              if m.startswith(cluster.name)]
    with open("/proc/mounts") as f:
        found += [f"mount {line.split()[1]}" for line in f
                  if cluster.name in line or str(cluster.root) in line]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if int(pid) != os.getpid() and (str(cluster.root) in cmd or cwd.startswith(
                str(cluster.root)) or f"{cluster.name}-node" in cmd):
            found.append(f"process {pid}: {cmd[:120]}")
    return found


def test_three_hosts_of_their_own_on_a_closed_network_and_stop_leaves_nothing(tmp_path):
    with private_cluster(tmp_path, nodes=3) as cluster:
        sinfo = cluster.slurm("sinfo", "-h", "-N", "-o", "%N %t")
        assert sorted(set(sinfo.split()[::2])) == ["node1", "node2", "node3"], sinfo
        # one step on each node: its own host name, PID space and address; no way out
        step = cluster.slurm("srun", "-N", "3", "--ntasks-per-node", "1", "python3", "-c",
                             PROBE, timeout=120)
        rows = sorted(line.split(maxsplit=3) for line in step.splitlines())
        assert [r[0] for r in rows] == ["node1", "node2", "node3"], step
        assert [r[2] for r in rows] == [cluster.address(i) for i in (1, 2, 3)], step
        assert all(r[3] == "errno 101" for r in rows), step  # ENETUNREACH: no route out
        pids = [int(r[1]) for r in rows]
        assert max(pids) < 1000, step  # each counts from its own PID 1, not this machine's
        # the hosts reach each other and the controller over the bridge, nothing else
        connect = f"import socket; socket.create_connection(('{cluster.address(2)}', 6818), 5)"
        ping = cluster.run_on(1, "python3", "-c", connect + "; print('ok')")
        assert ping.stdout.strip() == "ok", ping.stderr
        routes = cluster.run_on(2, "ip", "route").stdout
        assert "default" not in routes and cluster.net in routes, routes
        # every process of a node is in its PID namespace: killing the init ends the node
        inside = cluster.run_on(3, "ps", "-e", "-o", "comm=").stdout.split()
        assert "slurmd" in inside and "slurmctld" not in inside, inside
        assert _leftovers(cluster), "the probe of leftovers sees nothing of a running cluster"
        # stop.sh of another runtime folder leaves this cluster alone, even under its names
        # (an earlier stop.sh removed every namespace of the default name, another cluster's)
        other = tmp_path / "other"
        other.mkdir()
        stopped = subprocess.run(["bash", str(STOP)], capture_output=True, text=True,
                                 timeout=60, env=dict(os.environ, SLURM_LOCAL_DIR=str(other),
                                                      SLURM_CONF=str(other / "slurm.conf"),
                                                      SLURM_LOCAL_NAME=cluster.name))
        assert stopped.returncode == 0, stopped.stderr
        after = cluster.slurm("srun", "-N", "3", "hostname", timeout=120)
        assert sorted(after.split()) == ["node1", "node2", "node3"], after
    assert _leftovers(cluster) == []
    # stop.sh is idempotent: a second stop finds nothing and still succeeds
    again = subprocess.run(["bash", str(STOP)], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, SLURM_LOCAL_DIR=str(cluster.root),
                                    SLURM_CONF=cluster.conf, SLURM_LOCAL_NAME=cluster.name))
    assert again.returncode == 0, again.stderr
