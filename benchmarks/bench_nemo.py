"""NeMo-native pipeline: NeMo Curator on Ray (RayClient + RayDataExecutor) vs curator_dask.

One pipeline built only from NeMo Curator 1.4's own stages, run by both executors:

    JsonlReader -> ScoreFilter(WordCountFilter(min_words=10)) -> Modify(UrlRemover()) -> JsonlWriter

on 32 JSONL files x 20,000 documents (generated once under benchmarks/_data/ with
``curator_dask.sample_data.generate_jsonl``, seed 0: about 10 % of the documents have fewer
than 10 words and are filtered out, and about 20 % of the others get one or two URLs inserted,
which the modifier removes).

- side A, NeMo Curator as its docs show: ``RayClient(num_cpus=2).start()``, then
  ``pipeline.run(executor=RayDataExecutor())``, then ``RayClient.stop()``.
- side B: ``pipeline.run(executor=curator_dask.DaskExecutor(n_workers=2))`` (its embedded
  LocalCluster, started and shut down inside ``run``).

Each side runs in a fresh Python process, timed from process start to exit, so imports and
cluster start and shutdown all count. Runs alternate (A, B, A, B, ...) ``--repeat`` times and
the median of each side is reported with the ratio B / A. Before any number is reported, the
outputs of the two sides are compared: the same output file names (NeMo's JsonlWriter names
files by a hash of their source files) and identical bytes per file; if they differ, the
difference is printed and the benchmark exits non-zero without recording. Run from the
repository root:

    python benchmarks/bench_nemo.py                 # both sides, --repeat 3
    python benchmarks/bench_nemo.py --side dask --repeat 1 --no-record   # one side alone

Target: curator_dask <= 0.25 x NeMo Curator's time (ratio B / A <= 0.25) on the 2-core machine.

Every Ray cluster the benchmark starts gets its own ``--temp-dir`` under /tmp; after each run
of side A, any process still running from that cluster is reported and ended (by its id), and
the temp dir is removed, so a failed run leaves no raylet behind. Each run appends one row to
benchmarks/RESULTS.md (``--no-record`` to skip; never with ``--side``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SIDES = {"ray": "NeMo Curator, Ray Data", "dask": "curator_dask"}

SIDE = r'''
import json, os, sys, time
t_start = time.time()
side, src, out, min_words, workers, times_path = sys.argv[1:7]
min_words, workers = int(min_words), int(workers)
times = {"start": t_start}

def save():
    with open(times_path, "w") as f:
        json.dump(times, f)

from nemo_curator.pipeline import Pipeline
from nemo_curator.stages.text.filters import ScoreFilter
from nemo_curator.stages.text.filters.heuristic import WordCountFilter
from nemo_curator.stages.text.io.reader import JsonlReader
from nemo_curator.stages.text.io.writer import JsonlWriter
from nemo_curator.stages.text.modifiers import Modify, UrlRemover
if side == "ray":
    from nemo_curator.backends.ray_data import RayDataExecutor
    from nemo_curator.core.client import RayClient
else:
    from curator_dask import DaskExecutor
times["imported"] = time.time()

pipeline = Pipeline(name="bench_nemo")
pipeline.add_stage(JsonlReader(file_paths=src, files_per_partition=1))
pipeline.add_stage(ScoreFilter(WordCountFilter(min_words=min_words), text_field="text"))
pipeline.add_stage(Modify(UrlRemover(), input_fields="text"))
pipeline.add_stage(JsonlWriter(path=out))

if side == "ray":
    client = RayClient(num_cpus=workers, ray_temp_dir=os.environ["BENCH_NEMO_RAY_TEMP_DIR"])
    try:
        client.start()
        if client.ray_process is not None:  # its session holds every process of the cluster
            with open(os.environ["BENCH_NEMO_RAY_PID_FILE"], "w") as f:
                f.write(str(client.ray_process.pid))
        times["cluster_started"] = time.time()
        result = pipeline.run(executor=RayDataExecutor())
        times["run_done"] = time.time()
    finally:
        t = time.time()
        client.stop()
        times["cluster_stopped"] = time.time()
        times["stop_s"] = times["cluster_stopped"] - t
else:
    times["cluster_started"] = times["imported"]
    result = pipeline.run(executor=DaskExecutor(n_workers=workers, progress=False))
    times["run_done"] = time.time()
    times["cluster_stopped"] = times["run_done"]
times["tasks"] = len(result or [])
save()
'''


def generate(src: str, files: int, docs: int, url_fraction: float, seed: int) -> None:
    """``generate_jsonl`` output (10 % short documents), then URLs put into some documents.

    generate_jsonl has no URL option, so its files are rewritten: each document of 10 words or
    more gets, with probability ``url_fraction``, one or two URLs inserted at random word
    positions. Deterministic for the same arguments.
    """
    sys.path.insert(0, os.path.dirname(HERE))
    from curator_dask.sample_data import generate_jsonl

    shutil.rmtree(src, ignore_errors=True)
    paths = generate_jsonl(src, files=files, docs_per_file=docs, short_fraction=0.1, seed=seed)
    rng = random.Random(seed + 1)
    hosts = ["https://www.example.com", "http://docs.example.org", "https://data.example.net"]
    for path in paths:
        with open(path, encoding="utf-8") as f:
            records = [json.loads(line) for line in f]
        for record in records:
            words = record["text"].split(" ")
            if len(words) >= 10 and rng.random() < url_fraction:
                for _ in range(rng.randint(1, 2)):
                    url = f"{rng.choice(hosts)}/{rng.choice(words)}/{rng.randint(0, 99999)}.html"
                    words.insert(rng.randint(0, len(words)), url)
                record["text"] = " ".join(words)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("\n".join(json.dumps(r) for r in records) + "\n")
        os.replace(tmp, path)


def _ray_processes(temp_dir: str, sessions: set[int]) -> list[int]:
    """Live processes of one Ray cluster: in one of ``sessions`` or naming ``temp_dir``.

    RayClient starts ``ray start --head --block`` in a new session, and every Ray process
    (GCS, raylet, dashboard, workers and actors, which rename themselves ``ray::...``) stays
    in that session; the ones that keep their command line also name the cluster's temp dir.
    Zombies are left out (nothing to end).
    """
    procs = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                named = temp_dir.encode() in f.read()
        except OSError:
            continue
        if fields[0] != b"Z":
            procs.append((int(entry), int(fields[3]), named))
    sessions.update(sid for _, sid, named in procs if named and sid != os.getsid(0))
    return [pid for pid, sid, named in procs if named or sid in sessions]


def _describe(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            name = f.read().strip()
    except OSError:
        name = "?"
    return f"{pid} {name}"


def _end_processes(pids: list[int]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.time() + 5
        while time.time() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
            time.sleep(0.1)
        pids = [p for p in pids if os.path.exists(f"/proc/{p}")]
        if not pids:
            return


def _clean_up_ray(temp_dir: str, pid_file: str, grace: float = 30.0) -> tuple[float, list[str]]:
    """Wait up to ``grace`` s for the cluster's processes to exit, then end the rest.

    Returns how long processes lingered after side A's process exited, and the ones that had
    to be ended. Waiting keeps exiting Ray processes from taking CPU from the next run.
    """
    sessions = set()
    if os.path.exists(pid_file):
        with open(pid_file) as f:
            sessions.add(int(f.read()))
    start = time.time()
    pids = _ray_processes(temp_dir, sessions)
    while pids and time.time() - start < grace:
        time.sleep(0.1)
        pids = _ray_processes(temp_dir, sessions)
    lingered = time.time() - start
    ended = [_describe(pid) for pid in pids]
    if pids:
        _end_processes(pids)
    shutil.rmtree(temp_dir, ignore_errors=True)
    return lingered, ended


def run_side(side: str, script: str, src: str, out: str, min_words: int, workers: int,
             log: str) -> tuple[float, dict, list[str]]:
    """One fresh process; returns its wall time, its own timestamps and leftover Ray processes."""
    shutil.rmtree(out, ignore_errors=True)
    times_path = out + ".times.json"
    if os.path.exists(times_path):
        os.remove(times_path)
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)  # RayClient would attach to it instead of starting a cluster
    # As in an activated virtual environment: RayClient runs the `ray` command line.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    temp_dir = None
    if side == "ray":
        # Short path: Ray's unix sockets live under it (108-character limit).
        temp_dir = tempfile.mkdtemp(prefix="bench_nemo_ray_", dir="/tmp")
        env["BENCH_NEMO_RAY_TEMP_DIR"] = temp_dir
        env["BENCH_NEMO_RAY_PID_FILE"] = os.path.join(temp_dir, "ray-start.pid")
    cmd = [sys.executable, script, side, src, out, str(min_words), str(workers), times_path]
    lingered, leftovers = None, []
    try:
        with open(log, "w") as f:
            launch = time.time()
            start = time.perf_counter()
            proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
            wall = time.perf_counter() - start
    finally:
        if temp_dir is not None:
            lingered, leftovers = _clean_up_ray(temp_dir, env["BENCH_NEMO_RAY_PID_FILE"])
    if proc.returncode != 0:
        with open(log, encoding="utf-8", errors="replace") as f:
            tail = f.read()[-6000:]
        print(f"\n*** side {side} ({SIDES[side]}) failed with exit status {proc.returncode}; "
              f"last lines of its output ({log}):\n{tail}", file=sys.stderr)
        if leftovers:
            print(f"(ended leftover Ray processes: {', '.join(leftovers)})", file=sys.stderr)
        raise SystemExit(1)
    with open(times_path) as f:
        times = json.load(f)
    written = [n for n in os.listdir(out) if n.endswith(".jsonl")] if os.path.isdir(out) else []
    inputs = [n for n in os.listdir(src) if n.endswith(".jsonl")]
    if len(written) != len(inputs) or times["tasks"] != len(inputs):
        print(f"\n*** side {side} ({SIDES[side]}) wrote {len(written)} files and returned "
              f"{times['tasks']} tasks for {len(inputs)} input files (one each expected); "
              f"see {log}", file=sys.stderr)
        raise SystemExit(1)
    times["launch"] = launch
    times["lingered"] = lingered
    times["exit"] = launch + wall
    return wall, times, leftovers


def compare(a: str, b: str) -> list[str]:
    """Differences between two output folders: file names, then bytes per file."""
    names_a, names_b = set(os.listdir(a)), set(os.listdir(b))
    problems = []
    if names_a - names_b:
        problems.append(f"only in {a}: {sorted(names_a - names_b)}")
    if names_b - names_a:
        problems.append(f"only in {b}: {sorted(names_b - names_a)}")
    for name in sorted(names_a & names_b):
        with open(os.path.join(a, name), "rb") as f:
            data_a = f.read()
        with open(os.path.join(b, name), "rb") as f:
            data_b = f.read()
        if data_a != data_b:
            lines_a, lines_b = data_a.split(b"\n"), data_b.split(b"\n")
            pairs = enumerate(zip(lines_a, lines_b, strict=False))
            first = next((i for i, (x, y) in pairs if x != y), min(len(lines_a), len(lines_b)))
            problems.append(
                f"{name}: {len(data_a)} vs {len(data_b)} bytes, {len(lines_a) - 1} vs "
                f"{len(lines_b) - 1} lines, first difference at line {first + 1}:\n"
                f"    A: {lines_a[first][:200] if first < len(lines_a) else b'<end>'!r}\n"
                f"    B: {lines_b[first][:200] if first < len(lines_b) else b'<end>'!r}")
    return problems


def _count(folder: str) -> tuple[int, int]:
    """Documents and documents containing a URL-like string in the JSONL files of ``folder``."""
    docs = urls = 0
    for name in os.listdir(folder):
        with open(os.path.join(folder, name), "rb") as f:
            for line in f:
                docs += 1
                urls += b"://" in line or b"www." in line
    return docs, urls


def _breakdown(samples: list[dict]) -> dict[str, float]:
    """Median seconds of each phase of one side's runs."""
    phases = {
        "interpreter start": ("launch", "start"),
        "imports": ("start", "imported"),
        "cluster start": ("imported", "cluster_started"),
        "pipeline.run": ("cluster_started", "run_done"),
        "cluster stop": ("run_done", "cluster_stopped"),
        "exit": ("cluster_stopped", "exit"),
    }
    return {name: statistics.median(s[b] - s[a] for s in samples)
            for name, (a, b) in phases.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=32, help="input files (default 32)")
    parser.add_argument("--docs", type=int, default=20_000, help="documents per file")
    parser.add_argument("--min-words", type=int, default=10, help="WordCountFilter min_words")
    parser.add_argument("--url-fraction", type=float, default=0.2,
                        help="fraction of the long documents given URLs")
    parser.add_argument("--workers", type=int, default=2,
                        help="Ray num_cpus and Dask n_workers (default 2)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per side; medians reported")
    parser.add_argument("--side", choices=sorted(SIDES), help="run only this side (no "
                        "comparison, nothing recorded)")
    parser.add_argument("--data", default=os.path.join(HERE, "_data"))
    parser.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    args = parser.parse_args()
    files, docs = args.files, args.docs
    os.makedirs(args.data, exist_ok=True)

    src = os.path.join(args.data, f"nemo-in-{files}x{docs}")
    stamp = json.dumps({"files": files, "docs": docs, "url_fraction": args.url_fraction,
                        "seed": 0, "version": 1})
    marker = src + ".done"
    done = open(marker).read() if os.path.exists(marker) else ""  # noqa: SIM115
    if done != stamp:
        print(f"generating {files} files x {docs} documents in {src} ...", flush=True)
        generate(src, files, docs, args.url_fraction, seed=0)
        with open(marker, "w") as f:
            f.write(stamp)
    script = os.path.join(args.data, "_nemo_side.py")
    with open(script, "w") as f:
        f.write(SIDE)

    # Compile the package's bytecode first, as a regular (non-editable) install does.
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(
        os.path.dirname(HERE), "curator_dask")], check=True, stdout=subprocess.DEVNULL)

    sides = [args.side] if args.side else ["ray", "dask"]
    outs = {s: os.path.join(args.data, f"nemo-out-{s}") for s in sides}
    logs = {s: os.path.join(args.data, f"nemo-{s}.log") for s in sides}
    walls: dict[str, list[float]] = {s: [] for s in sides}
    samples: dict[str, list[dict]] = {s: [] for s in sides}
    leftovers: list[str] = []
    for i in range(args.repeat):
        for side in sides:
            wall, times, left = run_side(side, script, src, outs[side], args.min_words,
                                         args.workers, logs[side])
            walls[side].append(wall)
            samples[side].append(times)
            leftovers += left
            print(f"  run {i + 1}/{args.repeat} {side:4s}: {wall:6.2f} s", flush=True)
            if len(sides) == 2 and side == "dask":
                problems = compare(outs["ray"], outs["dask"])
                if problems:
                    print("\n*** outputs differ (A = Ray Data, B = curator_dask); nothing "
                          "recorded:\n  " + "\n  ".join(problems), file=sys.stderr)
                    raise SystemExit(1)

    in_docs, in_urls = _count(src)
    out_docs, out_urls = _count(outs[sides[0]])
    print(f"{files} files x {docs} documents ({in_docs:,} in, {in_urls:,} with URLs); "
          f"{out_docs:,} written, {out_urls:,} with URLs; {len(os.listdir(outs[sides[0]]))} "
          f"output files")
    if len(sides) == 2:
        print(f"outputs identical: same {len(os.listdir(outs['ray']))} file names, same bytes "
              f"per file (checked after each of the {args.repeat} pairs)")
    medians = {s: statistics.median(walls[s]) for s in sides}
    for side in sides:
        label = "A" if side == "ray" else "B"
        name = f"{label} {SIDES[side]}" + (f" ({args.workers} CPUs)" if side == "ray" else
                                          f" ({args.workers} workers)")
        print(f"{name:32s}: {medians[side]:6.2f} s  (runs: "
              f"{', '.join(f'{t:.2f}' for t in walls[side])})")
        parts = _breakdown(samples[side])
        print("    " + ", ".join(f"{k} {v:.2f}" for k, v in parts.items()
                                  if not (side == "dask" and k.startswith("cluster"))))
    if "dask" in sides:
        print("    (curator_dask starts and stops its cluster inside pipeline.run)")
    for side in sides:
        with open(logs[side], encoding="utf-8", errors="replace") as f:
            warnings = sorted({line.strip()[:220] for line in f
                               if "WARN" in line or "Warning" in line})
        if warnings:
            print(f"warnings in the last {side} run's output ({logs[side]}):")
            for w in warnings[:15]:
                print(f"    {w}")
    if "ray" in sides:
        lingered = [s["lingered"] for s in samples["ray"]]
        print(f"Ray processes still exiting after side A's process had exited, for "
              f"{', '.join(f'{t:.1f}' for t in lingered)} s (not timed; waited for before the "
              f"next run)")
    if leftovers:
        print(f"Ray processes still running 30 s after side A's process exited (ended by the "
              f"benchmark): {', '.join(leftovers)}")
    if len(sides) < 2:
        return
    ratio = medians["dask"] / medians["ray"]
    print(f"ratio curator_dask / NeMo Curator on Ray: {ratio:.2f}  (target <= 0.25)")
    if not args.no_record:
        command = " ".join(["python benchmarks/bench_nemo.py", *sys.argv[1:]])
        a, b = _breakdown(samples["ray"]), _breakdown(samples["dask"])
        from _results import append_row

        append_row(
            "NeMo-native pipeline",
            ["date", "command", "setup", "NeMo Curator on Ray (A)", "curator_dask (B)",
             "ratio B/A", "where the time goes (medians)"],
            [str(datetime.date.today()), f"`{command}`",
             f"JsonlReader, ScoreFilter(WordCountFilter(min_words={args.min_words})), "
             f"Modify(UrlRemover()), JsonlWriter on {files}x{docs}, {out_docs:,} written; "
             f"RayClient(num_cpus={args.workers}) + RayDataExecutor vs DaskExecutor(n_workers="
             f"{args.workers}); outputs byte-identical; {os.cpu_count()} CPUs, Python "
             f"{platform.python_version()}, median of {args.repeat}",
             f"{medians['ray']:.2f} s", f"{medians['dask']:.2f} s", f"{ratio:.2f}",
             f"A: imports {a['imports']:.2f}, cluster start {a['cluster start']:.2f}, run "
             f"{a['pipeline.run']:.2f}, stop {a['cluster stop']:.2f}, exit {a['exit']:.2f}; "
             f"B: imports {b['imports']:.2f}, run {b['pipeline.run']:.2f}, exit "
             f"{b['exit']:.2f}"],
        )


if __name__ == "__main__":
    main()
