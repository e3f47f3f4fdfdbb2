"""The ``triton`` executor: a compiled graph on a torch device, with generated kernels.

Extension ops whose decomposition is elementwise, row and product work (tenferro_nn's
linear and log_softmax, bound as one op in graphs traced on torch) reach it decomposed (its
registration's `decompose`). Row groups (row reductions with their elementwise producers
and consumers, rows.py) are contracted into `fused` nodes next to the elementwise groups the
fusion pass made; then the generic plan is built with this executor's kernels for the nodes
it generates code for:
each fused group (elementwise.py or rows.py) and each `dot_general` (matmul.py). Every
other node, and every group the generators decline, runs its torch kernel, with the reason
logged (logger ``tenferro_triton``). Runs on ``torch:cuda:N``, and on ``torch:cpu`` in
Triton's interpreter (``TRITON_INTERPRET=1``), where the tests run it.
"""

from __future__ import annotations

import logging
from typing import Any

from .cache import interpreted

log = logging.getLogger("tenferro_triton")


class Unsupported(Exception):
    """A generator has no code for this node or group; the message says why."""


def compile_graph(graph: Any, device: Any) -> Any:
    """`run(input buffers) -> output buffers` for an optimized graph on a torch device, or
    None (logged) where this executor does not apply."""
    if device.backend.name != "torch":
        log.info("triton executor: declined a graph on %s (it generates kernels for torch "
                 "devices only)", device)
        return None
    if not device.name.startswith("torch:cuda") and not interpreted():
        log.info("triton executor: declined a graph on %s (Triton kernels run on torch:cuda "
                 "devices, or on torch:cpu with TRITON_INTERPRET=1 set before triton is "
                 "imported)", device)
        return None
    try:
        import triton  # noqa: F401
    except ImportError as exc:
        log.info("triton executor: declined (triton is not importable: %s)", exc)
        return None
    from tenferro_runtime.passes.fusion import fuse_groups
    from tenferro_runtime.plan import build_plan

    from . import rows

    grouped = fuse_groups(graph, rows.find_groups(graph))
    chooser = _Chooser(device)
    plan = build_plan(grouped, kernel_for=chooser.kernel_for)
    if plan is None:
        log.info("triton executor: declined a graph of %d node(s) on %s (no plan: a node has "
                 "no kernel there)", len(graph.nodes), device)
        return None
    log.debug("triton executor: %d generated kernel(s), %d fallback(s) for a graph of %d "
              "node(s) on %s", chooser.generated, chooser.fallbacks, len(graph.nodes), device)
    return plan.run_buffers


class _Chooser:
    """`kernel_for` of build_plan: a generated kernel per node where there is one."""

    def __init__(self, device: Any):
        self.device = device
        self.generated = 0
        self.fallbacks = 0

    def kernel_for(self, node: Any) -> Any:
        name = node.prim.name
        try:
            if name == "fused":
                kernel = self._group(node.params["graph"])
            elif name == "dot_general":
                from .matmul import dot_kernel

                kernel = dot_kernel(tuple(v.aval for v in node.inputs), node.outputs[0].aval,
                                    node.params["contracting_dims"], node.params["batch_dims"])
                if kernel is None:
                    raise Unsupported(f"no Triton matmul for {node.inputs[0].aval.dtype}")
            else:
                return None
        except Unsupported as why:
            self.fallbacks += 1
            log.info("triton executor: %s at %s runs the torch kernels: %s", name,
                     node.site or "?", why)
            return None
        self.generated += 1
        return kernel

    def _group(self, group: Any) -> Any:
        if any(n.prim.category == "reduction" for n in group.nodes):
            from .rows import row_kernel

            return row_kernel(group, self.device)
        from .elementwise import group_kernel

        return group_kernel(group, self.device)


__all__ = ["Unsupported", "compile_graph"]
