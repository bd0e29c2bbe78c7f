"""NeMo Curator interop: its ``Pipeline.run`` on a ``DaskExecutor``, checks, logs.

Nothing here imports ``nemo_curator`` at module level: the hook waits for NeMo's pipeline
module to be imported by the user, and the checks look at objects the user handed over.
"""
