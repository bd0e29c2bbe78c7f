"""Resumability benchmarks: checkpoint overhead, resume start-up, completion throughput.

Run from the repository root; each case appends a row to benchmarks/RESULTS.md
(``--no-record`` to skip):

    python benchmarks/bench_resumability.py overhead         # throughput pipeline, ckpt on/off
    python benchmarks/bench_resumability.py resume-startup   # 1,000,000 ids in 100 writer files
    python benchmarks/bench_resumability.py completion       # 20,000 no-op sources, 2 workers
    python benchmarks/bench_resumability.py stage-checkpoints  # every_stage vs disabled

Every measurement runs in a fresh Python process and prints both sides of its comparison.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

SCRIPT = r'''
import json, os, resource, sys, time
from dataclasses import dataclass
import pyarrow.compute as pc
from curator_dask import (DaskExecutor, DocumentBatch, FileGroupTask, JsonlReader, JsonlWriter,
                          Pipeline, ProcessingStage)

@dataclass
class KeepLong(ProcessingStage):
    name: str = "keep_long"
    def process(self, task):
        t = task.to_pyarrow()
        return DocumentBatch(dataset_name=task.dataset_name, _metadata=task._metadata,
                             _stage_perf=task._stage_perf,
                             data=t.filter(pc.greater(pc.utf8_length(t["text"]), 50)))

@dataclass
class ManySources(ProcessingStage):
    n: int = 1000
    name: str = "many_sources"
    def process(self, task):
        return [FileGroupTask(dataset_name="d", data=[f"virtual/{i}"]) for i in range(self.n)]

@dataclass
class Noop(ProcessingStage):
    name: str = "noop"
    def process(self, task):
        return task

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

if __name__ == "__main__":
    args = json.loads(sys.argv[1])
    if args["pipeline"] == "throughput":
        p = Pipeline(name="bench").add_stage(JsonlReader(file_paths=args["src"]))
        p.add_stage(KeepLong()).add_stage(JsonlWriter(path=args["out"]))
    else:
        p = Pipeline(name="noop").add_stage(ManySources(n=args["sources"]))
        p.add_stage(Noop()).add_stage(Noop().with_(name="noop_2"))
    with DaskExecutor(n_workers=2, progress=False) as ex:
        client = ex.start()
        workers_cpu = lambda: sum(client.run(lambda: __import__("psutil").Process().cpu_times().user
                                  + __import__("psutil").Process().cpu_times().system).values())
        w0, d0, t0 = workers_cpu(), cpu(), time.perf_counter()
        extra = {"stage_checkpoints": args["stage_ckpt"]} if args.get("stage_ckpt") else {}
        result = p.run(executor=ex, checkpoint_path=args.get("ckpt"), **extra)
        wall, driver, workers = time.perf_counter() - t0, cpu() - d0, workers_cpu() - w0
    print(json.dumps({"wall": wall, "driver_cpu": driver, "workers_cpu": workers,
                      "timings": result.timings, "outputs": len(result),
                      "skipped": result.skipped_sources,
                      "stage_checkpoints": result.stage_checkpoints}))
'''


def run_script(data_dir: str, **args) -> dict:
    script = os.path.join(data_dir, "_resumability.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, script, json.dumps(args)], check=True,
                          capture_output=True, text=True)
    measured = json.loads(proc.stdout.strip().splitlines()[-1])
    measured["process_wall"] = time.perf_counter() - started
    return measured


def record(case: str, setup: str, a: str, b: str, ratio: str) -> None:
    from _results import append_row

    command = " ".join(["python benchmarks/bench_resumability.py", *sys.argv[1:]])
    append_row(
        "Resumability",
        ["date", "command", "setup", "without / baseline", "with", "ratio or difference"],
        [str(datetime.date.today()), f"`{command}`",
         f"{setup}, {os.cpu_count()} CPUs, Python {platform.python_version()}", a, b, ratio],
    )


def throughput_input(data: str) -> str:
    """The throughput pipeline's input: 64 JSONL files x 20,000 documents (made once)."""
    from curator_dask.sample_data import generate_jsonl

    src = os.path.join(data, "in-64x20000")
    if len(os.listdir(src) if os.path.isdir(src) else []) != 64:
        generate_jsonl(src, files=64, docs_per_file=20_000, short_fraction=0.1)
    return src


def case_overhead(args) -> None:
    src = throughput_input(args.data)
    off, on = [], []
    for _ in range(args.repeat):
        for label, runs in (("off", off), ("on", on)):
            out = os.path.join(args.data, f"out-ckpt-{label}")
            ckpt = os.path.join(args.data, "ckpt-overhead")
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(ckpt, ignore_errors=True)
            extra = {"ckpt": ckpt} if label == "on" else {}
            runs.append(run_script(args.data, pipeline="throughput", src=src, out=out,
                                   **extra)["process_wall"])
    a, b = statistics.median(off), statistics.median(on)
    print(f"checkpoint off: {a:.2f} s  (runs: {', '.join(f'{t:.2f}' for t in off)})")
    print(f"checkpoint on : {b:.2f} s  (runs: {', '.join(f'{t:.2f}' for t in on)})")
    print(f"overhead      : {100 * (b / a - 1):+.1f} %  (target <= +3 %)")
    if not args.no_record:
        record("overhead", f"64x20000 throughput pipeline, median of {args.repeat}",
               f"off {a:.2f} s", f"on {b:.2f} s", f"{b / a:.3f}")


def case_stage_checkpoints(args) -> None:
    """The cost of writing stage checkpoints: the throughput pipeline with a completion
    checkpoint in both runs, stage checkpoints disabled vs every_stage (the reader's and the
    filter's outputs, Arrow IPC, deleted as each source completes)."""
    src = throughput_input(args.data)
    off, on, saved = [], [], None
    for _ in range(args.repeat):
        for label, runs in (("disabled", off), ("every_stage", on)):
            out = os.path.join(args.data, f"out-stage-{label}")
            ckpt = os.path.join(args.data, "ckpt-stage")
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(ckpt, ignore_errors=True)
            measured = run_script(args.data, pipeline="throughput", src=src, out=out, ckpt=ckpt,
                                  stage_ckpt=label)
            runs.append(measured["process_wall"])
            if label == "every_stage":
                saved = measured["stage_checkpoints"]["saved"]
    a, b = statistics.median(off), statistics.median(on)
    size = sum(v["bytes"] for v in saved.values()) / 1e6
    print(f"stage checkpoints disabled   : {a:.2f} s  (runs: {', '.join(f'{t:.2f}' for t in off)})")
    print(f"stage checkpoints every_stage: {b:.2f} s  (runs: {', '.join(f'{t:.2f}' for t in on)})")
    print(f"ratio {b / a:.3f}; {size:.0f} MB written per run: "
          + ", ".join(f"{k} {v['count']} entries {v['seconds']:.2f} s" for k, v in saved.items()))
    if not args.no_record:
        record("stage-checkpoints", f"64x20000 throughput pipeline, completion checkpoint in "
               f"both, every_stage writes {size:.0f} MB, median of {args.repeat}",
               f"disabled {a:.2f} s", f"every_stage {b:.2f} s", f"{b / a:.3f}")


def _build_checkpoint(path: str, files: int, ids_per_file: int) -> None:
    from curator_dask.resumability.store import DB_NAME, METADATA_DIRNAME, open_writer_env

    meta = os.path.join(path, METADATA_DIRNAME)
    os.makedirs(meta, exist_ok=True)
    for i in range(files):
        env = open_writer_env(os.path.join(meta, f"host{i:03d}-{1000 + i}.mdb"))
        db = env.open_db(DB_NAME)
        keys = sorted(secrets.token_hex(6).encode() for _ in range(ids_per_file))
        with env.begin(write=True, db=db) as txn:
            for key in keys:
                txn.put(key, b"1", db=db)
        env.close()


def case_resume_startup(args) -> None:
    from curator_dask.sample_data import generate_jsonl

    big = os.path.join(args.data, "ckpt-1M")
    if not os.path.isdir(big):
        print("building 100 writer files x 10,000 ids ...", flush=True)
        _build_checkpoint(big, 100, 10_000)
    src = os.path.join(args.data, "in-8x100")
    if not os.path.isdir(src):
        generate_jsonl(src, files=8, docs_per_file=100)
    empty, full = [], []
    for _ in range(args.repeat):
        for label, runs in (("empty", empty), ("1M", full)):
            work = tempfile.mkdtemp(prefix="bench-ckpt-", dir=args.data)
            ckpt = os.path.join(work, "ckpt")
            if label == "1M":
                shutil.copytree(big, ckpt)
            out = run_script(args.data, pipeline="throughput", src=src,
                             out=os.path.join(work, "out"), ckpt=ckpt)
            t = out["timings"]
            runs.append(t["first_submit"] - t["cluster"])
            shutil.rmtree(work, ignore_errors=True)
    a, b = statistics.median(empty), statistics.median(full)
    print("time from connected cluster to first new source submitted:")
    print(f"  empty checkpoint                : {a:.3f} s")
    print(f"  1,000,000 ids in 100 writer files: {b:.3f} s  (target <= 2 s)")
    if not args.no_record:
        record("resume-startup", f"8 new sources, median of {args.repeat}",
               f"empty {a:.3f} s", f"1M ids {b:.3f} s", f"+{b - a:.3f} s")


def case_completion(args) -> None:
    n = args.sources
    rows = {}
    for label in ("off", "on"):
        samples = []
        for _ in range(args.repeat):
            work = tempfile.mkdtemp(prefix="bench-tput-", dir=args.data)
            extra = {"ckpt": os.path.join(work, "ckpt")} if label == "on" else {}
            samples.append(run_script(args.data, pipeline="noop", sources=n, **extra))
            shutil.rmtree(work, ignore_errors=True)
        wall = statistics.median(s["wall"] for s in samples)
        driver = statistics.median(s["driver_cpu"] for s in samples)
        workers = statistics.median(s["workers_cpu"] for s in samples)
        rows[label] = (n / wall, driver / (driver + workers), wall)
        print(f"checkpoint {label:3}: {n / wall:8.0f} sources/s ({wall:.2f} s); driver process "
              f"(scheduler + client) {100 * rows[label][1]:.0f} % of CPU")
    print(f"target >= 2,000 sources/s with the checkpoint on: {rows['on'][0]:.0f}")
    if not args.no_record:
        packing = ("" if args.max_sources_per_task is None
                   else f", max-sources-per-task {args.max_sources_per_task}")
        record("completion", f"{n} no-op sources, 3 stages, 2 workers{packing}, median of "
               f"{args.repeat}",
               f"off {rows['off'][0]:.0f}/s", f"on {rows['on'][0]:.0f}/s "
               f"(scheduler process {100 * rows['on'][1]:.0f} % of CPU)",
               f"{rows['on'][0] / rows['off'][0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=["overhead", "resume-startup", "completion",
                                         "stage-checkpoints"])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sources", type=int, default=20_000)
    parser.add_argument("--data", default=os.path.join(HERE, "_data"))
    parser.add_argument("--max-sources-per-task", type=int, default=None,
                        help="curator-dask.execution.max-sources-per-task for the runs "
                             "(1 = one Dask task per source)")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    os.makedirs(args.data, exist_ok=True)
    if args.max_sources_per_task is not None:  # inherited by the measured processes
        os.environ["DASK_CURATOR_DASK__EXECUTION__MAX_SOURCES_PER_TASK"] = str(
            args.max_sources_per_task)
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(ROOT, "curator_dask")],
                   check=True, stdout=subprocess.DEVNULL)
    {"overhead": case_overhead, "resume-startup": case_resume_startup,
     "completion": case_completion, "stage-checkpoints": case_stage_checkpoints}[args.case](args)


if __name__ == "__main__":
    main()
