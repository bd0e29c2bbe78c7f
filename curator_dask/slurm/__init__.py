"""SLURM job arrays: sharding, completion manifests, retry discovery (CONTRACT §5)."""
