"""Products and norms of the linalg extension: cross, diagonal, matmul, matrix_norm,
matrix_transpose, outer, tensordot, trace, vecdot, vector_norm.

All are compositions of core primitives (matmul, matrix_transpose, tensordot and vecdot
are the main namespace's own functions), so they run on every backend and are
differentiated by the core rules; the spectral matrix norms (2, -2, "nuc") go through
svdvals. No ops, kernels or rules of their own.

Norms take floating or complex input (integers are a DTypeError, as in the rest of the
namespace) and return the real dtype. Conventions:

- vector_norm with ord 2 (and any p other than 0, 1, +-inf) scales by s = max|x| before
  summing, s * (sum |x/s|^p)^(1/p), so huge or tiny values neither overflow nor underflow;
  s is held constant under differentiation (the norm is homogeneous, so its derivative
  in s is zero), which keeps every derivative order exact.
- Gradient at x = 0 is 0 (JAX's subgradient choice) for every ord; for 0 < p < 1 and
  p < 0, zero entries get a 0 gradient too (the true one is infinite or undefined).
- Empty reductions: 0 for ord >= 0 (ord 0, 1, 2, inf, p > 0, "fro", "nuc", 2), inf for a
  finite p < 0; ord -inf (and matrix ords -1, -2, -inf over an empty axis) have no value:
  ShapeError.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any

from tenferro_ad.stop_gradient import stop_gradient
from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, ArgumentValueError, AxisError, DTypeError, ShapeError
from tenferro_runtime import lax
from tenferro_runtime.array_api import _helpers as H
from tenferro_runtime.array_api import matmul, matrix_transpose, tensordot, vecdot
from tenferro_runtime.array_api import sum as _sum
from tenferro_runtime.tensor import Tensor

OPS: list = []
KERNELS: dict = {}
RULES: list = []

INF = math.inf


def _int(name: str, what: str, v: Any) -> int:
    if isinstance(v, bool):
        raise ArgumentError(f"linalg.{name}: {what} must be an int, got {v!r}")
    try:
        return operator.index(v)
    except TypeError:
        raise ArgumentError(f"linalg.{name}: {what} must be an int, got {type(v).__name__}") from None


def _bool(name: str, what: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise ArgumentError(f"linalg.{name}: {what} must be True or False, got {v!r}")
    return v


def _numeric_pair(name: str, x1: Any, x2: Any) -> list[Tensor]:
    for what, x in (("x1", x1), ("x2", x2)):
        H.check_tensor(f"linalg.{name}", x, what)
        if x.dtype.kind == "b":
            raise DTypeError(f"linalg.{name} expects numeric tensors, got {what} of dtype bool; "
                             f"convert it with astype first")
    return H.promote(f"linalg.{name}", x1, x2)


def _inexact(name: str, x: Any) -> Tensor:
    H.check_tensor(f"linalg.{name}", x)
    if x.dtype.kind not in "fc":
        raise DTypeError(
            f"linalg.{name} expects a floating-point or complex x, got {x.dtype}; convert it first, "
            f"for example astype(x, float64)"
        )
    return x


def _const(value: Any, like: Any, shape: tuple[int, ...] | None = None) -> Tensor:
    return H.full(like.shape if shape is None else shape, value, like.dtype, like.device)


# ---- cross, outer, diagonal, trace ---------------------------------------------------------


def _to_last(x: Tensor, axis: int) -> Tensor:
    ax = axis % x.ndim
    if ax == x.ndim - 1:
        return x
    return lax.transpose(x, permutation=(*(d for d in range(x.ndim) if d != ax), ax))


def cross(x1: Tensor, x2: Tensor, /, *, axis: int = -1) -> Tensor:
    """Cross product of 3-vectors along `axis` (in [-N, N) for N = min(x1.ndim, x2.ndim);
    non-negative axes need equal ranks), broadcasting the other axes."""
    a, b = _numeric_pair("cross", x1, x2)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"linalg.cross expects at least 1-d tensors, got shapes {a.shape} and {b.shape}")
    nd = min(a.ndim, b.ndim)
    ax = _int("cross", "axis", axis)
    if not -nd <= ax < nd:
        raise AxisError(f"linalg.cross: axis {ax} is out of range for shapes {a.shape} and {b.shape}; "
                        f"expected {-nd} <= axis < {nd}")
    if ax >= 0:
        if a.ndim != b.ndim:
            raise AxisError(
                f"linalg.cross: a non-negative axis ({ax}) is ambiguous for tensors of ranks {a.ndim} "
                f"and {b.ndim}; pass a negative axis (counted from the end)"
            )
        ax -= a.ndim
    if a.shape[ax] != 3 or b.shape[ax] != 3:
        raise ShapeError(
            f"linalg.cross needs size 3 along axis {ax}, got shapes {a.shape} and {b.shape}"
        )
    a, b = _to_last(a, ax), _to_last(b, ax)
    try:
        batch = H.broadcast_shapes(a.shape[:-1], b.shape[:-1])
    except ShapeError as exc:
        raise ShapeError(f"linalg.cross: the non-vector axes do not broadcast: {exc}") from None
    a, b = H.broadcast_to(a, (*batch, 3)), H.broadcast_to(b, (*batch, 3))
    k = len(batch)

    def part(t: Tensor, i: int) -> Tensor:
        return lax.slice(t, start_indices=(0,) * k + (i,), limit_indices=(*batch, i + 1))

    (a0, a1, a2), (b0, b1, b2) = ([part(t, i) for i in range(3)] for t in (a, b))
    out = lax.concatenate(
        lax.sub(lax.mul(a1, b2), lax.mul(a2, b1)),
        lax.sub(lax.mul(a2, b0), lax.mul(a0, b2)),
        lax.sub(lax.mul(a0, b1), lax.mul(a1, b0)),
        dimension=k,
    )
    pos = k + 1 + ax
    if pos == k:
        return out
    perm = list(range(k))
    perm.insert(pos, k)
    return lax.transpose(out, permutation=tuple(perm))


def outer(x1: Tensor, x2: Tensor, /) -> Tensor:
    """Outer product (N, M) of vectors x1 (N,) and x2 (M,)."""
    a, b = _numeric_pair("outer", x1, x2)
    if a.ndim != 1 or b.ndim != 1:
        raise ShapeError(f"linalg.outer expects two 1-d tensors, got shapes {a.shape} and {b.shape}")
    shape = (a.shape[0], b.shape[0])
    return lax.mul(lax.broadcast_in_dim(a, shape=shape, broadcast_dimensions=(0,)),
                   lax.broadcast_in_dim(b, shape=shape, broadcast_dimensions=(1,)))


def _diagonal(name: str, x: Any, offset: Any) -> Tensor:
    H.check_tensor(f"linalg.{name}", x)
    offset = _int(name, "offset", offset)
    if x.ndim < 2:
        raise ShapeError(f"linalg.{name} expects at least 2 dimensions (a stack of matrices), got "
                         f"shape {x.shape}")
    *batch, m, n = x.shape
    k = max(0, min(m, n - offset) if offset >= 0 else min(m + offset, n))
    if k == 0:
        return H.full((*batch, 0), False if x.dtype is D.bool_ else 0, x.dtype, x.device)
    start = offset if offset >= 0 else -offset * n
    nb = len(batch)
    flat = H.reshape(x, (*batch, m * n))  # element (i, i + offset) sits at start + i (n + 1)
    stop = start + (k - 1) * (n + 1) + 1
    return lax.slice(flat, start_indices=(0,) * nb + (start,), limit_indices=(*batch, stop),
                     strides=(1,) * nb + (n + 1,))


def diagonal(x: Tensor, /, *, offset: int = 0) -> Tensor:
    """The diagonal x[..., i, i + offset] of the last two axes, shape (..., k)."""
    return _diagonal("diagonal", x, offset)


def trace(x: Tensor, /, *, offset: int = 0, dtype: Any = None) -> Tensor:
    """Sum of the offset diagonal, shape x.shape[:-2]; dtype None accumulates as `sum` does
    (signed integers in int64, unsigned in uint64, floating dtypes kept)."""
    return _sum(_diagonal("trace", x, offset), axis=-1, dtype=dtype)


# ---- vector_norm ---------------------------------------------------------------------------


def _vector_ord(ord: Any) -> float:
    if isinstance(ord, bool) or not isinstance(ord, numbers.Real) or math.isnan(ord):
        raise ArgumentValueError(
            f"linalg.vector_norm: ord must be a real number (0, 1, 2, inf, -inf or any p), got {ord!r}"
        )
    return float(ord)


def _abs2(x: Tensor) -> Tensor:
    """|x|^2 as re^2 + im^2: differentiable everywhere (abs is not at 0)."""
    if x.dtype.kind != "c":
        return lax.mul(x, x)
    re, im = lax.real(x), lax.imag(x)
    return lax.add(lax.mul(re, re), lax.mul(im, im))


def _safe_apply(fn: Any, x: Tensor, at: float, value: float) -> Tensor:
    """fn(x), with `value` (and a zero derivative) where x == at: fn is never evaluated
    there, so no inf/NaN leaks into the derivative (the double-select trick)."""
    hit = lax.eq(x, _const(at, x))
    return lax.select(hit, _const(value, x), fn(lax.select(hit, _const(1.0, x), x)))


def _scaled_p_norm(x: Tensor, axes: tuple[int, ...], p: float) -> Tensor:
    """s * (sum |x/s|^p)^(1/p) with s = max|x| held constant (see the module docstring)."""
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    s = lax.reduce_max(lax.abs(stop_gradient(x)), axes=axes)
    scale = lax.select(lax.logical_and(lax.gt(s, _const(0, s)), lax.lt(s, _const(INF, s))), s, _const(1, s))
    scale_x = lax.broadcast_in_dim(scale, shape=x.shape, broadcast_dimensions=kept)
    if p == 2:
        total = lax.reduce_sum(_abs2(lax.div(x, H.convert(scale_x, x.dtype))), axes=axes)
        root = _safe_apply(lax.sqrt, total, 0.0, 0.0)
    else:
        y = lax.div(lax.abs(x), scale_x)
        terms = _safe_apply(lambda t: lax.pow(t, _const(p, t)), y, 0.0, 0.0 if p > 0 else INF)
        total = lax.reduce_sum(terms, axes=axes)
        root = _safe_apply(lambda t: lax.pow(t, _const(1 / p, t)), total, 0.0, 0.0)
    return lax.mul(scale, root)


def _vector_norm(x: Tensor, axes: tuple[int, ...], p: float) -> Tensor:
    rdt = D.real_of(x.dtype)
    if any(x.shape[a] == 0 for a in axes):
        if p == -INF:
            raise ShapeError(
                f"linalg.vector_norm: ord=-inf (the smallest |x|) of an empty axis has no value; "
                f"shape {x.shape}, axes {axes}"
            )
        shape = tuple(n for i, n in enumerate(x.shape) if i not in axes)
        return H.full(shape, INF if p < 0 else 0.0, rdt, x.device)
    if p == 0:
        return lax.reduce_sum(lax.convert(lax.ne(x, _const(0, x)), new_dtype=rdt), axes=axes)
    if p == 1:
        return lax.reduce_sum(lax.abs(x), axes=axes)
    if p in (INF, -INF):
        return (lax.reduce_max if p > 0 else lax.reduce_min)(lax.abs(x), axes=axes)
    return _scaled_p_norm(x, axes, p)


def vector_norm(x: Tensor, /, *, axis: int | tuple[int, ...] | None = None, keepdims: bool = False,
                ord: float = 2) -> Tensor:
    """The ord-norm over `axis` (None: all axes, flattened): ord 0 counts non-zeros, 1 sums
    |x|, 2 is Euclidean (overflow-safe), +-inf is max/min |x|, any other p is
    (sum |x|^p)^(1/p). Real dtype of x; gradient 0 at x = 0."""
    x = _inexact("vector_norm", x)
    _bool("vector_norm", "keepdims", keepdims)
    axes = H.normalize_axes("linalg.vector_norm", axis, x.ndim)
    out = _vector_norm(x, axes, _vector_ord(ord))
    return H.expand_reduced(out, x.shape, axes) if keepdims else out


# ---- matrix_norm ---------------------------------------------------------------------------

MATRIX_ORDS = ("fro", "nuc", 1, -1, 2, -2, INF, -INF)


def _matrix_ord(ord: Any) -> Any:
    if isinstance(ord, str):
        if ord in ("fro", "nuc"):
            return ord
    elif not isinstance(ord, bool) and isinstance(ord, numbers.Real) and ord in MATRIX_ORDS[2:]:
        return float(ord)
    raise ArgumentValueError(f"linalg.matrix_norm: ord must be one of {MATRIX_ORDS}, got {ord!r}")


def _extreme(x: Tensor, axis: int, largest: bool, what: str) -> Tensor:
    """max (largest) or min over one axis; 0 for an empty max, ShapeError for an empty min."""
    if x.shape[axis] == 0:
        if not largest:
            raise ShapeError(f"linalg.matrix_norm: ord={what} (a minimum) over an empty axis has no value; "
                             f"the matrices have shape {x.shape}")
        return H.full(tuple(n for i, n in enumerate(x.shape) if i != axis), 0, x.dtype, x.device)
    return (lax.reduce_max if largest else lax.reduce_min)(x, axes=(axis,))


def matrix_norm(x: Tensor, /, *, keepdims: bool = False, ord: Any = "fro") -> Tensor:
    """Norm of the matrices in the last two axes: "fro" (overflow-safe), "nuc" (sum of
    singular values), 2 / -2 (largest / smallest singular value), 1 / -1 (max / min column
    sum of |x|), inf / -inf (max / min row sum). Real dtype of x, shape x.shape[:-2]
    (with two size-1 axes under keepdims)."""
    x = _inexact("matrix_norm", x)
    _bool("matrix_norm", "keepdims", keepdims)
    if x.ndim < 2:
        raise ShapeError(f"linalg.matrix_norm expects at least 2 dimensions (a stack of matrices), got "
                         f"shape {x.shape}")
    key = _matrix_ord(ord)
    nd = x.ndim
    if key == "fro":
        out = _vector_norm(x, (nd - 2, nd - 1), 2.0)
    elif key in ("nuc", 2, -2):
        if min(x.shape[-2:]) == 0:
            s = H.full((*x.shape[:-2], 0), 0, D.real_of(x.dtype), x.device)
        else:
            from ._decomp import svdvals

            s = svdvals(x)
        last = s.ndim - 1
        out = lax.reduce_sum(s, axes=(last,)) if key == "nuc" else _extreme(s, last, key > 0, str(ord))
    else:  # 1 / -1: sum over rows, extreme over columns; inf / -inf: the other way round
        along = nd - 2 if key in (1, -1) else nd - 1
        sums = lax.reduce_sum(lax.abs(x), axes=(along,))
        out = _extreme(sums, sums.ndim - 1, key > 0, str(ord))
    return H.reshape(out, (*out.shape, 1, 1)) if keepdims else out


__all__ = ["cross", "diagonal", "matmul", "matrix_norm", "matrix_transpose", "outer", "tensordot", "trace",
           "vecdot", "vector_norm"]
