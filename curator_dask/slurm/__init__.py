"""SLURM job arrays: sharding, run.json, completion manifests, failed-task markers, retries.

Byte-for-byte NeMo Curator 1.4 where files are shared: ``docs/design/contract.md §5``.
"""
