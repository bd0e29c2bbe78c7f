"""The sides of benchmarks/bench_dedup.py, each run in a fresh interpreter by it.

``python -c "import _dedup_runners as r; r.main()" SIDE ARGS_JSON`` (with this folder on
``PYTHONPATH``, so that worker processes of Dask and of datatrove import the same module)
runs one side on the corpus in ``ARGS_JSON["src"]``, writes the doc indices it removes to
``ARGS_JSON["work"]/removed.npy`` and prints one JSON line (its own timings and details).
"""

from __future__ import annotations

import glob
import json
import logging
import os
import sys
import threading
import time
import uuid
from typing import Any

import numpy as np


def peak_rss() -> int:
    """This process's peak RSS in bytes."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def input_files(args: dict[str, Any]) -> list[str]:
    return sorted(glob.glob(os.path.join(args["src"], f"*.{args['format']}")))


def read_table(path: str, columns: list[str]) -> Any:
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    if path.endswith(".parquet"):
        return pq.read_table(path, columns=columns)
    return pj.read_json(path).select(columns)


# -- curator_dask: map the workflow's dedup ids back to doc indices --------------------------

def doc_indices(dedup_ids: np.ndarray, generator_json: str, args: dict[str, Any]) -> np.ndarray:
    """Doc indices of a workflow's ``dedup_ids``. Each range of its id generator belongs to one
    file group (keyed by NeMo's ``uuid5`` of the group's paths) whose rows are its files' rows
    in the group's order; the groups are those ``FilePartitioningStage`` makes of the input
    with the workflow's blocksize, and each corpus file holds consecutive doc indices."""
    from curator_dask.stages.file_partitioning import FilePartitioningStage
    from curator_dask.tasks import EmptyTask

    files = input_files(args)
    starts = dict(zip(files, np.concatenate(([0], np.cumsum(args["rows_per_file"]))),
                      strict=False))
    rows = dict(zip(files, args["rows_per_file"], strict=True))
    extensions = [".parquet"] if args["format"] == "parquet" else [".jsonl", ".json"]
    stage = FilePartitioningStage(file_paths=args["src"], blocksize=args["blocksize"],
                                  file_extensions=extensions)
    groups = {}

    def known(paths: list[str]) -> None:
        local = [p.removeprefix("file://") for p in paths]
        groups[str(uuid.uuid5(uuid.NAMESPACE_URL, ";".join(paths)))] = np.concatenate(
            [np.arange(starts[p], starts[p] + rows[p]) for p in local])

    for task in stage.process(EmptyTask()):
        known(list(task.data))
        for path in task.data:  # the files' own ranges, beside their groups'
            known([path])
    with open(generator_json) as f:
        registry = json.load(f)["batch_registry"]
    doc = np.full(max((high + 1 for _, high in registry.values()), default=0), -1, np.int64)
    for key, (low, high) in registry.items():
        # a range of something else (a row range, the whole corpus) is covered by the files'
        if key in groups and len(groups[key]) == high - low + 1:
            doc[low:high + 1] = groups[key]
    if (doc < 0).any():
        missing = int(np.flatnonzero(doc < 0)[0])
        msg = (f"id {missing} is in no id range of a file or of a file group that "
               f"FilePartitioningStage makes with blocksize {args['blocksize']}")
        raise SystemExit(msg)
    return doc[dedup_ids]


def removed_ids(directory: str) -> np.ndarray:
    """The ids in a workflow's ``*DuplicateIds`` folder (its one column, NeMo's layout)."""
    import pyarrow.parquet as pq

    parts = sorted(glob.glob(os.path.join(directory, "*.parquet")))
    columns = [pq.read_table(p) for p in parts]
    values = [t.column(0).to_numpy() for t in columns if t.num_rows]
    return np.concatenate(values).astype(np.int64) if values else np.zeros(0, np.int64)


def worker_stats(dask_worker: Any) -> dict[str, int]:
    """Peak RSS of this Dask worker process, and what it wrote to disk: P2P shuffle files and
    memory spilled by the worker's SpillBuffer (digests of distributed's context meter)."""
    from curator_dask.dedup.meter import worker_usage

    return dict(worker_usage(dask_worker))


# the log lines that end a phase of each workflow: (logger, message start, phase; None: the
# phase is the line's first argument)
PHASE_ENDS = [
    ("curator_dask.dedup.exact", "exact dedup: hashed", "hash"),
    ("curator_dask.dedup.exact", "Id generator written", "duplicates"),
    ("curator_dask.dedup.fuzzy.steps", "Minhash pipeline completed", "minhash"),
    ("curator_dask.dedup.fuzzy.steps", "fuzzy phase %s done in", None),
]


class PhaseMeter(logging.Handler):
    """At each log line that ends a phase (:data:`PHASE_ENDS`), every worker's counters
    (``curator_dask.dedup.meter``) and the driver's peak RSS, each peak reset for the next
    phase: per phase, each worker's peak RSS and the bytes the P2P shuffle and the memory
    spill wrote to disk (differences of the workers' cumulative counters)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)  # a phase's end may be said at DEBUG
        self.client: Any = None
        self.started = 0.0
        self.last: dict[str, Any] = {}
        self.pids: set[int] = set()
        self.phases: list[dict[str, Any]] = []

    def start(self, client: Any) -> None:
        from curator_dask.dedup.meter import cluster_usage, peak_rss

        self.client, self.started = client, time.perf_counter()
        self.last = cluster_usage(client, reset=True)
        self.pids = {u["pid"] for u in self.last.values()}
        peak_rss(reset=True)

    def emit(self, record: logging.LogRecord) -> None:
        if self.client is None or threading.current_thread() is not threading.main_thread():
            return  # a line from another thread: client.run from it could wait on itself
        for name, start, phase in PHASE_ENDS:
            if record.name == name and str(record.msg).startswith(start):
                self.end(phase or str(record.args[0] if record.args else "?"))
                return

    def end(self, phase: str) -> None:
        from curator_dask.dedup.meter import cluster_usage, peak_rss

        now = cluster_usage(self.client, reset=True)
        counters = ("p2p_disk_bytes", "p2p_disk_writes", "p2p_limited_seconds",
                    "spill_disk_bytes")
        workers = {}
        for address, usage in now.items():
            before = self.last.get(address)
            if before is None or before["pid"] != usage["pid"]:  # a new or restarted worker
                before = dict.fromkeys(counters, 0)
            workers[address] = {"peak_rss": usage["peak_rss"],
                                **{k: usage[k] - before[k] for k in counters}}
        self.pids |= {u["pid"] for u in now.values()}
        stamp = time.perf_counter()
        self.phases.append({"phase": phase, "seconds": stamp - self.started,
                            "driver_peak_rss": peak_rss(reset=True), "workers": workers})
        self.started, self.last = stamp, now


def run_curator_dask(args: dict[str, Any], kind: str) -> dict[str, Any]:
    from curator_dask import DaskExecutor
    from curator_dask.dedup import ExactDeduplicationWorkflow, FuzzyDeduplicationWorkflow

    out, cache = os.path.join(args["work"], "output"), os.path.join(args["work"], "cache")
    common = {"output_path": out, "input_path": args["src"], "input_filetype": args["format"],
              "input_blocksize": args["blocksize"], "text_field": "text"}
    if kind == "fuzzy":
        workflow = FuzzyDeduplicationWorkflow(
            cache_path=cache, char_ngrams=24, num_bands=args["bands"],
            minhashes_per_band=args["rows"], seed=42, **common, **args["extra"])
        ids_dir, json_name = "FuzzyDuplicateIds", "fuzzy_id_generator.json"
    else:
        workflow = ExactDeduplicationWorkflow(assign_id=True, **common, **args["extra"])
        ids_dir, json_name = "ExactDuplicateIds", "exact_id_generator.json"
    cluster_kwargs = {"memory_limit": args["memory_limit"]} if args["memory_limit"] else None
    meter = PhaseMeter() if args.get("per_phase") else None
    started = time.perf_counter()
    with DaskExecutor(n_workers=args["workers"], threads_per_worker=1, progress=False,
                      cluster_kwargs=cluster_kwargs) as executor:
        if meter is not None:
            watched = logging.getLogger("curator_dask.dedup")
            watched.setLevel(logging.DEBUG)
            watched.addHandler(meter)
            meter.start(executor.client)
            started = time.perf_counter()  # the workflow alone: the cluster is up
        result = workflow.run(executor=executor)
        ran = time.perf_counter() - started
        if meter is not None:
            meter.end("rest")  # what came after the last phase's line (the ids' files)
        workers = list(executor.client.run(worker_stats).values())
    ids = removed_ids(os.path.join(out, ids_dir))
    removed = doc_indices(ids, os.path.join(out, json_name), args)
    np.save(os.path.join(args["work"], "removed.npy"), removed)
    metadata = getattr(result, "metadata", None) or {}
    # each phase once: not the total, nor NeMo's sum of the phases after LSH
    aggregates = ("total_time", "connected_components_pipeline_time")
    phases = {k.removesuffix("_time"): v for k, v in metadata.items()
              if k.endswith("_time") and k not in aggregates}
    return {"run_s": ran, "phases": phases, "workers": workers, "driver_rss": peak_rss(),
            "num_duplicates": metadata.get("num_duplicates"),
            "per_phase": None if meter is None else meter.phases,
            "worker_processes": None if meter is None else len(meter.pids)}


# -- datatrove: its four MinHash stages on LocalPipelineExecutor -----------------------------

def _datatrove_tokenizer() -> Any:
    from datatrove.utils.word_tokenizers import WordTokenizer

    class SplitTokenizer(WordTokenizer):
        """Whitespace words. datatrove's English tokenizer is spaCy's (not installed); on
        this corpus (lowercase letters and single spaces) both give the same words."""

        def word_tokenize(self, text: str) -> list[str]:
            return text.split()

        def sent_tokenize(self, text: str) -> list[str]:
            return [text]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            return [(0, len(text))]

    return SplitTokenizer()


def _id_only(self: Any, document: Any) -> dict[str, Any]:
    return {"id": document.id}


def datatrove_hash() -> tuple[str, str]:
    """``("xxhash", "")`` when datatrove's xxhash path hashes a string, else ``("sha1", why)``."""
    from datatrove.utils.hashing import HashConfig, create_hash_func

    try:
        create_hash_func(HashConfig(precision=64, hash_fc="xxhash"))("a probe text")
    except Exception as exc:  # any failure of that path: the benchmark says which
        return "sha1", f"{type(exc).__name__}: {exc}"
    return "xxhash", ""


def run_datatrove(args: dict[str, Any]) -> dict[str, Any]:
    from datatrove.executor.local import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import JsonlReader, ParquetReader
    from datatrove.pipeline.writers.jsonl import JsonlWriter
    from datatrove.utils.hashing import HashConfig

    hash_fc, why = datatrove_hash()
    config = MinhashConfig(n_grams=args["n_grams"], num_buckets=args["bands"],
                           hashes_per_bucket=args["rows"], seed=42,
                           hash_config=HashConfig(precision=64, hash_fc=hash_fc))
    work = args["work"]

    def reader() -> Any:
        cls = ParquetReader if args["format"] == "parquet" else JsonlReader
        return cls(args["src"], glob_pattern=f"*.{args['format']}", text_key="text",
                   id_key="id")

    def folder(name: str) -> str:
        return os.path.join(work, name)

    tasks, workers = args["workers"], args["workers"]
    stages = {
        "signatures": LocalPipelineExecutor(
            [reader(), MinhashDedupSignature(folder("signatures"), config=config,
                                             language=_datatrove_tokenizer())],
            tasks=tasks, workers=workers, logging_dir=folder("logs/signatures")),
        # stage 2 needs a multiple of num_buckets tasks: one per bucket, as datatrove's example
        "buckets": LocalPipelineExecutor(
            [MinhashDedupBuckets(folder("signatures"), folder("buckets"), config=config)],
            tasks=config.num_buckets, workers=workers, logging_dir=folder("logs/buckets")),
        "cluster": LocalPipelineExecutor(
            [MinhashDedupCluster(folder("buckets"), folder("remove_ids"), config=config)],
            tasks=1, logging_dir=folder("logs/cluster")),
        "filter": LocalPipelineExecutor(
            [reader(), MinhashDedupFilter(folder("remove_ids"), exclusion_writer=JsonlWriter(
                folder("removed"), output_filename="${rank}.jsonl", compression=None,
                adapter=_id_only))],
            tasks=tasks, workers=workers, logging_dir=folder("logs/filter")),
    }
    times = {}
    for name, executor in stages.items():
        started = time.perf_counter()
        executor.run()
        times[name] = time.perf_counter() - started
    removed = []
    for path in glob.glob(os.path.join(folder("removed"), "*.jsonl")):
        with open(path) as f:
            removed += [int(json.loads(line)["id"]) for line in f]
    np.save(os.path.join(work, "removed.npy"), np.asarray(removed, dtype=np.int64))
    return {"phases": times, "hash": hash_fc, "hash_fallback": why, "driver_rss": peak_rss()}


# -- datasketch: MinHash + MinHashLSH in one process -----------------------------------------

def run_datasketch(args: dict[str, Any]) -> dict[str, Any]:
    import xxhash
    from datasketch import MinHash, MinHashLSH
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    width, num_perm = 24, args["bands"] * args["rows"]
    times, started = {}, time.perf_counter()
    ids, texts = [], []
    for path in input_files(args):
        table = read_table(path, ["id", "text"])
        ids += table.column("id").to_pylist()
        texts += table.column("text").to_pylist()
    times["read"] = time.perf_counter() - started

    def shingles(text: str) -> list[bytes]:
        data = text.encode()
        return list({data[i:i + width] for i in range(max(len(data) - width + 1, 1))})

    started = time.perf_counter()
    sketches = list(MinHash.generator((shingles(t) for t in texts), num_perm=num_perm,
                                      seed=42, hashfunc=xxhash.xxh32_intdigest))
    times["minhash"] = time.perf_counter() - started
    started = time.perf_counter()
    lsh = MinHashLSH(threshold=args["threshold"], num_perm=num_perm,
                     params=(args["bands"], args["rows"]))
    with lsh.insertion_session() as session:
        for i, m in enumerate(sketches):
            session.insert(i, m, check_duplication=False)
    left, right = [], []
    for i, m in enumerate(sketches):
        for j in lsh.query(m):
            if j > i:
                left.append(i)
                right.append(j)
    times["lsh"] = time.perf_counter() - started
    started = time.perf_counter()
    n = len(sketches)
    graph = coo_matrix((np.ones(len(left)), (left, right)), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    first = np.full(labels.max() + 1, n)
    np.minimum.at(first, labels, np.arange(n))  # keep the first document of each component
    removed = np.asarray(ids, dtype=np.int64)[np.arange(n) != first[labels]]
    times["components"] = time.perf_counter() - started
    np.save(os.path.join(args["work"], "removed.npy"), removed)
    return {"phases": times, "pairs": len(left), "driver_rss": peak_rss()}


# -- pandas: single-process exact dedup, read -> md5 -> group -> write ids -------------------

def run_pandas(args: dict[str, Any]) -> dict[str, Any]:
    import hashlib

    import pandas as pd

    # File by file, keeping the id and the digest of each document only: what a careful user
    # of one process writes, and what fits in memory at 10,000,000 documents (the texts of
    # all files at once, as the rows before 2026-12-06 held them, need about twice the corpus)
    times, ids, digests = {"read": 0.0, "hash": 0.0}, [], []
    for path in input_files(args):
        started = time.perf_counter()
        table = read_table(path, ["id", "text"])
        ids.append(table.column("id").to_numpy())
        texts = table.column("text").to_pylist()
        del table
        times["read"] += time.perf_counter() - started
        started = time.perf_counter()
        digests.extend(hashlib.md5(t.encode()).hexdigest() for t in texts)
        times["hash"] += time.perf_counter() - started
    started = time.perf_counter()
    frame = pd.DataFrame({"id": np.concatenate(ids), "md5": digests})
    keep = frame.groupby("md5")["id"].transform("min")
    dups = frame.loc[frame["id"] != keep, ["id"]].sort_values("id")
    times["group"] = time.perf_counter() - started
    started = time.perf_counter()
    os.makedirs(os.path.join(args["work"], "output"), exist_ok=True)
    dups.to_parquet(os.path.join(args["work"], "output", "part.0.parquet"), index=False)
    times["write"] = time.perf_counter() - started
    np.save(os.path.join(args["work"], "removed.npy"), dups["id"].to_numpy(np.int64))
    return {"phases": times, "driver_rss": peak_rss()}


SIDES = {
    "curator_dask_fuzzy": lambda a: run_curator_dask(a, "fuzzy"),
    "curator_dask_exact": lambda a: run_curator_dask(a, "exact"),
    "datatrove": run_datatrove,
    "datasketch": run_datasketch,
    "pandas": run_pandas,
}


def main() -> None:
    side, args = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(SIDES[side](args)), flush=True)
