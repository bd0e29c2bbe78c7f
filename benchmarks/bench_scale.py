"""Scale benchmarks: driver memory and completion rate at 10^5-10^6 sources, resume at 10^7 ids.

Each measurement runs in a fresh Python process (the driver; with the embedded cluster the
Dask scheduler and the completion plugin live in it too), so its peak RSS is the run's own.
Run from the repository root:

    python benchmarks/bench_scale.py memory              # 20,000 and 200,000 sources
    python benchmarks/bench_scale.py memory --sizes 20000 200000 1000000 --source lazy
    python benchmarks/bench_scale.py memory --file-groups --outputs drop --sizes 20000 200000
    python benchmarks/bench_scale.py resume              # 10,000,000 ids in 1,000 files

- memory: a source stage emitting N tiny tasks (``--source list``: one list, NeMo Curator's
  contract; ``lazy``: a generator the engine pulls from), then two no-op stages, checkpoint
  on, 2 workers; each size runs with ``keep_outputs=False`` (the CLI's setting) and then with
  the default ``True`` (NeMo's contract: the driver holds every output task until the end),
  ``--outputs`` to run one of them. Printed per run: wall time, sources per second (first
  submission to end), driver peak RSS and, with outputs kept, the bytes each returned task
  holds (every object reachable from the first 1,000, each counted once); then the RSS ratio
  of each size to the smallest, and the rate with outputs kept over the rate without.
  Targets (issue 25): RSS(200,000) <= 1.5 x RSS(20,000) and RSS(1,000,000) < 300 MB with a
  lazy source and outputs not kept; the rate with outputs kept >= 0.9 x the rate without.
  ``--file-groups``: the source is a ``FilePartitioningStage`` over N tiny JSONL files on disk
  (one file per partition, the default; made once under ``<tmp>/curator-dask-bench-files/``
  in folders of 10,000, listed as ``file_paths``, so sizes share them), the no-op stages take
  the file groups (no reader). Target (issue 35, item 7): RSS(200,000) <= 1.5 x RSS(20,000)
  and RSS(1,000,000) < 300 MB with outputs not kept.
- resume: a checkpoint of N completed ids in F writer files (NeMo Curator's format, made
  once and kept under benchmarks/_data/), then a run over 1,000 sources of which half are
  complete. Printed: seconds from "cluster connected" to the first submission, and the
  driver's peak RSS, next to the same run over an empty checkpoint. Target: <= 5 s.

Each run appends its rows to benchmarks/RESULTS.md (``--no-record`` to skip).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

COMMON = r'''
import json, sys, tempfile, time
from dataclasses import dataclass
from curator_dask import DaskExecutor, Pipeline, ProcessingStage
from curator_dask.tasks import Task

@dataclass
class Tiny(Task):
    """One source; a str payload is its id (12 hex characters, like a file group's hash)."""
    @property
    def num_items(self): return 1
    def validate(self): return True
    def get_deterministic_id(self): return self.data if isinstance(self.data, str) else None

@dataclass
class Noop(ProcessingStage):
    name: str = "noop"
    def process(self, task):
        return task

def run(source, checkpoint, **executor):
    """``source`` then two no-op stages, on 2 workers of 1 thread, with a checkpoint."""
    pipeline = Pipeline(name="scale").add_stage(source)
    pipeline.add_stage(Noop(name="noop_a")).add_stage(Noop(name="noop_b"))
    with DaskExecutor(n_workers=2, threads_per_worker=1, progress=False, **executor) as ex:
        return pipeline.run(executor=ex, checkpoint_path=checkpoint)

def deep_size(objects):
    """Bytes the objects hold, each object counted once (``sys.getsizeof`` of every object
    reachable through containers, ``__dict__`` and ``__slots__``; classes and modules not)."""
    seen, todo, total = set(), list(objects), 0
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (type, type(sys))):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            todo.extend(obj.keys()); todo.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            todo.extend(obj)
        if hasattr(obj, "__dict__") and not isinstance(obj, dict):
            todo.append(vars(obj))
        for name in getattr(type(obj), "__slots__", ()):
            if hasattr(obj, name):
                todo.append(getattr(obj, name))
    return total

def peak_rss():
    """This process's peak RSS in bytes (``ru_maxrss`` would keep the parent's)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
'''

MEMORY_RUN = COMMON + r'''
n, keep, lazy = int(sys.argv[1]), sys.argv[2] == "keep", sys.argv[3] == "lazy"

@dataclass
class Source(ProcessingStage):
    name: str = "source"
    n: int = 0
    def process(self, task):
        tasks = (Tiny(dataset_name="scale", data=i) for i in range(self.n))
        return tasks if lazy else list(tasks)  # lazy: the engine pulls as its window frees

if sys.argv[3].startswith("files:"):  # file groups: FilePartitioningStage over folders
    from curator_dask.stages.file_partitioning import FilePartitioningStage
    source = FilePartitioningStage(file_paths=json.loads(sys.argv[3][len("files:"):]),
                                   file_extensions=[".jsonl"])
else:
    source = Source(n=n)
with tempfile.TemporaryDirectory() as ckpt:
    started = time.perf_counter()
    result = run(source, ckpt, keep_outputs=keep)
    wall = time.perf_counter() - started
t = result.timings
stream = t["end"] - t.get("first_submit", t["end"])
rss = peak_rss()
returned = len(result)
print(json.dumps({"n": n, "wall": wall, "stream": stream, "rss": rss, "returned": returned,
                  "task_bytes": deep_size(result[:1000]) / min(returned, 1000) if keep else 0,
                  "completed": result.checkpoint["completed"], "outputs": result.num_outputs}))
'''


def child(code: str, *args: str, code_root: str | None = None) -> dict:
    """Run ``code`` in a fresh interpreter; its last stdout line is a JSON document.
    ``code_root``: import curator_dask from that checkout (a worktree of another commit)."""
    env = dict(os.environ)
    if code_root is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [code_root, env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          cwd=tempfile.gettempdir(), check=False, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"benchmark child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


FILES_PER_FOLDER = 10_000


def file_folders(n: int) -> list[str]:
    """The folders holding ``n`` tiny JSONL files (one line each), made once and kept under
    ``<tmp>/curator-dask-bench-files/`` (folders of 10,000 files, shared by every size)."""
    if n % FILES_PER_FOLDER:
        raise SystemExit(f"--file-groups: sizes must be multiples of {FILES_PER_FOLDER:,}, "
                         f"not {n:,}")
    root = os.path.join(tempfile.gettempdir(), "curator-dask-bench-files")
    folders = []
    for k in range(n // FILES_PER_FOLDER):
        folder = os.path.join(root, f"f{k:04d}")
        folders.append(folder)
        if os.path.exists(os.path.join(folder, "done")):
            continue
        os.makedirs(folder, exist_ok=True)
        for i in range(FILES_PER_FOLDER):
            with open(os.path.join(folder, f"{i:05d}.jsonl"), "w") as f:
                f.write(f'{{"id": {k * FILES_PER_FOLDER + i}, "text": "x"}}\n')
        open(os.path.join(folder, "done"), "w").close()  # not .jsonl: not listed
    return folders


def machine() -> str:
    return f"{os.cpu_count()} CPUs, Python {platform.python_version()}"


def record(section: str, header: list[str], row: list[str]) -> None:
    sys.path.insert(0, HERE)
    from _results import append_row

    append_row(section, header, row)


def memory(args: argparse.Namespace) -> None:
    modes = {"both": ["drop", "keep"], "keep": ["keep"], "drop": ["drop"]}[args.outputs]
    sides = [("before", args.baseline), ("after", None)] if args.baseline else [("", None)]
    rows = []  # (side, mode, n, wall, rate, rss, task bytes)
    for n in args.sizes:
        for mode in modes:  # the modes of one size, and the two sides of each, in turn
            for side, root in sides:
                source = (args.source if not args.file_groups
                          else "files:" + json.dumps(file_folders(n)))
                r = child(MEMORY_RUN, str(n), mode, source, code_root=root)
                if r["completed"] != n or r["returned"] != (n if mode == "keep" else 0):
                    raise SystemExit(f"{n} sources ({mode}): the checkpoint recorded "
                                     f"{r['completed']}, the run returned {r['returned']} tasks")
                rate = n / r["stream"] if r["stream"] > 0 else float("nan")
                rows.append((side, mode, n, r["wall"], rate, r["rss"], r["task_bytes"]))
                per = f", {r['task_bytes']:,.0f} bytes per returned task" if mode == "keep" else ""
                print(f"{side:>6} {n:>9,} sources, keep_outputs={mode == 'keep'!s:5}: "
                      f"{r['wall']:7.2f} s wall, {rate:9,.0f} sources/s, driver peak RSS "
                      f"{r['rss'] / 2**20:7.1f} MiB{per}", flush=True)
    smallest = {(side, mode): next(r for r in rows if r[:2] == (side, mode))
                for side, _ in sides for mode in modes}
    for side, mode, n, _, _, rss, _ in rows:
        small = smallest[side, mode]
        if n != small[2]:
            print(f"{side:>6} keep_outputs={mode == 'keep'}: RSS {n:,} / {small[2]:,} sources: "
                  f"{rss / 2**20:.1f} / {small[5] / 2**20:.1f} MiB = {rss / small[5]:.2f}x")
    for side, _ in sides:
        for n in args.sizes:
            rate = {r[1]: r[4] for r in rows if r[0] == side and r[2] == n}
            if len(rate) == 2:
                print(f"{side:>6} {n:,} sources: rate with outputs kept / without = "
                      f"{rate['keep'] / rate['drop']:.2f} (target >= 0.9)")
    if args.baseline:
        for mode in modes:
            for n in args.sizes:
                before, after = (next(r for r in rows if r[:3] == (side, mode, n))
                                 for side in ("before", "after"))
                extra = (f", bytes per returned task {after[6] / before[6]:.2f}x"
                         if mode == "keep" else "")
                print(f"after / before, {n:,} sources, keep_outputs={mode == 'keep'}: rate "
                      f"{after[4] / before[4]:.2f}x (target >= 1.5), driver peak RSS "
                      f"{after[5] / before[5]:.2f}x{extra}")
    if args.no_record:
        return
    today = datetime.date.today().isoformat()
    command = ("`python benchmarks/bench_scale.py memory --sizes "
               + " ".join(str(s) for s in args.sizes)
               + ("" if args.outputs == "both" else f" --outputs {args.outputs}")
               + ("" if args.source == "list" else f" --source {args.source}")
               + (" --file-groups" if args.file_groups else "")
               + (" --baseline <worktree>" if args.baseline else "") + "`")
    for side, mode, n, wall, rate, rss, task_bytes in rows:
        small = smallest[side, mode]
        label = {"before": f" (before: {args.baseline_label})", "after": " (after)"}.get(side, "")
        record("scale-memory with file groups and a checkpoint" if args.file_groups
               else "scale-memory by output mode",
               ["date", "command", "machine", "source stage", "keep_outputs", "sources",
                "wall s", "sources/s", "driver peak RSS MiB", "RSS ratio to the smallest size",
                "bytes per returned task"],
               [today, command + label, machine(),
                "FilePartitioningStage" if args.file_groups else args.source,
                str(mode == "keep"), f"{n:,}",
                f"{wall:.2f}", f"{rate:,.0f}", f"{rss / 2**20:.1f}", f"{rss / small[5]:.2f}",
                f"{task_bytes:,.0f}" if mode == "keep" else "n/a"])


RESUME_RUN = COMMON + r'''
ckpt, ids_file = sys.argv[1], sys.argv[2]

@dataclass
class Source(ProcessingStage):
    name: str = "source"
    ids_file: str = ""
    def process(self, task):
        with open(self.ids_file) as f:
            return [Tiny(dataset_name="resume", data=sid) for sid in json.load(f)]

result = run(Source(ids_file=ids_file), ckpt)
t = result.timings
print(json.dumps({"start": t["first_submit"] - t["cluster"],
                  "loaded": t["checkpoint_loaded"] - t["cluster"], "rss": peak_rss(),
                  "skipped": result.skipped_sources, "ids": result.checkpoint["loaded"]}))
'''


def hex12(codes):
    """12-character lowercase hex ids (``S12``) of integers below 2**48."""
    import numpy as np

    shifts = np.arange(44, -4, -4, dtype=np.uint64)
    digits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    return digits[(codes[:, None] >> shifts) & np.uint64(15)].view("S12").ravel()


def resume_checkpoint(n: int, files: int) -> str:
    """``_data/resume-<n>-<files>/``, made once: ``ckpt/`` holds ``n`` random 12-hex ids in
    ``files`` writer files (NeMo Curator's flags and layout, each file's keys put in one
    transaction), ``sources.json`` 1,000 ids of which every other one is in the checkpoint."""
    import numpy as np

    from curator_dask.resumability.store import DB_NAME, METADATA_DIRNAME, open_writer_env

    root = os.path.join(HERE, "_data", f"resume-{n}-{files}")
    if os.path.exists(os.path.join(root, "done")):
        return root
    shutil.rmtree(root, ignore_errors=True)
    print(f"building a checkpoint of {n:,} ids in {files:,} writer files (once) ...", flush=True)
    rng = np.random.default_rng(20261130)
    codes = rng.permutation(np.unique(rng.integers(0, 1 << 48, n + n // 50 + 100,
                                                   dtype=np.uint64)))[:n]
    meta = os.path.join(root, "ckpt", METADATA_DIRNAME)
    os.makedirs(meta)
    for i, chunk in enumerate(np.array_split(codes, files)):
        env = open_writer_env(os.path.join(meta, f"node{i // 64:02d}-{10_000 + i}.mdb"))
        db = env.open_db(DB_NAME)
        with env.begin(write=True, db=db) as txn, txn.cursor(db=db) as cur:
            cur.putmulti([(key, b"1") for key in hex12(np.sort(chunk)).tolist()])
        env.close()
    fresh = rng.integers(0, 1 << 48, 2_000, dtype=np.uint64)
    known = np.sort(codes)  # (np.isin would take seconds here)
    at = np.minimum(known.searchsorted(fresh), len(known) - 1)
    fresh = fresh[known[at] != fresh][:500]
    done = codes[:: max(1, n // 500)][:500]
    sources = [c.decode() for pair in zip(hex12(done), hex12(fresh), strict=True) for c in pair]
    with open(os.path.join(root, "sources.json"), "w") as f:
        json.dump(sources, f)
    open(os.path.join(root, "done"), "w").close()
    return root


def resume_once(root: str | None, sources: str) -> dict:
    """One run over ``sources`` with a fresh checkpoint folder: empty (``root`` None) or
    holding hard links to the cached writer files (a run writes only its own file)."""
    from curator_dask.resumability.layout import METADATA_DIRNAME

    work = tempfile.mkdtemp(prefix="resume-", dir=os.path.join(HERE, "_data"))
    try:
        meta = os.path.join(work, "ckpt", METADATA_DIRNAME)
        os.makedirs(meta)
        if root is not None:
            cached = os.path.join(root, "ckpt", METADATA_DIRNAME)
            for name in os.listdir(cached):
                os.link(os.path.join(cached, name), os.path.join(meta, name))
        return child(RESUME_RUN, os.path.join(work, "ckpt"), sources)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def resume(args: argparse.Namespace) -> None:
    root = resume_checkpoint(args.ids, args.files)
    sources = os.path.join(root, "sources.json")
    empty = resume_once(None, sources)
    full = resume_once(root, sources)
    if full["skipped"] != 500 or empty["skipped"] != 0:
        raise SystemExit(f"skipped {full['skipped']} and {empty['skipped']}, not 500 and 0")
    print("cluster connected -> first submission, 1,000 sources (500 complete in the checkpoint):")
    print(f"  empty checkpoint                 : {empty['start']:6.2f} s, driver peak RSS "
          f"{empty['rss'] / 2**20:7.1f} MiB")
    print(f"  {args.ids:>10,} ids in {args.files:,} files: {full['start']:6.2f} s (loaded in "
          f"{full['loaded']:.2f} s), driver peak RSS {full['rss'] / 2**20:7.1f} MiB "
          "(target <= 5 s)")
    if args.no_record:
        return
    record("scale-resume", ["date", "command", "machine", "completed ids", "writer files",
                            "empty: start s", "empty: RSS MiB", "start s", "of which loading s",
                            "RSS MiB", "RSS difference MiB"],
           [datetime.date.today().isoformat(), "`python benchmarks/bench_scale.py resume --ids "
            f"{args.ids} --files {args.files}`", machine(), f"{full['ids']:,}",
            f"{args.files:,}", f"{empty['start']:.2f}", f"{empty['rss'] / 2**20:.1f}",
            f"{full['start']:.2f}", f"{full['loaded']:.2f}", f"{full['rss'] / 2**20:.1f}",
            f"{(full['rss'] - empty['rss']) / 2**20:.1f}"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="case", required=True)
    mem = sub.add_parser("memory", help="driver peak RSS and rate by number of sources")
    mem.add_argument("--sizes", type=int, nargs="+", default=[20_000, 200_000])
    mem.add_argument("--outputs", choices=["both", "keep", "drop"], default="both",
                     help="keep_outputs=True (keep), False (drop), or both, one after the other")
    mem.add_argument("--baseline", metavar="DIR",
                     help="a checkout of another commit (git worktree): each run also there, "
                          "just before, and the ratios printed")
    mem.add_argument("--baseline-label", default="the baseline checkout",
                     help="what the baseline is, for the rows (e.g. 'commit f1549a2')")
    mem.add_argument("--source", choices=["list", "lazy"], default="list",
                     help="the source stage returns a list (NeMo's contract) or a generator")
    mem.add_argument("--file-groups", action="store_true",
                     help="the source is FilePartitioningStage over N tiny JSONL files on disk")
    mem.add_argument("--no-record", action="store_true")
    mem.set_defaults(func=memory)
    res = sub.add_parser("resume", help="start of a run over a checkpoint of many ids")
    res.add_argument("--ids", type=int, default=10_000_000)
    res.add_argument("--files", type=int, default=1_000)
    res.add_argument("--no-record", action="store_true")
    res.set_defaults(func=resume)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
