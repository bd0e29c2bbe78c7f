"""A Data-Juicer-style recipe (issue 21, item 7): a pipeline file's ``partition:``,
``checkpoint:``, ``intermediate_storage:`` and ``executor_type:`` sections mapped onto
curator_dask's options (``cli/recipe.py``, docs/recipes.md), every unknown, unused or
contradicting key refused by name, and the command line's options over the recipe's. No
cluster here: the run itself is tests/cli/test_recipe_run.py."""

from __future__ import annotations

import logging
import textwrap
from dataclasses import dataclass

import pytest

from curator_dask.cli.common import UsageError
from curator_dask.cli.loader import PipelineDefinitionError, load_recipe, recipe_from_mapping
from curator_dask.cli.main import build_parser
from curator_dask.cli.recipe import recipe_options
from curator_dask.cli.run_command import checkpoint_kwargs
from curator_dask.resumability.fingerprint import config_fingerprint, diff_configs
from curator_dask.stages.base import ProcessingStage
from tests.helpers import cli

READER = "curator_dask.stages.text.io.reader.JsonlReader"
STAGES = [{"_target_": READER, "file_paths": "in"},
          {"_target_": "tests.cli.test_recipe.Keep"},
          {"_target_": "curator_dask.stages.text.io.writer.JsonlWriter", "path": "out"}]


@dataclass
class Keep(ProcessingStage):
    """A stage between the reader and the writer (a stage name for op_names)."""

    name: str = "keep"

    def process(self, task):
        return task


def recipe(**sections):
    return {"name": "r", "stages": STAGES, **sections}


@pytest.mark.parametrize(("sections", "partition", "concurrency", "checkpoints"), [
    ({"partition": {"mode": "manual", "num_of_partitions": 3,
                    "max_concurrent_partitions": 2}},
     {"mode": "manual", "num_of_partitions": 3}, 2, {}),
    ({"partition": {"mode": "auto", "target_size_mb": 512, "size": 5000, "max_size_mb": 64,
                    "max_concurrent_partitions": "auto"}},
     {"mode": "auto", "target_size_mb": 512, "size": 5000, "max_size_mb": 64,
      "max_rows": 50000}, "auto", {}),
    ({"partition": {"max_concurrent_partitions": 4}}, None, 4, {}),
    ({"checkpoint": {"enabled": True, "strategy": "every_op"}}, None, None,
     {"strategy": "every_stage"}),
    ({"checkpoint": {"strategy": "every_n_ops", "n_ops": 2}}, None, None,
     {"strategy": "every_n_stages", "n": 2}),
    ({"checkpoint": {"enabled": True}}, None, None, {"strategy": "every_n_stages", "n": 5}),
    ({"checkpoint": {"strategy": "manual", "op_names": ["keep"]}}, None, None,
     {"strategy": "manual", "stages": ["keep"]}),
    ({"checkpoint": {"strategy": "disabled"}}, None, None, {"strategy": "disabled"}),
    ({"checkpoint": {"enabled": False}}, None, None, {"strategy": "disabled"}),
    ({"intermediate_storage": {"format": "parquet", "compression": "snappy",
                               "preserve_intermediate_data": True,
                               "retention_policy": "keep_all"}}, None, None,
     {"format": "parquet", "compression": "snappy", "retention": "keep_all"}),
    ({"intermediate_storage": {"preserve_intermediate_data": False}}, None, None,
     {"retention": "cleanup_all"}),
    ({"intermediate_storage": {"preserve_intermediate_data": True}}, None, None,
     {"retention": "keep_all"}),
    ({"intermediate_storage": {"format": "jsonl", "compression": "gzip",
                               "retention_policy": "keep_failed_only"}}, None, None,
     {"format": "jsonl", "compression": "gzip", "retention": "keep_failed_only"}),
    ({"executor_type": "ray_partitioned"}, None, None, {}),
    ({"executor_type": "dask"}, None, None, {}),
])
def test_sections_map_onto_the_options(sections, partition, concurrency, checkpoints):
    options = recipe_options(recipe(**sections), "r.yaml")
    assert options.partition == partition
    assert options.max_concurrent_partitions == concurrency
    assert options.partition_kwargs() == ({} if concurrency is None
                                          else {"max_concurrent_partitions": concurrency})
    assert options.stage_checkpoints == checkpoints


def test_run_kwargs_from_python_fill_in_the_configured_defaults():
    from curator_dask.resumability.stage_checkpoints import StageCheckpoints

    options = recipe_options(recipe(checkpoint={"strategy": "every_n_ops", "n_ops": 2},
                                    intermediate_storage={"format": "parquet"},
                                    partition={"max_concurrent_partitions": 3}), "r.yaml")
    assert options.run_kwargs() == {
        "max_concurrent_partitions": 3,
        "stage_checkpoints": StageCheckpoints("every_n_stages", n=2, format="parquet")}
    assert recipe_options(recipe(), "r.yaml").run_kwargs() == {}


@pytest.mark.parametrize(("sections", "expected"), [
    ({"partitions": {}}, ["unknown key(s) ['partitions']", "'partition'", "'checkpoint'"]),
    ({"partition": {"mode": "manual", "num_partitions": 3}},
     ["partition: unknown key(s) ['num_partitions']", "'num_of_partitions'",
      "'max_concurrent_partitions'"]),
    ({"partition": {"mode": "dynamic"}}, ["'mode' must be one of ['manual', 'auto']"]),
    ({"partition": {"mode": "auto", "target_size_mb": 300}},
     ["target_size_mb must be one of [128, 256, 512, 1024], got 300"]),
    ({"partition": {"mode": "manual", "num_of_partitions": 2, "target_size_mb": 256}},
     ["['target_size_mb'] belong to mode auto", "mode: auto"]),
    ({"partition": {"num_of_partitions": 2}}, ["need partition.mode: manual"]),
    ({"partition": {"mode": "manual"}}, ["needs num_of_partitions"]),
    ({"partition": {"mode": "manual", "num_of_partitions": 2, "max_concurrent_partitions": 0}},
     ["partition.max_concurrent_partitions", '"auto" or a whole number']),
    ({"checkpoint": "every_op"}, ["checkpoint: expected a mapping of enabled, strategy"]),
    ({"checkpoint": {"every": 2}}, ["checkpoint: unknown key(s) ['every']",
                                    "['enabled', 'strategy', 'n_ops', 'op_names']"]),
    ({"checkpoint": {"strategy": "every_partition"}},
     ["strategy 'every_partition' is not one of ['every_n_ops', 'every_op', 'manual', "
      "'disabled']"]),
    ({"checkpoint": {"enabled": "yes"}}, ["checkpoint.enabled must be true or false"]),
    ({"checkpoint": {"enabled": False, "strategy": "every_op"}},
     ["enabled: false and strategy: every_op contradict"]),
    ({"checkpoint": {"enabled": True, "strategy": "disabled"}},
     ["enabled: true and strategy: disabled contradict"]),
    ({"checkpoint": {"strategy": "every_op", "n_ops": 3}},
     ["checkpoint.n_ops is used by strategy every_n_ops only", "strategy is every_op"]),
    ({"checkpoint": {"strategy": "every_n_ops", "op_names": ["keep"]}},
     ["checkpoint.op_names is used by strategy manual only"]),
    ({"checkpoint": {"strategy": "every_n_ops", "n_ops": 0}},
     ["checkpoint.n_ops must be a whole number of at least 1, got 0"]),
    ({"checkpoint": {"strategy": "manual"}}, ["strategy manual needs op_names"]),
    ({"intermediate_storage": {"use_arrow_batches": True}},
     ["intermediate_storage: unknown key(s) ['use_arrow_batches']", "'retention_policy'"]),
    ({"intermediate_storage": {"format": "orc"}},
     ["format 'orc' is not one of ['arrow', 'parquet', 'jsonl']"]),
    ({"intermediate_storage": {"format": "parquet", "compression": "lz4"}},
     ["intermediate_storage.compression", "'lz4' does not go with format 'parquet'"]),
    ({"intermediate_storage": {"retention_policy": "forever"}},
     ["retention_policy 'forever' is not one of", "'cleanup_all'"]),
    ({"intermediate_storage": {"preserve_intermediate_data": False,
                               "retention_policy": "keep_all"}},
     ["preserve_intermediate_data: false and retention_policy: keep_all contradict"]),
    ({"intermediate_storage": {"preserve_intermediate_data": True,
                               "retention_policy": "cleanup_all"}},
     ["preserve_intermediate_data: true and retention_policy: cleanup_all contradict"]),
    ({"executor_type": "ray"}, ["executor_type 'ray'", "['dask', 'ray_partitioned']"]),
])
def test_unknown_unused_and_contradicting_keys_are_refused_by_name(sections, expected):
    with pytest.raises(PipelineDefinitionError) as info:
        recipe_from_mapping(recipe(**sections), "r.yaml")
    message = str(info.value)
    assert message.startswith("r.yaml: ")
    for part in expected:
        assert part in message, message


def test_the_partition_section_reaches_the_source_reader():
    pipeline, options = recipe_from_mapping(recipe(partition={
        "mode": "manual", "num_of_partitions": 3}), "r.yaml")
    assert pipeline.stages[0].partition == {"mode": "manual", "num_of_partitions": 3}
    pipeline.build()
    source = pipeline.stages[0]
    assert source.is_source_stage and source.partition == options.partition
    # ... which the job's fingerprint holds: a resume with another section is refused
    other, _ = recipe_from_mapping(recipe(partition={
        "mode": "manual", "num_of_partitions": 4}), "r.yaml")
    other.build()
    assert diff_configs(config_fingerprint(pipeline.stages), config_fingerprint(other.stages)) \
        == ["stages[0] (file_partitioning).params.partition.num_of_partitions: 3 -> 4"]


def test_a_source_without_partition_is_refused_naming_it():
    nemo = [{**STAGES[0], "_target_": "nemo_curator.stages.text.io.reader.JsonlReader"},
            *STAGES[1:]]
    with pytest.raises(PipelineDefinitionError) as info:
        recipe_from_mapping({"stages": nemo, "partition": {"mode": "auto"}}, "r.yaml")
    message = str(info.value)
    assert "stages[0] (nemo_curator.stages.text.io.reader.jsonl.JsonlReader)" in message
    assert f"_target_: {READER}" in message
    twice = [{**STAGES[0], "partition": {"mode": "auto"}}, *STAGES[1:]]
    with pytest.raises(PipelineDefinitionError, match=r"stages\[0\].partition and the "
                                                      "partition: section both"):
        recipe_from_mapping({"stages": twice, "partition": {"mode": "auto"}}, "r.yaml")


def test_op_names_must_name_stages_that_can_be_boundaries(caplog):
    def refused(names):
        with pytest.raises(PipelineDefinitionError) as info:
            recipe_from_mapping(recipe(checkpoint={"strategy": "manual", "op_names": names}),
                                "r.yaml")
        return str(info.value)

    message = refused(["document_deduplicator"])
    assert "checkpoint.op_names" in message and "['document_deduplicator']" in message
    assert "'jsonl_reader', 'keep', 'jsonl_writer'" in message  # the names it can use
    assert "['jsonl_writer'] cannot be checkpointed" in refused(["jsonl_writer"])  # the sink
    with caplog.at_level(logging.WARNING, logger="curator_dask.cli.recipe"):
        recipe_from_mapping(recipe(checkpoint={"strategy": "every_n_ops"}), "r.yaml")
    (record,) = [r for r in caplog.records if r.name == "curator_dask.cli.recipe"]
    assert "every_n_ops checkpoints no stage" in record.getMessage()
    assert "lower checkpoint.n_ops to at most 2" in record.getMessage()


def parse(*argv: str):
    return build_parser().parse_args(["run", "p.yaml", *argv])


FROM_RECIPE = {"strategy": "every_stage", "format": "parquet", "compression": "gzip",
               "retention": "keep_all"}


@pytest.mark.parametrize(("argv", "expected"), [
    ((), ("every_stage", None, (), "parquet", "gzip", "keep_all")),
    (("--checkpoint-stages", "keep"), ("manual", None, ("keep",), "parquet", "gzip",
                                       "keep_all")),
    (("--checkpoint-every", "2", "--checkpoint-retention", "cleanup_all"),
     ("every_n_stages", 2, (), "parquet", "gzip", "cleanup_all")),
    # the recipe's compression went with the recipe's format, not the command line's
    (("--checkpoint-format", "arrow"), ("every_stage", None, (), "arrow", "none", "keep_all")),
    (("--checkpoint-compression", "snappy"),
     ("every_stage", None, (), "parquet", "snappy", "keep_all")),
    (("--stage-checkpoints", "disabled"), ("disabled", None, (), "parquet", "gzip",
                                           "keep_all")),
])
def test_command_line_options_win_over_the_recipe(argv, expected):
    sc = checkpoint_kwargs(parse(*argv), FROM_RECIPE)["stage_checkpoints"]
    assert (sc.strategy, sc.n, sc.stages, sc.format, sc.compression, sc.retention) == expected
    n5 = checkpoint_kwargs(parse("--stage-checkpoints", "every_stage"),
                           {"strategy": "every_n_stages", "n": 5})["stage_checkpoints"]
    assert (n5.strategy, n5.n) == ("every_stage", None)
    with pytest.raises(UsageError, match="--checkpoint-every goes with every_n_stages"):
        checkpoint_kwargs(parse("--stage-checkpoints", "manual", "--checkpoint-every", "2"),
                          FROM_RECIPE)


def test_a_python_pipeline_has_no_recipe(tmp_path):
    (tmp_path / "p.py").write_text(textwrap.dedent(f"""
        from curator_dask import Pipeline, JsonlReader
        def make():
            return Pipeline(name="p").add_stage(JsonlReader(file_paths={str(tmp_path)!r}))
    """))
    pipeline, options = load_recipe(f"{tmp_path / 'p.py'}:make")
    assert pipeline.name == "p" and options.partition is None
    assert options.stage_checkpoints == {} and options.partition_kwargs() == {}


def test_the_command_refuses_a_bad_section_with_exit_2(tmp_path):
    (tmp_path / "r.yaml").write_text(textwrap.dedent(f"""\
        stages:
          - _target_: {READER}
            file_paths: ./in
        checkpoint:
          strategy: every_op
          cleanup: true
    """))
    out = cli("run", "r.yaml", cwd=tmp_path, timeout=60)
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert "r.yaml: checkpoint: unknown key(s) ['cleanup']; the valid keys are" in line
