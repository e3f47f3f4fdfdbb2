"""Small BLAS products and small MKL VML functions on one thread of torch's intra-op pool.

MKL splits even a tiny product (an (8, 64) by (64, 64) attention score) over every intra-op
thread, and tenferro imports torch with a short OpenMP spin (`backend.OMP_SPIN_COUNT`), so
between two products separated by some Python the workers sleep and each product pays a
futex wake-up of tens of microseconds. SmolLM2's decode step on torch:cpu makes ~210
products a token, most of them small (a shape-alike model with tiny matrices: 25 ms a
token of dispatch on two threads, 14.5 on one, on the 2-core VM). Here a small product
(fewer than `SMALL_PRODUCT` multiply-adds reading under `SMALL_OPERANDS`) runs with the
pool at one thread, set back right after (`torch.set_num_threads` costs
~0.1 us and only sizes the next parallel region); a matrix-vector product that streams a
large weight still runs on every thread, where the bandwidth pays for the wake-up.

torch's exp, log, sqrt, tanh, sin, cos, tan, asin, acos, atan and trunc on the CPU call MKL's
VML, which threads a call of 576 elements too: ~47 us a call after a pause against ~7 us for
torch's own loops (sigmoid, expm1, add), 250 us next to a busy process. Up to
`SMALL_ELEMENTS` results they run on one thread, and so does a `fused` group that holds one
of them (the limits are where a warm pool still pays: a compiled step keeps it awake).
"""

from __future__ import annotations

import math
import sys
from typing import Any

from .ops.common import on_cpu

SMALL_PRODUCT = 1 << 18
"""Multiply-adds (the whole call's) below which a product runs on one thread: OpenBLAS's
own threshold for threading a product (a decode step's attention and rotation products are
below it, a transformer block's (32, 64, 32) x (32, 32, 64) scores, 4.2 M, are not)."""

SMALL_OPERANDS = 1 << 20
"""...unless its operands are this many bytes or more (bound by memory, not multiply-adds)."""


SMALL_ELEMENTS = 1 << 15
"""Results up to this many elements of a VML function run on one thread (torch's own
grain: it runs its loops below this size on one thread too). Larger calls keep the pool:
in a compiled step the pool is awake and a 131,072-element softmax exp gains from it (a
transformer block step took 8.7 ms with these calls on one thread up to 2^17 elements and
products up to 2^24 multiply-adds, 7.0 ms with none)."""

VML = frozenset(("exp", "log", "sqrt", "tanh", "sin", "cos", "tan", "asin", "acos", "atan", "trunc"))
"""tenferro primitives whose torch CPU kernels are MKL VML calls (measured: ~47 us a call
of 576 elements after a pause on two threads, where torch's own loops take ~7 us)."""


def product_size(name: str, in_avals: tuple, out_avals: tuple, params: dict) -> tuple[int, int]:
    """(multiply-adds, operand bytes) of a dot_general or conv_general call: the core cost
    rule's FLOPs (two per multiply-add) and the operands' bytes."""
    from tenferro_core.catalog.cost import CORE_COST_RULES, nbytes

    return CORE_COST_RULES[name](in_avals, out_avals, **params).flops // 2, nbytes(in_avals[:2])


def _small(name: str, in_avals: tuple, out_avals: tuple, params: dict | None) -> bool:
    """Whether this call runs faster on one thread (see the module docstring)."""
    if name in ("dot_general", "conv_general"):
        if params is None or len(in_avals) < 2:
            return False
        return small_product(*product_size(name, in_avals, out_avals, params))
    if name == "fused":
        graph = (params or {}).get("graph")
        if graph is None or not any(n.prim.name in VML for n in graph.nodes):
            return False
        values = [*graph.inputs, *(v for n in graph.nodes for v in n.outputs)]
        return max(math.prod(v.aval.shape) for v in values) <= SMALL_ELEMENTS
    return name in VML and bool(out_avals) and math.prod(out_avals[0].shape) <= SMALL_ELEMENTS


def sized(kernel: Any, name: str, in_avals: tuple, out_avals: tuple, params: dict | None) -> Any:
    """`kernel` run with torch's intra-op pool at one thread when the call is small and on the
    CPU (a BLAS product, a VML function, a fused group holding one), else `kernel` itself."""
    if not on_cpu((in_avals or out_avals)[0]) or not _small(name, in_avals, out_avals, params):
        return kernel
    def one_thread(*args: Any, **kwargs: Any) -> Any:
        return run_sized(True, kernel, *args, **kwargs)

    one_thread.__name__ = f"{getattr(kernel, '__name__', name)}_one_thread"
    one_thread.one_thread_of = kernel  # a fused group takes the kernel itself (fusion.py)
    return one_thread


def small_group(graph: Any) -> bool:
    """Whether a `fused` group's calls run on one thread (as `sized` runs its kernel)."""
    return _small("fused", (), (), {"graph": graph})


def small_product(macs: int, nbytes: int) -> bool:
    """Whether a product of `macs` multiply-adds reading `nbytes` runs on one thread."""
    return macs < SMALL_PRODUCT and nbytes < SMALL_OPERANDS


def run_sized(small: bool, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)`, with torch's intra-op pool at one thread when `small` (the out
    forms' counterpart of `sized`: the same thread count, so the same bits)."""
    torch = sys.modules["torch"]
    n = torch.get_num_threads() if small else 1
    if n == 1:
        return fn(*args, **kwargs)
    torch.set_num_threads(1)
    try:
        return fn(*args, **kwargs)
    finally:
        torch.set_num_threads(n)


__all__ = ["SMALL_ELEMENTS", "SMALL_OPERANDS", "SMALL_PRODUCT", "VML", "product_size", "run_sized",
           "sized", "small_group", "small_product"]
