"""NeMo Curator's id generator on Dask: an engine service, below the backends that run it.

``generator.py``: ``IdGeneratorBase`` (NeMo's semantics and JSON) and the driver's functions
under NeMo's names; ``plugin.py``: the scheduler extension that hands out id ranges;
``run.py``: one run's ids (installed, saved with the checkpoint, brought back). Its public
names are also exported by :mod:`curator_dask.dedup`. See docs/design/architecture.md
("The id generator").
"""
