# The seed's resume_demo.py (NeMo Curator's "Interrupt and Resume Example") with the imports
# renamed from nemo_curator to curator_dask, and a last line that says what it did. Run from
# examples/ after generating ./input:
#   python generate_sample_data.py --if-missing && python resume_demo.py
# Interrupt it with Ctrl+C once a few files are in ./output, then run it again: it skips the
# partitions that completed. Delete ./checkpoints to start over.
import os
import time
from dataclasses import dataclass

from curator_dask.pipeline import Pipeline
from curator_dask.stages.base import ProcessingStage
from curator_dask.stages.text.io.reader import JsonlReader
from curator_dask.stages.text.io.writer import JsonlWriter
from curator_dask.tasks import DocumentBatch


@dataclass
class SlowPassThrough(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Delay each partition so an interrupted run is easy to observe."""

    name: str = "slow_pass_through"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        time.sleep(2)
        return task


pipeline = Pipeline(name="resume-demo")
pipeline.add_stage(
    JsonlReader(
        file_paths="./input/*.jsonl",
        files_per_partition=1,
        fields=["text"],
    )
)
pipeline.add_stage(SlowPassThrough())
pipeline.add_stage(JsonlWriter(path="./output"))

result = pipeline.run(checkpoint_path="./checkpoints/resume-demo")
written = os.listdir("./output") if os.path.isdir("./output") else []
outputs = len([name for name in written if name.endswith(".jsonl")])
print(f"Done: {result.num_sources} source partitions, {outputs} output files in output/ "
      f"({result.skipped_sources} skipped as complete)")
