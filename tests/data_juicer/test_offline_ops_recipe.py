"""Every text Mapper and Filter of Data-Juicer 1.6.1 that runs on CPU without a download
(docs/data-juicer-operators.md), in one recipe, gives on Dask the rows and stats of
Data-Juicer's default executor, byte for byte, with and without the fast operators."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.data_juicer.helpers import corpus, run_dj_default, run_in_process, same_files
from tests.data_juicer.offline_ops import OFFLINE_FILTERS, OFFLINE_MAPPERS

RECIPE = Path(__file__).parent / "recipes" / "all_offline_text_ops.yaml"


def _recipe(path: Path, data: Path, out: Path, executor_type: str) -> Path:
    spec = yaml.safe_load(RECIPE.read_text())
    spec.update(dataset_path=str(data), export_path=str(out / "result.jsonl"),
                executor_type=executor_type)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_the_recipe_holds_every_offline_text_operator() -> None:
    names = {next(iter(op)) for op in yaml.safe_load(RECIPE.read_text())["process"]}
    left_out = {"latex_figure_context_extractor_mapper"}  # keeps no plain-text row
    assert set(OFFLINE_MAPPERS) - left_out <= names
    assert set(OFFLINE_FILTERS) <= names


@pytest.mark.parametrize("fast_ops", [True, False])
def test_every_offline_text_operator_equals_data_juicer(tmp_path_factory: pytest.TempPathFactory,
                                                        executor: object,
                                                        fast_ops: bool) -> None:
    root = tmp_path_factory.getbasetemp() / "offline-ops"
    data = root / "input"
    if not data.exists():
        root.mkdir(exist_ok=True)
        corpus(root, max_bytes=600_000)
        run_dj_default(_recipe(root / "ref.yaml", data, root / "ref", "default"))
    tmp = tmp_path_factory.mktemp("ours")
    result = run_in_process(_recipe(tmp / "ours.yaml", data, tmp / "out", "dask"), executor,
                            "--partition.mode", "manual", "--partition.num_of_partitions", "3",
                            fast_ops=fast_ops)
    same_files(root / "ref" / "result.jsonl", tmp / "out" / "result.jsonl")
    same_files(root / "ref" / "result_stats.jsonl", tmp / "out" / "result_stats.jsonl")
    assert result.rows_out > 0
