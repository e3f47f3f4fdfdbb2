"""Statistical functions: reductions, cumulative scans, mean, var and std.

Conventions (Array API 2024.12, NumPy where the standard is silent):

- `sum`, `prod`, `cumulative_sum`, `cumulative_prod` with ``dtype=None`` accumulate
  bool and signed integers in int64, unsigned integers in uint64; floating and
  complex inputs keep their dtype.
- `mean`, `var` and `std` need a floating or complex input; integer and bool
  tensors are a DTypeError (no silent promotion; convert with ``astype`` first).
  float16 accumulates in float32 and is rounded back, as in NumPy. `var`/`std`
  of complex input return the real dtype of matching precision.
- Empty reductions: `sum` gives 0, `prod` 1, `mean`/`var`/`std` NaN; `max` and
  `min` have no identity and raise ShapeError.
- `max`/`min` propagate NaN and reject complex input (no order).
"""

from __future__ import annotations

import builtins
import math
import numbers
from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, DTypeError, ShapeError

from .. import lax
from ..tensor import Tensor
from ._helpers import check_tensor, convert, expand_reduced, full, normalize_axes, normalize_axis

_HALF = (D.float16, D.bfloat16)


def _keep(out: Tensor, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
    return expand_reduced(out, x.shape, axes) if keepdims else out


def _check_bool(name: str, what: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ArgumentError(f"{name}: {what} must be True or False, got {value!r}")
    return value


def accumulation_dtype(name: str, x: Tensor, dtype: Any) -> D.DType:
    """The dtype `sum`/`prod`/cumulative scans compute in (see the module docstring)."""
    if dtype is None:
        if x.dtype.kind in "bi":
            return D.DEFAULT_INT
        if x.dtype.kind == "u":
            return D.uint64
        return x.dtype
    dtype = D.as_dtype(dtype)
    if dtype is D.bool_:
        raise DTypeError(f"{name}: dtype must be numeric, got bool; pass an integer or floating dtype")
    if x.dtype.kind == "c" and dtype.kind != "c":
        raise DTypeError(
            f"{name}: cannot accumulate a {x.dtype} tensor in {dtype} without dropping the "
            f"imaginary part; pass a complex dtype or take real() first"
        )
    return dtype


def _accumulate(name: str, prim: Any, x: Tensor, axis: Any, dtype: Any, keepdims: bool) -> Tensor:
    check_tensor(name, x)
    _check_bool(name, "keepdims", keepdims)
    axes = normalize_axes(name, axis, x.ndim)
    dt = accumulation_dtype(name, x, dtype)
    return _keep(prim(convert(x, dt), axes=axes), x, axes, keepdims)


def sum(x: Tensor, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Tensor:
    """Sum over `axis` (None: all axes); an empty sum is 0."""
    return _accumulate("sum", lax.reduce_sum, x, axis, dtype, keepdims)


def prod(x: Tensor, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Tensor:
    """Product over `axis` (None: all axes); an empty product is 1."""
    return _accumulate("prod", lax.reduce_prod, x, axis, dtype, keepdims)


def _extreme(name: str, prim: Any, x: Tensor, axis: Any, keepdims: bool) -> Tensor:
    check_tensor(name, x)
    _check_bool(name, "keepdims", keepdims)
    if x.dtype.kind == "c":
        raise DTypeError(
            f"{name}: complex numbers have no order, got a {x.dtype} tensor; reduce abs(x) or "
            f"real(x) instead"
        )
    axes = normalize_axes(name, axis, x.ndim)
    for a in axes:
        if x.shape[a] == 0:
            raise ShapeError(
                f"{name}: cannot reduce zero-size axis {a} of a tensor of shape {x.shape}; an "
                f"empty {name} has no identity. Check the size first or reduce a non-empty axis"
            )
    return _keep(prim(x, axes=axes), x, axes, keepdims)


def max(x: Tensor, /, *, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Maximum over `axis`; NaN propagates; empty axes are a ShapeError."""
    return _extreme("max", lax.reduce_max, x, axis, keepdims)


def min(x: Tensor, /, *, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Minimum over `axis`; NaN propagates; empty axes are a ShapeError."""
    return _extreme("min", lax.reduce_min, x, axis, keepdims)


def _inexact(name: str, x: Tensor) -> None:
    check_tensor(name, x)
    if not x.dtype.is_inexact:
        raise DTypeError(
            f"{name}: expected a floating or complex tensor, got {x.dtype}; convert it first, "
            f"for example astype(x, float64) (tenferro does not promote integers silently)"
        )


def _work(x: Tensor) -> Tensor:
    """float16/bfloat16 compute in float32; other dtypes as they are."""
    return convert(x, D.float32) if x.dtype in _HALF else x


def _divide_by(s: Tensor, n: float) -> Tensor:
    return lax.div(s, full(s.shape, float(n), s.dtype, s.device))


def _mean_work(x: Tensor, axes: tuple[int, ...]) -> tuple[Tensor, Tensor, int]:
    xw = _work(x)
    n = math.prod(x.shape[a] for a in axes)
    return xw, _divide_by(lax.reduce_sum(xw, axes=axes), n), n


def mean(x: Tensor, /, *, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Arithmetic mean over `axis`; floating or complex input; NaN for empty axes."""
    _inexact("mean", x)
    _check_bool("mean", "keepdims", keepdims)
    axes = normalize_axes("mean", axis, x.ndim)
    _, m, _ = _mean_work(x, axes)
    return _keep(convert(m, x.dtype), x, axes, keepdims)


def _var_work(name: str, x: Tensor, axis: Any, correction: Any, keepdims: bool):
    _inexact(name, x)
    _check_bool(name, "keepdims", keepdims)
    if isinstance(correction, bool) or not isinstance(correction, numbers.Real):
        raise ArgumentError(f"{name}: correction must be a real number, got {correction!r}")
    if correction < 0:
        raise ArgumentError(f"{name}: correction must be non-negative, got {correction}")
    axes = normalize_axes(name, axis, x.ndim)
    xw, m, n = _mean_work(x, axes)
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    d = lax.sub(xw, lax.broadcast_in_dim(m, shape=x.shape, broadcast_dimensions=kept))
    sq = lax.real(lax.mul(d, lax.conj(d))) if d.dtype.kind == "c" else lax.mul(d, d)
    v = _divide_by(lax.reduce_sum(sq, axes=axes), builtins.max(n - correction, 0))
    return v, axes


def var(x: Tensor, /, *, axis: Any = None, correction: float = 0.0, keepdims: bool = False) -> Tensor:
    """Variance over `axis` with divisor ``max(N - correction, 0)``; real result dtype."""
    v, axes = _var_work("var", x, axis, correction, keepdims)
    return _keep(convert(v, D.real_of(x.dtype)), x, axes, keepdims)


def std(x: Tensor, /, *, axis: Any = None, correction: float = 0.0, keepdims: bool = False) -> Tensor:
    """Standard deviation: the square root of `var`."""
    v, axes = _var_work("std", x, axis, correction, keepdims)
    return _keep(convert(lax.sqrt(v), D.real_of(x.dtype)), x, axes, keepdims)


def _scan_axis(name: str, x: Tensor, axis: Any) -> int:
    if x.ndim == 0:
        raise ShapeError(f"{name}: expected a tensor with at least one axis, got a 0-d tensor; "
                         f"reshape it to (1,) first")
    if axis is None:
        if x.ndim > 1:
            raise ArgumentError(
                f"{name}: axis is required for a {x.ndim}-d tensor (it may be omitted only for "
                f"1-d input); pass axis=..."
            )
        return 0
    return normalize_axis(name, axis, x.ndim)


def _prepend_identity(y: Tensor, ax: int, value: int) -> Tensor:
    cfg = tuple((1 if i == ax else 0, 0, 0) for i in range(y.ndim))
    return lax.pad(y, full((), value, y.dtype, y.device), padding_config=cfg)


def cumulative_sum(x: Tensor, /, *, axis: int | None = None, dtype: Any = None,
                   include_initial: bool = False) -> Tensor:
    """Inclusive running sum along `axis`; ``include_initial`` prepends a 0."""
    check_tensor("cumulative_sum", x)
    _check_bool("cumulative_sum", "include_initial", include_initial)
    ax = _scan_axis("cumulative_sum", x, axis)
    xc = convert(x, accumulation_dtype("cumulative_sum", x, dtype))
    out = lax.cumsum(xc, axis=ax)
    return _prepend_identity(out, ax, 0) if include_initial else out


def cumulative_prod(x: Tensor, /, *, axis: int | None = None, dtype: Any = None,
                    include_initial: bool = False) -> Tensor:
    """Inclusive running product along `axis`; ``include_initial`` prepends a 1.

    A Hillis-Steele scan: ``ceil(log2 n)`` steps, each multiplying by a copy
    shifted by 1, 2, 4, ... (slice + pad with 1). Exact (wrapping) for integers.
    """
    check_tensor("cumulative_prod", x)
    _check_bool("cumulative_prod", "include_initial", include_initial)
    ax = _scan_axis("cumulative_prod", x, axis)
    y = convert(x, accumulation_dtype("cumulative_prod", x, dtype))
    if y.dtype.kind not in "iufc":
        raise DTypeError(f"cumulative_prod: expected a numeric dtype, got {y.dtype}")
    n = y.shape[ax]
    one = full((), 1, y.dtype, y.device)
    shift = 1
    while shift < n:
        limit = tuple(n - shift if i == ax else s for i, s in enumerate(y.shape))
        head = lax.slice(y, start_indices=(0,) * y.ndim, limit_indices=limit)
        cfg = tuple((shift if i == ax else 0, 0, 0) for i in range(y.ndim))
        y = lax.mul(y, lax.pad(head, one, padding_config=cfg))
        shift *= 2
    return _prepend_identity(y, ax, 1) if include_initial else y


__all__ = [
    "cumulative_sum", "cumulative_prod", "max", "mean", "min", "prod", "std", "sum", "var",
]
