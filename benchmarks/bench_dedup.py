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
  (pyarrow) one at a time, md5 of each text (hashlib), keeping each document's id and digest
  only (since 2026-12-06; the rows before held every text at once), group, write the ids to
  remove (all but the smallest id of each group) to Parquet. The corpus's clusters are exact copies
  (``similarity=1.0``), documents of ``--words`` (default 100-300) words. Printed for
  curator_dask: each worker's peak RSS and the bytes it wrote to disk (P2P shuffle files and
  memory spill). Target: curator_dask <= 0.7 x the pandas time at 1,000,000 documents.
- scale (issue 35): both workflows on corpora of several sizes (``--docs``, default 1,000,000
  and 10,000,000), each generated once in chunks of 200,000 documents (two processes; files
  of ``--docs-per-file`` documents, ``id`` the doc index): in each chunk, half are a
  ``planted_corpus`` with clusters of exact copies, half one with near-duplicate clusters
  (``--similarity``), 100-300 words per document. Each workflow runs on 2 workers with
  ``--memory-limit`` each (default 1.5GiB), and is scored against the clusters it should
  find (exact: the exact copies only, a near-duplicate removed is a wrong removal; fuzzy:
  all). Per phase (the workflows' log line at each phase's end), every worker's and the
  driver's peak RSS (``VmHWM``, reset at each phase's end) and the bytes the P2P shuffle and
  the memory spill wrote to disk (the workers' own counters, ``curator_dask.dedup.meter``).
  Target: (t_big / t_small) / (docs_big / docs_small) <= 1.3, on the workflow's time. Each
  run's outputs are removed after it (``--keep-outputs`` keeps them). ``--workflows exact
  pandas`` also runs the exact side's single-process pandas peer on the same corpus and prints
  the ratio of the two wall times (target: exact <= 0.7 x pandas at 10,000,000 documents):

      python benchmarks/bench_dedup.py scale --docs 1000000 10000000
      python benchmarks/bench_dedup.py scale --docs 1000000 10000000 --workflows exact pandas

Each run appends one row to benchmarks/RESULTS.md (``--no-record`` to skip).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import glob
import hashlib
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


# -- scale: both workflows past memory, at several corpus sizes ------------------------------

SCALE_CHUNK = 200_000  # documents generated at once (two processes: about 1 GB of texts)


def scale_vocabulary(seed: int, n: int = 20_000) -> list[str]:
    """``n`` distinct pseudo-words (2-10 lowercase letters), one vocabulary for every chunk."""
    import numpy as np

    rng = np.random.default_rng([seed, 2])
    words: dict[str, None] = {}
    while len(words) < n:
        for length in rng.integers(2, 11, n):
            words["".join(chr(97 + c) for c in rng.integers(0, 26, length))] = None
            if len(words) == n:
                break
    return list(words)


def scale_chunk(job: dict) -> dict:
    """Generate and write one chunk: half clusters of exact copies, half near-duplicate clusters
    (``job["similarity"]``), each half a ``planted_corpus`` of its own; its files
    ``part-<global index>.jsonl`` of ``job["per_file"]`` documents whose ``id`` is the global
    doc index. Returns the chunk's truth with local labels."""
    import numpy as np

    from curator_dask.dedup.synthetic import planted_corpus

    n, first = job["docs"], job["first"]
    halves = [(n // 2, 1.0), (n - n // 2, job["similarity"])]
    texts: list[str] = []
    cluster, exact, pairs, far = [], [], [], []
    base = 0
    for i, (size, similarity) in enumerate(halves):
        if size == 0:
            continue
        p = planted_corpus(size, seed=job["seed"] * 1_000_003 + 2 * job["chunk"] + i,
                           words=tuple(job["words"]), similarity=similarity,
                           vocabulary=job["vocabulary"])
        labels = np.where(p.cluster >= 0, p.cluster + base, -1)
        base += p.n_clusters
        cluster.append(labels)
        exact.append(np.full(p.n_clusters, similarity == 1.0))
        pairs.append(p.cluster_pairs + len(texts) + first)
        far.append(p.far_pairs + len(texts) + first)
        texts += p.texts
    # documents of the same text: the exact workflow's truth (a near-duplicate copy edited by no
    # substitution, frequent at similarity 0.9 on 100 words, is an exact copy too)
    groups: dict[bytes, int] = {}
    first_of = np.asarray([groups.setdefault(hashlib.md5(t.encode()).digest(), i)
                           for i, t in enumerate(texts)])
    shared = np.bincount(first_of, minlength=len(texts)) > 1
    same_text = np.where(shared[first_of], first_of, -1)
    rows = []
    for k, start in enumerate(range(0, n, job["per_file"])):
        chunk_texts = texts[start:start + job["per_file"]]
        lines = [json.dumps({"id": first + start + j, "text": t})
                 for j, t in enumerate(chunk_texts)]
        path = os.path.join(job["dir"], f"part-{job['first_file'] + k:06d}.jsonl")
        with open(path + ".tmp", "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(path + ".tmp", path)
        rows.append(len(chunk_texts))
    return {"cluster": np.concatenate(cluster), "exact": np.concatenate(exact),
            "same_text": same_text,
            "pairs": np.concatenate(pairs), "far": np.concatenate(far), "rows": rows,
            "bytes": sum(len(t) + 30 for t in texts)}


def scale_corpus(args: argparse.Namespace, docs: int) -> tuple[str, dict]:
    """The scale corpus of ``docs`` documents (made once; chunks generated two at a time) and
    its truth: cluster labels, whether each cluster is exact copies, pairs, far pairs."""
    from concurrent.futures import ProcessPoolExecutor

    import numpy as np

    key = (f"scale-{docs}-w{args.words[0]}_{args.words[1]}-s{args.similarity}"
           f"-p{args.docs_per_file}-seed{args.seed}")
    root = os.path.join(args.data, key)
    if not os.path.exists(os.path.join(root, "done")):
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(os.path.join(root, "input"))
        print(f"generating the corpus {key} (once) ...", flush=True)
        started = time.perf_counter()
        vocabulary = scale_vocabulary(args.seed)
        chunk = max(args.docs_per_file, SCALE_CHUNK // args.docs_per_file * args.docs_per_file)
        jobs = []
        for c, first in enumerate(range(0, docs, chunk)):
            jobs.append({"chunk": c, "first": first, "docs": min(chunk, docs - first),
                         "first_file": first // args.docs_per_file, "seed": args.seed,
                         "per_file": args.docs_per_file, "words": args.words,
                         "similarity": args.similarity, "vocabulary": vocabulary,
                         "dir": os.path.join(root, "input")})
        parts = []
        with ProcessPoolExecutor(max_workers=min(2, len(jobs))) as pool:
            for part in pool.map(scale_chunk, jobs):
                parts.append(part)
                print(f"  {sum(len(p['cluster']) for p in parts):,} documents", flush=True)
        offsets = np.cumsum([0] + [len(p["exact"]) for p in parts])
        cluster = np.concatenate([np.where(p["cluster"] >= 0, p["cluster"] + o, -1)
                                  for p, o in zip(parts, offsets, strict=False)])
        np.savez(os.path.join(root, "truth.npz"), cluster=cluster,
                 exact=np.concatenate([p["exact"] for p in parts]),
                 cluster_pairs=np.concatenate([p["pairs"] for p in parts]),
                 far_pairs=np.concatenate([p["far"] for p in parts]),
                 rows=np.asarray([r for p in parts for r in p["rows"]]),
                 same_text=np.concatenate([np.where(p["same_text"] >= 0, p["same_text"] + f, -1)
                                           for p, f in zip(parts, [j["first"] for j in jobs],
                                                           strict=True)]))
        size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(root, "input", "*")))
        print(f"  {docs:,} documents, {size / 1e9:,.2f} GB in {sum(len(p['rows']) for p in parts)}"
              f" files, {time.perf_counter() - started:.0f} s", flush=True)
        open(os.path.join(root, "done"), "w").close()
    with np.load(os.path.join(root, "truth.npz")) as z:
        truth = {name: z[name] for name in z.files}
    return root, truth


def scale_score(truth: dict, kind: str, removed):
    """Score against the clusters ``kind`` should find: every cluster for fuzzy, the clusters
    of exact copies for exact (removing a near-duplicate is then a wrong removal)."""
    import numpy as np

    from curator_dask.dedup.synthetic import PlantedCorpus

    cluster = truth["cluster"]
    pairs = truth["cluster_pairs"]
    if kind == "exact" and "same_text" in truth:  # the documents of one text
        same = truth["same_text"]
        labels = np.unique(same[same >= 0], return_inverse=True)[1]  # 0 .. groups - 1
        cluster = np.full(len(same), -1, np.int64)
        cluster[same >= 0] = labels
        pairs = np.empty((0, 2), np.int64)
    elif kind == "exact":  # a corpus made before same_text: its exact-copy clusters only
        keep = np.concatenate([truth["exact"], [False]])  # label -1 reads the last entry
        cluster = np.where(keep[cluster], cluster, -1)
        pairs = pairs[cluster[pairs[:, 0]] >= 0] if len(pairs) else pairs
    planted = PlantedCorpus(texts=[""] * len(cluster), cluster=cluster, cluster_pairs=pairs,
                            cluster_jaccard=np.ones(len(pairs)), far_pairs=truth["far_pairs"],
                            far_jaccard=np.zeros(len(truth["far_pairs"])))
    return planted.score(removed)


def scale_side(args: argparse.Namespace, kind: str, root: str, truth: dict) -> dict:
    side = {"src": os.path.join(root, "input"), "format": "jsonl",
            "work": os.path.join(root, "runs", kind), "workers": args.workers,
            "blocksize": args.blocksize, "bands": 20, "rows": 13, "threshold": 0.8,
            "n_grams": 4, "memory_limit": args.memory_limit, "per_phase": True,
            "rows_per_file": [int(r) for r in truth["rows"]],
            "extra": json.loads(args.curator_dask_kwargs)}
    result = run_side(f"curator_dask_{kind}", side, args.timeout)
    result["side"] = kind
    if not result["failed"] and not result["timed_out"]:
        result["score"] = scale_score(truth, kind, result["removed"])
    if not args.keep_outputs and not result["failed"]:
        shutil.rmtree(side["work"], ignore_errors=True)  # the next run needs the disk
    return result


def scale_pandas(args: argparse.Namespace, root: str, truth: dict) -> dict:
    """The single-process pandas md5 group-by (``_dedup_runners.run_pandas``, file by file) on
    the scale corpus, scored as the exact workflow is."""
    side = {"src": os.path.join(root, "input"), "format": "jsonl",
            "work": os.path.join(root, "runs", "pandas")}
    result = run_side("pandas", side, args.timeout)
    result["side"] = "pandas"
    if not result["failed"] and not result["timed_out"]:
        result["score"] = scale_score(truth, "exact", result["removed"])
    if not args.keep_outputs and not result["failed"]:
        shutil.rmtree(side["work"], ignore_errors=True)
    return result


def show_scale(args: argparse.Namespace, docs: int, kind: str, r: dict) -> None:
    head = f"{kind:>6} {docs:>12,} docs:"
    if kind == "pandas" and not r["failed"] and not r["timed_out"]:
        s = r["score"]
        print(f"{head} {r['wall']:.1f} s in one process ("
              + ", ".join(f"{k} {v:.1f} s" for k, v in r["phases"].items())
              + f"), precision {s.precision:.4f}, recall {s.recall:.4f} (removed "
              f"{s.removed:,} of {s.expected:,} expected); peak RSS {mib(r['tree'])} MiB",
              flush=True)
        return
    if r["failed"]:
        print(f"{head} FAILED, {r['failed']}", flush=True)
        return
    if r["timed_out"]:
        print(f"{head} > {r['wall']:.0f} s (timed out; peak RSS of the tree so far "
              f"{mib(r['tree'])} MiB)", flush=True)
        return
    s = r["score"]
    print(f"{head} {r['wall']:.1f} s ({r['run_s']:.1f} s in the workflow), precision "
          f"{s.precision:.4f}, recall {s.recall:.4f} (removed {s.removed:,} of {s.expected:,} "
          f"expected); peak RSS of the tree {mib(r['tree'])} MiB (PSS {mib(r['tree_pss'])}); "
          f"workers restarted: {r['worker_processes'] - args.workers}", flush=True)
    addresses = sorted({a for p in r["per_phase"] for a in p["workers"]})
    print(f"{'':>8}{'phase':<12}{'s':>8}{'driver MiB':>12}" + "".join(
        f"{f'w{i} MiB':>9}{f'w{i} P2P disk MiB':>17}{f'w{i} spill MiB':>14}"
        for i in range(len(addresses))))
    for p in r["per_phase"]:
        cells = "".join(
            f"{mib(w['peak_rss']):>9}{mib(w['p2p_disk_bytes']):>17}"
            f"{mib(w['spill_disk_bytes']):>14}" if w else f"{'-':>9}{'-':>17}{'-':>14}"
            for w in (p["workers"].get(a) for a in addresses))
        print(f"{'':>8}{p['phase']:<12}{p['seconds']:>8.1f}{mib(p['driver_peak_rss']):>12}"
              + cells)


def growth(results: dict, kind: str, sizes: list[int], key: str) -> float | None:
    small, big = results.get((min(sizes), kind)), results.get((max(sizes), kind))
    if not small or not big or any(x["failed"] or x["timed_out"] for x in (small, big)):
        return None
    return (big[key] / small[key]) / (max(sizes) / min(sizes))


def scale(args: argparse.Namespace) -> None:
    sizes = sorted(set(args.docs))
    results: dict = {}
    for docs in sizes:
        root, truth = scale_corpus(args, docs)
        for kind in args.workflows:
            results[docs, kind] = (scale_pandas(args, root, truth) if kind == "pandas"
                                   else scale_side(args, kind, root, truth))
            show_scale(args, docs, kind, results[docs, kind])
        exact, pandas = results.get((docs, "exact")), results.get((docs, "pandas"))
        if exact and pandas and not any(r["failed"] or r["timed_out"] for r in (exact, pandas)):
            ratio = exact["wall"] / pandas["wall"]
            print(f"target: exact / pandas at {docs:,} documents, wall {exact['wall']:.1f} / "
                  f"{pandas['wall']:.1f} s = {ratio:.3f} <= 0.7: "
                  f"{'met' if ratio <= 0.7 else 'missed'}", flush=True)
    if len(sizes) > 1:
        for kind in args.workflows:
            g_run = growth(results, kind, sizes, "wall" if kind == "pandas" else "run_s")
            g_wall = growth(results, kind, sizes, "wall")
            if g_run is None:
                print(f"target: {kind} time growth {min(sizes):,} -> {max(sizes):,}: not "
                      "measured (a run did not finish)")
                continue
            print(f"target: {kind} time growth {min(sizes):,} -> {max(sizes):,} documents, "
                  f"(t_big / t_small) / (docs_big / docs_small) = {g_run:.3f} (workflow "
                  f"time; {g_wall:.3f} with interpreter and cluster start) <= 1.3: "
                  f"{'met' if g_run <= 1.3 else 'missed'}")
    if not args.no_record:
        record_scale(args, sizes, results)
    failed = [f"{kind} at {docs:,}" for (docs, kind), r in results.items() if r["failed"]]
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}; logs: {args.data}/scale-*/runs/"
                         "<workflow>/side.log")


def record_scale(args: argparse.Namespace, sizes: list[int], results: dict) -> None:
    sys.path.insert(0, HERE)
    from _results import append_row

    command = "`python benchmarks/bench_dedup.py " + " ".join(sys.argv[1:]) + "`"
    setup = (f"{args.words[0]}-{args.words[1]} words, {args.docs_per_file:,} docs per jsonl "
             f"file, {args.workers} workers, memory limit {args.memory_limit} each, "
             f"{os.cpu_count()} CPUs, Python {platform.python_version()}")
    for (docs, kind), r in results.items():
        if r["failed"] or r["timed_out"]:
            cells = ["FAILED" if r["failed"] else f"> {r['wall']:.0f} s"] + ["-"] * 5
        elif kind == "pandas":
            s = r["score"]
            cells = [f"{r['wall']:.1f} s (one process: " + ", ".join(
                         f"{k} {v:.1f} s" for k, v in r["phases"].items()) + ")",
                     f"P {s.precision:.4f} R {s.recall:.4f}", f"process {mib(r['tree'])}",
                     "-", "-"]
        else:
            s, phases = r["score"], r["per_phase"]
            workers = [mib(max(p["workers"].get(a, {}).get("peak_rss", 0) for p in phases))
                       for a in sorted({a for p in phases for a in p["workers"]})]
            disk = ", ".join(
                f"{p['phase']} {mib(sum(w['p2p_disk_bytes'] for w in p['workers'].values()))}"
                for p in phases)
            spill = sum(w["spill_disk_bytes"] for p in phases for w in p["workers"].values())
            cells = [f"{r['wall']:.1f} s ({r['run_s']:.1f} s workflow)",
                     f"P {s.precision:.4f} R {s.recall:.4f}",
                     f"workers {' / '.join(workers)}, driver "
                     f"{mib(max(p['driver_peak_rss'] for p in phases))}",
                     f"{disk}; memory spill {mib(spill)}",
                     str(r["worker_processes"] - args.workers)]
        key = "wall" if kind == "pandas" else "run_s"
        g = growth(results, kind, sizes, key) if docs == max(sizes) != min(sizes) else None
        append_row("Deduplication: scale", [
            "date", "command", "setup", "workflow", "docs", "time", "precision / recall",
            "peak RSS MiB", "P2P shuffle to disk MiB per phase", "workers restarted",
            "time growth vs smallest"],
            [datetime.date.today().isoformat(), command, setup, kind, f"{docs:,}", *cells,
             "-" if g is None else f"{g:.3f}"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["fuzzy", "exact", "scale"])
    parser.add_argument("--docs", type=int, nargs="+", help="documents (default 100,000 "
                        "fuzzy, 1,000,000 exact; scale: several sizes, default 1000000 "
                        "10000000)")
    parser.add_argument("--words", type=int, nargs=2, help="words per original document "
                        "(default 300 1000 fuzzy, 100 300 exact and scale)")
    parser.add_argument("--similarity", type=float, default=0.9,
                        help="fuzzy and scale: planted Jaccard of two copies in a cluster")
    parser.add_argument("--files", type=int, default=16, help="input files (default 16)")
    parser.add_argument("--docs-per-file", type=int, default=20_000,
                        help="scale: documents per JSONL file (default 20,000, about 30 MB)")
    parser.add_argument("--workflows", nargs="+", choices=["exact", "fuzzy", "pandas"],
                        default=["exact", "fuzzy"], help="scale: the workflows to run "
                        "(pandas: the single-process md5 group-by exact is compared with)")
    parser.add_argument("--keep-outputs", action="store_true",
                        help="scale: keep each run's outputs and cache (default: removed)")
    parser.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2, help="Dask workers / datatrove "
                        "tasks and workers (default 2)")
    parser.add_argument("--blocksize", default="32MiB",
                        help="curator_dask input_blocksize (file groups; default 32MiB)")
    parser.add_argument("--memory-limit", default=None,
                        help="memory limit of each Dask worker (default: LocalCluster's; "
                        "scale: 1.5GiB)")
    parser.add_argument("--n-grams", type=int, default=4, help="datatrove word n-grams")
    parser.add_argument("--curator-dask-kwargs", default="{}",
                        help="JSON of extra workflow parameters, e.g. a Jaccard check")
    parser.add_argument("--skip", nargs="*", default=[], choices=FUZZY_SIDES + EXACT_SIDES)
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds per side before it is ended (default 1800; scale "
                        "10800)")
    parser.add_argument("--data", default=os.path.join(tempfile.gettempdir(),
                                                       "curator-dask-bench-dedup"))
    parser.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    args = parser.parse_args()
    args.words = args.words or ([300, 1000] if args.kind == "fuzzy" else [100, 300])
    if args.kind == "scale":
        args.docs = args.docs or [1_000_000, 10_000_000]
        args.memory_limit = args.memory_limit or "1.5GiB"
        args.timeout = args.timeout or 10_800
        scale(args)
        return
    if args.docs and len(args.docs) > 1:
        parser.error(f"--docs takes one size for {args.kind} (got {args.docs}); several "
                     "sizes are for scale")
    args.docs = args.docs[0] if args.docs else (100_000 if args.kind == "fuzzy"
                                                else 1_000_000)
    args.timeout = args.timeout or 1800
    bench(args, args.kind)


if __name__ == "__main__":
    main()
