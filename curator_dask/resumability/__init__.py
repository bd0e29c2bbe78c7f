"""Resumable processing: completion counters, the LMDB completion store, the scheduler plugin."""
