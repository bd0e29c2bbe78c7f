"""The stage bars of a run (``backends/dask/progress.py``), real tqdm bars on stderr.

A lazy source stage's count is known only when it has given its last task, so its bars start
without a total; executed notebooks stored them as ``8/?`` (issue 32, item 13). Closed, they
show the count as the total.
"""

from __future__ import annotations

from curator_dask import JsonlReader, JsonlWriter
from curator_dask.backends.dask.plan import build_plan
from curator_dask.backends.dask.progress import StageBars


def _bars(tmp_path, total: int | None) -> tuple[StageBars, object]:
    stages = [*JsonlReader(file_paths=str(tmp_path)).decompose(),
              JsonlWriter(path=str(tmp_path / "out"))]
    plan = build_plan(stages, fuse=True)
    return StageBars(stages, plan, total, progress=True, dashboard=None), plan


def test_a_bar_without_a_total_ends_with_its_count(tmp_path, capsys):
    bars, plan = _bars(tmp_path, None)
    assert all(bar.total is None for bar in bars.bars.values())
    bars.advance(plan.groups[0], 8)
    bars.close()
    assert [bar.total for bar in bars.bars.values()] == [8] * len(bars.bars)
    assert "8/8" in capsys.readouterr().err


def test_a_known_total_is_kept(tmp_path, capsys):
    bars, plan = _bars(tmp_path, 10)
    bars.advance(plan.groups[0], 4)
    bars.close()
    assert [bar.total for bar in bars.bars.values()] == [10] * len(bars.bars)
    assert "4/10" in capsys.readouterr().err
