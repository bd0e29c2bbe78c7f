"""``cluster="slurm"`` over several hosts (issue 24), on a private multi-node test cluster
(tests/slurm/multinode.py): each node fits one worker job, so the worker jobs land on hosts of
their own, with their own names, PID spaces and addresses, and no route out of the bridge.

1. Three worker jobs on three hosts, TLS on (the default): the scheduler is reached over the
   bridge, a client without the run's certificate is refused from every namespace, the
   dashboards (plain HTTP, on each host's loopback) answer nobody from another namespace, and
   a real pipeline gives the input's records back, processed on all three hosts.
2. A node lost mid-run (``lose_node``: every process of the host SIGKILLed at once) while its
   worker runs tasks of a checkpointed run: the run completes on the other hosts, its outputs
   are byte-identical to a clean run's, the checkpoint holds every source once (a resumed run
   processes nothing), no temp file is left, and the watchdog's replacement job joins on the
   spare fourth node. Three ways: the host's processes killed (its kernel closes their
   connections), its link cut first (nothing arrives: TCP keepalive tells), and killed with a
   Dask task per stage (``fuse=False``: lost intermediate results are computed again).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from curator_dask.sample_data import generate_jsonl
from tests.helpers import import_path, poll_for
from tests.slurm.local_slurm import local_slurm, network_kwargs
from tests.slurm.multinode import PrivateCluster, private_cluster

_reason = local_slurm()
pytestmark = [pytest.mark.slurm, pytest.mark.multinode, pytest.mark.slow,
              pytest.mark.skipif(_reason is not None, reason=_reason or "")]

# A stage that sleeps ``seconds`` per batch and, with ``marks``, leaves a file
# start-<host>-<pid>-<source> when it begins and end-... when it is done: which host ran what.
STAGES = textwrap.dedent("""
    import os, socket, time
    from dataclasses import dataclass
    from curator_dask import ProcessingStage

    @dataclass
    class Slow(ProcessingStage):
        name: str = "slow"
        seconds: float = 0.0
        marks: str = ""

        def _mark(self, kind, task):
            if self.marks:
                name = f"{kind}-{socket.gethostname()}-{os.getpid()}-{task.get_source_id()}"
                open(os.path.join(self.marks, name), "w").close()

        def process(self, task):
            self._mark("start", task)
            time.sleep(self.seconds)
            self._mark("end", task)
            return task
""")

# Connect to (host, port) from wherever this runs; print "connected" or the errno's name.
CONNECT = textwrap.dedent("""
    import errno, socket, sys
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), 5).close()
        print("connected")
    except OSError as exc:
        print(errno.errorcode.get(exc.errno, repr(exc)))
""")

# A Dask client with another run's credentials (or none: plain TCP) must not get in.
INTRUDER = textwrap.dedent("""
    import sys
    from distributed import Client
    from distributed.security import Security
    address, mode = sys.argv[1], sys.argv[2]
    try:
        if mode == "other-certificate":
            client = Client(address, security=Security.temporary(), timeout="8s")
        else:  # the same port, without TLS
            client = Client(address.replace("tls://", "tcp://"), timeout="8s")
    except Exception as exc:
        print("refused", type(exc).__name__)
    else:
        print("connected", len(client.scheduler_info()["workers"]))
        client.close()
""")


def _stages(tmp_path: Path):
    """The stage module, pickled by value: the worker jobs cannot import this test's folder."""
    import cloudpickle

    (tmp_path / "mn_cluster_stages.py").write_text(STAGES)
    module = import_path(tmp_path / "mn_cluster_stages.py")
    cloudpickle.register_pickle_by_value(module)
    return module


def _pipeline(stages, name: str, source: Path, out: Path, seconds: float = 0.0,
              marks: Path | None = None):
    from curator_dask import JsonlReader, JsonlWriter, Pipeline

    return (Pipeline(name=name).add_stage(JsonlReader(file_paths=str(source)))
            .add_stage(stages.Slow(seconds=seconds, marks=str(marks or "")))
            .add_stage(JsonlWriter(path=str(out))))


def _cluster_kwargs(tmp_path: Path) -> dict:
    """One 1-core worker job per 1-CPU node; the dashboards stay on (on loopback)."""
    (tmp_path / "logs").mkdir(exist_ok=True)
    return {"cores": 1, "memory": "1GB", "processes": 1, "queue": "debug",
            "walltime": "00:15:00", **network_kwargs(), "log_directory": str(tmp_path / "logs"),
            "python": sys.executable}


def _records(folder: Path) -> list[str]:
    """Every JSON record under ``folder``, canonical and sorted."""
    return sorted(json.dumps(json.loads(line), sort_keys=True)
                  for path in folder.glob("*.jsonl") for line in path.read_text().splitlines()
                  if line.strip())


def _probe(cluster: PrivateCluster, node: int | None, script: str, *args: str) -> str:
    """``script`` run by this Python in node ``node``'s namespaces (None: the root namespace,
    the login side); its stdout."""
    command = [sys.executable, "-c", script, *args]
    if node is None:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    else:
        proc = cluster.run_on(node, *command)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def _hosts(client) -> dict[str, str]:
    """Worker address -> the host name its process sees."""
    return client.run(socket.gethostname)


def _logs(tmp_path: Path) -> str:
    return "\n".join(f"== {p.name}\n{p.read_text()[-1500:]}"
                     for p in sorted((tmp_path / "logs").glob("*")))


def test_three_worker_jobs_on_three_hosts_with_tls_and_private_dashboards(tmp_path,
                                                                         monkeypatch):
    pytest.importorskip("dask_jobqueue")
    import dask

    from curator_dask import DaskExecutor

    stages = _stages(tmp_path)
    generate_jsonl(str(tmp_path / "input"), files=9, docs_per_file=3, seed=24)
    marks = tmp_path / "marks"
    marks.mkdir()
    with private_cluster(tmp_path, nodes=3, cpus=1) as cluster:
        monkeypatch.setenv("SLURM_CONF", cluster.conf)
        kwargs = _cluster_kwargs(tmp_path)
        with dask.config.set({"curator-dask.slurm.watchdog-interval": 1}), \
                DaskExecutor(cluster="slurm", jobs=3, progress=False,
                             cluster_kwargs=kwargs) as executor:
            handle = executor.cluster
            address = handle.cluster.scheduler_address
            # TLS, and the scheduler on the bridge: the one address every host reaches
            assert handle.tls and address.startswith(f"tls://{cluster.controller_address}:")
            client = executor.start()
            poll_for(lambda: len(client.scheduler_info()["workers"]) == 3, 180,
                     lambda: f"3 worker jobs did not join: {cluster.slurm('squeue')}"
                     f"{_logs(tmp_path)}", interval=0.5)
            workers = client.scheduler_info()["workers"]
            # one worker per host: each on its node's own address, under its own name
            assert sorted(a.rsplit(":", 1)[0] for a in workers) == [
                f"tls://{cluster.address(i)}" for i in (1, 2, 3)], list(workers)
            hosts = _hosts(client)
            assert sorted(hosts.values()) == ["node1", "node2", "node3"], hosts
            for addr, host in hosts.items():
                assert addr.startswith(f"tls://{cluster.address(int(host[4:]))}:"), hosts

            # no certificate of this run: refused, from the login side and from a host
            for node in (None, 2):
                for mode in ("other-certificate", "plain-tcp"):
                    said = _probe(cluster, node, INTRUDER, address, mode)
                    assert said.startswith("refused"), (node, mode, said)

            # the dashboards listen on their own host's loopback: nobody else gets in
            sched_port = handle.cluster.scheduler.http_server.port
            assert _probe(cluster, None, CONNECT, "127.0.0.1", str(sched_port)) == "connected"
            for node in (1, 2):
                said = _probe(cluster, node, CONNECT, cluster.controller_address,
                              str(sched_port))
                assert said == "ECONNREFUSED", (node, said)
            for addr, info in workers.items():
                port, node = str(info["services"]["dashboard"]), int(hosts[addr][4:])
                other = 1 + node % 3
                assert _probe(cluster, node, CONNECT, "127.0.0.1", port) == "connected"
                for where, target in ((None, cluster.address(node)),
                                      (other, cluster.address(node)), (other, "127.0.0.1")):
                    said = _probe(cluster, where, CONNECT, target, port)
                    assert said == "ECONNREFUSED", (addr, where, target, said)

            pipeline = _pipeline(stages, "mn-cluster", tmp_path / "input", tmp_path / "output",
                                 seconds=0.5, marks=marks)
            result = pipeline.run(executor=executor)
    assert len(result) == 9
    assert _records(tmp_path / "output") == _records(tmp_path / "input")
    ran_on = {name.split("-")[1] for name in (p.name for p in marks.iterdir())}
    assert ran_on == {"node1", "node2", "node3"}, sorted(p.name for p in marks.iterdir())


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize(("loss", "fuse"), [("killed", True), ("cut-off-first", True),
                                            ("killed", False)],
                         ids=["killed", "cut-off-first", "killed-a-group-per-stage"])
def test_a_node_lost_mid_run_the_run_completes_exactly_once(tmp_path, monkeypatch, loss,
                                                            fuse):
    """``killed``: every process of the host dies at once, and its kernel closes their
    connections (the scheduler sees the worker go at once). ``cut-off-first``: the host's link
    goes down first, as in a power loss or a partition, so no FIN or RST ever arrives and only
    TCP keepalive (``distributed.comm.timeouts.tcp``) and heartbeats tell the scheduler.
    ``fuse=False`` (a Dask task per stage): results of finished stages that lived only on the
    lost worker are computed again, firing their checkpoint deltas a second time."""
    pytest.importorskip("dask_jobqueue")
    import dask

    from curator_dask import DaskExecutor
    from curator_dask.resumability.inspect import inspect_checkpoint

    stages = _stages(tmp_path)
    generate_jsonl(str(tmp_path / "input"), files=18, docs_per_file=3, seed=25)
    marks = tmp_path / "marks"
    marks.mkdir()
    # four 1-CPU nodes, three worker jobs: one node stays free for the replacement job
    with private_cluster(tmp_path, nodes=4, cpus=1) as cluster:
        monkeypatch.setenv("SLURM_CONF", cluster.conf)
        kwargs = _cluster_kwargs(tmp_path)
        # a cut-off host is found by TCP keepalive on the scheduler's side (in this process):
        # 12 s (its least: 10 probes) instead of 30 s, the same mechanism sooner
        with dask.config.set({"distributed.deploy.lost-worker-timeout": "2s",
                              "distributed.comm.timeouts.tcp": "12s",
                              "curator-dask.slurm.watchdog-interval": 1}), \
                DaskExecutor(cluster="slurm", jobs=3, progress=False, fuse=fuse,
                             cluster_kwargs=kwargs) as executor:
            handle, client = executor.cluster, executor.start()
            poll_for(lambda: len(client.scheduler_info()["workers"]) == 3, 180,
                     lambda: f"3 worker jobs did not join: {cluster.slurm('squeue')}"
                     f"{_logs(tmp_path)}", interval=0.5)
            first_hosts = _hosts(client)
            assert len(set(first_hosts.values())) == 3, first_hosts
            first_jobs = {job.job_id for job in handle.cluster.workers.values()}
            # the clean run: same pipeline, same input, no sleep, no fault
            clean = _pipeline(stages, "mn-loss", tmp_path / "input", tmp_path / "clean")
            assert len(clean.run(executor=executor,
                                 checkpoint_path=str(tmp_path / "clean-ckpt"))) == 18

            out, ckpt = tmp_path / "output", tmp_path / "ckpt"
            faulty = _pipeline(stages, "mn-loss", tmp_path / "input", out, seconds=2.0,
                               marks=marks)
            outcome: dict = {}

            def run() -> None:
                try:
                    outcome["run"] = faulty.run(executor=executor, checkpoint_path=str(ckpt))
                except BaseException as exc:  # noqa: BLE001 (the test inspects it)
                    outcome["run"] = exc

            runner = threading.Thread(target=run)
            runner.start()
            victim_host = "node3" if "node3" in first_hosts.values() else max(
                first_hosts.values())

            def busy() -> set[str]:
                names = [p.name for p in marks.iterdir()]
                started = {n.split("-", 1)[1] for n in names if n.startswith("start-")}
                ended = {n.split("-", 1)[1] for n in names if n.startswith("end-")}
                running = {key.split("-")[0] for key in started - ended}
                return running if len(running) == 3 and victim_host in running else set()

            poll_for(busy, 180, lambda: f"not every worker ran a task: "
                     f"{sorted(p.name for p in marks.iterdir())}", interval=0.1)
            if loss == "cut-off-first":
                subprocess.run(["ip", "link", "set", f"{cluster.name}v{victim_host[4:]}",
                                "down"], check=True, capture_output=True)
            cluster.lose_node(int(victim_host[4:]))
            lost_marks = {p.name for p in marks.iterdir()}
            runner.join(timeout=300)
            assert not runner.is_alive(), f"the run did not end after {victim_host} was lost"
            result = outcome["run"]
            assert not isinstance(result, BaseException), repr(result)
            assert len(result) == 18

            # the watchdog keeps jobs=3: the lost worker's job is replaced, on the free node
            def replaced() -> dict[str, str]:
                hosts = _hosts(client)
                return hosts if len(hosts) == 3 and victim_host not in hosts.values() else {}

            hosts = poll_for(replaced, 180, lambda: f"no replacement joined: "
                             f"{cluster.slurm('squeue')}{_logs(tmp_path)}", interval=0.5)
            now_jobs = {job.job_id for job in handle.cluster.workers.values()}
            assert len(now_jobs - first_jobs) == len(first_jobs - now_jobs) == 1, (first_jobs,
                                                                                  now_jobs)
            # the lost job was cancelled (dask-jobqueue closes what it dropped): SLURM shows
            # it COMPLETING on the unresponsive node until SlurmdTimeout marks the node DOWN
            (lost_job,) = first_jobs - now_jobs
            states = subprocess.run(["squeue", "-h", "-t", "all", "-j", lost_job, "-o", "%T"],
                                    capture_output=True, text=True, env=cluster.env).stdout
            assert not {"RUNNING", "PENDING"} & set(states.split()), states  # gone, or ending
            spare = ({f"node{i}" for i in (1, 2, 3, 4)} - set(first_hosts.values())).pop()
            assert spare in hosts.values(), hosts

            # resumed: nothing left to process
            again = _pipeline(stages, "mn-loss", tmp_path / "input", out)
            assert again.run(executor=executor, checkpoint_path=str(ckpt)) == []

    # the lost host was running a task when it went: that source ran again elsewhere
    started_on_victim = [n for n in lost_marks if n.startswith(f"start-{victim_host}-")]
    assert started_on_victim, sorted(lost_marks)
    # outputs: byte-identical to the clean run, file by file; no temp file anywhere
    assert _files(out) == _files(tmp_path / "clean")
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]
    # the checkpoint: every source complete, once
    report, clean_report = inspect_checkpoint(str(ckpt)), inspect_checkpoint(
        str(tmp_path / "clean-ckpt"))
    assert len(report.completed) == 18 and report.completed == clean_report.completed
    assert sum(w.completed for w in report.writers) == 18, report.writers
    assert all(w.error is None for w in report.writers), report.writers
