"""Array tasks across hosts (issue 24), on a private multi-node test cluster
(tests/slurm/multinode.py): each node has its own host name, PID space and address, and no
route out of the bridge, so Dask cannot find an address by "the route to 8.8.8.8".

1. One array task over two nodes (``--nodes 2 --dask-runner-tasks 4``, ``--cluster
   slurm-runner``): its ranks sit on two hosts, only the driver writes the shard's manifest,
   SIGUSR1 to the batch step drains it (exit 3) and ``--resume`` does exactly the rest.
2. Two drivers of one array with the same PID on two hosts (forced with ``ns_last_pid`` in each
   node's PID namespace) write two writer files and lose no completion.
3. Six tasks over three nodes, the two on one node preempted by a ``high`` job: retry
   discovery names exactly those shards while they are requeued and held, nothing afterwards.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from curator_dask.resumability.inspect import inspect_checkpoint
from curator_dask.resumability.layout import METADATA_DIRNAME
from curator_dask.sample_data import generate_jsonl
from curator_dask.slurm.sbatch import ArrayJobSpec, render_array_script, submit_script
from tests.helpers import poll_for
from tests.slurm.local_slurm import local_slurm
from tests.slurm.multinode import PrivateCluster, private_cluster

_reason = local_slurm()
pytestmark = [pytest.mark.slurm, pytest.mark.multinode, pytest.mark.slow,
              pytest.mark.skipif(_reason is not None, reason=_reason or "")]

# input -> Slow (TEST_SLEEP s per batch; records the host and pid of the process that ran it)
# -> output. build() runs in every process that loads the pipeline (every srun rank) and
# records the rank's host, pid and SLURM ids under $TEST_RECORDS/ranks.
PIPELINE = textwrap.dedent("""
    import json, os, socket, time
    from dataclasses import dataclass
    from curator_dask import JsonlReader, JsonlWriter, Pipeline, ProcessingStage

    def _record(kind, name, payload):
        folder = os.path.join(os.environ["TEST_RECORDS"], kind)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, name), "w") as f:
            json.dump(payload, f)

    @dataclass
    class Slow(ProcessingStage):
        name: str = "slow"
        def process(self, task):
            time.sleep(float(os.environ.get("TEST_SLEEP", "0.8")))
            try:  # the Dask worker running it: its address and its scheduler's
                from distributed import get_worker
                worker = get_worker()
                addresses = {"worker": worker.address, "scheduler": worker.scheduler.address}
            except ValueError:
                addresses = {}
            _record("stage", f"{socket.gethostname()}-{os.getpid()}-{time.time_ns()}",
                    {"host": socket.gethostname(), "pid": os.getpid(), **addresses})
            return task

    def build():
        env = os.environ
        _record("ranks", f"{env.get('SLURM_JOB_ID')}-{env.get('SLURM_ARRAY_TASK_ID')}-"
                f"{env.get('SLURM_RESTART_COUNT', '0')}-{env.get('SLURM_PROCID', 'x')}",
                {"host": socket.gethostname(), "pid": os.getpid(),
                 "resolves_to": socket.gethostbyname(socket.gethostname()),
                 "procid": env.get("SLURM_PROCID"), "nodeid": env.get("SLURM_NODEID"),
                 "shard": env.get("NEMO_CURATOR_SLURM_ARRAY_SHARD_INDEX")})
        return (Pipeline(name="multinode-array").add_stage(JsonlReader(file_paths="input"))
                .add_stage(Slow()).add_stage(JsonlWriter(path="output")))
""")

SUMMARY = re.compile(r"(\d+) source partitions: (\d+) already complete \(skipped\), (\d+) to "
                     r"process")


def _setup(tmp_path: Path, files: int, seed: int) -> None:
    (tmp_path / "pipe.py").write_text(PIPELINE)
    generate_jsonl(str(tmp_path / "input"), files=files, docs_per_file=2, seed=seed)
    (tmp_path / "logs").mkdir()


def _env(tmp_path: Path, cluster: PrivateCluster, **extra: str) -> dict[str, str]:
    return {**cluster.env, "TEST_RECORDS": str(tmp_path / "records"), **extra}


def _log(path: Path) -> str:
    return path.read_text() if path.exists() else f"no log at {path}"


def _tail(path: Path) -> str:
    """The end of a log, for a failure's message; assertions read the whole :func:`_log`."""
    return _log(path)[-4000:]


def _records(tmp_path: Path, kind: str) -> dict[str, dict]:
    folder = tmp_path / "records" / kind
    return {p.name: json.loads(p.read_text()) for p in sorted(folder.glob("*"))} \
        if folder.is_dir() else {}


def _wait_gone(cluster: PrivateCluster, job_id: str, timeout: float = 300) -> None:
    poll_for(lambda: cluster.slurm("squeue", "-h", "-j", job_id, "-o", "%i") .strip() == "",
             timeout, lambda: f"job {job_id} still queued: "
             + cluster.slurm("squeue", "-h", "-j", job_id, "-o", "%i %T %r %N"), interval=0.5,
             on_timeout=lambda: cluster.slurm("scancel", job_id))


def _job_field(cluster: PrivateCluster, job: str, name: str) -> str:
    shown = cluster.slurm("scontrol", "show", "job", "-o", job)
    return re.search(rf"\b{name}=(\S+)", shown).group(1)


def _writer_files(checkpoint: Path) -> list[str]:
    return sorted(p.name for p in (checkpoint / METADATA_DIRNAME).glob("*.mdb"))


def _outputs(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "output").glob("*.jsonl"))


def _sources(tmp_path: Path) -> list[str]:
    return sorted(str(p) for p in (tmp_path / "input").glob("*.jsonl"))


def _manifests(checkpoint: Path) -> list[Path]:
    return sorted((checkpoint / METADATA_DIRNAME).glob("**/completed_slurm_array_*.json"))


def _assert_exact(tmp_path: Path, checkpoint: Path, files: int, docs_per_file: int = 2) -> None:
    """Every source written once: ``files`` outputs, each document once, and the checkpoint
    records every source complete with no damaged writer file."""
    outputs = _outputs(tmp_path)
    assert len(outputs) == files, [p.name for p in outputs]
    lines = [line for p in outputs for line in p.read_text().splitlines() if line.strip()]
    assert len(lines) == files * docs_per_file and len(set(lines)) == len(lines)
    report = inspect_checkpoint(str(checkpoint))
    assert report.damaged == [] and all(w.error is None for w in report.writers), report
    assert len(report.completed) == files, report.completed


def test_two_node_runner_task_drains_on_usr1_and_resumes_exactly(tmp_path, monkeypatch):
    """``--nodes 2 --dask-runner-tasks 4``: the scheduler and the driver on one host, the two
    workers on the other (block distribution, 2 CPUs a node, 1 a rank); only the driver writes
    the manifest. The hosts have no default route and their /etc/hosts gives each its own name
    as 127.0.1.1 (as Debian writes it): Dask's own choice of the scheduler's address (the route
    to 8.8.8.8, else the host name's address) is one the workers' host cannot reach: the first
    task's scheduler takes the launch node's address, the second's the configured interface."""
    pytest.importorskip("dask_jobqueue")
    # 4 worker threads take 4 partitions a round (0.8 s each): with 32 partitions the USR1
    # (which takes a second or two to reach the driver through scancel and srun) still finds
    # partitions that never started; with 8 it once found only running ones (CI), which a
    # drain lets finish: a complete run, not a stopped one
    files = 32
    _setup(tmp_path, files, seed=24)
    checkpoint = tmp_path / "ckpt"
    with private_cluster(tmp_path, nodes=2, cpus=2,
                         extra_env={"SLURM_NODE_SELF_ADDR": "127.0.1.1"}) as cluster:
        monkeypatch.setenv("SLURM_CONF", cluster.conf)

        def submit(log: str, *run_args: str, **env: str) -> str:
            spec = ArrayJobSpec(pipeline=str(tmp_path / "pipe.py") + ":build", array="0",
                                total_shards=1, checkpoint_path=str(checkpoint),
                                cpus_per_task=1, nodes=2, dask_runner_tasks=4,
                                time="00:05:00", output=str(tmp_path / "logs" / log),
                                workdir=str(tmp_path), extra_run_args=run_args)
            script = render_array_script(spec)
            assert "#SBATCH --nodes=2" in script and "#SBATCH --ntasks=4" in script
            return submit_script(script, environ=_env(tmp_path, cluster, **env))

        first = submit("first.log", "--job-id", "runner-job")
        log = tmp_path / "logs" / "first.log"
        poll_for(lambda: len(_outputs(tmp_path)) >= 1, 180,
                 lambda: "the two-node step wrote no output: " + _tail(log),
                 on_timeout=lambda: cluster.slurm("scancel", first))
        assert _job_field(cluster, first, "NumNodes") == "2"
        # SLURM's --signal=B:USR1@grace: USR1 to the batch shell (`exec srun`), which forwards
        # it to every rank of the step, on both hosts
        cluster.slurm("scancel", "--batch", "--signal=USR1", first)
        _wait_gone(cluster, first)
        text = _log(log)
        assert "stopped: received SIGUSR1" in text, _tail(log)
        assert _job_field(cluster, first, "ExitCode") == "3:0", text
        done_first = len(_outputs(tmp_path))
        assert 1 <= done_first < files, text
        assert _manifests(checkpoint) == [], text  # a drained shard is not complete

        ranks = {r["procid"]: r for r in _records(tmp_path, "ranks").values()}
        assert sorted(ranks) == ["0", "1", "2", "3"], ranks
        hosts = {rank: r["host"] for rank, r in ranks.items()}
        assert len(set(hosts.values())) == 2, hosts  # the step spans two hosts
        assert hosts["0"] == hosts["1"] != hosts["2"] == hosts["3"], hosts
        assert ranks["1"]["nodeid"] == "0", ranks  # the driver: rank 1, on the first node
        assert {r["resolves_to"] for r in ranks.values()} == {"127.0.1.1"}, ranks
        stage = list(_records(tmp_path, "stage").values())
        assert {r["host"] for r in stage} == {hosts["2"]}, (stage, hosts)  # the workers ran it
        # on the bridge: the scheduler at its host's address, the workers at theirs
        node = {f"node{i}": cluster.address(i) for i in (1, 2)}
        assert {r["scheduler"].split("//")[1].rsplit(":", 1)[0] for r in stage} == \
            {node[hosts["0"]]}, stage
        assert {r["worker"].split("//")[1].rsplit(":", 1)[0] for r in stage} == \
            {node[hosts["2"]]}, stage

        # the resumed task names the interface, as a site's Dask configuration would
        # (jobqueue.slurm.interface, the key --cluster slurm reads too)
        second = submit("second.log", "--resume", "runner-job",
                        DASK_JOBQUEUE__SLURM__INTERFACE="eth0")
        _wait_gone(cluster, second)
        log = tmp_path / "logs" / "second.log"
        text = _log(log)
        assert _job_field(cluster, second, "ExitCode") == "0:0", _tail(log)
        found = SUMMARY.findall(text)
        assert found and found[-1] == (str(files), str(done_first), str(files - done_first)), \
            _tail(log)
        # exactly one manifest, written once, by the driver rank
        manifests = _manifests(checkpoint)
        assert len(manifests) == 1, manifests
        assert json.loads(manifests[0].read_text()) == {
            "minimum_shard_index": 0, "shard_index": 0, "status": "completed",
            "total_shards": 1}
        assert text.count("Wrote Slurm array completion manifest") == 1, _tail(log)
        job_dir = tmp_path / "curator-dask-jobs" / "runner-job"
        assert json.loads((job_dir / "job_summary.json").read_text())["state"] == "completed"
        _assert_exact(tmp_path, checkpoint, files)
        # the drivers (rank 1 of each job) wrote the checkpoint: each writer file is named
        # after the driver's host
        second_ranks = [r for name, r in _records(tmp_path, "ranks").items()
                        if name.startswith(f"{second}-")]
        driver_hosts = {r["host"] for r in second_ranks if r["procid"] == "1"} | {hosts["1"]}
        writers = _writer_files(checkpoint)
        assert writers and all(w.split("-")[0] in driver_hosts for w in writers), \
            (writers, driver_hosts)


def _plain_spec(tmp_path: Path, array: str, total: int, **kw) -> ArrayJobSpec:
    return ArrayJobSpec(pipeline=str(tmp_path / "pipe.py") + ":build", array=array,
                        total_shards=total, checkpoint_path=str(tmp_path / "ckpt"),
                        time="00:05:00", output=str(tmp_path / "logs" / "%A_%a.log"),
                        workdir=str(tmp_path), **kw)


def _logs(tmp_path: Path) -> str:
    return "\n".join(f"--- {p.name}\n{_tail(p)}" for p in sorted((tmp_path / "logs").glob("*")))


def test_drivers_with_the_same_pid_on_two_hosts_write_their_own_writer_files(tmp_path,
                                                                           monkeypatch):
    """Two array tasks, one a node (2 CPUs each on 2-CPU nodes), whose drivers get the same PID
    in their hosts' PID namespaces (``ns_last_pid``, written just before the driver is forked):
    each writes its own writer file into the shared checkpoint, and no completion is lost."""
    files, pid = 12, 20000
    _setup(tmp_path, files, seed=25)
    checkpoint = tmp_path / "ckpt"
    with private_cluster(tmp_path, nodes=2, cpus=2) as cluster:
        monkeypatch.setenv("SLURM_CONF", cluster.conf)
        script = render_array_script(_plain_spec(tmp_path, "0-1", 2, cpus_per_task=2))
        # the driver is forked (not exec'd) right after ns_last_pid is set, so it gets `pid`
        assert script.count("\nexec ") == 1
        script = script.replace(
            "\nexec ", f"\necho {pid - 1} > /proc/sys/kernel/ns_last_pid\n")
        job = submit_script(script, environ=_env(tmp_path, cluster, TEST_SLEEP="0.3"))
        _wait_gone(cluster, job)
        text = _logs(tmp_path)
        for task in ("0", "1"):
            assert _job_field(cluster, f"{job}_{task}", "ExitCode") == "0:0", text
        drivers = sorted((r["host"], r["pid"]) for r in _records(tmp_path, "ranks").values())
        assert drivers == [("node1", pid), ("node2", pid)], (drivers, text)
        writers = _writer_files(checkpoint)
        assert len(writers) == 2, (writers, text)
        # each named <host>-<pid>[-<token>].mdb: the same pid, each its own host's name
        named = sorted(re.match(r"^([^-.]+)-(\d+)\b", w).groups() for w in writers)
        assert named == [("node1", str(pid)), ("node2", str(pid))], writers
        assert len(_manifests(checkpoint)) == 2, text
        _assert_exact(tmp_path, checkpoint, files)
        stage_hosts = {r["host"] for r in _records(tmp_path, "stage").values()}
        assert stage_hosts == {"node1", "node2"}, stage_hosts


def _indices(expression: str) -> set[int]:
    """The indices of an sbatch --array expression such as ``1,4-5``."""
    found: set[int] = set()
    for part in filter(None, expression.strip().split(",")):
        low, _, high = part.partition("-")
        found.update(range(int(low), int(high or low) + 1))
    return found


def _retry(checkpoint: Path, cwd: Path) -> set[int]:
    from tests.helpers import cli

    shown = cli("slurm", "retry", "--checkpoint-path", str(checkpoint), cwd=cwd)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    return set().union(*map(_indices, shown.stdout.splitlines()))


def test_preempted_tasks_of_one_node_are_exactly_what_retry_finds(tmp_path, monkeypatch):
    """Six tasks over three 2-CPU nodes (1 CPU a task: two a node); a ``high`` job takes one
    node exclusively and SLURM requeues (PreemptMode=REQUEUE) the two tasks there. While they
    are held, ``slurm retry`` names exactly their shards; once they completed, nothing."""
    files = 36
    _setup(tmp_path, files, seed=26)
    checkpoint = tmp_path / "ckpt"
    with private_cluster(tmp_path, nodes=3, cpus=2) as cluster:
        monkeypatch.setenv("SLURM_CONF", cluster.conf)
        script = render_array_script(_plain_spec(tmp_path, "0-5", 6, cpus_per_task=1,
                                                 requeue=True))
        job = submit_script(script, environ=_env(tmp_path, cluster, TEST_SLEEP="1.5"))

        def placed() -> dict[int, str]:
            rows = cluster.slurm("squeue", "-h", "-j", job, "-o", "%K %T %N").split("\n")
            rows = [r.split() for r in rows if r.strip()]
            return {int(r[0]): r[2] for r in rows if len(r) == 3 and r[1] == "RUNNING"}

        nodes = poll_for(lambda: (p := placed()) and len(p) == 6 and p, 120,
                         lambda: "the six tasks did not all run: " + cluster.slurm(
                             "squeue", "-h", "-j", job, "-o", "%i %T %r %N"),
                         interval=0.2, on_timeout=lambda: cluster.slurm("scancel", job))
        by_node = {n: sorted(t for t, m in nodes.items() if m == n) for n in set(nodes.values())}
        assert sorted(len(t) for t in by_node.values()) == [2, 2, 2], by_node
        # the node whose tasks have no manifest yet (a shard without sources ends at once)
        done = {json.loads(p.read_text())["shard_index"] for p in _manifests(checkpoint)}
        victim = next((n for n, t in sorted(by_node.items()) if not set(t) & done), None)
        assert victim is not None, (by_node, done, _logs(tmp_path))
        preempted = set(by_node[victim])
        high = cluster.slurm("sbatch", "--parsable", "-p", "high", f"--nodelist={victim}",
                             "--exclusive", "-o", "/dev/null", "--wrap", "sleep 600").strip()
        try:
            # requeued: pending again (SLURM holds a requeued task back for cred_expire s);
            # held now, so they cannot start elsewhere while retry discovery looks
            def requeued() -> bool:
                rows = cluster.slurm("squeue", "-h", "-j", job, "-o", "%K %T").split("\n")
                states = dict(r.split() for r in rows if r.strip())
                return all(states.get(str(t)) == "PENDING" for t in preempted)

            poll_for(requeued, 60, lambda: "the tasks on the preempted node were not requeued: "
                     + cluster.slurm("squeue", "-h", "-o", "%i %T %r %N"), interval=0.1)
            for task in sorted(preempted):
                cluster.slurm("scontrol", "hold", f"{job}_{task}")
            others = {t for t in nodes if t not in preempted}
            poll_for(lambda: {json.loads(p.read_text())["shard_index"]
                              for p in _manifests(checkpoint)} >= others, 240,
                     lambda: "the tasks on the other nodes did not complete: " + _logs(tmp_path))
            for task in sorted(preempted):
                assert _job_field(cluster, f"{job}_{task}", "Restarts") == "1"
            assert _retry(checkpoint, tmp_path) == preempted
        finally:
            cluster.slurm("scancel", high)
        for task in sorted(preempted):
            cluster.slurm("scontrol", "release", f"{job}_{task}")
        _wait_gone(cluster, job)
        assert _retry(checkpoint, tmp_path) == set(), _logs(tmp_path)
        assert len(_manifests(checkpoint)) == 6
        _assert_exact(tmp_path, checkpoint, files)
        restarted = {r["shard"] for n, r in _records(tmp_path, "ranks").items()
                     if n.split("-")[2] == "1"}
        assert restarted == {str(t) for t in preempted}, restarted
