"""Row-range partitions on one big JSONL file: whole file vs ``auto``, and a SIGKILL at 60 %.

Run from the repository root; each case appends rows to benchmarks/RESULTS.md
(``--no-record`` to skip):

    python benchmarks/bench_partitions.py speed   # one 2000 MiB file, sides A, B, C
    python benchmarks/bench_partitions.py kill    # B with a checkpoint, killed at 60 %, resumed

The input is ONE JSONL file of ``--size-mb`` MiB (rows ``{"id", "url", "text"}``, the text 500
to 2,000 bytes of Zipf-distributed words with some non-ASCII words and JSON escapes), made once
into ``--data-dir`` (default: ``curator-dask-bench-partitions`` under the system temp folder)
and reused while its sidecar ``.json`` names its size. The pipeline reads it, keeps the rows
whose text has more than ``MIN_CHARS`` characters (about 90 %) and writes JSONL, on the
embedded cluster with 2 workers x 1 thread.

- speed: A, the whole file (one partition: today's default); B, ``partition={"mode": "auto",
  "target_size_mb": 256}``; C, B with a checkpoint (the partitions' sha256 computed in the
  planning pass and ``partitioning_info.json`` written). Each side runs in a fresh process,
  after its previous output is removed and ``sync``; the order of the sides changes from one
  repetition to the next. Target: B at most 0.6 x A. Every side must write the same rows and
  bytes. Also printed: where the time goes (imports, cluster start, planning on the driver
  (the head: with the checkpoint, of which the scan, hashes and record), per stage the sum of
  the stage calls' ``process_time`` (the result tasks' ``_stage_perf``) over the partitions,
  the workers' and the driver's CPU seconds, the workers' peak RSS).
- kill: B with a checkpoint through ``python -m curator_dask run`` as a job; the driver's
  process group gets SIGKILL when 60 % of the partitions are recorded complete, then the job is
  resumed (``--resume``, with the same ``--checkpoint-path``). The completed count is polled
  from the checkpoint's LMDB files. A stage before the reader and one after the writer log each
  partition's start and end, so the work lost is counted: partitions the resume ran again
  that had started before the kill (in flight, or finished but not yet recorded). Target: at
  most one partition per worker (2). The resume must run exactly the partitions that were not
  complete, and leave a clean run's rows.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from bench_pipeline import KEEP_LONG  # the same filter stage (benchmarks/ is on sys.path)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MIN_CHARS = 650  # text lengths are ~uniform in 500-2000: about 10 % of the rows are dropped
AUTO = {"mode": "auto", "target_size_mb": 256}
DATA_VERSION = 1

SIDE = r'''
import json, os, resource, sys, time
t_start = time.time()
from collections import defaultdict
from dataclasses import dataclass
import pyarrow.compute as pc
from curator_dask import DaskExecutor, DocumentBatch, JsonlReader, JsonlWriter, Pipeline
from curator_dask import ProcessingStage
from curator_dask.stages.file_partitioning import FilePartitioningStage
t_imported = time.time()
spent = defaultdict(float)

def timed(name, method):  # the planning steps, on the driver
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            spent[name] += time.perf_counter() - t0
    return wrapper

FilePartitioningStage.use_partition_record = timed(
    "settle", FilePartitioningStage.use_partition_record)
FilePartitioningStage.process = timed("head_process", FilePartitioningStage.process)

''' + KEEP_LONG + r'''
def worker_state():
    import psutil
    times = psutil.Process().cpu_times()
    with open("/proc/self/status") as f:
        peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
    return times.user + times.system, peak / 1024

if __name__ == "__main__":
    args = json.loads(sys.argv[1])
    p = Pipeline(name="bench-partitions").add_stage(
        JsonlReader(file_paths=args["src"], partition=args["partition"]))
    p.add_stage(KeepLong(min_chars=args["min_chars"])).add_stage(JsonlWriter(path=args["out"]))
    t0 = time.perf_counter()
    with DaskExecutor(n_workers=2, threads_per_worker=1, progress=False) as ex:
        cluster = time.perf_counter() - t0
        client = ex.start()
        before = client.run(worker_state)
        d0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        result = p.run(executor=ex, checkpoint_path=args["ckpt"])
        run = time.perf_counter() - t0
        d1 = resource.getrusage(resource.RUSAGE_SELF)
        after = client.run(worker_state)
        t0 = time.perf_counter()
    closed = time.perf_counter() - t0
    stages = defaultdict(float)
    for task in result:
        for perf in task._stage_perf:
            stages[perf.stage_name] += perf.process_time
    print(json.dumps({
        "start": t_start, "imported": t_imported, "cluster": cluster, "run": run, "close": closed,
        "returned": time.time(), "timings": result.timings, "sources": result.num_sources,
        "planning": dict(spent), "stages": dict(stages),
        "driver_cpu": d1.ru_utime + d1.ru_stime - d0.ru_utime - d0.ru_stime,
        "workers_cpu": sum(after[w][0] - before[w][0] for w in after),
        "workers_peak_mib": max(v[1] for v in after.values())}))
'''


# -- the input ---------------------------------------------------------------------------------
_COMMON = ("the of and to in a is that for it as was with be by on not he this are or his from "
           "at which but have an they you were her she there one all we their been has when who "
           "will more no if out so said what up its about into than them can only other new some "
           "could time these two may then do first any my now such like our over even most made "
           "after also did many before must through back years where much your way well down "
           "should because each just those people how too little state good very make world "
           "still own see men work long get here between both life being under never day same "
           "another know while last might us great old year off come since against go came right "
           "used take three data model training corpus language quality filter document web "
           "page")
_FOREIGN = ["café", "naïve", "Zürich", "São", "Paulo", "façade", "über", "déjà", "vu", "東京",
            "データ", "데이터", "Москва", "€", "—", "…"]
_ESCAPED = ['\\"quoted\\"', "line\\nbreak", '\\"', "tab\\tstop"]  # JSON escapes, already escaped


def _vocabulary(rng: np.random.Generator) -> list[bytes]:
    """Common words, invented words from syllables, some non-ASCII and escaped tokens, some
    with punctuation: ordered from the most to the least frequent."""
    syllables = ["ka", "ri", "to", "men", "sa", "lo", "qui", "ber", "an", "tion", "el", "ov",
                 "ist", "ra", "de", "un", "ple", "mo", "ness", "ing"]
    invented = {"".join(rng.choice(syllables, rng.integers(2, 5))) for _ in range(6000)}
    common = _COMMON.split()
    invented = sorted(invented)
    rng.shuffle(invented)
    words = common + invented
    marked = [w + p for w, p in zip(words[:400], [".", ",", ";", ":", "?", "!"] * 67,
                                    strict=False)]
    vocab = words[:60] + marked + _FOREIGN + _ESCAPED + words[60:]
    return [w.encode() for w in vocab]


def _corpus(rng: np.random.Generator, size: int) -> bytes:
    """About ``size`` bytes of words separated by single spaces (Zipf frequencies)."""
    vocab = _vocabulary(rng)
    p = 1.0 / np.arange(1, len(vocab) + 1) ** 1.05
    ids = rng.choice(len(vocab), size=size // 6, p=p / p.sum())
    return b" ".join(vocab[i] for i in ids.tolist())


def _char_counts(corpus: bytes) -> np.ndarray:
    """Characters before each byte of ``corpus`` once parsed as a JSON string: UTF-8
    continuation bytes and the backslash of an escape count for nothing."""
    b = np.frombuffer(corpus, np.uint8)
    weight = ((b & 0xC0) != 0x80) & (b != ord("\\"))
    return np.concatenate([[0], np.cumsum(weight, dtype=np.int64)])


def generate(path: str, size_mb: int, seed: int = 0) -> dict:
    """Write ``path`` (at least ``size_mb`` MiB of whole rows), its sidecar, and return it."""
    rng = np.random.default_rng(seed)
    corpus = _corpus(rng, 8 << 20)  # rows are random slices of it
    spaces = np.flatnonzero(np.frombuffer(corpus, np.uint8) == 32)
    chars = _char_counts(corpus)
    usable = int(np.searchsorted(spaces, len(corpus) - 4096))
    target, written, rows, kept, batch = size_mb << 20, 0, 0, 0, 20_000
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        while written < target:
            first = spaces[rng.integers(0, usable, batch)] + 1
            last = spaces[np.searchsorted(spaces, first + rng.integers(500, 2001, batch))]
            n_chars = chars[last] - chars[first]
            parts = []
            for i, (a, b) in enumerate(zip(first.tolist(), last.tolist(), strict=True)):
                n = rows + i
                parts.append(b'{"id":"doc-%010d","url":"https://example.org/%x/%d","text":"'
                             % (n, n * 2654435761 % 4294967296, n % 997))
                parts.append(corpus[a:b])
                parts.append(b'"}\n')
            lengths = np.add.reduceat(np.fromiter(map(len, parts), np.int64, len(parts)),
                                      np.arange(0, len(parts), 3))
            take = int(np.searchsorted(np.cumsum(lengths), target - written)) + 1
            take = min(take, batch)
            f.write(b"".join(parts[:3 * take]))
            written += int(lengths[:take].sum())
            rows += take
            kept += int((n_chars[:take] > MIN_CHARS).sum())
    os.replace(tmp, path)
    info = {"version": DATA_VERSION, "size_mb": size_mb, "seed": seed, "bytes": written,
            "rows": rows, "kept": kept, "min_chars": MIN_CHARS}
    with open(path + ".json", "w") as f:
        json.dump(info, f)
    return info


def input_file(data_dir: str, size_mb: int) -> tuple[str, dict]:
    """The input file of ``size_mb`` MiB (made when missing or not the size its sidecar says)."""
    path = os.path.join(data_dir, f"rows-{size_mb}mb-v{DATA_VERSION}.jsonl")
    try:
        with open(path + ".json") as f:
            info = json.load(f)
        if info.get("min_chars") == MIN_CHARS and os.path.getsize(path) == info["bytes"]:
            return path, info
    except (OSError, ValueError, KeyError):
        pass
    print(f"generating {size_mb} MiB of JSONL into {path} ...", flush=True)
    t0 = time.perf_counter()
    info = generate(path, size_mb)
    seconds = time.perf_counter() - t0
    print(f"  {info['rows']:,} rows, {info['bytes'] / 2**20:.0f} MiB in {seconds:.1f} s "
          f"({info['bytes'] / 2**20 / seconds:.0f} MiB/s); {info['kept']:,} rows have more than "
          f"{MIN_CHARS} characters", flush=True)
    return path, info


# -- speed ------------------------------------------------------------------------------------
SIDES = {"A": ("whole file", None, False), "B": ("auto 256", AUTO, False),
         "C": ("auto 256 + checkpoint", AUTO, True)}


def output_totals(out: str) -> tuple[int, int, int]:
    """Files, rows and bytes of the JSONL files under ``out``."""
    files = rows = size = 0
    for name in sorted(os.listdir(out)):
        if not name.endswith(".jsonl"):
            continue
        files += 1
        with open(os.path.join(out, name), "rb") as f:
            while chunk := f.read(16 << 20):
                rows += chunk.count(b"\n")
                size += len(chunk)
    return files, rows, size


def run_side(args, side: str, src: str) -> dict:
    """One side in a fresh process: its measurements, with the process's wall time."""
    _, partition, checkpoint = SIDES[side]
    out, ckpt = (os.path.join(args.data_dir, f"out-{side}"), os.path.join(args.data_dir, "ckpt"))
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(ckpt, ignore_errors=True)
    os.sync()  # no side pays for the write-back of another's output
    script = os.path.join(args.data_dir, "_side.py")
    with open(script, "w") as f:
        f.write(SIDE)
    spec = {"src": src, "out": out, "partition": partition, "min_chars": MIN_CHARS,
            "ckpt": ckpt if checkpoint else None}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, script, json.dumps(spec)], capture_output=True,
                          text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"side {side} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    measured = json.loads(proc.stdout.strip().splitlines()[-1])
    measured.update(wall=wall, checkpointed=checkpoint,
                    outside=wall - (measured["returned"] - measured["start"]),
                    output=output_totals(out))
    shutil.rmtree(out, ignore_errors=True)
    return measured


def where(runs: list[dict]) -> str:
    """One side's medians: imports, cluster start, planning on the driver, the run, each
    stage's time summed over the partitions, CPU, the workers' peak memory."""
    med = lambda f: statistics.median(f(r) for r in runs)  # noqa: E731
    parts = [f"imports {med(lambda r: r['imported'] - r['start']):.2f}",
             f"cluster start {med(lambda r: r['cluster']):.2f}",
             f"run {med(lambda r: r['run']):.2f} "
             f"(planning {med(lambda r: r['timings']['head']):.2f}"]
    if runs[0]["checkpointed"]:
        settle = med(lambda r: r["planning"]["settle"])
        parts[-1] += f", of which scan + sha256 + record {settle:.2f}"
    parts[-1] += ")"
    parts.append("stages summed over partitions: " + ", ".join(
        f"{stage} {med(lambda r, s=stage: r['stages'][s]):.2f}" for stage in runs[0]["stages"]))
    parts += [f"close {med(lambda r: r['close']):.2f}",
              f"interpreter start and exit {med(lambda r: r['outside']):.2f}",
              f"workers CPU {med(lambda r: r['workers_cpu']):.1f}",
              f"driver CPU {med(lambda r: r['driver_cpu']):.1f}",
              f"worker peak RSS {med(lambda r: r['workers_peak_mib']) / 1024:.1f} GiB"]
    return ", ".join(parts)


def case_speed(args) -> None:
    src, info = input_file(args.data_dir, args.size_mb)
    names = list(SIDES) if not args.no_checkpoint_side else ["A", "B"]
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for turn in range(args.repeat):
        for side in names[turn % len(names):] + names[:turn % len(names)]:
            measured = run_side(args, side, src)
            runs[side].append(measured)
            print(f"  {side} ({SIDES[side][0]}): {measured['wall']:.2f} s, "
                  f"{measured['sources']} partitions", flush=True)
    outputs = {(n, r["output"][1], r["output"][2]) for n in names for r in runs[n]}
    if {o[1:] for o in outputs} != {(info["kept"], next(iter(outputs))[2])}:
        raise SystemExit(f"outputs differ (rows, bytes per side): {sorted(outputs)}; "
                         f"{info['kept']} rows expected")
    med = {n: statistics.median(r["wall"] for r in runs[n]) for n in names}
    parts = runs["B"][0]["sources"]
    print(f"one {info['bytes'] / 2**20:.0f} MiB file, {info['rows']:,} rows, {info['kept']:,} "
          f"written by every side; 2 workers x 1 thread")
    for n in names:
        print(f"{n} {SIDES[n][0]:22s}: {med[n]:7.2f} s  ({runs[n][0]['sources']} partition(s); "
              f"runs: {', '.join(format(r['wall'], '.2f') for r in runs[n])})")
        print(f"    {where(runs[n])}")
    print(f"ratio B/A: {med['B'] / med['A']:.3f}  (target <= 0.6)")
    if "C" in med:
        print(f"ratio C/A: {med['C'] / med['A']:.3f}; C - B: {med['C'] - med['B']:+.2f} s")
    if args.no_record:
        return
    from _results import append_row

    command = " ".join(["python benchmarks/bench_partitions.py", *sys.argv[1:]])
    c = (f"{med['C']:.2f} s ({med['C'] / med['A']:.3f} x A)" if "C" in med else "not run")
    append_row(
        "Partitions inside files: one big JSONL file, whole file vs auto",
        ["date", "command", "setup", "A: whole file", "B: auto 256", "ratio B/A",
         "C: B + checkpoint", "where the time goes (medians, s)"],
        [str(datetime.date.today()), f"`{command}`",
         f"one {info['bytes'] / 2**20:.0f} MiB JSONL file ({info['rows']:,} rows, "
         f"{info['kept']:,} kept), JsonlReader, text > {MIN_CHARS} chars, JsonlWriter; 2 workers "
         f"x 1 thread, {os.cpu_count()} CPUs, Python {platform.python_version()}, median of "
         f"{args.repeat}", f"{med['A']:.2f} s", f"{med['B']:.2f} s ({parts} partitions)",
         f"{med['B'] / med['A']:.3f}", c,
         "; ".join(f"{n}: {where(runs[n])}" for n in names)])


# -- kill -------------------------------------------------------------------------------------
PIPELINE = r'''
import os
from dataclasses import dataclass
import pyarrow.compute as pc
from curator_dask import DocumentBatch, JsonlWriter, Pipeline, ProcessingStage
from curator_dask.stages.file_partitioning import FilePartitioningStage
from curator_dask.stages.text.io.reader.jsonl import JsonlReaderStage

SRC, OUT, LOG, MIN_CHARS = {src!r}, {out!r}, {log!r}, {min_chars!r}
PARTITION = {partition!r}

def log(event, task):
    """One line per event, appended whole (O_APPEND): the partition's first row."""
    ranges = task._metadata["row_ranges"]
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{{event}} {{ranges[0][1]}} {{os.getpid()}}\n".encode())
    finally:
        os.close(fd)

@dataclass
class LogStart(ProcessingStage):
    name: str = "log_start"
    def process(self, task):
        log("start", task)
        return task

@dataclass
class LogEnd(ProcessingStage):
    name: str = "log_end"
    def process(self, task):
        log("end", task)
        return task

{keep_long}
def build():
    return (Pipeline(name="bench-partitions-kill")
            .add_stage(FilePartitioningStage(SRC, partition=PARTITION))
            .add_stage(LogStart()).add_stage(JsonlReaderStage())
            .add_stage(KeepLong(min_chars=MIN_CHARS)).add_stage(JsonlWriter(path=OUT))
            .add_stage(LogEnd()))
'''


def completed(ckpt: str) -> set[str]:
    """The checkpoint's completed ids (every writer file), as tests/helpers.py reads them."""
    from curator_dask.resumability.store import METADATA_DIRNAME, read_completed

    meta = os.path.join(ckpt, METADATA_DIRNAME)
    if not os.path.isdir(meta):
        return set()
    ids: set[str] = set()
    for name in sorted(os.listdir(meta)):
        if name.endswith(".mdb"):
            ids |= read_completed(os.path.join(meta, name))
    return ids


def group_alive(pgid: int) -> list[int]:
    """The processes of group ``pgid`` that are not zombies (Linux ``/proc``)."""
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(pid))
    return alive


def log_events(log: str) -> list[tuple[str, int]]:
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return [(e, int(row)) for e, row, _ in (line.split() for line in f)]


def case_kill(args) -> None:
    import signal

    sys.path.insert(0, ROOT)
    src, info = input_file(args.data_dir, args.size_mb)
    work = os.path.join(args.data_dir, "kill")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    out, ckpt, log = (os.path.join(work, n) for n in ("out", "ckpt", "events.log"))
    with open(os.path.join(work, "pipeline.py"), "w") as f:
        f.write(PIPELINE.format(src=src, out=out, log=log, min_chars=MIN_CHARS, partition=AUTO,
                                keep_long=KEEP_LONG))
    base = [sys.executable, "-m", "curator_dask", "run", "pipeline.py:build", "--workers", "2",
            "--threads-per-worker", "1", "--work-dir", "jobs", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get(
        "PYTHONPATH")]))}
    os.sync()
    with open(os.path.join(work, "first.log"), "w") as err:
        proc = subprocess.Popen([*base, "--checkpoint-path", ckpt, "--job-id", "bench-kill"],
                                cwd=work, env=env, stdout=err, stderr=err, start_new_session=True)
    record = os.path.join(ckpt, ".curator_dask", "partitioning_info.json")
    total = at = None
    while proc.poll() is None:
        if total is None and os.path.exists(record):
            with open(record) as f:
                total = json.load(f)["num_partitions"]
                at = math.ceil(args.kill_at * total)
        try:
            done = len(completed(ckpt)) if total is not None else 0
        except Exception:  # noqa: BLE001 (a writer file being created: not yet)
            done = 0
        if total is not None and done >= at:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait()
    if total is None or proc.returncode != -signal.SIGKILL:
        raise SystemExit(f"the run ended (status {proc.returncode}) before it was killed; see "
                         f"{work}/first.log")
    deadline = time.monotonic() + 60
    while group_alive(proc.pid):  # the workers and the forkserver die with the group
        if time.monotonic() > deadline:
            raise SystemExit(f"processes of the killed run still alive: {group_alive(proc.pid)}")
        time.sleep(0.05)
    with open(record) as f:
        ids = {p["pieces"][0]["start_row"]: p["id"] for p in json.load(f)["partitions"]}
    done = completed(ckpt)
    at_kill = log_events(log)
    started = {ids[r] for e, r in at_kill if e == "start"}
    ended = {ids[r] for e, r in at_kill if e == "end"}
    files_at_kill = len([n for n in os.listdir(out) if n.endswith(".jsonl")])
    t0 = time.perf_counter()
    resumed = subprocess.run([*base, "--checkpoint-path", ckpt, "--resume", "bench-kill"],
                             cwd=work, env=env,
                             capture_output=True, text=True, check=False)
    resume_wall = time.perf_counter() - t0
    if resumed.returncode:
        raise SystemExit(f"the resume failed ({resumed.returncode}):\n{resumed.stderr[-4000:]}")
    rerun = [ids[r] for e, r in log_events(log)[len(at_kill):] if e == "start"]
    lost = set(rerun) & started
    unrecorded, in_flight = lost & ended, lost - ended
    files, rows, _ = output_totals(out)
    print(f"one {info['bytes'] / 2**20:.0f} MiB file, {total} partitions (auto 256), 2 workers")
    print(f"killed when {len(done)} partitions were recorded complete (target {at}); "
          f"{files_at_kill} output files, {len(started)} partitions started, {len(ended)} "
          f"ended by then")
    print(f"the resume ran {len(rerun)} partitions ({total - len(done)} not complete) in "
          f"{resume_wall:.1f} s; output: {files} files, {rows:,} rows ({info['kept']:,} expected)")
    print(f"work lost: {len(lost)} partitions re-run that had started before the kill "
          f"({len(in_flight)} in flight, {len(unrecorded)} finished but not recorded); "
          f"target <= 2 (one per worker)")
    problems = []
    if sorted(rerun) != sorted(set(ids.values()) - done):
        problems.append("the resume did not run exactly the partitions not complete")
    if (files, rows) != (total, info["kept"]):
        problems.append("the output is not a clean run's")
    if problems:
        raise SystemExit(f"{'; '.join(problems)}: see {work}")
    shutil.rmtree(out)  # the logs stay in the work folder
    if args.no_record:
        return
    from _results import append_row

    command = " ".join(["python benchmarks/bench_partitions.py", *sys.argv[1:]])
    append_row(
        "Partitions inside files: SIGKILL at 60 %",
        ["date", "command", "setup", "partitions", "complete at kill", "output files at kill",
         "started before kill", "run by the resume", "work lost (target <= 2)"],
        [str(datetime.date.today()), f"`{command}`",
         f"one {info['bytes'] / 2**20:.0f} MiB JSONL file, auto 256, checkpoint, `python -m "
         f"curator_dask run` job, SIGKILL to the driver's process group, `--resume`; 2 workers x "
         f"1 thread, {os.cpu_count()} CPUs, Python {platform.python_version()}",
         str(total), str(len(done)), str(files_at_kill), str(len(started)),
         f"{len(rerun)} ({resume_wall:.1f} s)",
         f"{len(lost)} ({len(in_flight)} in flight, {len(unrecorded)} finished, not recorded)"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=["speed", "kill"])
    parser.add_argument("--size-mb", type=int, default=2000, help="input size in MiB")
    parser.add_argument("--repeat", type=int, default=3, help="runs per side; medians reported")
    parser.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(),
                                                           "curator-dask-bench-partitions"))
    parser.add_argument("--kill-at", type=float, default=0.6,
                        help="kill: fraction of the partitions complete at the kill")
    parser.add_argument("--no-checkpoint-side", action="store_true",
                        help="speed: sides A and B only")
    parser.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    os.makedirs(args.data_dir, exist_ok=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(ROOT, "curator_dask")],
                   check=True, stdout=subprocess.DEVNULL)
    {"speed": case_speed, "kill": case_kill}[args.case](args)


if __name__ == "__main__":
    main()
