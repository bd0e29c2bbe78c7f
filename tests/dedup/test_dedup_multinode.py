"""Both deduplication workflows on three SLURM worker jobs on three hosts (TLS on, the P2P
shuffle between hosts over the bridge), with a host lost in the middle of a shuffle: the run
completes, or a rerun with the same ``checkpoint_path`` does, and the duplicate ids, the id
generator's JSON and the deduplicated corpus are those of a clean run on a LocalCluster.

The hosts are a private multi-node test cluster (tests/slurm/multinode.py: four 1-CPU nodes,
three worker jobs, one node spare for the replacement job), so losing a node leaves the shared
local SLURM alone. The loss is timed by the scheduler (in this process): a scheduler plugin
SIGKILLs the victim host's namespace init (every process of that host at once, as a power
loss) in the transition that finishes the first ``shuffle-transfer`` task, while the shuffle
is registered with the P2P extension and its barrier has not run, so the victim holds a share
of a shuffle in progress. No sleep decides when.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from distributed.diagnostics.plugin import SchedulerPlugin

from curator_dask.dedup.synthetic import planted_corpus
from tests.helpers import poll_for
from tests.slurm.local_slurm import local_slurm, network_kwargs
from tests.slurm.multinode import private_cluster

_reason = local_slurm()
pytestmark = [pytest.mark.slurm, pytest.mark.multinode, pytest.mark.slow,
              pytest.mark.skipif(_reason is not None, reason=_reason or "")]

FILES = 12  # input partitions: twelve transfer tasks per shuffle, so the first is not the last


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A few hundred documents with planted near-duplicate clusters (and exact copies: the
    exact workflow's duplicates), in ``FILES`` JSONL files on the shared file system."""
    root = tmp_path_factory.mktemp("dedup-multinode")
    planted = planted_corpus(300, seed=35, words=(60, 160), cluster_fraction=0.3)
    texts = list(planted.texts)
    for i in range(0, 60, 6):  # exact copies for the exact workflow to find
        texts[i + 1] = texts[i]
    dataclasses.replace(planted, texts=texts).write_jsonl(str(root / "in"), n_files=FILES)
    return root / "in"


def _workflow(kind: str, corpus: Path, work: Path, checkpoint: Path | None) -> Any:
    from curator_dask.dedup import ExactDeduplicationWorkflow, FuzzyDeduplicationWorkflow

    ckpt = None if checkpoint is None else str(checkpoint)
    common = {"output_path": str(work / "out"), "input_path": str(corpus),
              "input_filetype": "jsonl", "perform_removal": True, "checkpoint_path": ckpt}
    if kind == "exact":
        return ExactDeduplicationWorkflow(input_blocksize="1kB",  # a group per file
                                          normalize_text=True, total_nparts=4, **common)
    return FuzzyDeduplicationWorkflow(cache_path=str(work / "cache"), input_blocksize=None,
                                      bands_per_iteration=10, **common)


def _outputs(kind: str, work: Path) -> dict[str, Any]:
    """What a run wrote that a user reads: the ids to remove, the id generator's JSON and the
    deduplicated corpus (each file's records)."""
    out = work / "out"
    ids_dir, generator = (("ExactDuplicateIds", "exact_id_generator.json") if kind == "exact"
                          else ("FuzzyDuplicateIds", "fuzzy_id_generator.json"))
    ids = sorted(pq.read_table(out / ids_dir).column("_curator_dedup_id").to_pylist())
    kept = {p.relative_to(out / "deduplicated").as_posix(): sorted(
        json.dumps(json.loads(line), sort_keys=True) for line in p.read_text().splitlines()
        if line.strip()) for p in sorted((out / "deduplicated").rglob("*.jsonl"))}
    return {"ids": ids, "generator": json.loads((out / generator).read_text()),
            "deduplicated": kept}


@pytest.fixture(scope="module")
def clean(corpus, executor, tmp_path_factory) -> dict[str, dict[str, Any]]:
    """Each workflow's outputs from a clean run on the shared LocalCluster."""
    found = {}
    for kind in ("exact", "fuzzy"):
        work = tmp_path_factory.mktemp(f"clean-{kind}")
        _workflow(kind, corpus, work, None).run(executor=executor)
        found[kind] = _outputs(kind, work)
        assert found[kind]["ids"], f"the clean {kind} run found no duplicates"
    return found


def _name(key: Any) -> str:
    return str(key[0] if isinstance(key, tuple) else key)


class LoseHostMidShuffle(SchedulerPlugin):
    """SIGKILLs ``init_pid`` (a host's namespace init) once, in the scheduler's transition that
    finishes the first P2P ``shuffle-transfer`` task of a shuffle that the scheduler's P2P
    extension holds active with ``victim`` (a worker address) taking part. What it saw then is
    in ``seen``."""

    name = "lose-host-mid-shuffle"

    def __init__(self, scheduler: Any, victim: str, init_pid: int) -> None:
        self.scheduler = scheduler
        self.victim = victim
        self.init_pid = init_pid
        self.seen: dict[str, Any] = {}

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        name = _name(key)
        if self.seen or finish != "memory" or not name.startswith("shuffle-transfer-"):
            return
        token = name.removeprefix("shuffle-transfer-")
        shuffle = self.scheduler.plugins["shuffle"].active_shuffles.get(token)
        if shuffle is None or self.victim not in shuffle.participating_workers:
            return
        os.kill(self.init_pid, signal.SIGKILL)
        transfers = [ts for k, ts in self.scheduler.tasks.items() if _name(k) == name]
        barrier = self.scheduler.tasks.get(f"shuffle-barrier-{token}")
        self.seen = {"shuffle": token, "participants": sorted(shuffle.participating_workers),
                     "transfers": len(transfers),
                     "transfers_done": sum(ts.state == "memory" for ts in transfers),
                     "barrier": None if barrier is None else barrier.state}

    def remove_worker(self, scheduler: Any, worker: str, **kwargs: Any) -> None:
        """The scheduler's P2P extension sees the loss first (it was added first): a shuffle
        it restarts (or fails) leaves its active shuffles with the barrier not yet run."""
        if worker != self.victim or not self.seen:
            return
        token = self.seen["shuffle"]
        barrier = scheduler.tasks.get(f"shuffle-barrier-{token}")
        self.seen["at_removal"] = {
            "still_active": token in scheduler.plugins["shuffle"].active_shuffles,
            "barrier": None if barrier is None else barrier.state}


def _logs(folder: Path) -> str:
    return "\n".join(f"== {p.name}\n{p.read_text()[-1500:]}"
                     for p in sorted(folder.glob("*")) if p.is_file())


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in "ZX"
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("kind", ["exact", "fuzzy"])
def test_a_host_lost_mid_shuffle_gives_the_clean_runs_outputs(kind, corpus, clean, tmp_path,
                                                              monkeypatch):
    pytest.importorskip("dask_jobqueue")
    import dask

    from curator_dask import DaskExecutor

    logs = tmp_path / "logs"
    logs.mkdir()
    work, ckpt = tmp_path / "work", tmp_path / "ckpt"
    # four 1-CPU nodes, three worker jobs: one job per host, and a free node for the
    # replacement job of the lost one
    with private_cluster(tmp_path, nodes=4, cpus=1) as cluster:
        monkeypatch.setenv("SLURM_CONF", cluster.conf)
        kwargs = {"cores": 1, "memory": "2GB", "processes": 1, "queue": "debug",
                  "walltime": "00:15:00", **network_kwargs(dashboard_address=None),
                  "log_directory": str(logs), "python": sys.executable}
        # exact's ids would be grouped in memory (they fit): the P2P shuffle between hosts
        # is what loses a host here
        with dask.config.set({"distributed.deploy.lost-worker-timeout": "2s",
                              "curator-dask.slurm.watchdog-interval": 1,
                              "curator-dask.dedup.exact-in-memory-fraction": 0}), \
                DaskExecutor(cluster="slurm", jobs=3, progress=False,
                             cluster_kwargs=kwargs) as executor:
            handle, client = executor.cluster, executor.start()
            poll_for(lambda: len(client.scheduler_info()["workers"]) == 3, 180,
                     lambda: f"3 worker jobs did not join: {cluster.slurm('squeue')}"
                     f"{_logs(logs)}", interval=0.5)
            assert handle.tls and handle.cluster.scheduler_address.startswith(
                f"tls://{cluster.controller_address}:")
            hosts = client.run(socket.gethostname)
            assert sorted(hosts.values()) == ["node1", "node2", "node3"], hosts
            victim = next(a for a, h in hosts.items() if h == "node3")
            scheduler = handle.cluster.scheduler  # in this process: the plugin stays here
            plugin = LoseHostMidShuffle(scheduler, victim, cluster.init_pid(3))
            scheduler.add_plugin(plugin)

            try:
                result = _workflow(kind, corpus, work, ckpt).run(executor=executor)
                outcome = "completed"
            except Exception as exc:  # noqa: BLE001 (a failed run is resumed below)
                outcome = f"failed ({type(exc).__name__}: {str(exc)[:300]}), resumed"
                poll_for(lambda: len(client.scheduler_info()["workers"]) >= 2, 120,
                         "the other two workers left after the loss", interval=0.5)
                result = _workflow(kind, corpus, work, ckpt).run(executor=executor)
            assert plugin.seen, (f"the {kind} run ({outcome}) had no P2P shuffle with "
                                 f"{victim} taking part")
            poll_for(lambda: _gone(cluster.init_pid(3)), 30, "node3 outlived SIGKILL")
            assert victim not in client.scheduler_info()["workers"]
    # the loss landed inside the shuffle: its barrier had not run, transfers were still to do
    seen = plugin.seen
    assert victim in seen["participants"] and seen["barrier"] != "memory", seen
    assert seen["transfers_done"] < seen["transfers"], seen
    # ... and the scheduler saw it there: the shuffle left the active ones before its barrier
    assert seen.get("at_removal", {}).get("still_active") is False, seen
    assert seen["at_removal"]["barrier"] != "memory", seen
    print(f"{kind}: {outcome}; {seen}")  # which way it went, for the log (-s / -rA)
    assert result.metadata["num_duplicates"] == len(clean[kind]["ids"]), outcome
    found = _outputs(kind, work)
    assert found["ids"] == clean[kind]["ids"], outcome
    assert found["generator"] == clean[kind]["generator"], outcome
    assert found["deduplicated"] == clean[kind]["deduplicated"], outcome
