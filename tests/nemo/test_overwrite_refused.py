"""NeMo's writers with ``mode="overwrite"`` are refused together with a checkpoint, before
anything runs, as curator_dask's own writers are: NeMo's empties its folder when it is built,
so a resumed run would skip every completed source and end with their outputs gone."""

from __future__ import annotations

from pathlib import Path

import pytest
from nemo_curator.pipeline import Pipeline as NemoPipeline
from nemo_curator.stages.text.io.reader import JsonlReader as NemoJsonlReader
from nemo_curator.stages.text.io.writer import JsonlWriter as NemoJsonlWriter

from curator_dask import JsonlReader, JsonlWriter, Pipeline
from tests.helpers import cli, completed_ids
from tests.nemo.nemo_pipelines import write_input

LEAD = "JsonlWriter 'jsonl_writer': mode='overwrite' cannot be combined with checkpoint_path="


def nemo_pipeline(data: Path, out: Path, mode: str) -> NemoPipeline:
    """NeMo's own JsonlReader → JsonlWriter(mode); the writer is built (and, with
    ``mode="overwrite"``, empties ``out``) here."""
    p = NemoPipeline(name="nemo-overwrite")
    p.add_stage(NemoJsonlReader(file_paths=str(data), files_per_partition=2))
    return p.add_stage(NemoJsonlWriter(path=str(out), mode=mode))


def refusal_of(run) -> ValueError:
    with pytest.raises(ValueError) as info:  # before the fix: DID NOT RAISE
        run()
    error = info.value
    assert type(error).__name__ == "OverwriteWithCheckpointError", repr(error)
    # Imported here, not at the top: before the fix the module loads and fails on the line above.
    from curator_dask.errors import OverwriteWithCheckpointError

    assert type(error) is OverwriteWithCheckpointError
    assert "\n" not in str(error)
    return error


def test_first_run_with_overwrite_and_checkpoint_is_refused_before_anything_runs(tmp_path):
    from curator_dask import DaskExecutor

    data = write_input(tmp_path / "in", files=4, docs=5)
    ckpt = tmp_path / "ckpt"
    executor = DaskExecutor(n_workers=1, progress=False)  # never started when refused
    pipeline = nemo_pipeline(data, tmp_path / "out", "overwrite")
    message = str(refusal_of(lambda: pipeline.run(executor=executor,
                                                  checkpoint_path=str(ckpt))))
    assert message.startswith(f"{LEAD}{str(ckpt)!r}: it empties {tmp_path / 'out'} on every run")
    assert "Use mode='ignore'" in message
    assert f"a fresh checkpoint path (or delete {ckpt})" in message
    assert "already emptied" not in message  # nothing was complete, so nothing is gone
    assert executor.cluster is None  # no cluster started
    assert not (ckpt / ".nemo_curator_metadata").exists()  # nothing recorded
    assert list((tmp_path / "out").iterdir()) == []


def test_overwrite_writer_built_after_a_checkpointed_run_is_refused_as_already_emptied(
        tmp_path, executor):
    data = write_input(tmp_path / "in", files=4, docs=5)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    first = nemo_pipeline(data, out, "ignore").run(executor=executor, checkpoint_path=str(ckpt))
    written = sorted(p.name for p in out.iterdir())
    assert len(first) == 2 and len(written) == 2  # two partitions of two files

    again = nemo_pipeline(data, out, "overwrite")  # NeMo's writer empties `out` right here
    assert list(out.iterdir()) == []
    message = str(refusal_of(lambda: again.run(executor=executor, checkpoint_path=str(ckpt))))
    assert message.startswith(f"{LEAD}{str(ckpt)!r}: NeMo's JsonlWriter(mode='overwrite') "
                              f"already emptied {out} when it was constructed: the outputs of "
                              "the 2 sources the checkpoint records as complete are gone, "
                              "so their completions were set aside (moved to "
                              f"{ckpt}/.nemo_curator_metadata.outputs-lost-")
    assert f"run with a fresh checkpoint path (or delete {ckpt})" in message
    assert "mode='ignore'" in message

    # Nothing lost for good (issue 32, item 6): the checkpoint no longer records the sources
    # whose outputs are gone, so the next ordinary run on it writes them again.
    assert not (ckpt / ".nemo_curator_metadata").exists()
    assert len(list(ckpt.glob(".nemo_curator_metadata.outputs-lost-*"))) == 1
    redone = nemo_pipeline(data, out, "ignore").run(executor=executor, checkpoint_path=str(ckpt))
    assert len(redone) == 2 and sorted(p.name for p in out.iterdir()) == written
    assert len(completed_ids(ckpt)) == 2

    # The fix it names rebuilds them: a fresh checkpoint path and mode="ignore".
    rebuilt = nemo_pipeline(data, out, "ignore").run(executor=executor,
                                                     checkpoint_path=str(tmp_path / "fresh"))
    assert len(rebuilt) == 2 and sorted(p.name for p in out.iterdir()) == written


@pytest.mark.parametrize("package", ["nemo_curator", "curator_dask"])
def test_cli_refuses_overwrite_with_checkpoint_path_with_exit_2(tmp_path, package):
    write_input(tmp_path / "in", files=2, docs=3)
    (tmp_path / "p.yaml").write_text(
        "stages:\n"
        f"  - _target_: {package}.stages.text.io.reader.JsonlReader\n"
        "    file_paths: in\n"
        f"  - _target_: {package}.stages.text.io.writer.JsonlWriter\n"
        "    path: out\n"
        "    mode: overwrite\n")
    out = cli("run", "p.yaml", "--checkpoint-path", "ckpt", "--workers", "1", "--no-progress",
              "--no-job", cwd=tmp_path, timeout=180)
    assert out.returncode == 2, out.stderr  # before the fix: 0 (NeMo's), 1 (curator_dask's)
    errors = [line for line in out.stderr.splitlines() if "run: error:" in line]  # logs aside
    assert len(errors) == 1 and out.stderr.strip().endswith(errors[0]), out.stderr
    assert errors[0].startswith(f"python -m curator_dask run: error: {LEAD}"), out.stderr
    assert "mode='ignore'" in errors[0] and "a fresh checkpoint path" in errors[0]
    assert not (tmp_path / "ckpt" / ".nemo_curator_metadata").exists()


def test_curator_dask_and_nemo_writers_are_refused_alike(tmp_path, executor):
    data = write_input(tmp_path / "in", files=2, docs=3)
    out, ckpt = tmp_path / "out", str(tmp_path / "ckpt")
    own = Pipeline(name="own").add_stage(JsonlReader(file_paths=str(data)))
    own.add_stage(JsonlWriter(path=str(out), mode="overwrite"))
    own_error = refusal_of(lambda: own.run(executor=executor, checkpoint_path=ckpt))
    nemo = nemo_pipeline(data, out, "overwrite")
    nemo_error = refusal_of(lambda: nemo.run(executor=executor, checkpoint_path=ckpt))
    assert type(own_error) is type(nemo_error) and isinstance(nemo_error, ValueError)
    assert str(own_error) == str(nemo_error)  # same writer name, folder and checkpoint
