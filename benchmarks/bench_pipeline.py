"""End-to-end benchmarks: curator_dask on its embedded cluster vs a plain single-process loop.

Each side runs in a fresh Python process, timed from process start to exit, so imports,
cluster start and shutdown all count. Both sides do the same work and their outputs are
compared (row counts) before any number is reported. Run from the repository root:

    python benchmarks/bench_pipeline.py throughput   # 64 JSONL files x 20,000 documents
    python benchmarks/bench_pipeline.py seed-demo    # 8 partitions, 0.5 s sleep each

Each run appends one row to benchmarks/RESULTS.md (``--no-record`` to skip).

- throughput: read JSONL, keep ``len(text) > 50``, write JSONL. Target: curator_dask with 2
  workers <= 0.75 x the loop. The loop writes with pandas ``to_json`` (what a plain pyarrow
  script, and NeMo Curator's JsonlWriter, use); curator_dask's writer encodes Arrow tables
  itself, so the same loop using that encoder is timed too and printed for reference.
- seed-demo: NeMo Curator's resume demo (JSONL in, one file per partition, a pass-through
  stage that sleeps, JSONL out) with a 0.5 s sleep. Target: <= 4 s with 2 workers.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

LOOP = r'''
import glob, os, sys, time
import pyarrow.compute as pc
import pyarrow.json as pj
src, out, sleep, min_chars = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
arrow_encoder = len(sys.argv) > 5
if arrow_encoder:
    from curator_dask.utils.jsonl import encode_jsonl
os.makedirs(out, exist_ok=True)
for path in sorted(glob.glob(os.path.join(src, "*.jsonl"))):
    table = pj.read_json(path)
    if min_chars >= 0:
        table = table.filter(pc.greater(pc.utf8_length(table["text"]), min_chars))
    time.sleep(sleep)
    name = os.path.join(out, os.path.basename(path))
    if arrow_encoder:
        with open(name, "wb") as f:
            for buf in encode_jsonl(table):
                f.write(buf)
    else:
        table.to_pandas().to_json(name, lines=True, orient="records", force_ascii=False)
'''

CURATOR = r'''
import sys, time
from dataclasses import dataclass
import pyarrow.compute as pc
from curator_dask import DaskExecutor, DocumentBatch, JsonlReader, JsonlWriter, Pipeline
from curator_dask import ProcessingStage

@dataclass
class KeepLong(ProcessingStage):
    min_chars: int = 50
    name: str = "keep_long"
    def process(self, task):
        t = task.to_pyarrow()
        return DocumentBatch(dataset_name=task.dataset_name, _metadata=task._metadata,
                             _stage_perf=task._stage_perf,
                             data=t.filter(pc.greater(pc.utf8_length(t["text"]), self.min_chars)))

@dataclass
class SlowPassThrough(ProcessingStage):
    seconds: float = 0.5
    name: str = "slow_pass_through"
    def process(self, task):
        time.sleep(self.seconds)
        return task

if __name__ == "__main__":
    src, out, sleep, min_chars, workers = sys.argv[1], sys.argv[2], float(sys.argv[3]), \
        int(sys.argv[4]), int(sys.argv[5])
    p = Pipeline(name="bench").add_stage(JsonlReader(file_paths=src, files_per_partition=1))
    if min_chars >= 0:
        p.add_stage(KeepLong(min_chars=min_chars))
    if sleep > 0:
        p.add_stage(SlowPassThrough(seconds=sleep))
    p.add_stage(JsonlWriter(path=out))
    result = p.run(executor=DaskExecutor(n_workers=workers, progress=False))
    assert len(result) == result.num_sources
    with open(out + ".wall", "w") as f:
        f.write(str(result.wall_time))
'''

CASES = {
    # name: (files, docs per file, sleep per partition, min_chars filter or -1, target ratio/s)
    "throughput": (64, 20_000, 0.0, 50),
    "seed-demo": (8, 100, 0.5, -1),
}


def _timed(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(args, check=True)
    return time.perf_counter() - start


def _rows(out: str) -> int:
    total = 0
    for name in os.listdir(out):
        with open(os.path.join(out, name), "rb") as f:
            total += sum(1 for _ in f)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("--files", type=int, help="input files (default: the case's)")
    parser.add_argument("--docs", type=int, help="documents per file (default: the case's)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="runs per side; medians reported")
    parser.add_argument("--data", default=os.path.join(HERE, "_data"))
    parser.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    args = parser.parse_args()
    files, docs, sleep, min_chars = CASES[args.case]
    files, docs = args.files or files, args.docs or docs

    sys.path.insert(0, os.path.dirname(HERE))
    from curator_dask.sample_data import generate_jsonl

    src = os.path.join(args.data, f"in-{files}x{docs}")
    present = [f for f in os.listdir(src) if f.endswith(".jsonl")] if os.path.isdir(src) else []
    if len(present) != files:
        print(f"generating {files} files x {docs} documents in {src} ...", flush=True)
        shutil.rmtree(src, ignore_errors=True)
        generate_jsonl(src, files=files, docs_per_file=docs, short_fraction=0.1)
    os.makedirs(args.data, exist_ok=True)
    scripts = {}
    for name, code in (("loop", LOOP), ("curator", CURATOR)):
        scripts[name] = os.path.join(args.data, f"_{name}.py")
        with open(scripts[name], "w") as f:
            f.write(code)

    # Compile the package's bytecode first, as a regular (non-editable) install does.
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(
        os.path.dirname(HERE), "curator_dask")], check=True, stdout=subprocess.DEVNULL)
    sides = {
        "loop": [scripts["loop"]],
        "loop-arrow": [scripts["loop"], "arrow-encoder"],
        "curator": [scripts["curator"], str(args.workers)],
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    execute: list[float] = []
    rows = {}
    for _ in range(args.repeat):
        for name, (script, *extra) in sides.items():
            out = os.path.join(args.data, f"out-{name}")
            shutil.rmtree(out, ignore_errors=True)
            cmd = [sys.executable, script, src, out, str(sleep), str(min_chars), *extra]
            times[name].append(_timed(cmd))
            rows[name] = _rows(out)
            if name == "curator":
                with open(out + ".wall") as f:
                    execute.append(float(f.read()))
    if len(set(rows.values())) != 1:
        raise SystemExit(f"outputs differ: {rows}")
    loop, cur = statistics.median(times["loop"]), statistics.median(times["curator"])
    loop_arrow = statistics.median(times["loop-arrow"])
    ratio = cur / loop
    print(f"case {args.case}: {files} files x {docs} documents, sleep {sleep} s per partition, "
          f"{rows['curator']:,} documents written")
    print(f"single-process loop        : {loop:6.2f} s  (runs: "
          f"{', '.join(f'{t:.2f}' for t in times['loop'])})")
    print(f"curator_dask, {args.workers} workers    : {cur:6.2f} s  (runs: "
          f"{', '.join(f'{t:.2f}' for t in times['curator'])})")
    print(f"  of which pipeline.run    : {statistics.median(execute):6.2f} s  (after imports; "
          "cluster start and shutdown included)")
    print(f"ratio curator_dask / loop  : {ratio:.2f}")
    print(f"for reference, the loop writing with curator_dask's Arrow JSONL encoder: "
          f"{loop_arrow:.2f} s (ratio curator_dask / that loop: {cur / loop_arrow:.2f})")
    if not args.no_record:
        command = " ".join(["python benchmarks/bench_pipeline.py", *sys.argv[1:]])
        from _results import append_row

        append_row(
            "Pipeline: curator_dask vs a single-process loop",
            ["date", "command", "setup", "single-process loop", "curator_dask", "ratio",
             "loop with Arrow encoder"],
            [str(datetime.date.today()), f"`{command}`",
             f"{files}x{docs}, sleep {sleep}, {args.workers} workers, {os.cpu_count()} CPUs, "
             f"Python {platform.python_version()}, median of {args.repeat}",
             f"{loop:.2f} s", f"{cur:.2f} s", f"{ratio:.2f}", f"{loop_arrow:.2f} s"],
        )


if __name__ == "__main__":
    main()
