"""Deduplication: curator_dask's workflows side by side with datatrove, datasketch and pandas.

The corpus is ``curator_dask.dedup.synthetic.planted_corpus`` (seed 0): unrelated documents,
clusters of 2-5 near-duplicates made by word substitutions (every pair of a cluster at a
Jaccard similarity of about 0.9 or above on 24-character shingles, all measured), and far
pairs at about 0.4. It is written once per parameter set under
``$TMPDIR/curator-dask-bench-dedup/`` (``--data`` to move it) and reused. Every side runs in a
fresh Python process, timed from its start to its exit (imports, cluster start and shutdown
included), with its whole process tree's RSS sampled every 0.2 s (summed over the processes,
and as PSS, which counts pages shared by forked processes once); a side still running after
``--timeout`` seconds is ended (its process group, by id) and reported as "> T s". Each side's
removed documents are scored against the planted clusters (``PlantedCorpus.score``: in a
cluster of s documents, s - 1 removals are right). Run from the repository root:

    python benchmarks/bench_dedup.py fuzzy --docs 100000
    python benchmarks/bench_dedup.py fuzzy --docs 100000 --skip datatrove --timeout 1200
    python benchmarks/bench_dedup.py exact --docs 1000000

- fuzzy: ``curator_dask.dedup.FuzzyDeduplicationWorkflow`` (NeMo's parameters: char_ngrams 24,
  20 bands x 13 rows, seed 42; ``--blocksize`` per file group) on a 2-worker DaskExecutor;
  datatrove's four MinHash stages (signatures, buckets, cluster, filter) on its
  LocalPipelineExecutor with 2 tasks and 2 workers (the buckets stage needs one task per
  bucket: 20 tasks on 2 workers), 20 buckets x 13 hashes, 64-bit; and datasketch's
  ``MinHashLSH`` (params (20, 13), num_perm 260) in one process on the same 24-character
  shingles (hashed by xxhash's ``xxh32_intdigest``, given as its ``hashfunc``: its default
  sha1 is slower), candidate pairs joined into connected components (the first document of
  each kept), as the other two do. curator_dask's removed ids are mapped back to documents
  through its ``fuzzy_id_generator.json`` and the file groups of the input. datatrove
  shingles words, not characters: it gets word 4-grams (``--n-grams``), whose Jaccard on
  this corpus is within 0.01 of the 24-character one for the planted pairs (printed for
  every run), with whitespace words (its English tokenizer is spaCy's, not installed: on
  this corpus of lowercase letters and single spaces both give the same words); its hash
  is xxhash when datatrove's xxhash path works with the installed xxhash, else its sha1
  path (printed; with xxhash 4.1 it fails: "Strings must be encoded before hashing").
  Targets (issue 22): at 100,000 documents, curator_dask <= 0.25 x datatrove's time with
  recall >= 0.95 and precision >= 0.98, neither below datatrove's.
- exact: ``curator_dask.dedup.ExactDeduplicationWorkflow`` (md5, ids assigned) on a
  2-worker DaskExecutor vs one process of pandas doing the same end to end: read the files
  (pyarrow), md5 of each text (hashlib), group, write the ids to remove (all but the
  smallest id of each group) to Parquet. The corpus's clusters are exact copies
  (``similarity=1.0``), documents of ``--words`` (default 100-300) words. Printed for
  curator_dask: each worker's peak RSS and the bytes it wrote to disk (P2P shuffle files and
  memory spill). Target: curator_dask <= 0.7 x the pandas time at 1,000,000 documents.

Each run appends one row to benchmarks/RESULTS.md (``--no-record`` to skip).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FUZZY_SIDES = ["curator_dask", "datatrove", "datasketch"]
EXACT_SIDES = ["curator_dask", "pandas"]


def corpus(args: argparse.Namespace, kind: str) -> tuple[str, dict]:
    """The corpus's folder (made once per parameter set) and its truth (``truth.npz``)."""
    import numpy as np

    similarity = 1.0 if kind == "exact" else args.similarity
    key = (f"{kind}-{args.docs}-w{args.words[0]}_{args.words[1]}-s{similarity}-f{args.files}"
           f"-{args.format}-seed{args.seed}")
    root = os.path.join(args.data, key)
    if not os.path.exists(os.path.join(root, "done")):
        from curator_dask.dedup.synthetic import planted_corpus

        shutil.rmtree(root, ignore_errors=True)
        print(f"generating the corpus {key} (once) ...", flush=True)
        started = time.perf_counter()
        planted = planted_corpus(args.docs, seed=args.seed, words=tuple(args.words),
                                 similarity=similarity)
        write = planted.write_parquet if args.format == "parquet" else planted.write_jsonl
        paths = write(os.path.join(root, "input"), n_files=args.files)
        rows = [len(a) for a in np.array_split(np.arange(args.docs), args.files)]
        np.savez(os.path.join(root, "truth.npz"), cluster=planted.cluster,
                 cluster_pairs=planted.cluster_pairs, cluster_jaccard=planted.cluster_jaccard,
                 far_pairs=planted.far_pairs, far_jaccard=planted.far_jaccard,
                 rows=np.asarray(rows), word_jaccard=word_jaccards(planted))
        size = sum(os.path.getsize(p) for p in paths)
        print(f"  {args.docs:,} documents, {size / 1e6:,.0f} MB in {len(paths)} files, "
              f"{time.perf_counter() - started:.1f} s", flush=True)
        del planted
        open(os.path.join(root, "done"), "w").close()
    with np.load(os.path.join(root, "truth.npz")) as z:
        truth = {name: z[name] for name in z.files}
    return root, truth


def word_jaccards(planted, n: int = 4, sample: int = 200):
    """Word n-gram Jaccard of the first ``sample`` cluster pairs and far pairs (datatrove's
    unit), to set beside their 24-character Jaccard."""
    import numpy as np

    def grams(text: str) -> set[str]:
        w = text.split()
        return {" ".join(w[i:i + n]) for i in range(len(w) - n + 1)}

    def jaccard(a: int, b: int) -> float:
        x, y = grams(planted.texts[a]), grams(planted.texts[b])
        return len(x & y) / len(x | y)

    near = [jaccard(a, b) for a, b in planted.cluster_pairs[:sample]]
    far = [jaccard(a, b) for a, b in planted.far_pairs[:sample]]
    return np.asarray([np.mean(near), planted.cluster_jaccard[:sample].mean(),
                       np.mean(far) if far else np.nan,
                       planted.far_jaccard[:sample].mean() if far else np.nan])


def score(truth: dict, removed):
    from curator_dask.dedup.synthetic import PlantedCorpus

    # the texts are in the files; scoring reads only the labels
    planted = PlantedCorpus(texts=[""] * len(truth["cluster"]), cluster=truth["cluster"],
                            cluster_pairs=truth["cluster_pairs"],
                            cluster_jaccard=truth["cluster_jaccard"],
                            far_pairs=truth["far_pairs"], far_jaccard=truth["far_jaccard"])
    return planted.score(removed)


def pss(pid: int) -> int:
    """Proportional set size of ``pid`` in bytes (pages shared with other processes, such as a
    forked worker's pages of its forkserver, count in part), 0 when unreadable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))
    except (OSError, StopIteration):
        return 0


def sample_tree(pid: int, peaks: dict, done: threading.Event) -> None:
    """Until ``done``: every 0.2 s, the RSS of ``pid`` and all its descendants, summed
    (``peaks["tree"]``), of the largest one (``peaks["largest"]``), and their PSS summed
    (``peaks["tree_pss"]``: the tree's memory without counting shared pages twice)."""
    import psutil

    try:
        root = psutil.Process(pid)
    except psutil.Error:  # it has already ended
        return
    while not done.is_set():
        sizes, proportional = [], 0
        with contextlib.suppress(psutil.Error):
            for p in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):  # a process that just ended
                    sizes.append(p.memory_info().rss)
                    proportional += pss(p.pid)
        peaks["tree"] = max(peaks["tree"], sum(sizes))
        peaks["tree_pss"] = max(peaks["tree_pss"], proportional)
        peaks["largest"] = max(peaks["largest"], max(sizes, default=0))
        done.wait(0.2)


def run_side(side: str, args: dict, timeout: float) -> dict:
    """Run one side in a fresh interpreter; wall time, sampled tree RSS, its JSON line."""
    import numpy as np

    shutil.rmtree(args["work"], ignore_errors=True)
    os.makedirs(args["work"])
    subprocess.run(["sync"], check=False)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [HERE, ROOT] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    code = "import _dedup_runners as r; r.main()"
    log = open(os.path.join(args["work"], "side.log"), "w")  # noqa: SIM115 (closed below)
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, side, json.dumps(args)],
                            stdout=subprocess.PIPE, stderr=log, text=True, cwd=args["work"],
                            env=env, start_new_session=True)
    peaks = {"tree": 0, "tree_pss": 0, "largest": 0}
    done = threading.Event()
    sampler = threading.Thread(target=sample_tree, args=(proc.pid, peaks, done), daemon=True)
    sampler.start()
    try:
        out, _ = proc.communicate(timeout=timeout)
        wall, timed_out = time.perf_counter() - started, False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the session this benchmark started for the side
        out, _ = proc.communicate()
        wall, timed_out = timeout, True
    done.set()
    sampler.join()
    log.close()
    result = {"side": side, "wall": wall, "timed_out": timed_out, "failed": None, **peaks}
    if timed_out:
        return result
    if proc.returncode != 0:
        with open(os.path.join(args["work"], "side.log")) as f:
            result["failed"] = f"exit code {proc.returncode}:\n{f.read()[-3000:]}"
        return result
    result.update(json.loads(out.strip().splitlines()[-1]))
    result["removed"] = np.load(os.path.join(args["work"], "removed.npy"))
    return result


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f}"


def show(result: dict, truth: dict) -> dict:
    """Print one side's line; return its score (None when it timed out)."""
    name = result["side"]
    if result["failed"]:
        print(f"{name:>13}: FAILED, {result['failed']}", flush=True)
        return {}
    if result["timed_out"]:
        print(f"{name:>13}: > {result['wall']:.0f} s (timed out; peak RSS so far "
              f"{mib(result['tree'])} MiB)", flush=True)
        return {}
    s = score(truth, result["removed"])
    print(f"{name:>13}: {result['wall']:8.1f} s, peak RSS {mib(result['tree']):>6} MiB (tree; "
          f"PSS {mib(result['tree_pss'])}), {mib(result['largest']):>6} MiB (largest "
          f"process); removed {s.removed:,}: "
          f"precision {s.precision:.4f}, recall {s.recall:.4f} (of {s.expected:,}; wrongly "
          f"removed: {s.unrelated_removed:,} outside clusters, {s.far_pairs_hit:,} far pairs, "
          f"{s.clusters_emptied:,} clusters emptied)", flush=True)
    phases = ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                       for k, v in (result.get("phases") or {}).items())
    if phases:
        print(f"{'':>15}phases (s): {phases}")
    for i, w in enumerate(result.get("workers") or []):
        print(f"{'':>15}worker {i}: peak RSS {mib(w['peak_rss'])} MiB, P2P disk "
              f"{mib(w['p2p_disk_bytes'])} MiB, spilled {mib(w['spill_disk_bytes'])} MiB")
    if result.get("hash_fallback"):
        print(f"{'':>15}datatrove hash: sha1 (its xxhash path failed: {result['hash_fallback']})")
    return {"precision": s.precision, "recall": s.recall}


def ratio(a: dict, b: dict) -> str:
    if a["failed"] or b["failed"]:
        return "n/a (a side failed)"
    if a["timed_out"] and b["timed_out"]:
        return "n/a (both timed out)"
    if a["timed_out"]:
        return f"> {a['wall'] / b['wall']:.2f}"
    if b["timed_out"]:
        return f"< {a['wall'] / b['wall']:.3f}"
    return f"{a['wall'] / b['wall']:.3f}"


def targets(kind: str, results: dict, scores: dict) -> None:
    """Print each target of issue 22 as met or missed (or not measured)."""
    cd = results.get("curator_dask")
    peer = results.get("datatrove" if kind == "fuzzy" else "pandas")
    if not cd or cd["failed"] or cd["timed_out"]:
        print("targets: not measured (curator_dask did not finish)")
        return
    lines = []
    if peer and not peer["failed"]:
        limit = 0.25 if kind == "fuzzy" else 0.7
        value = cd["wall"] / peer["wall"]  # an upper bound when the peer timed out
        verdict = ("met" if value <= limit else
                   "not known (the peer timed out)" if peer["timed_out"] else "missed")
        bound = "< " if peer["timed_out"] else ""
        lines.append(f"time ratio {bound}{value:.3f} <= {limit}: {verdict}")
    if kind == "fuzzy":
        s = scores["curator_dask"]
        lines.append(f"recall {s['recall']:.4f} >= 0.95: "
                     f"{'met' if s['recall'] >= 0.95 else 'missed'}")
        lines.append(f"precision {s['precision']:.4f} >= 0.98: "
                     f"{'met' if s['precision'] >= 0.98 else 'missed'}")
        other = scores.get("datatrove") or {}
        for name in ("precision", "recall") if other else ():
            ok = s[name] >= other[name]
            lines.append(f"{name} not below datatrove's ({other[name]:.4f}): "
                         f"{'met' if ok else 'missed'}")
    for line in lines:
        print(f"target: {line}")


def side_args(args: argparse.Namespace, src_root: str, truth: dict, side: str) -> dict:
    return {"src": os.path.join(src_root, "input"), "format": args.format,
            "work": os.path.join(src_root, "runs", side), "workers": args.workers,
            "blocksize": args.blocksize, "bands": 20, "rows": 13, "threshold": 0.8,
            "n_grams": args.n_grams, "memory_limit": args.memory_limit,
            "rows_per_file": [int(r) for r in truth["rows"]],
            "extra": json.loads(args.curator_dask_kwargs)}


def bench(args: argparse.Namespace, kind: str) -> None:
    src_root, truth = corpus(args, kind)
    sides = [s for s in (FUZZY_SIDES if kind == "fuzzy" else EXACT_SIDES) if s not in args.skip]
    if kind == "fuzzy":
        wj = truth["word_jaccard"]
        print(f"planted pairs, mean Jaccard: clusters {wj[1]:.3f} on 24-character shingles, "
              f"{wj[0]:.3f} on word {args.n_grams}-grams (datatrove's unit); far pairs "
              f"{wj[3]:.3f} / {wj[2]:.3f}", flush=True)
    results, scores = {}, {}
    for side in sides:
        runner = f"curator_dask_{kind}" if side == "curator_dask" else side
        results[side] = run_side(runner, side_args(args, src_root, truth, side), args.timeout)
        results[side]["side"] = side
        scores[side] = show(results[side], truth)
    others = [s for s in sides if s != "curator_dask"]
    if "curator_dask" in results:
        for other in others:
            print(f"time ratio curator_dask / {other}: "
                  f"{ratio(results['curator_dask'], results[other])}")
    targets(kind, results, scores)
    failed = [s for s, r in results.items() if r["failed"]]
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)} (nothing recorded); logs: "
                         f"{os.path.join(src_root, 'runs')}/<side>/side.log")
    if not args.no_record:
        record(args, kind, results, scores)


def record(args: argparse.Namespace, kind: str, results: dict, scores: dict) -> None:
    sys.path.insert(0, HERE)
    from _results import append_row

    def cell(side: str) -> str:
        r = results.get(side)
        if r is None:
            return "skipped"
        if r["timed_out"]:
            return f"> {r['wall']:.0f} s"
        s = scores[side]
        return (f"{r['wall']:.1f} s, RSS {mib(r['tree'])} MiB (PSS {mib(r['tree_pss'])}), "
                f"P {s['precision']:.3f} R {s['recall']:.3f}")

    sides = FUZZY_SIDES if kind == "fuzzy" else EXACT_SIDES
    cd, peer = results.get("curator_dask"), results.get(sides[1])
    command = "`python benchmarks/bench_dedup.py " + " ".join(sys.argv[1:]) + "`"
    setup = (f"{args.docs:,} docs of {args.words[0]}-{args.words[1]} words, {args.files} "
             f"{args.format} files, {args.workers} workers, {os.cpu_count()} CPUs, Python "
             f"{platform.python_version()}")
    append_row(f"Deduplication: {kind}", ["date", "command", "setup", *sides,
                                          f"ratio curator_dask / {sides[1]}"],
               [datetime.date.today().isoformat(), command, setup,
                *[cell(s) for s in sides], ratio(cd, peer) if cd and peer else "n/a"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["fuzzy", "exact"])
    parser.add_argument("--docs", type=int, help="documents (default 100,000 fuzzy, "
                        "1,000,000 exact)")
    parser.add_argument("--words", type=int, nargs=2, help="words per original document "
                        "(default 300 1000 fuzzy, 100 300 exact)")
    parser.add_argument("--similarity", type=float, default=0.9,
                        help="fuzzy: planted Jaccard of two copies in a cluster")
    parser.add_argument("--files", type=int, default=16, help="input files (default 16)")
    parser.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2, help="Dask workers / datatrove "
                        "tasks and workers (default 2)")
    parser.add_argument("--blocksize", default="32MiB",
                        help="curator_dask input_blocksize (file groups; default 32MiB)")
    parser.add_argument("--memory-limit", default=None,
                        help="memory limit of each Dask worker (default: LocalCluster's)")
    parser.add_argument("--n-grams", type=int, default=4, help="datatrove word n-grams")
    parser.add_argument("--curator-dask-kwargs", default="{}",
                        help="JSON of extra workflow parameters, e.g. a Jaccard check")
    parser.add_argument("--skip", nargs="*", default=[], choices=FUZZY_SIDES + EXACT_SIDES)
    parser.add_argument("--timeout", type=float, default=1800,
                        help="seconds per side before it is ended (default 1800)")
    parser.add_argument("--data", default=os.path.join(tempfile.gettempdir(),
                                                       "curator-dask-bench-dedup"))
    parser.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    args = parser.parse_args()
    args.docs = args.docs or (100_000 if args.kind == "fuzzy" else 1_000_000)
    args.words = args.words or ([300, 1000] if args.kind == "fuzzy" else [100, 300])
    bench(args, args.kind)


if __name__ == "__main__":
    main()
