"""One run of the fuzzy workflow: its phases in order, each skipped when committed (with
``checkpoint_path=``) or redone from scratch and committed (``dedup/commits.py``)."""

from __future__ import annotations

import logging
import posixpath
import time
from collections.abc import Callable
from typing import Any, ClassVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

from curator_dask.dedup.commits import phase_key
from curator_dask.dedup.fuzzy.components import (
    CC_DIR,
    DUPLICATE_IDS_DIR,
    components_plan,
    components_task,
    identify_task,
)
from curator_dask.dedup.fuzzy.jaccard import JACCARD_DIR, check_candidates
from curator_dask.dedup.fuzzy.lsh import (
    EDGES_DIR,
    LSH_DIR,
    band_iterations,
    bucket_edges,
    shuffle_buckets,
)
from curator_dask.dedup.phases import ID_COLUMN
from curator_dask.dedup.progress import PhaseProgress, PhaseReporter, gather

logger = logging.getLogger(__name__)


class FuzzyRun:
    """The state of one ``FuzzyDeduplicationWorkflow.run``: the workflow's parameters, the
    executor and its client, the commit markers, the result being filled.

    Example:
        >>> # FuzzyRun(workflow, executor, client, commits, result).run(initial_tasks=None)
    """

    # what each phase's progress counts
    UNITS: ClassVar[dict[str, str]] = {
        "minhash": "documents", "lsh": "documents", "edges": "files", "jaccard": "pairs",
        "components": "edges", "identify": "ids", "removal": "documents"}

    def __init__(self, workflow: Any, executor: Any, client: Any, commits: Any,
                 result: Any, reporter: PhaseReporter | None = None) -> None:
        self.wf, self.executor, self.client = workflow, executor, client
        self.reporter = reporter or PhaseReporter(
            "fuzzy deduplication", progress=getattr(executor, "progress", None))
        self.progress: PhaseProgress | None = None  # the phase running
        self.commits, self.result = commits, result
        self.cache_opts = workflow._options(workflow.cache_kwargs)
        self.write_opts = workflow._options(workflow.write_kwargs)
        self.params = workflow.phase_params()
        self.upstream = ""
        self.times: dict[str, float] = {}
        self.counts: dict[str, dict[str, Any]] = {}
        self.skipped: list[str] = []
        self.phase1: Any = None

    def run(self, initial_tasks: list[Any] | None) -> None:
        self.minhash(initial_tasks)
        lsh = self.phase("lsh", [(self.wf.cache_dir(LSH_DIR), self.cache_opts)], self._lsh)
        edges = self.phase("edges", [(self.wf.cache_dir(EDGES_DIR), self.cache_opts)],
                           self._edges)
        if self.wf.false_positive_check:
            jaccard = self.phase("jaccard", [(self.wf.cache_dir(JACCARD_DIR), self.cache_opts)],
                                 self._jaccard)
            self.result.add_metadata("num_candidate_pairs", jaccard.get("pairs", 0))
            self.result.add_metadata("num_verified_pairs", jaccard.get("verified", 0))
        cc = self.phase("components", [(self.wf.cache_dir(CC_DIR), self.cache_opts)],
                        self._components)
        ids = self.phase("identify", [(self.wf.output_dir(DUPLICATE_IDS_DIR), self.write_opts)],
                         self._identify)
        t = self.times
        self.result.add_metadata("lsh_time", t["lsh"])
        self.result.add_metadata("buckets_to_edges_time", t["edges"])
        if self.wf.false_positive_check:
            self.result.add_metadata("jaccard_time", t["jaccard"])
        self.result.add_metadata("connected_components_time", t["components"])
        self.result.add_metadata("identify_duplicates_time", t["identify"])
        self.result.add_metadata("connected_components_pipeline_time", sum(
            t[k] for k in ("edges", "jaccard", "components", "identify") if k in t))
        self.result.add_metadata("num_buckets", lsh.get("buckets", 0))
        self.result.add_metadata("num_edges", edges.get("edges", 0))
        self.result.add_metadata("num_duplicate_groups", cc.get("num_groups", 0))
        self.result.add_metadata("num_duplicates", ids.get("num_removal_ids", 0))
        self.result.add_metadata("duplicate_ids_path", self.wf.output_dir(DUPLICATE_IDS_DIR))
        self.result.add_metadata("phases_skipped", list(self.skipped))
        self.result.add_pipeline_tasks("connected_components", self._id_tasks(ids))
        logger.info("Number of documents removed: %d", ids.get("num_removal_ids", 0))
        if self.wf.perform_removal:
            self.removal(initial_tasks)

    def phase(self, name: str, directories: list[tuple[str, dict[str, Any]]],
              work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Skip ``name`` if committed with this key (resuming), else redo and commit it."""
        key = phase_key(name, self.params[name], self.upstream)
        start = time.time()
        with self.reporter.phase(name, self.UNITS[name]) as self.progress:
            counts, skipped = self.commits.run(name, key, directories, work)
        if skipped:
            self.skipped.append(name)
            logger.info("fuzzy phase %s committed by an earlier run: skipped", name)
        else:
            # the phase's progress line said it (dedup/progress.py): its counts, for debugging
            logger.debug("fuzzy phase %s done in %.2f s: %s", name, time.time() - start, counts)
        self.upstream = key
        self.times[name] = time.time() - start
        self.counts[name] = counts
        return counts

    # -- phase 1 ----------------------------------------------------------------------------
    def minhash(self, initial_tasks: list[Any] | None) -> None:
        from curator_dask.dedup.fuzzy.workflow import (
            ID_GENERATOR_OUTPUT_FILENAME,
            MINHASH_DIR,
            upstream_of_phase1,
        )
        from curator_dask.dedup.phases import SignatureSpec, run_phase1

        wf = self.wf
        start = time.time()
        spec = SignatureSpec("minhash", wf.minhash_spec(), wf.text_field)
        with self.reporter.phase("minhash", self.UNITS["minhash"]) as progress:
            progress.start()  # the engine's bars show the pipeline's sources meanwhile
            self.phase1 = run_phase1(
                self.executor, spec, input_path=wf.input_path,
                input_filetype=wf.input_filetype, input_blocksize=wf.input_blocksize,
                input_file_extensions=wf.input_file_extensions, read_kwargs=wf.read_kwargs,
                id_field=None, assign_id=True, out_dir=wf.cache_dir(MINHASH_DIR),
                checkpoint_path=wf.checkpoint_path, initial_tasks=initial_tasks,
                verify_inputs=wf.verify_inputs, partition=wf.partition)
            progress.advance(self.phase1.num_documents, say=False)
        self.times["minhash"] = time.time() - start
        self.result.add_metadata("minhash_time", self.times["minhash"])
        self.result.add_metadata("num_documents", self.phase1.num_documents)
        self.result.add_pipeline_tasks("minhash", self._minhash_tasks())
        logger.info("Minhash pipeline completed in %.2f seconds", self.times["minhash"])
        path = wf.output_dir(ID_GENERATOR_OUTPUT_FILENAME)
        self.phase1.id_generator().to_disk(path, storage_options=self.write_opts)
        self.result.add_metadata("id_generator_path", path)
        self.upstream = upstream_of_phase1(wf, self.phase1.groups)

    def _minhash_tasks(self) -> list[Any]:
        from curator_dask.tasks import FileGroupTask

        return [FileGroupTask(dataset_name="minhash", data=[g.path],
                              _metadata={"num_rows": g.rows, "source_files": list(g.files)})
                for g in self.phase1.groups]

    def _id_tasks(self, counts: dict[str, Any]) -> list[Any]:
        """NeMo's tasks of the identification: one per ids file, with its counts."""
        from curator_dask.tasks import FileGroupTask

        folder = self.wf.output_dir(DUPLICATE_IDS_DIR)
        sizes = counts.get("part_sizes") or []
        return [FileGroupTask(dataset_name="FuzzyDuplicateIds",
                              data=[posixpath.join(folder, f"part.{i}.parquet")],
                              _metadata={"partition_index": i, "total_partitions": len(sizes),
                                         "num_removal_ids": n})
                for i, n in enumerate(sizes)]

    # -- the phases after it -----------------------------------------------------------------
    def _lsh(self) -> dict[str, Any]:
        wf = self.wf
        groups = [g for g in self.phase1.groups if g.rows > 0]
        buckets = rows = 0
        if self.progress is not None:  # one row per document and band
            self.progress.start(self.phase1.num_documents, per=wf.num_bands)
        for a, b in band_iterations(wf.num_bands, wf.bands_per_iteration):
            out = posixpath.join(wf.cache_dir(LSH_DIR), f"band_{a}-band_{b}")
            if not groups:
                continue
            stats = shuffle_buckets(
                self.client, groups, out, num_hashes=wf.num_hashes,
                minhashes_per_band=wf.minhashes_per_band, band_range=(a, b), seed=wf.seed,
                npartitions=wf.lsh_num_output_partitions, storage_options=self.cache_opts,
                progress=self.progress)
            buckets += int(stats["buckets"].sum())
            rows += int(stats["rows"].sum())
        return {"buckets": buckets, "bucketed_rows": rows}

    def _edges(self) -> dict[str, Any]:
        inputs = parquet_files(self.wf.cache_dir(LSH_DIR), self.cache_opts)
        out_dir = self.wf.cache_dir(EDGES_DIR)
        outputs = [posixpath.join(out_dir, "-".join(p.split("/")[-2:])) for p in inputs]
        if self.progress is not None:
            self.progress.start(len(inputs))
        counts = gather(self.client.map(
            bucket_edges, inputs, outputs, storage_options=self.cache_opts, pure=False),
            self.progress, lambda _: 1)
        return {"edges": int(sum(counts)), "files": len(outputs)}

    def _jaccard(self) -> dict[str, Any]:
        wf = self.wf
        edge_paths = parquet_files(wf.cache_dir(EDGES_DIR), self.cache_opts)
        if not edge_paths:
            return {"pairs": 0, "verified": 0, "candidate_documents": 0, "files": 0}
        return check_candidates(
            self.client, self.phase1.groups, edge_paths, wf.cache_dir(JACCARD_DIR),
            filetype=wf.input_filetype, text_field=wf.text_field,
            read_kwargs=dict(wf.read_kwargs or {}), normalize_text=wf.normalize_text,
            char_ngrams=wf.char_ngrams, seed=wf.seed, threshold=float(wf.jaccard_threshold),
            npartitions=wf.lsh_num_output_partitions, storage_options=self.cache_opts,
            progress=self.progress)

    def _components(self) -> dict[str, Any]:
        wf = self.wf
        source, threshold = (JACCARD_DIR, float(wf.jaccard_threshold)) if (
            wf.false_positive_check) else (EDGES_DIR, None)
        paths = parquet_files(wf.cache_dir(source), self.cache_opts)
        # the edges and the id table are held in memory: say how much before it starts
        phase, count = ("jaccard", "verified") if wf.false_positive_check else ("edges", "edges")
        edges = int(self.counts.get(phase, {}).get(count) or 0)
        where, level, line = components_plan(edges, self.phase1.num_documents,
                                             self.client.scheduler_info()["workers"])
        logger.log(level, "%s", line)
        # no worker has the room: the union-find with its parents in a file instead
        out_of_core = level >= logging.WARNING
        future = self.client.submit(components_task, paths, wf.cache_dir(CC_DIR),
                                    self.cache_opts, threshold, pure=False,
                                    num_ids=self.phase1.num_documents, out_of_core=out_of_core,
                                    workers=None if where is None else [where],
                                    allow_other_workers=True)
        return self._one_task(future, "num_edges", int(edges or 0))

    def _identify(self) -> dict[str, Any]:
        future = self.client.submit(identify_task, self.wf.cache_dir(CC_DIR),
                                    self.wf.output_dir(DUPLICATE_IDS_DIR), self.cache_opts,
                                    self.write_opts, pure=False)
        return self._one_task(future, "num_removal_ids")

    def _one_task(self, future: Any, counted: str, total: int | None = None) -> dict[str, Any]:
        """A phase that is one task: its progress says it runs (a line every
        ``line_every`` seconds without a bar) and counts ``counted`` of its result at the end."""
        if self.progress is not None:
            self.progress.start(total)
        return gather([future], self.progress, lambda counts: int(counts[counted]))[0]

    def removal(self, initial_tasks: list[Any] | None) -> None:
        from curator_dask.dedup.fuzzy.workflow import REMOVAL_DIR
        from curator_dask.dedup.removal import TextDuplicatesRemovalWorkflow
        from curator_dask.dedup.removal_step import RemovalStep, removal_key, removal_params

        wf = self.wf
        start = time.time()
        params = removal_params(
            input_path=wf.input_path, input_filetype=wf.input_filetype,
            input_blocksize=wf.input_blocksize, extensions=wf.input_file_extensions,
            initial_tasks=initial_tasks, output=wf.output_dir(REMOVAL_DIR),
            write_kwargs=wf.write_kwargs)
        step = RemovalStep(output=wf.output_dir(REMOVAL_DIR), storage_options=self.write_opts,
                           checkpoint=wf.checkpoint_path,
                           key=removal_key(self.upstream, params),
                           num_documents=self.phase1.num_documents)
        removal = TextDuplicatesRemovalWorkflow(
            input_path=wf.input_path, ids_to_remove_path=wf.output_dir(DUPLICATE_IDS_DIR),
            output_path=wf.output_dir(REMOVAL_DIR), input_filetype=wf.input_filetype,
            input_blocksize=wf.input_blocksize, input_file_extensions=wf.input_file_extensions,
            input_kwargs=wf.read_kwargs, id_field=ID_COLUMN, duplicate_id_field=ID_COLUMN,
            duplicate_id_read_kwargs={"storage_options": self.write_opts} if self.write_opts
            else None,
            id_generator_path=self.result.get_metadata("id_generator_path"),
            id_generator_storage_options=self.write_opts or None,
            output_filetype=wf.input_filetype, output_kwargs=wf.write_kwargs,
            drop_id_field=True, checkpoint_path=step.pipeline_checkpoint)
        with self.reporter.phase("removal", self.UNITS["removal"]) as progress:
            progress.start(self.phase1.num_documents)  # the pipeline's bars show its sources
            counts, outcome = step.run(self.client, removal, self.executor, initial_tasks)
            if counts["skipped"]:
                progress.skip()
            else:
                progress.advance(self.phase1.num_documents, say=False)
        if counts["skipped"]:
            self.skipped.append("removal")
            self.result.add_metadata("phases_skipped", list(self.skipped))
            logger.info("fuzzy phase removal committed by an earlier run: skipped")
        self.result.add_pipeline_tasks(
            "removal", [] if outcome is None else outcome.pipeline_tasks.get("removal"))
        self.result.add_metadata("removal_time", time.time() - start)
        self.result.add_metadata("num_duplicates_removed", counts["num_duplicates_removed"])
        self.result.add_metadata("deduplicated_path", wf.output_dir(REMOVAL_DIR))


def parquet_files(directory: str, storage_options: dict[str, Any]) -> list[str]:
    """Every ``*.parquet`` under ``directory`` (recursively), sorted, as URLs the workers can
    open (plain paths for local files); none when the directory does not exist."""
    fs, root = fsspec.core.url_to_fs(str(directory), **storage_options)
    if not fs.exists(root):
        return []
    found = sorted(p for p in fs.find(root) if p.endswith(".parquet")
                   and not posixpath.basename(p).startswith("."))
    return found if isinstance(fs, LocalFileSystem) else [fs.unstrip_protocol(p) for p in found]


__all__ = ["FuzzyRun", "parquet_files"]
