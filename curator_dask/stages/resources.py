"""``Resources``: what one call of a stage needs (docs/design/contract.md §7.1)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

_DEFAULT_GPU_MEMORY_GB = 24.0


@cache
def _device_memory_gb() -> float:
    """Memory of GPU 0 in GB via NVML, or 24.0 when NVML is not available."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return pynvml.nvmlDeviceGetMemoryInfo(handle).total / 1e9
    except Exception:  # noqa: BLE001 (no NVML, no GPU, no driver: all mean "use the default")
        return _DEFAULT_GPU_MEMORY_GB


@dataclass
class Resources:
    """CPU and GPU needs of a stage.

    GPU needs become Dask worker resources (``{"GPU": gpus}``): a stage that needs a GPU runs
    only on workers started with ``--resources GPU=1``. ``cpus`` is informational (each worker
    runs one task per thread).

    Example:
        >>> Resources(gpus=1).dask_resources()
        {'GPU': 1}
        >>> Resources(cpus=2).dask_resources()
        {}
    """

    cpus: float = 1.0
    gpu_memory_gb: float = 0.0
    gpus: float = 0.0

    def __post_init__(self) -> None:
        if self.gpus > 0 and self.gpu_memory_gb > 0:
            msg = (
                f"Resources: set either gpus ({self.gpus}) or gpu_memory_gb "
                f"({self.gpu_memory_gb}), not both"
            )
            raise ValueError(msg)
        if self.gpu_memory_gb > 0:
            self.gpus = max(0.1, round(self.gpu_memory_gb / _device_memory_gb(), 1))
            if self.gpus > 1:
                msg = (
                    f"Resources: gpu_memory_gb={self.gpu_memory_gb} needs more than one GPU "
                    f"({self.gpus}); use gpus=N instead"
                )
                raise ValueError(msg)

    @property
    def requires_gpu(self) -> bool:
        return self.gpus > 0 or self.gpu_memory_gb > 0

    def dask_resources(self) -> dict[str, float]:
        """The Dask worker resources one task of this stage holds while it runs."""
        from curator_dask.stages.model import dask_resources

        return dask_resources(self)
