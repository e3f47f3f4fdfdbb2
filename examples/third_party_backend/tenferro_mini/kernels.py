"""mini's kernels: 33 of the 89 core primitives, written by hand with NumPy.

Semantics are docs/primitives.md's. Each kernel below is a function of NumPy arrays
and keyword params; `build_kernels(meter)` lifts it to `MiniBuffer`s and charges its
estimated cost (FLOPs, bytes read and written) to the device's energy meter. The
primitives not in `KERNELS` have no kernel on mini: the runtime answers them with a
MissingKernelError naming the backends that have one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .buffer import MiniBuffer

# ---- elementwise ----------------------------------------------------------


def _div(x, y):
    """Floats: IEEE. Ints: truncate toward zero, x/0 = 0, INT_MIN/-1 = INT_MIN (wraps)."""
    if x.dtype.kind == "f":
        return np.true_divide(x, y)
    safe = np.where(y == 0, 1, y)
    q = np.floor_divide(x, safe)
    q = q + ((q * safe != x) & ((x < 0) != (safe < 0)))  # floor -> trunc when a remainder is left
    return np.where(y == 0, 0, q).astype(x.dtype)


ELEMENTWISE: dict[str, Callable[..., Any]] = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "logical_not": np.logical_not,
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": _div,
    "maximum": np.maximum, "minimum": np.minimum,  # both propagate NaN; on bool: or / and
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or,
    "select": np.where,
}

# ---- structural (no arithmetic; several return views, safe as buffers are immutable) ----


def _reshape(x, *, new_sizes):
    return x.reshape(new_sizes)


def _transpose(x, *, permutation):
    return np.transpose(x, permutation)


def _broadcast_in_dim(x, *, shape, broadcast_dimensions):
    kept = [1] * len(shape)
    for axis, dim in enumerate(broadcast_dimensions):
        kept[dim] = x.shape[axis]
    return np.broadcast_to(x.reshape(kept), shape)


def _convert(x, *, new_dtype):
    return x.astype(new_dtype.numpy)  # C casts: ints wrap, floats truncate, nonzero -> True


def _reverse(x, *, dimensions):
    return np.flip(x, dimensions)


def _slice(x, *, start_indices, limit_indices, strides):
    return x[tuple(slice(a, b, s) for a, b, s in zip(start_indices, limit_indices, strides))]


def _iota(*, dtype, shape, dimension, device):
    line = [1] * len(shape)
    line[dimension] = shape[dimension]
    return np.broadcast_to(np.arange(shape[dimension], dtype=dtype.numpy).reshape(line), shape)


def _full(*, shape, fill_value, dtype, device):
    value = np.asarray(fill_value)  # bool, int64 / uint64, float64 or complex128, as from Python
    if value.dtype.kind == "c":
        value = value.real  # convert's rule: complex to real takes the real part
    return np.full(shape, value.astype(dtype.numpy), dtype=dtype.numpy)


def _copy(x):
    return np.array(x, copy=True)


STRUCTURAL: dict[str, Callable[..., Any]] = {
    "reshape": _reshape, "transpose": _transpose, "broadcast_in_dim": _broadcast_in_dim,
    "convert": _convert, "reverse": _reverse, "slice": _slice, "iota": _iota, "full": _full,
    "copy": _copy,
}

# ---- reductions and contraction -----------------------------------------------


def _reduce_sum(x, *, axes):
    return np.sum(x, axis=axes, dtype=x.dtype)  # no promotion: ints wrap


def _reduce_max(x, *, axes):
    return np.max(x, axis=axes)  # NaN propagates; bool: any


def _dot_general(lhs, rhs, *, contracting_dims, batch_dims):
    """Batch axes first, then lhs free, then rhs free: one batched matmul (B, M, K) @ (B, K, N)."""
    (lc, rc), (lb, rb) = contracting_dims, batch_dims
    lf = [a for a in range(lhs.ndim) if a not in lc and a not in lb]
    rf = [a for a in range(rhs.ndim) if a not in rc and a not in rb]
    batch, m, n = [lhs.shape[a] for a in lb], [lhs.shape[a] for a in lf], [rhs.shape[a] for a in rf]
    k = math.prod(lhs.shape[a] for a in lc)
    a = np.transpose(lhs, [*lb, *lf, *lc]).reshape(math.prod(batch), math.prod(m), k)
    b = np.transpose(rhs, [*rb, *rc, *rf]).reshape(math.prod(batch), k, math.prod(n))
    return np.matmul(a, b).reshape((*batch, *m, *n))


# ---- cost model (FLOPs per call) ----------------------------------------------


def _per_element(out, *operands, **params) -> float:
    return out.size


def _no_flops(out, *operands, **params) -> float:
    return 0


def _per_input(out, x, **params) -> float:
    return x.size


def _matmul_flops(out, lhs, rhs, *, contracting_dims, batch_dims) -> float:
    return 2 * out.size * math.prod(lhs.shape[a] for a in contracting_dims[0])


Cost = Callable[..., float]

KERNELS: dict[str, tuple[Callable[..., Any], Cost]] = {
    **{name: (fn, _per_element) for name, fn in ELEMENTWISE.items()},
    **{name: (fn, _no_flops) for name, fn in STRUCTURAL.items()},
    "reduce_sum": (_reduce_sum, _per_input),
    "reduce_max": (_reduce_max, _per_input),
    "dot_general": (_dot_general, _matmul_flops),
}
KERNEL_NAMES = frozenset(KERNELS)


def _lift(fn: Callable[..., Any], cost: Cost, meter: Any) -> Callable[..., MiniBuffer]:
    """A kernel on MiniBuffers from a kernel on arrays, charging its cost to `meter`."""

    def kernel(*bufs: MiniBuffer, **params: Any) -> MiniBuffer:
        arrays = [b.array for b in bufs]
        with np.errstate(all="ignore"):  # IEEE special values are silent (docs/primitives.md)
            out = MiniBuffer(fn(*arrays, **params))
        meter.record(cost(out.array, *arrays, **params), out.nbytes + sum(a.nbytes for a in arrays))
        return out

    kernel.__name__ = kernel.__qualname__ = f"mini_{getattr(fn, '__name__', 'kernel').lstrip('_')}"
    return kernel


def build_kernels(meter: Any) -> dict[str, Callable[..., MiniBuffer]]:
    """The kernel table of one backend instance, each kernel charging `meter`."""
    return {name: _lift(fn, cost, meter) for name, (fn, cost) in KERNELS.items()}
