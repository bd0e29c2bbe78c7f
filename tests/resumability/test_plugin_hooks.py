"""``CompletionPlugin`` hooks called directly, without a cluster (as distributed's own tests
drive scheduler plugins), plus the §8 ``tests/utils/test_resumability_actor.py`` behaviours:
the plugin is this package's counterpart of NeMo's ResumabilityActor.

Real LMDB files in ``tmp_path``; no Dask cluster is started.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import uuid
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import fsspec
import lmdb
import pytest

from curator_dask.resumability.plugin import TOPIC, CompletionPlugin, handler_names
from curator_dask.resumability.store import METADATA_DIRNAME, read_completed

COUNTERS_LOGGER = "curator_dask.resumability.counters"
STORE_LOGGER = "curator_dask.resumability.store"
RUN = "run1"


class FakeScheduler:
    """A stand-in for ``distributed.Scheduler``: only the attributes the plugin touches exist
    (``handlers``, ``plugins``, and ``remove_plugin`` for a plugin registered by name)."""

    def __init__(self) -> None:
        self.handlers: dict[str, Callable] = {}
        self.plugins: dict[str, Any] = {}

    def remove_plugin(self, name: str) -> None:
        del self.plugins[name]


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())


def make(ckpt: Path | str, run_id: str = RUN, **kwargs: Any) -> CompletionPlugin:
    kwargs.setdefault("flush_interval", 0.01)
    kwargs.setdefault("writer_id", "w")
    return CompletionPlugin(str(ckpt), run_id, **kwargs)


async def start(plugin: CompletionPlugin) -> FakeScheduler:
    sched = FakeScheduler()
    await plugin.start(sched)
    return sched


def send(
    plugin: CompletionPlugin,
    deltas: Iterable[tuple[str, str, int]],
    *,
    run_id: str = RUN,
    failed: Iterable[str] = (),
    warnings: Iterable[str] = (),
    topic: str = TOPIC,
) -> None:
    # Tuples arrive as lists after the worker's msgpack round trip.
    msg = {"run": run_id, "deltas": [list(d) for d in deltas], "failed": list(failed),
           "warnings": list(warnings)}
    plugin.log_event(topic, msg)


def own_file(ckpt: Path, writer: str = "w") -> Path:
    return ckpt / METADATA_DIRNAME / f"{writer}.mdb"


def committed(path: Path, tmp_path: Path) -> set[str]:
    """What is on disk right now, read from a byte copy (the writer still holds the file)."""
    copy = tmp_path / f"copy-{uuid.uuid4().hex}.mdb"
    shutil.copyfile(path, copy)
    return read_completed(str(copy))


def nemo_write(path: Path, ids: Iterable[str]) -> None:
    """A writer file exactly as NeMo Curator 1.4's actor writes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(path), subdir=False, lock=False, max_dbs=1, map_size=1 << 30,
                    metasync=False, sync=True, readahead=False)
    db = env.open_db(b"completed_sources")
    with env.begin(write=True) as txn:
        for sid in ids:
            txn.put(sid.encode(), b"1", db=db, overwrite=True)
    env.close()


def nemo_read(path: Path) -> dict[bytes, bytes]:
    """The named database read with NeMo Curator 1.4's exact reader flags."""
    env = lmdb.open(str(path), subdir=False, readonly=True, lock=False, max_dbs=1)
    try:
        db = env.open_db(b"completed_sources")
        with env.begin() as txn, txn.cursor(db=db) as cur:
            return {bytes(k): bytes(v) for k, v in cur}
    finally:
        env.close()


def removing_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records
        if r.name == COUNTERS_LOGGER and r.levelno == logging.WARNING
        and "Removing" in r.getMessage()
    ]


# --------------------------------------------------------------------------------------------
# Lifecycle and handlers
# --------------------------------------------------------------------------------------------


class TestLifecycle:
    def test_start_registers_handlers_and_close_removes_them(self, tmp_path: Path) -> None:
        async def body() -> None:
            plugin = make(tmp_path)
            assert plugin.name == "curator-dask-completion-run1"
            sched = await start(plugin)
            assert handler_names(RUN) == {
                "open_sources": "curator_dask_open_sources_run1",
                "completed": "curator_dask_completed_run1",
                "flush": "curator_dask_flush_run1",
                "close": "curator_dask_close_run1",
            }
            assert sched.handlers == {
                "curator_dask_open_sources_run1": plugin.open_sources,
                "curator_dask_completed_run1": plugin.completed_among,
                "curator_dask_flush_run1": plugin.flush,
                "curator_dask_close_run1": plugin.close_handler,
            }
            expected = {
                "completed": 0, "loaded": 0, "completed_in_run": 0, "pending": 0,
                "failed_sources": [], "warnings": {}, "deltas": 0, "errors": [], "unreadable": [],
                "writer_file": str(own_file(tmp_path)),
            }
            assert await plugin.flush() == expected
            assert await plugin.close_handler() == expected
            assert sched.handlers == {}

        run(body)
        assert nemo_read(own_file(tmp_path)) == {}

    def test_close_is_idempotent(self, tmp_path: Path) -> None:
        async def body() -> None:
            plugin = make(tmp_path)
            sched = await start(plugin)
            sched.plugins[plugin.name] = plugin
            sched.handlers["someone_else"] = print
            plugin.open_sources(sources=[["0_a", "a"]])
            send(plugin, [("0_a_0", "a", -1)])
            first = await plugin.close_handler()
            assert first["completed"] == 1
            assert sched.plugins == {}
            assert sched.handlers == {"someone_else": print}
            second = await plugin.close_handler()
            assert second == first
            await plugin.close()  # the scheduler's own shutdown call
            assert plugin.errors == []

        run(body)
        assert nemo_read(own_file(tmp_path)) == {b"a": b"1"}

    def test_late_deltas_after_close_are_dropped(self, tmp_path: Path) -> None:
        async def body() -> None:
            plugin = make(tmp_path)
            await start(plugin)
            plugin.open_sources(sources=[["0_a", "a"], ["0_b", "b"]])
            send(plugin, [("0_a_0", "a", -1)])
            await plugin.close_handler()
            send(plugin, [("0_b_0", "b", -1), ("0_a_late", "a", -1)])
            assert plugin.book.completed == {"a"}
            assert plugin.book.pending == {"b": 1}
            summary = await plugin.flush()
            assert summary["completed"] == 1
            assert summary["errors"] == []

        run(body)
        assert read_completed(str(own_file(tmp_path))) == {"a"}

    def test_owner_disconnect_flushes_and_unregisters(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        async def body() -> None:
            plugin = make(tmp_path, owner="client-1")
            sched = await start(plugin)
            sched.plugins[plugin.name] = plugin
            plugin.open_sources(sources=[["0_a", "a"]])
            send(plugin, [("0_a_0", "a", -1)])
            plugin.remove_client(scheduler=sched, client="client-2")
            await asyncio.sleep(0.05)
            assert plugin.name in sched.plugins
            assert not plugin._closed
            with caplog.at_level(logging.WARNING, logger="curator_dask.resumability.plugin"):
                plugin.remove_client(scheduler=sched, client="client-1")
                for _ in range(500):
                    if plugin.name not in sched.plugins:
                        break
                    await asyncio.sleep(0.01)
            assert sched.plugins == {}
            assert sched.handlers == {}
            assert any("owning client client-1 disconnected" in r.getMessage()
                       for r in caplog.records)

        run(body)
        assert read_completed(str(own_file(tmp_path))) == {"a"}


# --------------------------------------------------------------------------------------------
# Messages
# --------------------------------------------------------------------------------------------


class TestMessages:
    def test_completed_ids_land_in_lmdb(self, tmp_path: Path) -> None:
        async def body() -> None:
            plugin = make(tmp_path)
            await start(plugin)
            assert plugin.open_sources(sources=[["0_a", "a"], ["0_b", "b"], ["0_c", "c"]]) == []
            assert plugin.book.pending == {"a": 1, "b": 1, "c": 1}
            send(plugin, [("0_a_0", "a", 2), ("0_a_0_0", "a", -1), ("0_a_1_0", "a", -1),
                          ("0_a_2_0", "a", -1)])
            send(plugin, [("0_b_0", "b", -1), ("0_c_0", "c", 0)])
            summary = await plugin.flush()
            assert summary["completed"] == 2
            assert summary["pending"] == 1
            assert summary["deltas"] == 6
            # flush() returns only once the completions are committed to the file.
            assert committed(own_file(tmp_path), tmp_path) == {"a", "b"}
            await plugin.close_handler()

        run(body)
        assert read_completed(str(own_file(tmp_path))) == {"a", "b"}
        assert nemo_read(own_file(tmp_path)) == {b"a": b"1", b"b": b"1"}

    def test_other_topics_and_runs_are_ignored(self, tmp_path: Path) -> None:
        async def body() -> None:
            plugin = make(tmp_path)
            await start(plugin)
            plugin.open_sources(sources=[["0_a", "a"]])
            done = [("0_a_0", "a", -1)]
            send(plugin, done, topic="other-topic")
            send(plugin, done, run_id="run2")
            plugin.log_event(TOPIC, [RUN, done])  # not a dict
            plugin.log_event(TOPIC, {"deltas": done})  # no run id
            assert plugin.book.pending == {"a": 1}
            summary = await plugin.flush()
            assert (summary["deltas"], summary["completed"], summary["errors"]) == (0, 0, [])
            send(plugin, done)
            assert plugin.book.completed == {"a"}
            await plugin.close_handler()

        run(body)
        assert read_completed(str(own_file(tmp_path))) == {"a"}

    def test_two_runs_share_a_scheduler(self, tmp_path: Path) -> None:
        async def body() -> None:
            one = make(tmp_path / "one", "r1")
            two = make(tmp_path / "two", "r2")
            sched = FakeScheduler()
            await one.start(sched)
            await two.start(sched)
            assert len(sched.handlers) == 8
            for plugin in (one, two):
                plugin.open_sources(sources=[["0_a", "a"]])
            for plugin in (one, two):  # distributed calls every plugin's log_event
                plugin.log_event(TOPIC, {"run": "r2", "deltas": [["0_a_0", "a", -1]]})
            assert one.book.completed == set()
            assert two.book.completed == {"a"}
            await one.close_handler()
            assert sorted(sched.handlers) == sorted(handler_names("r2").values())
            await two.close_handler()

        run(body)
        assert read_completed(str(own_file(tmp_path / "one"))) == set()
        assert read_completed(str(own_file(tmp_path / "two"))) == {"a"}

    def test_open_sources_reports_nemo_completions(self, tmp_path: Path) -> None:
        nemo_write(tmp_path / METADATA_DIRNAME / "vm-24644.mdb", ["b", "d"])

        async def body() -> None:
            plugin = make(tmp_path)
            await start(plugin)
            assert plugin.loaded == 2
            sources = [["0_a", "a"], ["0_b", "b"], ["0_c", "c"]]
            assert plugin.open_sources(sources=sources) == ["b"]
            assert plugin.book.pending == {"a": 1, "c": 1}
            # A retried open (same task ids) does not count twice.
            assert plugin.open_sources(sources=sources) == ["b"]
            assert plugin.book.pending == {"a": 1, "c": 1}
            send(plugin, [("0_a_0", "a", -1), ("0_c_0", "c", -1)])
            summary = await plugin.close_handler()
            assert (summary["loaded"], summary["completed"], summary["pending"]) == (2, 4, 0)

        run(body)
        # Only this writer's completions are written to its own file; NeMo's file is untouched.
        assert nemo_read(own_file(tmp_path)) == {b"a": b"1", b"c": b"1"}
        assert nemo_read(tmp_path / METADATA_DIRNAME / "vm-24644.mdb") == {b"b": b"1",
                                                                           b"d": b"1"}

    @pytest.mark.parametrize(
        "deltas",
        [[["0_a_0", "a"]], [["0_a_0", "a", -1, 5]], [["0_a_0", "a", "minus one"]], 7],
        ids=["pair", "quad", "not-int", "not-list"],
    )
    def test_malformed_message_is_kept_in_errors(self, tmp_path: Path, deltas: Any) -> None:
        async def body() -> None:
            plugin = make(tmp_path)
            await start(plugin)
            plugin.open_sources(sources=[["0_a", "a"]])
            plugin.log_event(TOPIC, {"run": RUN, "deltas": deltas})  # must not raise
            assert len(plugin.errors) == 1
            assert "Traceback" in plugin.errors[0]
            assert plugin.book.pending == {"a": 1}
            assert plugin.deltas_received == 0
            send(plugin, [("0_a_0", "a", -1)])  # still working afterwards
            summary = await plugin.close_handler()
            assert summary["completed"] == 1
            assert summary["errors"] == plugin.errors
            assert len(summary["errors"]) == 1

        run(body)

    def test_failed_sources_and_warnings_reported(self, tmp_path: Path) -> None:
        async def body() -> None:
            plugin = make(tmp_path)
            await start(plugin)
            plugin.open_sources(sources=[["0_s", "s"], ["0_t", "t"]])
            send(plugin, [("0_s_0", "s", 0)], failed=["s"], warnings=["w"])
            send(plugin, [("0_t_0", "t", 0)], failed=["t", "s"], warnings=["w", "v"])
            summary = await plugin.flush()
            assert summary["failed_sources"] == ["s", "t"]
            assert summary["warnings"] == {"w": 2, "v": 1}
            assert summary["pending"] == 2
            assert summary["completed"] == 0
            closing = await plugin.close_handler()
            assert closing["failed_sources"] == ["s", "t"]
            assert closing["warnings"] == {"w": 2, "v": 1}

        run(body)
        assert read_completed(str(own_file(tmp_path))) == set()

    def test_garbage_file_is_skipped_and_listed(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        nemo_write(tmp_path / METADATA_DIRNAME / "A.mdb", ["a"])
        bad = tmp_path / METADATA_DIRNAME / "bad.mdb"
        bad.write_bytes(b"garbage" * 100)

        async def body() -> None:
            plugin = make(tmp_path)
            with caplog.at_level(logging.WARNING, logger=STORE_LOGGER):
                await start(plugin)
            assert plugin.loaded == 1
            assert plugin.open_sources(sources=[["0_a", "a"], ["0_b", "b"]]) == ["a"]
            summary = await plugin.flush()
            assert summary["unreadable"] == [str(bad)]
            assert summary["loaded"] == 1
            await plugin.close_handler()

        run(body)
        messages = [r.getMessage() for r in caplog.records if r.name == STORE_LOGGER]
        assert messages == [
            f"resumability: skipping unreadable checkpoint {bad}: "
            f"{bad}: MDB_INVALID: File is not an LMDB file"
        ]


# --------------------------------------------------------------------------------------------
# §8 tests/utils/test_resumability_actor.py, on the plugin
# --------------------------------------------------------------------------------------------


class TestActorBehaviours:
    def test_pending_arithmetic(self, tmp_path: Path) -> None:
        async def body() -> None:
            plugin = make(tmp_path)
            await start(plugin)
            plugin.open_sources(sources=[["h0", "0"], ["h1", "1"]])
            assert plugin.book.pending == {"0": 1, "1": 1}
            send(plugin, [("h_pass", "0", 0)])
            assert plugin.book.pending == {"0": 1, "1": 1}
            send(plugin, [("h_fanout", "1", 2)])
            assert plugin.book.pending == {"0": 1, "1": 3}
            send(plugin, [("h_sink", "0", -1)])
            assert plugin.book.completed == {"0"}
            assert plugin.book.pending == {"1": 3}
            await plugin.close_handler()

        run(body)
        assert read_completed(str(own_file(tmp_path))) == {"0"}

        async def reopen() -> None:
            plugin = make(tmp_path, "run2")
            await start(plugin)
            assert plugin.loaded == 1
            assert plugin.open_sources(sources=[["h0", "0"], ["h1", "1"], ["hu", "u"]]) == ["0"]
            await plugin.close_handler()

        run(reopen)

    def test_dedup_and_rewrite(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        async def body() -> None:
            plugin = make(tmp_path)
            await start(plugin)
            plugin.open_sources(sources=[["h0", "0"], ["h1", "1"]])
            send(plugin, [("h_t", "0", -1)])
            with caplog.at_level(logging.WARNING, logger=COUNTERS_LOGGER):
                send(plugin, [("h_t", "0", -1)])  # a retried task: no-op
            assert removing_warnings(caplog) == []
            assert plugin.book.completed == {"0"}
            send(plugin, [("h_u", "1", 0)])
            send(plugin, [("h_u", "1", 5)])
            assert plugin.book.pending == {"1": 6}
            send(plugin, [("h_u", "1", -1)])  # newest wins: 6 - 5 + (-1) = 0
            assert plugin.book.applied_delta("h_u") == -1
            assert plugin.book.completed == {"0", "1"}
            await plugin.close_handler()

        run(body)
        assert read_completed(str(own_file(tmp_path))) == {"0", "1"}

    @pytest.mark.parametrize("late", [("h_late", "0", -1), ("h_t", "0", 0)],
                             ids=["new-task", "rewrite"])
    def test_uncomplete_removes_from_memory_and_own_file(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture, late: tuple[str, str, int]
    ) -> None:
        async def body() -> None:
            plugin = make(tmp_path)
            await start(plugin)
            plugin.open_sources(sources=[["h0", "0"], ["h1", "1"]])
            send(plugin, [("h_t", "0", -1), ("h_t1", "1", -1)])
            await plugin.flush()
            assert committed(own_file(tmp_path), tmp_path) == {"0", "1"}
            with caplog.at_level(logging.WARNING, logger=COUNTERS_LOGGER):
                send(plugin, [late])
            (warning,) = [r.getMessage() for r in caplog.records if r.name == COUNTERS_LOGGER]
            assert "Removing" in warning
            assert "completed set" in warning
            assert plugin.book.completed == {"1"}
            summary = await plugin.flush()
            assert summary["completed"] == 1
            assert committed(own_file(tmp_path), tmp_path) == {"1"}
            await plugin.close_handler()

        run(body)
        assert read_completed(str(own_file(tmp_path))) == {"1"}

        async def reopen() -> None:
            plugin = make(tmp_path, "run2")
            await start(plugin)
            assert plugin.open_sources(sources=[["h0", "0"], ["h1", "1"]]) == ["1"]
            await plugin.close_handler()

        run(reopen)

    def test_uncomplete_of_another_writers_completion(self, tmp_path: Path) -> None:
        nemo_write(tmp_path / METADATA_DIRNAME / "hostA-1.mdb", ["x"])

        async def body() -> None:
            plugin = make(tmp_path, writer_id="hostB-2")
            await start(plugin)
            assert plugin.open_sources(sources=[["0_x", "x"]]) == ["x"]
            send(plugin, [("0_x_0", "x", -1)])  # an anomaly: x was complete
            assert plugin.book.completed == set()
            await plugin.close_handler()

        run(body)
        assert read_completed(str(own_file(tmp_path, "hostB-2"))) == set()
        # The other writer's file is never modified, so x reappears in the next union.
        assert nemo_read(tmp_path / METADATA_DIRNAME / "hostA-1.mdb") == {b"x": b"1"}

        async def reopen() -> None:
            plugin = make(tmp_path, "run2", writer_id="hostC-3")
            await start(plugin)
            assert plugin.open_sources(sources=[["0_x", "x"]]) == ["x"]
            await plugin.close_handler()

        run(reopen)

    def test_same_message_late_delta_is_not_persisted(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The deliberate difference from NeMo: complete at 0, un-completed by a later delta of
        the same message, so nothing is persisted and the source is replayed."""

        async def body() -> None:
            plugin = make(tmp_path)
            await start(plugin)
            with caplog.at_level(logging.WARNING, logger=COUNTERS_LOGGER):
                send(plugin, [("t0", "a", 1), ("t1", "a", -1), ("t2", "a", -1)])
            assert len(removing_warnings(caplog)) == 1
            summary = await plugin.close_handler()
            assert summary["completed"] == 0

        run(body)
        assert read_completed(str(own_file(tmp_path))) == set()

    def test_memory_and_file_agree_after_recompletion_in_one_message(
        self, tmp_path: Path
    ) -> None:
        """Complete, un-complete and complete again inside one message: whatever the plugin
        reports as completed must be what its LMDB file holds after flush."""

        async def body() -> None:
            plugin = make(tmp_path)
            await start(plugin)
            send(plugin, [
                ("0_a", "a", 1), ("0_a_0", "a", -1),  # complete
                ("0_a_1", "a", -1),  # late: un-complete (dropped)
                ("0_a_2", "a", 1), ("0_a_3", "a", -1),  # complete again
            ])
            summary = await plugin.flush()
            on_disk = committed(own_file(tmp_path), tmp_path)
            await plugin.close_handler()
            assert on_disk == plugin.book.completed
            assert summary["completed"] == len(on_disk)

        run(body)

    def test_pending_only_persists_nothing(self, tmp_path: Path) -> None:
        async def body() -> None:
            plugin = make(tmp_path)
            await start(plugin)
            plugin.open_sources(sources=[["h0", "0"], ["h1", "1"]])
            send(plugin, [("h_fanout_0", "0", 2)])
            await plugin.close_handler()

        run(body)
        assert nemo_read(own_file(tmp_path)) == {}

    def test_multiple_writers_see_the_union(self, tmp_path: Path) -> None:
        async def writer(run_id: str, writer_id: str, sid: str | None, ids: list[str]) -> list:
            plugin = make(tmp_path, run_id, writer_id=writer_id)
            await start(plugin)
            seen = plugin.open_sources(sources=[[f"0_{s}", s] for s in ids])
            if sid is not None:
                send(plugin, [(f"0_{sid}_0", sid, -1)], run_id=run_id)
            await plugin.close_handler()
            return seen

        async def body() -> None:
            assert await writer("rA", "hostA-1", "0", ["0", "1"]) == []
            assert await writer("rB", "hostB-2", "1", ["0", "1"]) == ["0"]
            assert await writer("rC", "hostC-3", None, ["0", "1", "2"]) == ["0", "1"]

        run(body)
        names = sorted(p.name for p in (tmp_path / METADATA_DIRNAME).glob("*.mdb"))
        assert names == ["hostA-1.mdb", "hostB-2.mdb", "hostC-3.mdb"]
        assert read_completed(str(own_file(tmp_path, "hostA-1"))) == {"0"}
        assert read_completed(str(own_file(tmp_path, "hostB-2"))) == {"1"}
        assert read_completed(str(own_file(tmp_path, "hostC-3"))) == set()

    def test_writer_that_finishes_nothing_leaves_others_readable(self, tmp_path: Path) -> None:
        async def body() -> None:
            a = make(tmp_path, "rA", writer_id="A")
            await start(a)
            a.open_sources(sources=[["h", "s"]])
            send(a, [("h_sink", "s", -1)], run_id="rA")
            await a.close_handler()
            b = make(tmp_path, "rB", writer_id="B")
            await start(b)
            await b.close_handler()
            reader = make(tmp_path, "rR", writer_id="reader")
            await start(reader)
            assert reader.open_sources(sources=[["h", "s"]]) == ["s"]
            await reader.close_handler()

        run(body)
        assert nemo_read(own_file(tmp_path, "A")) == {b"s": b"1"}


# --------------------------------------------------------------------------------------------
# Staged checkpoint (memory://): flush publishes
# --------------------------------------------------------------------------------------------


def test_flush_publishes_a_staged_checkpoint(mem_ckpt: str, tmp_path: Path) -> None:
    fs = fsspec.filesystem("memory")

    def published(path: str) -> set[str]:
        local = tmp_path / f"dl-{uuid.uuid4().hex}.mdb"
        local.write_bytes(fs.cat_file(path))
        return read_completed(str(local))

    async def body() -> None:
        plugin = make(mem_ckpt, publish_interval=3600)
        await start(plugin)
        assert plugin.store.staged is True
        plugin.open_sources(sources=[["0_a", "a"], ["0_b", "b"]])
        send(plugin, [("0_a_0", "a", -1)])
        summary = await plugin.flush()
        assert summary["writer_file"] == plugin.store.remote_path
        assert published(plugin.store.remote_path) == {"a"}
        send(plugin, [("0_b_0", "b", -1)])
        await plugin.close_handler()
        assert published(plugin.store.remote_path) == {"a", "b"}

    run(body)
