"""Entry point of tenferro-torch: registers the ``torch`` backend and the ``nvml`` energy meter
(neither torch nor pynvml is imported)."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl

from .backend import TorchBackend
from .nvml_meter import NvmlMeter


@hookimpl
def tenferro_register(registry) -> None:
    registry.add_backend(TorchBackend())
    registry.add_meter("nvml", NvmlMeter())
