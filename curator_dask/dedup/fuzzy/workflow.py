"""``FuzzyDeduplicationWorkflow``: NeMo Curator 1.4's fuzzy deduplication on CPU Dask.

Phases, each in NeMo's directory under ``cache_path``: MinHash signatures (phase 1, a
checkpointable pipeline run: ``MinHashStage/``), LSH buckets through the P2P shuffle
(``LSHStage/``), buckets to edges (``BucketsToEdgesStage/``), optionally the Jaccard check
(``JaccardSimilarityStage/``), connected components (``ConnectedComponentsStage/``), and the
ids to remove (``<output_path>/FuzzyDuplicateIds/``, with ``fuzzy_id_generator.json`` beside
it). ``perform_removal=True`` then writes the corpus without them to
``<output_path>/deduplicated/``. See docs/deduplication.md.
"""

from __future__ import annotations

import json
import logging
import posixpath
import time
from typing import Any, Literal

from curator_dask.dedup.admission import check_workers_reach, hold_executor
from curator_dask.dedup.cache_lock import CacheLock
from curator_dask.dedup.commits import PhaseCommits, phase_key
from curator_dask.dedup.fuzzy.components import CC_DIR, DUPLICATE_IDS_DIR
from curator_dask.dedup.fuzzy.lsh import EDGES_DIR, LSH_DIR
from curator_dask.dedup.fuzzy.minhash import MinHashSignature
from curator_dask.dedup.fuzzy.steps import FuzzyRun
from curator_dask.dedup.phases import (
    check_initial_tasks,
    phase1_partition,
    quiet_shuffle_notices,
    said_once,
)
from curator_dask.dedup.progress import job_reporter
from curator_dask.dedup.result import WorkflowBase, WorkflowRunResult, new_result
from curator_dask.resumability.input_check import MODES as VERIFY_MODES  # the pipeline's

logger = logging.getLogger(__name__)

ID_GENERATOR_OUTPUT_FILENAME = "fuzzy_id_generator.json"
MINHASH_DIR = "MinHashStage"
REMOVAL_DIR = "deduplicated"
# NeMo's GPU-only knobs and their defaults: accepted, ignored on CPU (one warning if set)
_GPU_ONLY = {"lsh_rmm_pool_size": "auto", "lsh_spill_memory_limit": "auto", "env_vars": None,
             "use_async_memory": True}


class FuzzyDeduplicationWorkflow(WorkflowBase):
    """MinHash + LSH fuzzy deduplication of a corpus, on a ``DaskExecutor``, without a GPU.

    The parameters are NeMo Curator 1.4's (``cache_path`` ... ``use_async_memory``), plus
    ``false_positive_check`` / ``jaccard_threshold`` (NeMo 0.x's Jaccard check of candidate
    pairs), ``checkpoint_path`` (a killed run, run again with the same paths, resumes) and
    ``verify_inputs`` (with a checkpoint: input files changed since the run that completed
    them are read again; ``"fingerprint"``, ``"content"`` or ``"off"``) and ``partition``
    (row ranges of the files in phase 1, as the readers' ``partition=``: a big file is
    several tasks; ``input_blocksize`` is then unused).
    ``run`` writes ``<output_path>/FuzzyDuplicateIds/part.<i>.parquet`` (column
    ``_curator_dedup_id``: every document of a duplicate group but the one with the smallest
    id) and ``<output_path>/fuzzy_id_generator.json`` (NeMo's id generator state, for
    ``TextDuplicatesRemovalWorkflow(id_generator_path=...)``).

    Example:
        >>> wf = FuzzyDeduplicationWorkflow(cache_path="cache/", output_path="out/",
        ...                                 input_path="corpus/", input_filetype="jsonl")
        >>> wf.num_hashes
        260
        >>> # result = wf.run(executor=DaskExecutor()); result.get_metadata("num_duplicates")
    """

    def __init__(  # noqa: PLR0913 (NeMo's signature)
        self,
        cache_path: str,
        output_path: str,
        input_path: str | list[str] | None = None,
        input_filetype: Literal["jsonl", "parquet"] = "parquet",
        input_blocksize: str | int | None = "1GiB",
        input_file_extensions: list[str] | None = None,
        read_kwargs: dict[str, Any] | None = None,
        cache_kwargs: dict[str, Any] | None = None,
        write_kwargs: dict[str, Any] | None = None,
        text_field: str = "text",
        perform_removal: bool = False,
        seed: int = 42,
        char_ngrams: int = 24,
        num_bands: int = 20,
        minhashes_per_band: int = 13,
        use_64_bit_hash: bool = False,
        normalize_text: bool = False,
        bands_per_iteration: int = 5,
        lsh_num_output_partitions: int | None = None,
        lsh_rmm_pool_size: int | Literal["auto"] | None = "auto",
        lsh_spill_memory_limit: int | Literal["auto"] | None = "auto",
        env_vars: dict[str, Any] | None = None,
        use_async_memory: bool = True,
        *,
        false_positive_check: bool = False,
        jaccard_threshold: float = 0.8,
        checkpoint_path: str | None = None,
        verify_inputs: str = "fingerprint",
        partition: dict[str, Any] | None = None,
    ) -> None:
        self.cache_path = str(cache_path)
        self.output_path = str(output_path)
        self.input_path = input_path
        self.input_filetype = input_filetype
        self.input_blocksize = input_blocksize
        self.input_file_extensions = input_file_extensions
        self.read_kwargs = read_kwargs
        self.cache_kwargs = cache_kwargs
        self.write_kwargs = write_kwargs
        self.text_field = text_field
        self.perform_removal = perform_removal
        self.seed = seed
        self.char_ngrams = char_ngrams
        self.num_bands = num_bands
        self.minhashes_per_band = minhashes_per_band
        self.use_64_bit_hash = use_64_bit_hash
        self.normalize_text = normalize_text
        self.bands_per_iteration = bands_per_iteration
        self.lsh_num_output_partitions = lsh_num_output_partitions
        self.lsh_rmm_pool_size = lsh_rmm_pool_size
        self.lsh_spill_memory_limit = lsh_spill_memory_limit
        self.env_vars = env_vars
        self.use_async_memory = use_async_memory
        self.false_positive_check = false_positive_check
        self.jaccard_threshold = jaccard_threshold
        self.checkpoint_path = None if checkpoint_path is None else str(checkpoint_path)
        self.verify_inputs = verify_inputs
        self.partition = phase1_partition(partition)
        self.num_hashes = num_bands * minhashes_per_band
        self._validate_inputs()

    def _validate_inputs(self) -> None:
        problems = []
        if self.input_filetype not in ("jsonl", "parquet"):
            problems.append(f"input_filetype={self.input_filetype!r} must be 'jsonl' or "
                            "'parquet'")
        for name in ("char_ngrams", "num_bands", "minhashes_per_band"):
            if int(getattr(self, name)) < 1:
                problems.append(f"{name}={getattr(self, name)} must be at least 1")
        if not 1 <= self.bands_per_iteration <= max(self.num_bands, 1):
            problems.append(f"bands_per_iteration={self.bands_per_iteration} must be between 1 "
                            f"and num_bands ({self.num_bands})")
        if not 0.0 < float(self.jaccard_threshold) <= 1.0:
            problems.append(f"jaccard_threshold={self.jaccard_threshold} must be in (0, 1]")
        if self.verify_inputs not in VERIFY_MODES:
            problems.append(f"verify_inputs must be one of {', '.join(VERIFY_MODES)} (got "
                            f"{self.verify_inputs!r})")
        if self.lsh_num_output_partitions is not None and self.lsh_num_output_partitions < 1:
            problems.append(f"lsh_num_output_partitions={self.lsh_num_output_partitions} must "
                            "be at least 1 (or None: one per input partition)")
        if problems:
            msg = "FuzzyDeduplicationWorkflow: " + "; ".join(problems)
            raise ValueError(msg)
        if self.char_ngrams < 20:
            logger.warning("Using a small char_ngrams value might lead to a large number (~5%%) "
                           "of false positives during deduplication. Using a value of at least "
                           "20 for char_ngrams is recommended.")
        ignored = [f"{k}={getattr(self, k)!r}" for k, default in _GPU_ONLY.items()
                   if getattr(self, k) != default]
        if ignored:
            logger.warning("FuzzyDeduplicationWorkflow on CPU ignores the GPU-only parameters "
                           "%s (they configure RMM, CUDA memory and Ray's runtime environment)",
                           ", ".join(ignored))

    # -- the phases' places and parameters ------------------------------------------------
    def _options(self, kwargs: dict[str, Any] | None) -> dict[str, Any]:
        return dict((kwargs or {}).get("storage_options") or {})

    def cache_dir(self, name: str) -> str:
        """``<cache_path>/<name>`` (NeMo's directory names: ``MinHashStage``, ``LSHStage``,
        ``BucketsToEdgesStage``, ``ConnectedComponentsStage``)."""
        return posixpath.join(self.cache_path, name)

    def output_dir(self, name: str) -> str:
        return posixpath.join(self.output_path, name)

    def minhash_spec(self) -> MinHashSignature:
        return MinHashSignature(seed=self.seed, num_hashes=self.num_hashes,
                                char_ngrams=self.char_ngrams,
                                use_64_bit_hash=self.use_64_bit_hash, text_field=self.text_field,
                                normalize_text=self.normalize_text)

    def phase_params(self) -> dict[str, dict[str, Any]]:
        """What each phase's commit key covers beyond its upstream."""
        return {
            "lsh": {"num_bands": self.num_bands, "minhashes_per_band": self.minhashes_per_band,
                    "bands_per_iteration": self.bands_per_iteration, "seed": self.seed,
                    "npartitions": self.lsh_num_output_partitions},
            "edges": {},
            "jaccard": {"char_ngrams": self.char_ngrams, "seed": self.seed,
                        "normalize_text": self.normalize_text, "text_field": self.text_field,
                        "threshold": self.jaccard_threshold},
            "components": {"false_positive_check": self.false_positive_check,
                           "jaccard_threshold": self.jaccard_threshold},
            "identify": {"output_path": self.output_path},
        }

    def _job_parameters(self) -> dict[str, Any]:
        """What a job records of this workflow (credentials are redacted by name)."""
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    # -- running ------------------------------------------------------------------------
    def _validate_initial_tasks(self, initial_tasks: list[Any] | None) -> None:
        check_initial_tasks(initial_tasks, self.input_path)

    def run(self, initial_tasks: list[Any] | None = None,
            executor: Any = None, *, work_dir: str | None = None,
            job_id: str | None = None) -> WorkflowRunResult:
        """Run every phase on ``executor`` (``None``: a ``DaskExecutor()`` on an embedded
        cluster) and return NeMo's ``WorkflowRunResult`` (``workflow_name``
        ``"fuzzy_deduplication"``; metadata ``minhash_time``, ``id_generator_path``,
        ``lsh_time``, ``connected_components_pipeline_time``, ``num_duplicates``,
        ``total_time`` as NeMo, plus each phase's own time).

        Each phase shows its progress (``dedup/progress.py``). With ``work_dir=`` or
        ``job_id=`` (beyond NeMo) the run is a job in ``<work_dir>/<job_id>/`` (default
        ``work_dir``: config ``jobs.work-dir``), as ``Pipeline.run``'s: its event log gets the
        phase events and ``python -m curator_dask status JOB`` shows the phases."""
        from curator_dask.backends.dask import DaskExecutor

        self._validate_initial_tasks(initial_tasks)
        if executor is None:
            executor = DaskExecutor()
        if not isinstance(executor, DaskExecutor):
            msg = (f"FuzzyDeduplicationWorkflow runs on curator_dask.DaskExecutor, got "
                   f"{type(executor).__name__}: pass executor=DaskExecutor(...) (or None)")
            raise TypeError(msg)
        result = new_result("fuzzy_deduplication")
        start = time.time()
        import dask

        name = "fuzzy_deduplication"
        cache_options = self._options(self.cache_kwargs)
        with hold_executor(executor, name), job_reporter(
                "fuzzy deduplication", self._job_parameters(), executor, work_dir=work_dir,
                job_id=job_id, checkpoint_path=self.checkpoint_path) as reporter, \
                executor.kept_open() as client, dask.config.set(
                {"dataframe.shuffle.method": "p2p"}), quiet_shuffle_notices(), said_once():
            check_workers_reach(client, {
                "cache_path": self.cache_path, "output_path": self.output_path,
                "input_path": self.input_path}, {
                "cache_path": cache_options, "input_path": self._options(self.read_kwargs),
                "output_path": self._options(self.write_kwargs)})
            with CacheLock(self.cache_path, cache_options, name):
                commits = PhaseCommits(self.cache_path, cache_options,
                                       resume=self.checkpoint_path is not None)
                FuzzyRun(self, executor, client, commits, result, reporter).run(initial_tasks)
        result.add_metadata("total_time", time.time() - start)
        logger.info("Fuzzy deduplication pipeline completed in %.2f seconds",
                    result.get_metadata("total_time"))
        return result


def upstream_of_phase1(workflow: FuzzyDeduplicationWorkflow, groups: list[Any]) -> str:
    """Phase 1's key: the minhash parameters and every group's files, rows and signature
    file's writing (a group reprocessed since, its input changed, has a new one)."""
    spec = workflow.minhash_spec()
    return phase_key("minhash", {k: getattr(spec, k) for k in spec.__dataclass_fields__},
                     json.dumps([[list(g.files), g.rows, g.version] for g in groups]))


__all__ = ["CC_DIR", "DUPLICATE_IDS_DIR", "EDGES_DIR", "ID_GENERATOR_OUTPUT_FILENAME",
           "LSH_DIR", "MINHASH_DIR", "REMOVAL_DIR", "FuzzyDeduplicationWorkflow"]
