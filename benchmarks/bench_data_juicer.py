"""Data-Juicer recipes: Data-Juicer's own executors vs curator_dask, and the operators alone.

One corpus, one recipe, one run. The corpus is real text: Debian's package documentation on
this machine (``/usr/share/doc/*/copyright`` and ``changelog*.gz``, one document each, about
150 MB available; ``tests/data_juicer/corpus.py`` builds it), at least ``--mb`` MB (default
100) in files of about 1 MiB, plus a subfolder ``more/repeats.jsonl`` that repeats 1 % of the
documents under other ids (``--duplicates``), so that the deduplicator has work across
files. It is written once per parameter set under ``--work`` (default
``benchmarks/_data/data_juicer``) and reused.

The recipe is issue 34's 12-operator recipe (``tests/data_juicer/helpers.py``'s
``TWELVE_OPS``: 5 mappers, 6 filters, ``document_deduplicator``), ``np`` = ``--workers``
(default 2). Each side runs as a fresh process (its own recipe YAML and folder), timed from
its start to its exit, with its whole process tree's RSS sampled every 0.2 s (psutil),
one side at a time, in this order:

- ``dj_default``: Data-Juicer's default executor, ``dj-process --config R.yaml`` (as
  ``python -c "from data_juicer.tools.process_data import main; main()"``), with its datasets
  cache in the side's folder, emptied before the run (a user's first run).
- ``dj_ray``: Data-Juicer's ``ray_partitioned`` executor, ``--partitions`` (4) manual
  partitions; ``document_deduplicator`` becomes ``ray_document_deduplicator`` (Ray refuses the
  former) and ``read_options: {block_size: 64 MiB}`` is set (Ray's JSON reader fails with
  "straddling object straddles two block boundaries" on documents longer than its 1 MiB
  default). Ray starts its own local cluster in a temp dir of its own (``RAY_TMPDIR``); any
  process of it still running 30 s after the side exits is ended by id. ``--skip-ray``.
- ``cd_dj_ops``: ``python -m curator_dask run R.yaml --workers 2 --partition.mode manual
  --partition.num_of_partitions 8 --no-fast-ops`` (Data-Juicer's own operator code;
  ``--cd-partitions``, 8 by default: the documents differ in size by a factor of 1,000, and
  more partitions than workers even out the workers' shares).
- ``cd_fast``: the same with curator_dask's fast equivalents (the default).
- ``ops``: the operators' own time, in one process: each operator built by Data-Juicer's
  ``load_ops`` and called directly on in-memory batches of its ``batch_size`` rows (1000),
  as Data-Juicer's ``map`` feeds them (filters: ``compute_stats`` then ``process``; mappers:
  ``process``; the deduplicator: ``compute_hash`` per row, then its ``process`` on a
  ``NestedDataset``): the floor of any engine that calls them. Each operator with an
  equivalent in ``curator_dask.data_juicer.fast_ops`` is timed again through it on the same
  batches, and its output compared with the operator's.
- ``ops_busy``: the same operators, ``--workers`` processes at once, each on every
  ``workers``-th document: the operators' own seconds summed over the processes and divided
  by the workers is the floor on a machine whose cores all work, as a cluster's workers' do
  (a core is slower when its neighbours work: shared caches, memory bandwidth, clock); it is
  printed beside the issue's ratio, which divides the one-process time by the workers.

Outputs: each curator_dask ``result.jsonl`` (and ``result_stats.jsonl``) must equal Data-Juicer
default's byte for byte (SAME, or DIFFERENT with the first differing line); Ray's rows are
compared as a set (its order, and which member of a duplicate group it keeps, may differ);
the operators' process's final rows are compared with the default's (``text`` and ``id``).
A side that fails or runs past its timeout is reported with its error; the others still run.

Printed: one line per side, a per-operator table, and the ratios the issue's targets name:
curator_dask (Data-Juicer's operators) / the faster Data-Juicer executor (<= 0.6),
curator_dask (Data-Juicer's operators) / (the operators' own time / workers) (<= 1.10),
curator_dask (fast operators) / the faster Data-Juicer executor (<= 0.25), and curator_dask's
largest process (a worker) against the corpus and partition sizes. Run from the repository
root (the full run takes about 20 minutes on a 2-core machine; nothing else should run):

    python benchmarks/bench_data_juicer.py                       # 100 MB, every side
    python benchmarks/bench_data_juicer.py --mb 3 --json /tmp/dj.json   # a smoke run
    python benchmarks/bench_data_juicer.py --skip-ray --record   # and append to RESULTS.md

Each side's folder (``--work``/runs/SIDE: recipe, output, ``side.log``) is kept until the
next run; the default executor's datasets cache there takes about 12 times the corpus.
``--record`` appends one row to benchmarks/RESULTS.md ("Data-Juicer recipes").
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CORPUS_VERSION = 1
RAY_BLOCK_SIZE = 64 << 20
SIDES = {
    "dj_default": "Data-Juicer default executor",
    "dj_ray": "Data-Juicer ray_partitioned",
    "cd_dj_ops": "curator_dask, DJ's operators",
    "cd_fast": "curator_dask, fast operators",
    "ops": "operators alone, 1 process",
    "ops_busy": "operators alone, a share each in --workers processes at once",
}
MiB = 1 << 20


# ---- the corpus and the recipes -------------------------------------------------------------

def build_corpus(args: argparse.Namespace) -> tuple[str, int, int]:
    """The corpus's folder (made once per parameter set), its bytes and its documents."""
    sys.path.insert(0, ROOT)
    from tests.data_juicer.corpus import build_corpus as write_documents

    folder = os.path.join(args.work, f"corpus-{args.mb}mb-dup{args.duplicates}")
    stamp = json.dumps({"mb": args.mb, "duplicates": args.duplicates,
                        "version": CORPUS_VERSION})
    marker = os.path.join(folder, ".done")
    if not (os.path.exists(marker) and open(marker).read() == stamp):  # noqa: SIM115
        print(f"building a corpus of {args.mb} MB in {folder} ...", flush=True)
        shutil.rmtree(folder, ignore_errors=True)
        files = write_documents(folder, args.mb * 10**6)
        _add_repeats(folder, files, args.duplicates)
        with open(marker, "w") as f:
            f.write(stamp)
    size = docs = 0
    for path in _jsonl_files(folder):
        size += os.path.getsize(path)
        with open(path, "rb") as f:
            docs += sum(1 for _ in f)
    return folder, size, docs


def _add_repeats(folder: str, files: list[str], duplicates: float) -> None:
    """``more/repeats.jsonl``: every k-th document again under a new id (exact duplicates
    spread over every file, so the dedup compares rows across partitions)."""
    rows: list[dict[str, Any]] = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            rows.extend(json.loads(line) for line in f)
    count = max(10, round(len(rows) * duplicates / 100))
    step = max(1, len(rows) // count)
    os.makedirs(os.path.join(folder, "more"))
    with open(os.path.join(folder, "more", "repeats.jsonl"), "w", encoding="utf-8") as f:
        for i, row in enumerate(rows[::step][:count]):
            f.write(json.dumps({"text": row["text"], "id": f"repeat-{i}"},
                               ensure_ascii=False) + "\n")


def _jsonl_files(folder: str) -> list[str]:
    return sorted(os.path.join(d, n) for d, _, names in os.walk(folder) for n in names
                  if n.endswith(".jsonl"))


def twelve_ops() -> list[dict[str, Any]]:
    sys.path.insert(0, ROOT)
    from tests.data_juicer.helpers import TWELVE_OPS

    return [dict(op) for op in TWELVE_OPS]


def write_recipe(side: str, folder: str, corpus: str, args: argparse.Namespace) -> str:
    """The side's recipe YAML in ``folder``; the export goes to ``folder/out/result.jsonl``."""
    import yaml

    process = twelve_ops()
    spec: dict[str, Any] = {"project_name": f"bench-dj-{side}", "dataset_path": corpus,
                            "export_path": os.path.join(folder, "out", "result.jsonl"),
                            "work_dir": os.path.join(folder, "work"), "np": args.workers,
                            "text_keys": "text"}
    if side == "dj_default":
        # its datasets cache in the side's folder, emptied before the run: a first run
        spec["ds_cache_dir"] = os.path.join(folder, "ds_cache")
    if side == "dj_ray":
        spec["executor_type"] = "ray_partitioned"
        spec["partition"] = {"mode": "manual", "num_of_partitions": args.partitions}
        spec["read_options"] = {"block_size": RAY_BLOCK_SIZE}
        process = [{"ray_document_deduplicator": op["document_deduplicator"]}
                   if "document_deduplicator" in op else op for op in process]
    spec["process"] = process
    path = os.path.join(folder, "recipe.yaml")
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(spec, f, sort_keys=False)
    return path


def side_command(side: str, recipe: str, folder: str, corpus: str,
                 args: argparse.Namespace) -> list[str]:
    if side in ("dj_default", "dj_ray"):
        code = "import sys; from data_juicer.tools.process_data import main; sys.exit(main())"
        return [sys.executable, "-c", code, "--config", recipe]
    if side == "ops":
        return [sys.executable, os.path.abspath(__file__), "--ops-child", corpus,
                os.path.join(folder, "ops.json"), os.path.join(folder, "out", "rows.jsonl")]
    if side == "ops_busy":
        return [sys.executable, os.path.abspath(__file__), "--ops-busy", corpus, folder,
                str(args.workers)]
    cmd = [sys.executable, "-m", "curator_dask", "run", recipe, "--workers", str(args.workers),
           "--partition.mode", "manual", "--partition.num_of_partitions",
           str(args.cd_partitions)]
    return cmd + (["--no-fast-ops"] if side == "cd_dj_ops" else [])


# ---- running one side as a process ----------------------------------------------------------

def sample_tree(pid: int, peaks: dict[str, Any], done: threading.Event) -> None:
    """Until ``done``: every 0.2 s, the RSS of ``pid`` and its descendants: summed
    (``peaks["tree"]``), as PSS summed (``peaks["tree_pss"]``: pages shared by forked
    processes counted once) and per process (``peaks["procs"]``: pid -> [peak, role])."""
    import psutil
    from bench_dedup import pss  # benchmarks/ is on sys.path

    try:
        root = psutil.Process(pid)
    except psutil.Error:  # it has already ended
        return
    procs: dict[int, list[Any]] = peaks["procs"]
    while not done.is_set():
        total = proportional = 0
        with contextlib.suppress(psutil.Error):
            for p in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):  # a process that just ended
                    rss = p.memory_info().rss
                    total += rss
                    proportional += pss(p.pid)
                    if p.pid not in procs:
                        procs[p.pid] = [0, _role(p, p.pid == pid)]
                    procs[p.pid][0] = max(procs[p.pid][0], rss)
        peaks["tree"] = max(peaks["tree"], total)
        peaks["tree_pss"] = max(peaks["tree_pss"], proportional)
        done.wait(0.2)


_ROLES = (("multiprocessing.forkserver", "forkserver"), ("spawn_main", "spawned process"),
          ("resource_tracker", "resource tracker"), ("process_data", "dj-process"),
          ("curator_dask run", "curator_dask run"), ("--ops-child", "operators alone"))


def _role(p: Any, root: bool) -> str:
    """What a process of a side's tree is: the side's own process, a forked copy of its
    parent (a pool or Dask worker), or its kind by command line (Ray's by its script)."""
    if root:  # sampled first while it may still be exec-ing: its command line is not yet set
        return "the side's process"
    try:
        cmd = " ".join(p.cmdline())
        parent = p.parent()
        forked = parent is not None and " ".join(parent.cmdline()) == cmd
        name = p.name()
    except Exception:  # noqa: BLE001 (psutil raises several kinds for a vanished process)
        return "?"
    role = next((label for key, label in _ROLES if key in cmd), None)
    script = next((os.path.basename(w) for w in cmd.split() if w.endswith(".py")), None)
    if role is None and name.startswith("python"):
        role = script or cmd[:50]  # Ray's helpers: default_worker.py, dashboard.py, ...
    role = role or name
    return f"{role}, forked child" if forked else role


def run_side(side: str, cmd: list[str], folder: str, timeout: float,
             env: dict[str, str]) -> dict[str, Any]:
    """One fresh process in its own session; wall time, sampled memory, failure if any."""
    log_path = os.path.join(folder, "side.log")
    subprocess.run(["sync"], check=False)
    peaks: dict[str, Any] = {"tree": 0, "tree_pss": 0, "procs": {}}
    done = threading.Event()
    with open(log_path, "w") as log:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=folder, env=env,
                                start_new_session=True)
        sampler = threading.Thread(target=sample_tree, args=(proc.pid, peaks, done),
                                   daemon=True)
        sampler.start()
        try:
            proc.wait(timeout=timeout)
            wall, timed_out = time.perf_counter() - started, False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the session started above for this side
            proc.wait()
            wall, timed_out = timeout, True
        done.set()
        sampler.join()
    procs = sorted(peaks["procs"].items(), key=lambda kv: -kv[1][0])
    children = [v for pid, v in procs if pid != proc.pid]
    result: dict[str, Any] = {
        "side": side, "command": cmd, "wall_s": wall, "timed_out": timed_out, "error": None,
        "peak_rss_tree": peaks["tree"], "peak_pss_tree": peaks["tree_pss"],
        "peak_rss_root": peaks["procs"].get(proc.pid, [0])[0],
        "peak_rss_largest_child": children[0][0] if children else 0,
        "processes": [{"rss": v[0], "role": v[1]} for _, v in procs if v[0]],
        "log": log_path}
    if timed_out:
        result["error"] = f"timed out after {timeout:.0f} s"
    elif proc.returncode != 0:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            tail = f.read()[-2500:]
        result["error"] = f"exit status {proc.returncode}; last output:\n{tail}"
    return result


def ray_env(env: dict[str, str]) -> tuple[dict[str, str], str]:
    """The environment of the Ray side: its own short temp dir (Ray's unix sockets live
    there: 108-character limit), no address to attach to, and no token authentication: a
    local Ray 2.60 otherwise writes ``~/.ray/auth_token``, and every later ``ray start`` of
    the user (NeMo Curator's ``RayClient`` among them) enables token authentication while
    ``ray status`` is refused, so NeMo's readiness check waits forever."""
    temp_dir = tempfile.mkdtemp(prefix="bench_dj_ray_", dir="/tmp")
    env = dict(env, RAY_TMPDIR=temp_dir, RAY_AUTH_MODE="disabled")
    env.pop("RAY_ADDRESS", None)
    return env, temp_dir


def clean_up_ray(temp_dir: str) -> list[str]:
    """Wait for the Ray cluster's processes to exit; end the ones left after 30 s."""
    from bench_nemo import _clean_up_ray  # benchmarks/ is on sys.path

    _, ended = _clean_up_ray(temp_dir, os.path.join(temp_dir, "no-pid-file"))
    return ended


def run_one(side: str, corpus: str, args: argparse.Namespace) -> dict[str, Any]:
    folder = os.path.join(args.work, "runs", side)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(os.path.join(folder, "out"))
    recipe = write_recipe(side, folder, corpus, args)
    cmd = side_command(side, recipe, folder, corpus, args)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE]))
    # As in an activated virtual environment: Ray runs its own command-line tools.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    timeout = getattr(args, f"timeout_{side}") or args.timeout
    print(f"running {side} ({SIDES[side]}) ...", flush=True)
    temp_dir = None
    if side == "dj_ray":
        env, temp_dir = ray_env(env)
    try:
        result = run_side(side, cmd, folder, timeout, env)
    finally:
        if temp_dir is not None:
            ended = clean_up_ray(temp_dir)
            if ended:
                print(f"    ended leftover Ray processes: {', '.join(ended)}", flush=True)
    result["folder"] = folder
    result["out"] = os.path.join(folder, "out")
    state = ("timed out" if result["timed_out"] else "FAILED") if result["error"] else (
        f"{result['wall_s']:.1f} s")
    print(f"    {side}: {state}", flush=True)
    if side == "ops" and not result["error"]:
        with open(os.path.join(folder, "ops.json")) as f:
            result["ops"] = json.load(f)
    if side.startswith("cd_") and not result["error"]:
        result["op_lines"] = _cd_op_lines(result["log"])
    return result


_OP_LINE = re.compile(r"^\s+(\w+)\s+([\d,]+) ->\s+([\d,]+) rows\s+([\d.]+) s$")


def _cd_op_lines(log: str) -> dict[str, float]:
    """The seconds per operator that ``curator_dask run`` prints."""
    seconds: dict[str, float] = {}
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = _OP_LINE.match(line.rstrip("\n"))
            if m:
                seconds[m.group(1)] = float(m.group(4))
    return seconds


# ---- the operators alone, in one process (the ``--ops-child`` process) ---------------------

def _read_columns(corpus: str) -> dict[str, list[Any]]:
    """The corpus's rows as columns, files in the order Data-Juicer's default executor reads
    a folder (``Path.rglob``)."""
    from pathlib import Path

    cols: dict[str, list[Any]] = {"text": [], "id": []}
    for path in Path(corpus).rglob("*.jsonl"):
        with open(path, encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                cols["text"].append(row["text"])
                cols["id"].append(row["id"])
    return cols


def _batches(cols: dict[str, list[Any]], size: int) -> list[dict[str, list[Any]]]:
    n = len(cols["text"])
    return [{k: v[s:s + size] for k, v in cols.items()} for s in range(0, n, size)]


def _time_mapper(fn: Any, batches: list[dict[str, list[Any]]]) -> tuple[float, list[Any]]:
    texts: list[Any] = []
    start = time.perf_counter()
    for batch in batches:
        # a copy: an operator may replace or change the batch's lists in place
        texts.extend(fn({k: list(v) for k, v in batch.items()})["text"])
    return time.perf_counter() - start, texts


def _time_filter(op: Any, stats_fn: Any, batches: list[dict[str, list[Any]]]
                 ) -> tuple[float, list[Any], list[bool]]:
    from data_juicer.utils.constant import Fields

    stats: list[Any] = []
    keep: list[bool] = []
    start = time.perf_counter()
    for batch in batches:
        batch = dict(batch)
        batch[Fields.stats] = [{} for _ in batch["text"]]  # as OP.run adds the column
        batch.update(stats_fn(batch))
        stats.extend(batch[Fields.stats])
        keep.extend(bool(k) for k in op.process(batch))
    return time.perf_counter() - start, stats, keep


def _time_dedup(op: Any, cols: dict[str, list[Any]]) -> tuple[float, dict[str, list[Any]]]:
    from data_juicer.core.data import NestedDataset
    from data_juicer.utils.constant import HashKeys

    start = time.perf_counter()
    hashes = [op.compute_hash({"text": t, "id": i})[HashKeys.hash]
              for t, i in zip(cols["text"], cols["id"], strict=True)]
    seconds = time.perf_counter() - start
    dataset = NestedDataset.from_dict({**cols, HashKeys.hash: hashes})
    start = time.perf_counter()
    kept, _ = op.process(dataset)
    seconds += time.perf_counter() - start
    return seconds, {"text": list(kept["text"]), "id": list(kept["id"])}


def _one_op(op_cfg: dict[str, Any], cols: dict[str, list[Any]]
            ) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """One operator over ``cols``: its own time, its fast equivalent's, the rows after it."""
    from data_juicer.ops import load_ops
    from data_juicer.ops.base_op import Filter, Mapper

    from curator_dask.data_juicer.fast_ops import fast_equivalent

    name = next(iter(op_cfg))
    start = time.perf_counter()
    op = load_ops([{name: op_cfg[name] or {}}])[0]
    entry: dict[str, Any] = {"op": name, "rows_in": len(cols["text"]),
                             "load_s": time.perf_counter() - start, "fast_s": None,
                             "fast_exact": None}
    if not isinstance(op, Mapper | Filter):
        entry["dj_s"], cols = _time_dedup(op, cols)
        entry["rows_out"] = len(cols["text"])
        return entry, cols
    batches = _batches(cols, max(1, int(op.batch_size or 1)))
    fast: Any = fast_equivalent(op)  # a mapper's or a filter's: process or compute_stats
    if isinstance(op, Mapper):
        entry["dj_s"], texts = _time_mapper(op.process, batches)
        if fast is not None:
            entry["fast_s"], fast_texts = _time_mapper(fast.process, batches)
            entry["fast_exact"] = fast_texts == texts
        cols = {**cols, "text": texts}
    else:
        entry["dj_s"], stats, keep = _time_filter(op, op.compute_stats, batches)
        if fast is not None:
            entry["fast_s"], fast_stats, fast_keep = _time_filter(op, fast.compute_stats,
                                                                  batches)
            entry["fast_exact"] = fast_stats == stats and fast_keep == keep
        cols = {k: [x for x, kept in zip(v, keep, strict=True) if kept]
                for k, v in cols.items()}
    entry["rows_out"] = len(cols["text"])
    return entry, cols


def ops_child(corpus: str, out_json: str, rows_path: str, shard: str = "0",
              shards: str = "1") -> None:
    """The operators alone: per operator seconds to ``out_json``, final rows to
    ``rows_path`` (``text`` and ``id``, as JSON lines); with ``shards`` > 1, only the
    ``shard``-th contiguous share of the documents."""
    sys.path.insert(0, ROOT)
    start = time.perf_counter()
    import data_juicer.ops  # noqa: F401 (its registry, imported once, not in an op's time)

    cols = _read_columns(corpus)
    if int(shards) > 1:  # every shards-th document: shares of like sizes
        cols = {key: values[int(shard)::int(shards)] for key, values in cols.items()}
    report: dict[str, Any] = {"setup_s": time.perf_counter() - start, "ops": []}
    for op_cfg in twelve_ops():
        entry, cols = _one_op(op_cfg, cols)
        report["ops"].append(entry)
        print(f"{entry['op']}: {entry['dj_s']:.2f} s", flush=True)
    with open(rows_path, "w", encoding="utf-8") as f:
        for text, row_id in zip(cols["text"], cols["id"], strict=True):
            f.write(json.dumps({"text": text, "id": row_id}, ensure_ascii=False) + "\n")
    with open(out_json, "w") as f:
        json.dump(report, f)


# ---- comparing the outputs ------------------------------------------------------------------

def compare_bytes(a: str, b: str) -> str:
    """SAME, or DIFFERENT with the first differing line."""
    if not (os.path.exists(a) and os.path.exists(b)):
        return f"DIFFERENT: missing {a if not os.path.exists(a) else b}"
    with open(a, "rb") as f:
        left = f.read()
    with open(b, "rb") as f:
        right = f.read()
    la, lb = left.split(b"\n"), right.split(b"\n")
    if left == right:
        return f"SAME ({len(la) - 1:,} lines)"
    first = next((i for i, (x, y) in enumerate(zip(la, lb, strict=False)) if x != y),
                 min(len(la), len(lb)))
    x = la[first][:160] if first < len(la) else b"<end>"
    y = lb[first][:160] if first < len(lb) else b"<end>"
    return (f"DIFFERENT ({len(la) - 1:,} vs {len(lb) - 1:,} lines), first at "
            f"line {first + 1}:\n        default: {x!r}\n        this:    {y!r}")


def _rows(path: str) -> list[dict[str, Any]]:
    if os.path.isdir(path):  # Ray writes a folder of files at the export path
        files = _jsonl_files(path) + [os.path.join(path, n) for n in sorted(os.listdir(path))
                                      if n.endswith(".json")]
    else:
        files = [path]
    rows: list[dict[str, Any]] = []
    for name in files:
        with open(name, encoding="utf-8") as f:
            rows.extend(json.loads(line) for line in f if line.strip())
    return rows


def compare_rows(reference: str, other: str, keys: tuple[str, ...] | None = None) -> str:
    """``other``'s rows against ``reference``'s as sets, on the reference's fields (or
    ``keys``); Ray writes a folder of files at the export path."""
    if not (os.path.exists(reference) and os.path.exists(other)):
        return "not compared (an output is missing)"
    ref, got = _rows(reference), _rows(other)
    fields = keys or (tuple(sorted(ref[0])) if ref else ("text",))
    extra = sorted({k for r in got for k in r} - set(fields))

    def canon(rows: list[dict[str, Any]], fs: tuple[str, ...]) -> set[str]:
        return {json.dumps([r.get(k) for k in fs], ensure_ascii=False) for r in rows}

    a, b = canon(ref, fields), canon(got, fields)
    texts_same = canon(ref, ("text",)) == canon(got, ("text",))
    if a == b and len(ref) == len(got):
        verdict = "SAME SET"
    elif texts_same and len(ref) == len(got):
        verdict = "SAME TEXTS (other members of duplicate groups kept)"
    else:
        verdict = "DIFFERENT"
    return (f"{verdict}: {len(got):,} rows vs {len(ref):,}; on {list(fields)}: "
            f"{len(a - b):,} only in default, {len(b - a):,} only here; same texts: "
            f"{'yes' if texts_same else 'no'}" + (f"; extra fields {extra}" if extra else ""))


def compare_all(results: dict[str, dict[str, Any]]) -> dict[str, str]:
    ref = results.get("dj_default")
    if not ref or ref["error"]:
        return {side: "not compared (the default executor did not finish)"
                for side in results if side != "dj_default"}
    base = os.path.join(ref["out"], "result.jsonl")
    verdicts: dict[str, str] = {}
    for side, r in results.items():
        if side == "dj_default":
            continue
        if r["error"]:
            verdicts[side] = "not compared (failed)"
        elif side.startswith("cd_"):
            verdicts[side] = compare_bytes(base, os.path.join(r["out"], "result.jsonl"))
            verdicts[side + " stats"] = compare_bytes(
                os.path.join(ref["out"], "result_stats.jsonl"),
                os.path.join(r["out"], "result_stats.jsonl"))
        elif side == "ops_busy":
            continue  # shares of the corpus, each deduplicated alone: timing only
        elif side == "dj_ray":
            verdicts[side] = compare_rows(base, os.path.join(r["out"], "result.jsonl"))
        else:
            verdicts[side] = compare_rows(base, os.path.join(r["out"], "rows.jsonl"),
                                          keys=("text", "id"))
    return verdicts


# ---- the report -----------------------------------------------------------------------------

def ops_totals(ops: list[dict[str, Any]]) -> tuple[float, float]:
    """The operators' own time with Data-Juicer's code, and with the fast equivalents where
    there is one."""
    own = sum(e["dj_s"] for e in ops)
    fast = sum(e["fast_s"] if e["fast_s"] is not None else e["dj_s"] for e in ops)
    return own, fast


def print_sides(results: dict[str, dict[str, Any]], verdicts: dict[str, str]) -> None:
    print(f"\n{'side':<32} {'wall s':>8} {'tree MiB':>9} {'PSS MiB':>8} {'largest':>8}  "
          "output vs default")
    for side, r in results.items():
        wall = "FAILED" if r["error"] and not r["timed_out"] else (
            f">{r['wall_s']:.0f}" if r["timed_out"] else f"{r['wall_s']:.1f}")
        largest = max(r["peak_rss_root"], r["peak_rss_largest_child"])
        verdict = "(reference)" if side == "dj_default" else verdicts.get(side, "")
        print(f"{SIDES[side]:<32} {wall:>8} {r['peak_rss_tree'] / MiB:>9,.0f} "
              f"{r['peak_pss_tree'] / MiB:>8,.0f} {largest / MiB:>8,.0f}  {verdict}")
        if side + " stats" in verdicts:
            print(f"{'':<70}stats: {verdicts[side + ' stats']}")
        if side == "ops" and "ops" in r:
            own, fast = ops_totals(r["ops"]["ops"])
            print(f"{'':<4}operators' own time: {own:.1f} s with Data-Juicer's code, {fast:.1f}"
                  f" s with the fast equivalents (reading and setup {r['ops']['setup_s']:.1f} s"
                  f", not counted)")
    for side, r in results.items():
        if r["error"]:
            print(f"\n*** {side} ({SIDES[side]}): {r['error']}\n    log: {r['log']}")


def print_ops(results: dict[str, dict[str, Any]]) -> None:
    r = results.get("ops")
    if not r or "ops" not in r:
        return
    cd_own = (results.get("cd_dj_ops") or {}).get("op_lines", {})
    cd_fast = (results.get("cd_fast") or {}).get("op_lines", {})
    print(f"\n{'operator':<36} {'rows in -> out':>19} {'DJ s':>7} {'fast s':>7} {'exact':>5}"
          f" {'cd DJ s':>8} {'cd fast s':>9}")
    for e in r["ops"]["ops"]:
        fast = f"{e['fast_s']:.2f}" if e["fast_s"] is not None else "-"
        exact = {None: "-", True: "yes", False: "NO"}[e["fast_exact"]]
        own = f"{cd_own[e['op']]:.2f}" if e["op"] in cd_own else "-"
        quick = f"{cd_fast[e['op']]:.2f}" if e["op"] in cd_fast else "-"
        print(f"{e['op']:<36} {e['rows_in']:>8,} -> {e['rows_out']:>7,} {e['dj_s']:>7.2f} "
              f"{fast:>7} {exact:>5} {own:>8} {quick:>9}")
    print("(cd columns: the seconds per operator that `curator_dask run` prints)")


def _json(path: str) -> Any:
    with open(path) as f:
        return json.load(f)


def ratios(results: dict[str, dict[str, Any]], args: argparse.Namespace,
           corpus_bytes: int) -> dict[str, Any]:
    """The issue's targets, each as a ratio (None where a side it needs did not finish)."""
    def wall(side: str) -> float | None:
        r = results.get(side)
        return None if not r or r["error"] else r["wall_s"]

    dj = [w for w in (wall("dj_default"), wall("dj_ray")) if w is not None]
    faster = min(dj) if dj else None
    own_ops = None
    if results.get("ops") and "ops" in results["ops"]:
        own_ops = ops_totals(results["ops"]["ops"]["ops"])[0]
    cd_own, cd_fast = wall("cd_dj_ops"), wall("cd_fast")
    busy = None
    if wall("ops_busy") is not None:
        shares = [os.path.join(results["ops_busy"]["folder"], f"ops-{i}.json")
                  for i in range(args.workers)]
        if all(os.path.exists(p) for p in shares):
            busy = sum(ops_totals(_json(p)["ops"])[0] for p in shares) / args.workers
    out: dict[str, Any] = {
        "ops_busy_s": busy,
        "cd_dj_ops_over_ops_busy": cd_own / busy if cd_own and busy else None,
        "faster_dj_s": faster,
        "cd_dj_ops_over_faster_dj": cd_own / faster if cd_own and faster else None,
        "cd_dj_ops_over_ops_per_worker": (cd_own / (own_ops / args.workers)
                                          if cd_own and own_ops else None),
        "cd_fast_over_faster_dj": cd_fast / faster if cd_fast and faster else None,
    }
    for side in ("cd_dj_ops", "cd_fast"):
        r = results.get(side)
        if r and not r["error"]:
            # Dask's workers are the forkserver's children; else the largest child
            workers = [p["rss"] for p in r["processes"] if p["role"].endswith("forked child")]
            out[f"{side}_largest_worker_mib"] = max(workers or [r["peak_rss_largest_child"]]) / MiB
            out[f"{side}_tree_mib"] = r["peak_rss_tree"] / MiB
    out["corpus_mib"] = corpus_bytes / MiB
    out["partition_mib"] = corpus_bytes / MiB / args.cd_partitions
    return out


def print_ratios(r: dict[str, Any]) -> None:
    def line(label: str, value: float | None, target: float) -> None:
        if value is None:
            print(f"  {label:<62} n/a (a side did not finish)   target <= {target}")
            return
        mark = "met" if value <= target else "MISSED"
        print(f"  {label:<62} {value:6.2f}   target <= {target}: {mark}")

    print("\nratios:")
    line("curator_dask (DJ's ops) / faster Data-Juicer executor",
         r["cd_dj_ops_over_faster_dj"], 0.6)
    line("curator_dask (DJ's ops) / (operators' own time / workers)",
         r["cd_dj_ops_over_ops_per_worker"], 1.10)
    line("curator_dask (fast ops) / faster Data-Juicer executor",
         r["cd_fast_over_faster_dj"], 0.25)
    if r.get("cd_dj_ops_over_ops_busy") is not None:
        print(f"  {'curator_dask (DJ ops) / operators alone, all cores busy (no target)':<62} "
              f"{r['cd_dj_ops_over_ops_busy']:6.2f}   ({r['ops_busy_s']:.1f} s: the "
              "operators' seconds with every core working, divided by the workers)")
    for side in ("cd_dj_ops", "cd_fast"):
        if f"{side}_largest_worker_mib" in r:
            print(f"  {SIDES[side]}: largest worker {r[f'{side}_largest_worker_mib']:,.0f} "
                  f"MiB (whole tree {r[f'{side}_tree_mib']:,.0f} MiB) for a corpus of "
                  f"{r['corpus_mib']:,.0f} MiB in partitions of {r['partition_mib']:,.0f} MiB")


def print_processes(results: dict[str, dict[str, Any]]) -> None:
    print("\nlargest processes of each side (peak RSS):")
    for side, r in results.items():
        top = ", ".join(f"{p['rss'] / MiB:,.0f} MiB {p['role']}"
                        for p in r["processes"][:4])
        print(f"  {side}: {top}")


def record(args: argparse.Namespace, results: dict[str, dict[str, Any]],
           r: dict[str, Any], corpus_bytes: int, docs: int) -> None:
    from _results import append_row

    def cell(side: str) -> str:
        x = results.get(side)
        if not x:
            return "not run"
        return "failed" if x["error"] else f"{x['wall_s']:.1f} s"

    def ratio(key: str) -> str:
        return f"{r[key]:.2f}" if r.get(key) is not None else "n/a"

    ops = results.get("ops", {}).get("ops")
    own, fast = ops_totals(ops["ops"]) if ops else (None, None)
    append_row(
        "Data-Juicer recipes",
        ["date", "command", "setup", "DJ default", "DJ ray_partitioned", "curator_dask (DJ's ops)",
         "curator_dask (fast ops)", "operators alone (DJ / fast)", "ratios (<= 0.6, <= 1.10, "
         "<= 0.25)", "largest curator_dask worker"],
        [str(datetime.date.today()),
         "`python benchmarks/bench_data_juicer.py " + " ".join(sys.argv[1:]) + "`",
         f"12-operator recipe, {corpus_bytes / 10**6:.0f} MB, {docs:,} documents, "
         f"{args.workers} workers, {args.partitions} partitions for Ray, "
         f"{args.cd_partitions} for curator_dask, {os.cpu_count()} CPUs, "
         f"Python {platform.python_version()}",
         cell("dj_default"), cell("dj_ray"), cell("cd_dj_ops"), cell("cd_fast"),
         f"{own:.1f} s / {fast:.1f} s" if own is not None else "n/a",
         f"{ratio('cd_dj_ops_over_faster_dj')}, {ratio('cd_dj_ops_over_ops_per_worker')} "
         f"({ratio('cd_dj_ops_over_ops_busy')} of the busy floor), "
         f"{ratio('cd_fast_over_faster_dj')}",
         f"{r.get('cd_dj_ops_largest_worker_mib', 0):,.0f} MiB"])


# ---- the command line -----------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="corpus size in MB (default 100)")
    parser.add_argument("--duplicates", type=float, default=1.0,
                        help="percent of documents repeated under other ids (default 1)")
    parser.add_argument("--workers", type=int, default=2,
                        help="np of the recipes and curator_dask's --workers (default 2)")
    parser.add_argument("--partitions", type=int, default=4,
                        help="partitions of ray_partitioned (default 4)")
    parser.add_argument("--work", default=os.path.join(HERE, "_data", "data_juicer"),
                        help="corpus cache and run folders (default benchmarks/_data/"
                        "data_juicer)")
    parser.add_argument("--cd-partitions", type=int, default=8,
                        help="curator_dask's partitions (default 8: with documents of very "
                             "different sizes, more partitions than workers even out their "
                             "work; --partitions is Data-Juicer ray_partitioned's)")
    parser.add_argument("--skip-ray", action="store_true", help="leave out ray_partitioned")
    parser.add_argument("--skip", action="append", default=[], choices=sorted(SIDES),
                        help="leave out a side (repeatable)")
    parser.add_argument("--timeout", type=float, default=3600,
                        help="seconds a side may run (default 3600)")
    for side in SIDES:
        parser.add_argument(f"--timeout-{side.replace('_', '-')}", dest=f"timeout_{side}",
                            type=float, help=f"timeout of {side} (default --timeout)")
    parser.add_argument("--json", help="write every number to this JSON file")
    parser.add_argument("--record", action="store_true",
                        help="append a row to benchmarks/RESULTS.md")
    return parser.parse_args()


def ops_busy(corpus: str, folder: str, workers: str) -> None:
    """``workers`` operator processes at once, each on its share of the documents: the
    operators' own time on a machine whose cores are all busy, as a cluster's workers'
    are (a core's speed drops when its neighbours work: shared caches, memory, clock)."""
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--ops-child",
                               corpus, os.path.join(folder, f"ops-{i}.json"),
                               os.path.join(folder, "out", f"rows-{i}.jsonl"), str(i),
                               workers]) for i in range(int(workers))]
    codes = [p.wait() for p in procs]
    if any(codes):
        sys.exit(max(codes))


def main() -> None:
    if len(sys.argv) in (5, 7) and sys.argv[1] == "--ops-child":
        ops_child(*sys.argv[2:])
        return
    if len(sys.argv) == 5 and sys.argv[1] == "--ops-busy":
        ops_busy(*sys.argv[2:5])
        return
    args = parse_args()
    args.work = os.path.abspath(args.work)
    os.makedirs(args.work, exist_ok=True)
    corpus, corpus_bytes, docs = build_corpus(args)
    print(f"corpus: {corpus} ({corpus_bytes / 10**6:.1f} MB, {docs:,} documents)", flush=True)
    if corpus_bytes < args.mb * 10**6:
        print(f"    (smaller than --mb {args.mb}: all the text this machine has)")
    # Compile the package's bytecode first, as a regular (non-editable) install does.
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(ROOT, "curator_dask")],
                   check=False, stdout=subprocess.DEVNULL)
    skip = set(args.skip) | ({"dj_ray"} if args.skip_ray else set())
    results = {side: run_one(side, corpus, args) for side in SIDES if side not in skip}
    verdicts = compare_all(results)
    print(f"\n12-operator recipe on {corpus_bytes / 10**6:.1f} MB ({docs:,} documents), "
          f"{args.workers} workers, {args.partitions} partitions for Ray, {args.cd_partitions} "
          f"for curator_dask, {os.cpu_count()} CPUs")
    print_sides(results, verdicts)
    print_ops(results)
    r = ratios(results, args, corpus_bytes)
    print_ratios(r)
    print_processes(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"corpus": {"path": corpus, "bytes": corpus_bytes, "documents": docs},
                       "args": vars(args), "sides": results, "outputs": verdicts,
                       "ratios": r}, f, indent=1, default=str)
    if args.record:
        record(args, results, r, corpus_bytes, docs)


if __name__ == "__main__":
    main()
