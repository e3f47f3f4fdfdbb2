"""The ``inductor`` executor: an optimized tenferro Graph lowered to torch.fx and compiled by
`torch.compile` (Inductor), a peer of the generic plan executor.

`compile(f, backend="inductor")` on a ``torch:*`` device calls `compile_graph(graph,
device)`: fx_lowering.py turns the graph into a `torch.fx.GraphModule` whose nodes call
the backend's own torch kernels (plain Python over torch tensors, which dynamo traces),
with `fused` and `call` nodes inlined; what cannot be lowered runs, unchanged, as the plan
would run it, inside a `torch.compiler.disable`d call (logged on ``tenferro_torch.inductor``
at INFO with the primitive, the user's call site and the reason). torch is imported only
when a graph is compiled.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

from tenferro_core.errors import KernelError, TenferroError

log = logging.getLogger("tenferro_torch.inductor")


def compile_graph(graph: Any, device: Any) -> Callable[[list], list] | None:
    """A runner `run(input buffers) -> output buffers` for the whole optimized `graph` on
    `device` by torch.compile (Inductor), or None (declined, logged) for a device that is
    not a torch device."""
    from .backend import TorchBackend

    if not isinstance(device.backend, TorchBackend):
        log.info("inductor: declined a graph of %d node(s) on %s: not a torch device (the "
                 "generic plan executor runs it)", len(graph.nodes), device)
        return None
    import torch

    from .fx_lowering import lower

    lowered = lower(graph, device)
    log.debug("inductor: lowered a graph of %d node(s) on %s to torch.fx: %d call(s) compiled, "
              "%d fallback(s), %d constant(s)", len(graph.nodes), device, lowered.n_lowered,
              len(lowered.fallbacks), lowered.n_consts)
    # where each graph output comes from: ("in", input index), ("const", buffer),
    # ("fx", index into the module's outputs) or ("none", None) for a non-Var output
    sources = lowered.sources
    if lowered.module is None:  # nothing to compute: inputs and constants only
        return _assemble(sources)
    compiled = torch.compile(lowered.module, backend="inductor", dynamic=False)
    return _Runner(compiled, lowered, graph, device)


def _assemble(sources: list) -> Callable[[list], list]:
    def run(bufs: list) -> list:
        return [bufs[x] if k == "in" else x if k == "const" else None for k, x in sources]

    return run


class _Runner:
    """Runs the compiled module and assembles the graph's outputs. The first call compiles;
    if Inductor fails there, the plan executor takes the graph over (with a warning)."""

    __slots__ = ("fn", "sources", "graph", "device", "first")

    def __init__(self, fn: Any, lowered: Any, graph: Any, device: Any):
        self.fn = fn
        self.sources = lowered.sources
        self.graph = graph
        self.device = device
        self.first = True

    def __call__(self, bufs: list) -> list:
        if self.first:
            return self._first(bufs)
        out = self.fn(*bufs)
        return [out[x] if k == "fx" else bufs[x] if k == "in" else x if k == "const" else None
                for k, x in self.sources]

    def _first(self, bufs: list) -> list:
        try:
            out = self.fn(*bufs)
        except TenferroError:
            raise
        except Exception as exc:
            from tenferro_runtime.executor import BackendCompileWarning
            from tenferro_runtime.plan import build_plan

            plan = build_plan(self.graph)
            if plan is None:
                raise KernelError(f"inductor: torch.compile failed on a graph of "
                                  f"{len(self.graph.nodes)} node(s) on {self.device} "
                                  f"({type(exc).__name__}: {exc})") from exc
            warnings.warn(f"inductor: torch.compile failed on a graph of {len(self.graph.nodes)} "
                          f"node(s) on {self.device} ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else ''}); running it with the "
                          f"generic plan executor", BackendCompileWarning, stacklevel=5)
            self.fn = lambda *b: plan.run_buffers(list(b))
            self.sources = [("fx", i) for i in range(len(self.graph.outputs))]
            self.first = False
            return self(bufs)
        self.first = False
        return [out[x] if k == "fx" else bufs[x] if k == "in" else x if k == "const" else None
                for k, x in self.sources]


__all__ = ["compile_graph"]
