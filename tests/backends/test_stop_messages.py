"""What a stopped run says it leaves (issue 20, item 8): partitions still running when the drain
timeout ends are cancelled, but on the workers they may finish and write their outputs. The
message counts what the checkpoint recorded and says how many more may have written files; the
folder must agree with it. (Ctrl+C in a terminal: tests/cli/test_interrupt.py.)
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

import dask
import pytest

from curator_dask import DaskExecutor, JsonlReader, JsonlWriter, Pipeline, ProcessingStage
from curator_dask.errors import RunStopped
from curator_dask.sample_data import generate_jsonl
from tests.helpers import completed_ids, poll_for

pytestmark = pytest.mark.slow


@dataclass
class MarkThenSleep(ProcessingStage):
    """Leaves a marker file when it starts a partition, then keeps it running."""

    marker: str = ""
    seconds: float = 3.0
    name: str = "mark_then_sleep"

    def process(self, task):
        import time

        with open(self.marker, "a") as f:
            f.write(task.task_id + "\n")
        time.sleep(self.seconds)
        return task


@pytest.mark.parametrize("checkpointed", [True, False], ids=["checkpoint", "no-checkpoint"])
def test_a_stop_past_the_drain_timeout_says_which_partitions_may_have_written(tmp_path,
                                                                              checkpointed):
    generate_jsonl(str(tmp_path / "in"), files=6, docs_per_file=2, seed=6)
    marker = tmp_path / "started.log"
    p = (Pipeline(name="cut").add_stage(JsonlReader(file_paths=str(tmp_path / "in")))
         .add_stage(MarkThenSleep(marker=str(marker))).add_stage(
             JsonlWriter(path=str(tmp_path / "out"))))
    ckpt = str(tmp_path / "ckpt") if checkpointed else None
    with dask.config.set({"curator-dask.execution.drain-timeout": 0.2}):
        executor = DaskExecutor(n_workers=2, progress=False)
    with executor:
        stopper = threading.Thread(target=lambda: (
            poll_for(marker.exists, 120, "no partition started"),
            executor.request_stop("test stop")))
        stopper.start()
        with pytest.raises(RunStopped) as info:
            p.run(executor=executor, checkpoint_path=ckpt)
        stopper.join(timeout=60)
    # the cluster is closed: nothing can write any more
    message = str(info.value)
    done = "recorded as complete" if checkpointed else "completed"
    stated = re.match(rf"test stop: stopped after (\d+) of 6 source partitions {done}; up to "
                      r"(\d+) more were cut short and may have written outputs, which the next "
                      r"run writes again; ", message)
    assert stated, message
    recorded, maybe = map(int, stated.groups())
    assert maybe >= 1
    written = len(list((tmp_path / "out").glob("*.jsonl"))) if (tmp_path / "out").is_dir() else 0
    assert recorded <= written <= recorded + maybe, (written, message)
    if checkpointed:
        assert recorded == len(completed_ids(ckpt))
        assert message.endswith("run it again with the same checkpoint to process the rest")
    else:
        assert "this run had no checkpoint, so running it again starts over" in message
