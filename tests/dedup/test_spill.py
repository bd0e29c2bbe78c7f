"""Both workflows with the P2P shuffle's memory far below its data, and the memory they say
they need before the connected components (issue 35, "Past memory, measured").

The shuffle's memory on a worker is bounded by ``distributed.p2p.comm.buffer`` (shards in
flight) and ``distributed.p2p.storage.buffer`` (shards waiting for the disk); here both are
1 KiB on a cluster of its own, against shuffles of hundreds of KB. What is measured is the
workers' own counters (``curator_dask.dedup.meter``, as ``benchmarks/bench_dedup.py scale``
prints them): the bytes the shuffle wrote to disk, and the seconds it waited because its
buffers were full. The ids to remove must be those of the same workflow on the shared
cluster, whose buffers (1 GiB, 100 MiB) are never full here. The 10,000,000-document figures
come from the benchmark.
"""

from __future__ import annotations

import glob
import logging
import tracemalloc

import dask
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curator_dask import DaskExecutor
from curator_dask.dedup import ExactDeduplicationWorkflow, FuzzyDeduplicationWorkflow
from curator_dask.dedup.fuzzy.components import (
    GROUP_FIELD,
    components_memory,
    components_out_of_core,
    components_plan,
    connected_components,
)
from curator_dask.dedup.fuzzy.lsh import EDGE_X, EDGE_Y
from curator_dask.dedup.meter import cluster_usage
from curator_dask.dedup.phases import ID_COLUMN
from curator_dask.dedup.synthetic import planted_corpus

TINY = "1 KiB"
EXACT_DOCS, FUZZY_DOCS = 4000, 2000


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("spill")
    exact = planted_corpus(EXACT_DOCS, seed=1, words=(100, 300), similarity=1.0)
    exact.write_jsonl(str(root / "exact"), n_files=8)
    fuzzy = planted_corpus(FUZZY_DOCS, seed=1, words=(100, 300), similarity=0.9)
    fuzzy.write_jsonl(str(root / "fuzzy"), n_files=8)
    return root


@pytest.fixture(scope="class")
def tiny_buffers():
    """A cluster whose workers' P2P buffers are 1 KiB: its nannies pass the config they were
    made under to their workers; this process's config stays as it was (the shared cluster,
    started later, keeps the defaults). It lives for :class:`TestTinyBuffers` only: the rest
    of the module runs with the shared cluster alone in the process (a run on the shared
    cluster once hung in a client's comm while this one idled beside it)."""
    ex = DaskExecutor(n_workers=2, progress=False)
    with dask.config.set({"distributed.p2p.comm.buffer": TINY,
                          "distributed.p2p.storage.buffer": TINY}):
        ex.start()
    with ex:
        yield ex


def _run(kind, corpora, out, executor):
    common = {"input_path": str(corpora / kind), "output_path": str(out),
              "input_filetype": "jsonl", "input_blocksize": "64KiB"}
    if kind == "exact":
        wf = ExactDeduplicationWorkflow(assign_id=True, **common)
    else:
        wf = FuzzyDeduplicationWorkflow(cache_path=str(out / "cache"), **common)
    client = executor.client
    before = cluster_usage(client)
    # exact dedup's ids would be grouped in memory (they fit): the P2P shuffle is the subject
    with dask.config.set({"curator-dask.dedup.exact-in-memory-fraction": 0}):
        wf.run(executor=executor)
    after = cluster_usage(client)
    totals = {k: sum(after[w][k] - before.get(w, {}).get(k, 0) for w in after)
              for k in ("p2p_disk_bytes", "p2p_limited_seconds")}
    ids_dir = "ExactDuplicateIds" if kind == "exact" else "FuzzyDuplicateIds"
    ids = np.sort(np.concatenate([pq.read_table(p).column(0).to_numpy() for p in
                                  sorted(glob.glob(str(out / ids_dir / "*.parquet")))]))
    return ids, totals


class TestTinyBuffers:
    @pytest.mark.parametrize(("kind", "docs", "row_bytes"), [
        ("exact", EXACT_DOCS, 24),  # id and the two md5 words, int64 each
        ("fuzzy", FUZZY_DOCS, 20 * 16)])  # per band: the bucket and the id, 8 bytes each
    def test_shuffle_past_its_memory(self, kind, docs, row_bytes, corpora, tiny_buffers,
                                     executor, tmp_path):
        def buffer():
            return dask.config.get("distributed.p2p.storage.buffer")

        assert set(tiny_buffers.client.run(buffer).values()) == {TINY}
        assert set(executor.client.run(buffer).values()) == {"100 MiB"}
        ids, limited = _run(kind, corpora, tmp_path / "tiny", tiny_buffers)
        reference, free = _run(kind, corpora, tmp_path / "reference", executor)

        assert len(ids) > 0
        np.testing.assert_array_equal(ids, reference)
        # the shuffle held at most 1 KiB: it waited on its full buffers and its data went to disk
        assert limited["p2p_limited_seconds"] > 0
        assert limited["p2p_disk_bytes"] >= docs * row_bytes
        assert free["p2p_limited_seconds"] == 0
        assert free["p2p_disk_bytes"] >= docs * row_bytes


def test_components_say_their_memory_first(corpora, executor, tmp_path, caplog):
    out = tmp_path / "out"
    wf = FuzzyDeduplicationWorkflow(cache_path=str(out / "cache"), output_path=str(out),
                                    input_path=str(corpora / "fuzzy"), input_filetype="jsonl",
                                    input_blocksize="64KiB")
    with caplog.at_level(logging.INFO, logger="curator_dask.dedup.fuzzy"):
        result = wf.run(executor=executor)
    edges = result.get_metadata("num_edges")
    lines = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("connected components:")]
    assert len(lines) == 1, lines
    expected = components_memory(edges, FUZZY_DOCS) / 2**20
    assert f"{edges:,} edges among {FUZZY_DOCS:,} document ids" in lines[0]
    assert f"about {expected:,.1f} MiB of arrays in one task" in lines[0]
    assert lines[0].endswith("it runs there")


@pytest.mark.parametrize(("ids", "edges", "seed"), [(50_000, 20_000, 1), (5_000, 9_000, 2)])
def test_components_out_of_core_equal_the_in_memory_ones(tmp_path, ids, edges, seed):
    """When no worker has the room, the union-find with its parents in a file gives the
    same groups as scipy's in memory, on random graphs (chains and stars merge across
    batches: 1,000 edges a batch)."""
    rng = np.random.default_rng(seed)
    x, y = rng.integers(0, ids, edges), rng.integers(0, ids, edges)
    for i, part in enumerate(np.array_split(np.arange(edges), 3)):
        pq.write_table(pa.table({EDGE_X: x[part], EDGE_Y: y[part]}),
                       tmp_path / f"edges-{i}.parquet")
    paths = sorted(str(p) for p in tmp_path.glob("edges-*.parquet"))
    counts = components_out_of_core(paths, str(tmp_path / "cc"), ids, str(tmp_path),
                                    batch_rows=1000)
    vertices, groups = connected_components(x, y)
    table = pq.read_table(tmp_path / "cc" / "part.0.parquet")
    assert table.column(ID_COLUMN).to_pylist() == vertices.tolist()
    assert table.column(GROUP_FIELD).to_pylist() == groups.tolist()
    assert counts == {"num_edges": edges, "num_vertices": len(vertices),
                      "num_groups": int(np.count_nonzero(vertices == groups))}
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["cc"]  # files gone


def test_a_workflow_whose_components_do_not_fit_runs_them_out_of_core(corpora, tmp_path,
                                                                     caplog):
    """A worker whose memory limit leaves less than the components' arrays runs them out of
    core, with the same duplicates as a roomy worker's run. The limit is real (the one the
    scheduler reports), set below what a worker holds before any task (~250 MiB), with
    distributed's pause and terminate thresholds off so that the worker keeps working."""

    def run(out, executor):
        return FuzzyDeduplicationWorkflow(
            cache_path=str(out / "cache"), output_path=str(out),
            input_path=str(corpora / "fuzzy"), input_filetype="jsonl",
            input_blocksize="64KiB").run(executor=executor)

    unguarded = {"distributed.worker.memory.target": False,
                 "distributed.worker.memory.spill": False,
                 "distributed.worker.memory.pause": False,
                 "distributed.worker.memory.terminate": False}
    with dask.config.set(unguarded), DaskExecutor(
            n_workers=1, progress=False, cluster_kwargs={"memory_limit": "64MiB"}) as small, \
            caplog.at_level(logging.INFO, logger="curator_dask.dedup.fuzzy"):
        run(tmp_path / "small", small)
    lines = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("connected components:")]
    assert len(lines) == 1 and "runs there out of core" in lines[0], lines
    with DaskExecutor(n_workers=1, progress=False) as roomy:
        run(tmp_path / "roomy", roomy)
    for name in ("ConnectedComponentsStage", "FuzzyDuplicateIds"):
        small_t = pq.read_table(tmp_path / "small" / ("cache" if name.startswith("C") else "")
                                / name)
        roomy_t = pq.read_table(tmp_path / "roomy" / ("cache" if name.startswith("C") else "")
                                / name)
        assert small_t.sort_by(ID_COLUMN).equals(roomy_t.sort_by(ID_COLUMN))


def test_components_plan_when_it_does_not_fit():
    workers = {"tcp://small": {"memory_limit": 2**30, "metrics": {"memory": 2**29}},
               "tcp://big": {"memory_limit": 2**32, "metrics": {"memory": 2**29}}}
    where, level, line = components_plan(100_000_000, 1_000_000_000, workers)
    assert where == "tcp://big"
    assert level == logging.WARNING
    assert "more than the roomiest worker has (3.30 GiB free of its 4.00 GiB" in line
    assert "out of core" in line
    where, level, _ = components_plan(1000, 10_000, workers)
    assert (where, level) == ("tcp://big", logging.INFO)


@pytest.mark.parametrize(("ids", "edges", "spread"), [
    (1_000_000, 100_000, 0.05), (1_000_000, 1_000_000, 1.0), (4_000_000, 2_000_000, 0.5),
    (16_000_000, 100_000, 1.0)])
def test_components_memory_bounds_the_measured_peak(ids, edges, spread):
    """The estimate against the arrays' peak measured with tracemalloc (numpy reports its
    allocations to it): never below, at most three times above."""
    rng = np.random.default_rng(0)
    connected_components(np.array([0]), np.array([1]))  # scipy imported before measuring
    top = max(2, int(ids * spread))
    tracemalloc.start()
    try:
        x, y = rng.integers(0, top, edges), rng.integers(0, top, edges)
        x[0] = ids - 1
        connected_components(x, y)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    estimate = components_memory(edges, ids)
    assert peak <= estimate <= 3 * peak
