"""Entry point of tenferro-torch: registers the ``torch`` backend, the ``nvml`` energy meter and
the ``inductor`` executor (none of which imports torch or pynvml here)."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl

from .backend import TorchBackend
from .inductor import compile_graph
from .nvml_meter import NvmlMeter


@hookimpl
def tenferro_register(registry) -> None:
    registry.add_backend(TorchBackend())
    registry.add_meter("nvml", NvmlMeter())
    registry.add_executor("inductor", compile_graph)
