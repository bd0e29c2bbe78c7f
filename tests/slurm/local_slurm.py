"""Is the SLURM that answers here the project's own local one (``tools/local-slurm/start.sh``)?

The tests marked ``slurm`` and ``notebooks/03_slurm_arrays.ipynb`` submit jobs only to that
one: on an HPC login node ``sinfo`` answers too, and nothing here may reach a production queue.
``start.sh`` leaves marks that a production cluster cannot have by accident, and
:func:`local_slurm` checks all of them, the first without contacting anything:

1. the configuration file the SLURM commands read (``$SLURM_CONF``, else
   ``/etc/slurm/slurm.conf``) starts with the line ``# managed-by: start-local-slurm.sh`` and
   names the cluster ``curator-dask-local``;
2. the controller that answers (``scontrol show config`` comes from the running slurmctld)
   runs with that very file and that cluster name;
3. that controller's address is this machine's loopback (``SlurmctldHost=<host>(127.0.0.1)``),
   or, for the multi-node test cluster (``start.sh --nodes N``), the address that the file's
   ``# bridge=cdslurm0 <address>`` line names and that this machine's own bridge ``cdslurm0``
   carries (a bridge that ``start.sh`` made and attached to no physical interface).

Standard library only: the notebook loads this file by path.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

MARK = "# managed-by: start-local-slurm.sh"
CLUSTER_NAME = "curator-dask-local"
DEFAULT_CONF = "/etc/slurm/slurm.conf"
COMMANDS = ("sbatch", "squeue", "scancel", "scontrol", "sinfo")
START = "start it with: sudo bash tools/local-slurm/start.sh"
LOOPBACK = re.compile(r"^(127(\.\d{1,3}){3}|::1|localhost)$")


def _run(*command: str, timeout: float = 15) -> tuple[int, str]:
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, str(exc)
    return proc.returncode, proc.stdout if proc.returncode == 0 else proc.stderr.strip()


def _config(text: str) -> dict[str, str]:
    """``scontrol show config`` as ``{name: value}``."""
    pairs = (line.split("=", 1) for line in text.splitlines() if " = " in line)
    return {k.strip(): v.strip() for k, v in pairs}


def local_slurm() -> str | None:
    """``None`` when the project's local SLURM is the one answering, else why not (a skip
    reason).

    Example (a configuration file that ``start.sh`` did not write is never used):
        >>> import os, tempfile
        >>> conf = os.path.join(tempfile.mkdtemp(), "slurm.conf")
        >>> _ = open(conf, "w").write("ClusterName=production")
        >>> old, os.environ["SLURM_CONF"] = os.environ.get("SLURM_CONF"), conf
        >>> reason = local_slurm()
        >>> _ = os.environ.pop("SLURM_CONF") if old is None else os.environ.update(SLURM_CONF=old)
        >>> "not written by tools/local-slurm/start.sh" in reason or "not installed" in reason
        True
    """
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        return f"SLURM commands not installed ({', '.join(missing)}); {START}"
    conf = os.environ.get("SLURM_CONF") or DEFAULT_CONF
    try:
        with open(conf, encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 20)
    except OSError as exc:
        return f"no SLURM configuration of the project's local SLURM ({exc}); {START}"
    if not text.startswith(MARK):
        return (f"{conf} was not written by tools/local-slurm/start.sh (no {MARK!r} line): "
                "this is not the project's local SLURM, and tests never submit elsewhere")
    if not re.search(rf"^ClusterName={re.escape(CLUSTER_NAME)}\s*$", text, re.M):
        return (f"{conf} does not name the cluster {CLUSTER_NAME} (written by an older "
                "start.sh?); restart it: bash tools/local-slurm/stop.sh && "
                "bash tools/local-slurm/start.sh")
    rc, out = _run("scontrol", "show", "config")
    if rc != 0:
        return f"the local SLURM controller does not answer ({out}); {START}"
    config = _config(out)
    if config.get("ClusterName") != CLUSTER_NAME:
        return (f"the SLURM controller answering is cluster {config.get('ClusterName')!r}, "
                f"not the project's local {CLUSTER_NAME!r}")
    used = config.get("SLURM_CONF", "")
    if os.path.realpath(used) != os.path.realpath(conf):
        return f"the SLURM commands read {used or 'an unknown file'}, not {conf}"
    hosts = [v for k, v in config.items() if k.startswith(("SlurmctldHost", "ControlMachine"))]
    addresses = [m.group(2) or m.group(1) for m in (re.match(r"^([^(]+)(?:\((.*)\))?$", h)
                                                    for h in hosts) if m]
    local = {"127.0.0.1", "::1", "localhost"} | _bridge_address(text)
    if not addresses or not all(LOOPBACK.match(a.strip()) or a.strip() in local
                                for a in addresses):
        return (f"the SLURM controller is at {', '.join(hosts) or 'an unknown address'}, not "
                "on this machine's loopback address or the test cluster's own bridge")
    return None


def _bridge_address(conf_text: str) -> set[str]:
    """The controller address of a multi-node test cluster, when the configuration names it
    (``# bridge=<bridge> <address>``) and this machine's bridge of that name carries it."""
    m = re.search(r"^# bridge=([\w-]+) (\S+)\s*$", conf_text, re.M)
    if not m:
        return set()
    rc, out = _run("ip", "-o", "-4", "addr", "show", "dev", m.group(1))
    return {m.group(2)} if rc == 0 and f" {m.group(2)}/" in out else set()


def _conf_text() -> str:
    try:
        with open(os.environ.get("SLURM_CONF") or DEFAULT_CONF, encoding="utf-8",
                  errors="replace") as f:
            return f.read(1 << 20)
    except OSError:
        return ""


def bridge() -> str:
    """The bridge of the multi-node test cluster that answers (``cdslurm0`` unless a private
    one is meant, ``$SLURM_CONF``), else ``""``."""
    m = re.search(r"^# bridge=([\w-]+) ", _conf_text(), re.M)
    return m.group(1) if m else ""


def multinode() -> int:
    """How many namespaced test hosts the local SLURM has (``start.sh --nodes N``), 0 for the
    single-node form (one slurmd in this machine's own namespaces)."""
    text = _conf_text()
    m = re.search(r"^# nodes=(\d+)\s*$", text, re.M)
    return int(m.group(1)) if m and int(m.group(1)) > 1 and _bridge_address(text) else 0


def network_kwargs(**scheduler_options: object) -> dict:
    """``SLURMCluster`` keyword arguments that put the scheduler and the worker jobs where
    they reach each other on the local SLURM: loopback on the single-node form; on the
    multi-node test cluster the workers on their node's ``eth0`` and the scheduler (in this
    process, the login side) on the bridge ``cdslurm0``, as an HPC site's interface setting
    (``interface="ib0"``) would. ``scheduler_options`` are added to the scheduler's."""
    if multinode():
        return {"interface": "eth0",
                "scheduler_options": {"interface": bridge(), **scheduler_options}}
    return {"interface": "lo", **({"scheduler_options": scheduler_options}
                                  if scheduler_options else {})}


def node_cpus() -> int:
    """CPUs of the local SLURM's node in the default partition (the tests' jobs run there)."""
    rc, out = _run("sinfo", "-h", "-o", "%P %c")
    if rc != 0:
        msg = f"sinfo failed: {out}"
        raise RuntimeError(msg)
    rows = [line.split() for line in out.splitlines() if line.strip()]
    cpus = {p: int(c.rstrip("+")) for p, c in rows}  # "4+": nodes differ; the least is shown
    default = [c for p, c in cpus.items() if p.endswith("*")]
    return default[0] if default else min(cpus.values())


if __name__ == "__main__":
    reason = local_slurm()
    print("the project's local SLURM answers" if reason is None else reason)
    raise SystemExit(0 if reason is None else 1)
