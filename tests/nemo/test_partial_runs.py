"""NeMo Curator's own ``Pipeline.run`` on a ``DaskExecutor``, with a stage that returns
``FailedTask``: the result names the failed sources and one ``PartialRunWarning`` says so, with
a checkpoint (the redirected resumable path) and without one (NeMo's plain
``executor.execute``), as ``curator_dask.Pipeline.run`` does (issue 20, item 1).
"""

from __future__ import annotations

import pytest

pytest.importorskip("nemo_curator")

from curator_dask.errors import PartialRunWarning  # noqa: E402
from tests.helpers import completed_ids  # noqa: E402
from tests.nemo.nemo_pipelines import int_pipeline  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("checkpointed", [True, False], ids=["checkpoint", "no-checkpoint"])
def test_nemo_pipeline_run_names_failed_sources_and_warns_once(tmp_path, executor, recwarn,
                                                               checkpointed):
    ckpt = str(tmp_path / "ck") if checkpointed else None

    result = int_pipeline(4, fail=(1, 3)).run(executor=executor, checkpoint_path=ckpt)

    assert sorted(t.data for t in result) == [0, 2]
    assert result.failed_sources == ("1", "3") and result.num_failed_sources == 2
    warned = [w for w in recwarn if issubclass(w.category, PartialRunWarning)]
    assert len(warned) == 1 and warned[0].filename == __file__
    assert str(warned[0].message).startswith(
        "2 of 4 sources completed, 2 failed (a stage returned FailedTask)")
    if checkpointed:  # NeMo's contract is unchanged: the failed sources stay pending
        assert completed_ids(ckpt) == {"0", "2"}
        assert str(warned[0].message).endswith("and stay pending: run again with the same "
                                               "checkpoint to retry them")
