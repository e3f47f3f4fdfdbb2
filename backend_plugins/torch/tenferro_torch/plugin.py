"""Entry point of tenferro-torch: registers the ``torch`` backend, the ``nvml`` energy meter,
the ``inductor`` executor and the ``torch_masks`` pass (none of which imports torch or pynvml here)."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl

from .backend import TorchBackend
from .inductor import compile_graph
from .nvml_meter import NvmlMeter
from .thresholds import PASS_POSITION, recompute_masks


@hookimpl
def tenferro_register(registry) -> None:
    registry.add_backend(TorchBackend())
    registry.add_meter("nvml", NvmlMeter())
    registry.add_executor("inductor", compile_graph)
    registry.add_pass("torch_masks", recompute_masks, position=PASS_POSITION)
