"""The workflows' result class: NeMo's in a process that uses NeMo Curator (its ``isinstance``
checks hold), curator_dask's otherwise, without loading NeMo's pipeline and Ray's Python
package (about 1.5 s) for it. Fresh interpreters, since this test process has NeMo loaded."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.helpers import REPO_ROOT

WITHOUT_NEMO = textwrap.dedent("""
    import json, os, sys, tempfile
    from curator_dask import DaskExecutor
    from curator_dask.dedup import ExactDeduplicationWorkflow
    from curator_dask.dedup.result import WorkflowRunResult
    root = tempfile.mkdtemp()
    os.makedirs(f"{root}/in")
    with open(f"{root}/in/a.jsonl", "w") as f:
        f.writelines(json.dumps({"text": t}) + "\\n" for t in ["x", "y", "x"])
    with DaskExecutor(n_workers=1, progress=False) as executor:
        result = ExactDeduplicationWorkflow(
            output_path=f"{root}/out", input_path=f"{root}/in", input_filetype="jsonl",
        ).run(executor=executor)
    assert type(result) is WorkflowRunResult and result.metadata["num_duplicates"] == 1
    print(sorted(m for m in ("ray", "nemo_curator") if m in sys.modules))
""")

WITH_NEMO = textwrap.dedent("""
    import nemo_curator.stages.text.io.reader  # a NeMo user's process
    from curator_dask.dedup import ExactDeduplicationWorkflow
    from curator_dask.dedup.result import new_result
    from nemo_curator.pipeline.workflow import WorkflowBase, WorkflowRunResult
    workflow = ExactDeduplicationWorkflow(output_path="out", input_path="in")
    print(isinstance(workflow, WorkflowBase),
          type(new_result("exact_deduplication")) is WorkflowRunResult)
""")


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_run_without_nemo_imports_neither_nemo_nor_ray():
    assert _run(WITHOUT_NEMO) == "[]"


def test_in_a_nemo_process_the_classes_are_nemos():
    assert _run(WITH_NEMO) == "True True"
