"""The ``inductor`` executor: an optimized tenferro Graph lowered to torch.fx and compiled by
`torch.compile` (Inductor), a peer of the generic plan executor.

`compile(f, backend="inductor")` on a ``torch:*`` device calls `compile_graph(graph,
device)`: fx_lowering.py turns the graph into a `torch.fx.GraphModule` whose nodes call the
backend's own torch kernels (plain Python over torch tensors, which dynamo traces), with
`fused` and `call` nodes inlined; what cannot be lowered runs as the plan would run it,
inside a `torch.compiler.disable`d call, and is logged on ``tenferro_torch.inductor`` (INFO:
the primitive, the user's call site, the reason). This module does not import torch (the
plugin imports it); compiling a graph does.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

from tenferro_core.errors import KernelError, TenferroError
from tenferro_runtime.kernels import failed

log = logging.getLogger("tenferro_torch.inductor")


def compile_graph(graph: Any, device: Any) -> Callable[[list], list] | None:
    """A runner `run(input buffers) -> output buffers` (one per graph output) for the whole
    optimized `graph` on `device` by torch.compile (Inductor), or None (declined, logged)
    for a device that is not a torch device or a graph the lowering cannot take."""
    from .backend import TorchBackend

    if not isinstance(device.backend, TorchBackend):
        log.info("inductor: declined a graph of %d node(s) on %s: not a torch device (the "
                 "generic plan executor runs it)", len(graph.nodes), device)
        return None
    import torch

    from .fx_lowering import Decline, lower

    try:
        lowered = lower(graph, device, realize_scalars=True)
    except Decline as why:
        log.info("inductor: declined a graph of %d node(s) on %s: %s (the generic plan "
                 "executor runs it)", len(graph.nodes), device, why)
        return None
    log.debug("inductor: compiling a graph of %d node(s) on %s: %d torch call(s) in the fx "
              "graph, %d fallback(s), %d constant(s)", len(graph.nodes), device,
              lowered.n_lowered, len(lowered.fallbacks), lowered.n_consts)
    fn = None
    if lowered.module is not None:  # else every output is an input or a constant
        fn = torch.compile(lowered.module, backend="inductor", dynamic=False,
                           options={"guard_filter_fn": _tensor_guards})
    return _Runner(fn, lowered.sources, graph, device)


def _tensor_guards(entries: list) -> list[bool]:
    """Which of dynamo's guards to keep: those on tensors (shape, strides, dtype, device: the
    compiled code assumes them). Not those on the lowered kernels, their params and constants:
    they are fixed for this graph, and checking them cost more than Inductor saved (0.65 ms a
    call of the digits CNN's train step, 0.3 ms of the MLP's)."""
    return [e.guard_type == "TENSOR_MATCH" for e in entries]


def _restrided(out: Any) -> tuple:
    """The results that are dense but carry Inductor's own stride on a size-1 axis (a (32, 1,
    3, 3) weight with stride 288 on axis 1), with the row-major strides they get instead (the
    same elements: a size-1 axis is never stepped). Fed back into the next call (a train
    step's parameters), the odd stride failed dynamo's stride guard and compiled the graph a
    second time."""
    import torch
    from torch._prims_common import make_contiguous_strides_for

    dense = [(i, t, tuple(make_contiguous_strides_for(t.shape))) for i, t in enumerate(out)
             if isinstance(t, torch.Tensor) and t.is_contiguous()]
    return tuple((i, strides) for i, t, strides in dense if t.stride() != strides)


class _Runner:
    """Runs the compiled module and assembles the graph's outputs from its results, the
    inputs and the constants. Inductor compiles on the first call: where that fails, the
    generic plan runs the graph from then on (with a BackendCompileWarning). Under
    TENFERRO_CHECK_KERNELS every output is checked against the graph's avals."""

    __slots__ = ("fn", "sources", "graph", "device", "first", "restride")

    def __init__(self, fn: Any, sources: list, graph: Any, device: Any):
        self.fn = fn
        # per graph output: ("fx", index into the module's results), ("in", input index),
        # ("const", buffer) or ("none", None) for an output that is no Var
        self.sources = sources
        self.graph = graph
        self.device = device
        self.first = fn is not None
        self.restride: tuple = ()  # (result index, row-major strides): see `_restrided`

    def __call__(self, bufs: list) -> list:
        if self.first:
            out = self._first(bufs)
        elif self.fn is None:
            out = ()
        else:
            try:
                out = self.fn(*bufs)
            except Exception as exc:
                raise failed(None, self.device, exc, who=self._who())  # noqa: B904
        if self.restride:
            out = list(out)
            for i, strides in self.restride:
                out[i] = out[i].as_strided(out[i].shape, strides, out[i].storage_offset())
        return [out[x] if k == "fx" else bufs[x] if k == "in" else x for k, x in self.sources]

    def _first(self, bufs: list) -> Any:
        try:
            out = self.fn(*bufs)
        except TenferroError:
            raise
        except Exception as exc:
            from tenferro_runtime.executor import BackendCompileWarning
            from tenferro_runtime.plan import build_plan

            plan = build_plan(self.graph)
            what = f"a graph of {len(self.graph.nodes)} node(s) on {self.device}"
            first_line = (str(exc).strip().splitlines() or [""])[0]
            if plan is None:
                raise KernelError(f"inductor: torch.compile failed on {what} ({type(exc).__name__}: "
                                  f"{first_line})") from exc
            warnings.warn(f"inductor: torch.compile failed on {what} ({type(exc).__name__}: "
                          f"{first_line}); running it with the generic plan executor",
                          BackendCompileWarning, stacklevel=5)
            self.fn = lambda *b: plan.run_buffers(list(b))
            self.sources = [("fx", i) for i in range(len(self.graph.outputs))]
            out = self.fn(*bufs)
        else:
            self.restride = _restrided(out)
        self.first = False
        return out

    def _who(self) -> str:
        return (f"inductor: a graph of {len(self.graph.nodes)} node(s) compiled by Inductor on "
                f"{self.device}")


__all__ = ["compile_graph"]
