"""End-to-end benchmarks: curator_dask on its embedded cluster vs a plain single-process loop.

Each side runs in a fresh Python process, timed from process start to exit, so imports,
cluster start and shutdown all count. Both sides do the same work and their outputs are
compared (row counts) before any number is reported. Run from the repository root:

    python benchmarks/bench_pipeline.py throughput      # 64 JSONL files x 20,000 documents
    python benchmarks/bench_pipeline.py throughput-256  # the same at four times the files
    python benchmarks/bench_pipeline.py seed-demo       # 8 partitions, 0.5 s sleep each

Each run appends one row to benchmarks/RESULTS.md (``--no-record`` to skip).

- throughput: read JSONL, keep ``len(text) > 50``, write JSONL. Target: curator_dask with 2
  workers <= 0.70 x the loop. The loop writes with pandas ``to_json`` (what a plain pyarrow
  script, and NeMo Curator's JsonlWriter, use); curator_dask's writer encodes Arrow tables
  itself, so the same loop using that encoder is timed too and printed for reference.
- throughput-256: the same on 256 files. Target: curator_dask with 2 workers takes at most the
  time of the loop that uses curator_dask's Arrow encoder (the best single-process program;
  Arrow's JSON reader in it runs on more than one thread at times).
- seed-demo: NeMo Curator's resume demo (JSONL in, one file per partition, a pass-through
  stage that sleeps, JSONL out) with a 0.5 s sleep. Target: <= 4 s with 2 workers.

For curator_dask the medians of its steps are printed too: interpreter start, imports, cluster
start, first submission, processing, cluster close and interpreter exit. ``--spawn`` measures
curator_dask started as before its forkserver (spawned workers, the usual interpreter exit).

Before each run the previous output is removed and the page cache written back (``sync``): a
side's output (800 MB at 256 files) is otherwise still being written to disk by the kernel
while the next side runs, taking CPU time from it on a small machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
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

# The filter stage of the curator_dask side, as source for the side scripts (bench_partitions.py
# uses it too); callers pass min_chars.
KEEP_LONG = '''
@dataclass
class KeepLong(ProcessingStage):
    min_chars: int = 50
    name: str = "keep_long"
    def process(self, task):
        t = task.to_pyarrow()
        return DocumentBatch(dataset_name=task.dataset_name, _metadata=task._metadata,
                             _stage_perf=task._stage_perf,
                             data=t.filter(pc.greater(pc.utf8_length(t["text"]), self.min_chars)))
'''

CURATOR = r'''
import time
t_start = time.time()
import sys
from dataclasses import dataclass
import pyarrow.compute as pc
from curator_dask import DaskExecutor, DocumentBatch, JsonlReader, JsonlWriter, Pipeline
from curator_dask import ProcessingStage
t_imported = time.time()

class TimedExecutor(DaskExecutor):
    """Notes when the run's cluster is closed (``close``), to time that step apart."""
    def close(self):
        self.closing = time.perf_counter()
        super().close()
        self.closed = time.perf_counter()

''' + KEEP_LONG + r'''
@dataclass
class SlowPassThrough(ProcessingStage):
    seconds: float = 0.5
    name: str = "slow_pass_through"
    def process(self, task):
        time.sleep(self.seconds)
        return task

if __name__ == "__main__":
    import json
    src, out, sleep, min_chars, workers = sys.argv[1], sys.argv[2], float(sys.argv[3]), \
        int(sys.argv[4]), int(sys.argv[5])
    p = Pipeline(name="bench").add_stage(JsonlReader(file_paths=src, files_per_partition=1))
    if min_chars >= 0:
        p.add_stage(KeepLong(min_chars=min_chars))
    if sleep > 0:
        p.add_stage(SlowPassThrough(seconds=sleep))
    p.add_stage(JsonlWriter(path=out))
    executor = TimedExecutor(n_workers=workers, progress=False)
    run_start = time.perf_counter()
    result = p.run(executor=executor)
    assert len(result) == result.num_sources
    steps = dict(result.timings)
    steps.update(closing=executor.closing - run_start, closed=executor.closed - run_start)
    with open(out + ".json", "w") as f:
        json.dump({"wall": result.wall_time, "timings": steps, "start": t_start,
                   "imported": t_imported, "returned": time.time()}, f)
'''

CASES = {
    # name: (files, docs per file, sleep per partition, min_chars filter or -1, target ratio/s)
    "throughput": (64, 20_000, 0.0, 50),
    "throughput-256": (256, 20_000, 0.0, 50),
    "seed-demo": (8, 100, 0.5, -1),
}


STEPS = ("interpreter start", "imports", "cluster start", "to first submit", "processing",
         "cluster close", "interpreter exit")


# --spawn: curator_dask as it started before the forkserver (issue 14), for comparison
SPAWN = {"DASK_CURATOR_DASK__LOCAL_CLUSTER__START_METHOD": "spawn",
         "DASK_CURATOR_DASK__LOCAL_CLUSTER__FREEZE_AT_EXIT": "false"}


def _timed(args: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float]:
    """Seconds from start to exit of ``args``, and the wall-clock times of both ends."""
    launched, start = time.time(), time.perf_counter()
    subprocess.run(args, check=True, env=env)
    return time.perf_counter() - start, launched, time.time()


def _steps(report: dict, launched: float, exited: float) -> dict[str, float]:
    """One curator_dask run's steps (seconds) from what its script wrote, in ``STEPS`` order."""
    t = report["timings"]
    values = (report["start"] - launched, report["imported"] - report["start"], t["cluster"],
              t["first_submit"] - t["cluster"], t["closing"] - t["first_submit"],
              t["closed"] - t["closing"], exited - report["returned"])
    return dict(zip(STEPS, values, strict=True))


def _rows(out: str) -> int:
    total = 0
    for name in os.listdir(out):
        with open(os.path.join(out, name), "rb") as f:
            total += sum(1 for _ in f)
    return total


def _prepare(args: argparse.Namespace, files: int, docs: int) -> tuple[str, dict[str, list]]:
    """The input folder (generated when missing) and each side's script and arguments."""
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
    return src, {
        "loop": [scripts["loop"]],
        "loop-arrow": [scripts["loop"], "arrow-encoder"],
        "curator": [scripts["curator"], str(args.workers)],
    }


def _measure(sides: dict[str, list], src: str, sleep: float, min_chars: int, data: str,
             repeat: int, spawn: bool) -> tuple[dict[str, list[float]], list[dict], dict]:
    """Run the sides in turn ``repeat`` times, each time in another order (a side does not
    always follow the same one): their times, curator_dask's steps, rows."""
    times: dict[str, list[float]] = {name: [] for name in sides}
    steps: list[dict[str, float]] = []
    rows = {}
    names = list(sides)
    for turn in range(repeat):
        for name in names[turn % len(names):] + names[:turn % len(names)]:
            script, *extra = sides[name]
            out = os.path.join(data, f"out-{name}")
            shutil.rmtree(out, ignore_errors=True)
            os.sync()  # no run pays for the write-back of another's output (or of its removal)
            cmd = [sys.executable, script, src, out, str(sleep), str(min_chars), *extra]
            env = {**os.environ, **SPAWN} if spawn and name == "curator" else None
            seconds, launched, exited = _timed(cmd, env)
            times[name].append(seconds)
            rows[name] = _rows(out)
            if name == "curator":
                with open(out + ".json") as f:
                    steps.append(_steps(json.load(f), launched, exited))
    if len(set(rows.values())) != 1:
        raise SystemExit(f"outputs differ: {rows}")
    return times, steps, rows


def _median_steps(steps: list[dict[str, float]]) -> str:
    return ", ".join(f"{k} {statistics.median(s[k] for s in steps):.2f}" for k in STEPS)


def _report(args: argparse.Namespace, files: int, docs: int, sleep: float,
            times: dict[str, list[float]], steps: list[dict], written: int) -> dict[str, float]:
    """Print both sides, the ratios and curator_dask's steps; returns the medians."""
    med = {name: statistics.median(values) for name, values in times.items()}
    loop, cur, loop_arrow = med["loop"], med["curator"], med["loop-arrow"]
    print(f"case {args.case}: {files} files x {docs} documents, sleep {sleep} s per partition, "
          f"{written:,} documents written")
    for label, name in (("single-process loop", "loop"),
                        ("loop with Arrow encoder", "loop-arrow"),
                        (f"curator_dask, {args.workers} workers", "curator")):
        runs = ", ".join(f"{t:.2f}" for t in times[name])
        print(f"{label:27s}: {med[name]:6.2f} s  (runs: {runs})")
    print(f"  curator_dask steps (medians, s): {_median_steps(steps)}")
    print(f"ratio curator_dask / loop                    : {cur / loop:.2f}"
          + ("  (target <= 0.70)" if args.case == "throughput" else ""))
    print(f"ratio curator_dask / loop with Arrow encoder : {cur / loop_arrow:.2f}"
          + ("  (target <= 1.00)" if args.case == "throughput-256" else ""))
    return med


def _record(args: argparse.Namespace, files: int, docs: int, sleep: float,
            med: dict[str, float], steps: list[dict]) -> None:
    """Append this run's rows to benchmarks/RESULTS.md."""
    from _results import append_row

    command = " ".join(["python benchmarks/bench_pipeline.py", *sys.argv[1:]])
    setup = (f"{files}x{docs}, sleep {sleep}, {args.workers} workers, {os.cpu_count()} CPUs, "
             f"Python {platform.python_version()}, median of {args.repeat}")
    today = str(datetime.date.today())
    loop, cur, loop_arrow = med["loop"], med["curator"], med["loop-arrow"]
    if args.case == "throughput-256":
        append_row(
            "Pipeline at 256 files: curator_dask vs the loop with the Arrow encoder",
            ["date", "command", "setup", "loop with Arrow encoder", "curator_dask",
             "ratio", "single-process loop (pandas writer)"],
            [today, f"`{command}`", setup, f"{loop_arrow:.2f} s", f"{cur:.2f} s",
             f"{cur / loop_arrow:.2f}", f"{loop:.2f} s"])
    else:
        append_row(
            "Pipeline: curator_dask vs a single-process loop",
            ["date", "command", "setup", "single-process loop", "curator_dask", "ratio",
             "loop with Arrow encoder"],
            [today, f"`{command}`", setup, f"{loop:.2f} s", f"{cur:.2f} s",
             f"{cur / loop:.2f}", f"{loop_arrow:.2f} s"])
    append_row(
        "Pipeline: curator_dask's steps",
        ["date", "command", "start method", "steps (medians, s)"],
        [today, f"`{command}`", "spawn" if args.spawn else _start_method(),
         _median_steps(steps)])


def _start_method() -> str:
    from curator_dask.backends.dask.forkserver import start_method

    return start_method()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("--files", type=int, help="input files (default: the case's)")
    parser.add_argument("--docs", type=int, help="documents per file (default: the case's)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="runs per side; medians reported")
    parser.add_argument("--data", default=os.path.join(HERE, "_data"))
    parser.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    parser.add_argument("--spawn", action="store_true", help="curator_dask's workers spawned, "
                        "as before the forkserver (and the usual interpreter exit)")
    args = parser.parse_args()
    files, docs, sleep, min_chars = CASES[args.case]
    files, docs = args.files or files, args.docs or docs
    src, sides = _prepare(args, files, docs)
    times, steps, rows = _measure(sides, src, sleep, min_chars, args.data, args.repeat,
                                  args.spawn)
    med = _report(args, files, docs, sleep, times, steps, rows["curator"])
    if not args.no_record:
        _record(args, files, docs, sleep, med, steps)


if __name__ == "__main__":
    main()
