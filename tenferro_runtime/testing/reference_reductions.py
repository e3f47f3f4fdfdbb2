"""Reference reductions, scans, sorts and contractions.

Reductions walk each reduced line in Python (exact integer arithmetic,
correctly rounded float sums); dot_general is an einsum with built subscripts
over widened operands; conv_general loops over output positions and window
offsets on an explicitly dilated and padded input.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .numerics import QUIET, narrow, wide


def _lines(x: np.ndarray, axes: tuple[int, ...]):
    """(outer shape, function outer index -> 1-d line of the reduced axes, widened)."""
    rest = [i for i in range(x.ndim) if i not in axes]
    moved = np.transpose(wide(x), rest + list(axes))
    outer = moved.shape[: len(rest)]
    k = math.prod(x.shape[a] for a in axes)
    flat = moved.reshape(outer + (k,))
    return outer, (lambda idx: list(flat[idx]))


def _reduce(x: np.ndarray, axes: tuple[int, ...], fn: Callable[[list], Any], npd: Any) -> np.ndarray:
    outer, line = _lines(x, axes)
    out = np.empty(outer, dtype=object)
    for idx in np.ndindex(outer):
        out[idx] = fn(line(idx))
    if np.dtype(npd).kind in "iub":
        return narrow(out, npd)
    kind = np.complex128 if np.dtype(npd).kind == "c" else np.float64
    with np.errstate(**QUIET):
        return out.astype(kind).astype(npd)


def _fsum(vals: list) -> Any:
    """Correctly rounded sum of floats; plain IEEE sum once inf/nan are involved."""
    if not vals or not isinstance(vals[0], (float, complex, np.floating, np.complexfloating)):
        return sum(vals, 0)
    if isinstance(vals[0], (complex, np.complexfloating)):
        return complex(_fsum([v.real for v in vals]), _fsum([v.imag for v in vals]))
    if all(math.isfinite(v) for v in vals):
        return math.fsum(vals)
    with np.errstate(invalid="ignore", over="ignore"):  # inf + -inf is nan, as in IEEE
        return float(np.sum(np.asarray(vals, dtype=np.float64)))


def _prod(vals: list) -> Any:
    out: Any = 1
    with np.errstate(**QUIET):
        for v in vals:
            out = out * v
    return out


def _is_nan(v: Any) -> bool:
    return isinstance(v, (float, np.floating)) and math.isnan(v)


def _extreme(pick: Callable[[list], Any]) -> Callable[[list], Any]:
    def fn(vals: list) -> Any:
        return math.nan if any(_is_nan(v) for v in vals) else pick(vals)

    return fn


def _reducer(fn: Callable[[list], Any]) -> Callable[..., np.ndarray]:
    def ref(x, *, axes):
        return _reduce(x, tuple(axes), fn, x.dtype)

    return ref


def _arg(largest: bool) -> Callable[..., np.ndarray]:
    def first(vals: list) -> int:
        for i, v in enumerate(vals):
            if _is_nan(v):
                return i
        best = max(vals) if largest else min(vals)
        return vals.index(best)

    def ref(x, *, axis, index_dtype):
        return _reduce(x, (axis,), first, index_dtype.numpy)

    return ref


def _along(x: np.ndarray, axis: int, fn: Callable[[list], list], npd: Any) -> np.ndarray:
    """Apply a line -> line function along one axis."""
    moved = np.moveaxis(wide(x), axis, -1)
    out = np.empty(moved.shape, dtype=object)
    for idx in np.ndindex(moved.shape[:-1]):
        out[idx] = np.array(fn(list(moved[idx])) + [None], dtype=object)[:-1]
    out = np.moveaxis(out, -1, axis)
    if np.dtype(npd).kind in "iub":
        return narrow(out, npd)
    kind = np.complex128 if np.dtype(npd).kind == "c" else np.float64
    with np.errstate(**QUIET):
        return out.astype(kind).astype(npd)


def _cumsum(x, *, axis, reverse):
    def scan(vals: list) -> list:
        order = vals[::-1] if reverse else vals
        acc, out = None, []
        with np.errstate(**QUIET):
            for v in order:
                acc = v if acc is None else acc + v
                out.append(acc)
        return out[::-1] if reverse else out

    return _along(x, axis, scan, x.dtype)


def sort_order(vals: list, descending: bool) -> list[int]:
    """Stable order of a line: NaNs last ascending, first descending; ties keep input order."""
    keys = [(1, 0) if _is_nan(v) else (0, v) for v in vals]
    return sorted(range(len(vals)), key=lambda i: keys[i], reverse=descending)


def _sort(x, *, dimension, descending, stable):
    moved = np.moveaxis(x, dimension, -1)
    out = np.array(moved, copy=True)
    for idx in np.ndindex(moved.shape[:-1]):
        line = moved[idx]
        out[idx] = line[sort_order(list(wide(line)), descending)]
    return np.moveaxis(out, -1, dimension)


def _argsort(x, *, dimension, descending, stable, index_dtype):
    return _along(x, dimension, lambda vals: sort_order(vals, descending), index_dtype.numpy)


def _letters(n: int, start: int = 0) -> str:
    return "".join(chr(ord("a") + start + i) for i in range(n))


def dot_subscripts(lhs_ndim: int, rhs_ndim: int, contracting_dims, batch_dims) -> str:
    """The einsum spec of a dot_general: output axes are batch, lhs free, rhs free."""
    (lc, rc), (lb, rb) = contracting_dims, batch_dims
    lsub = [""] * lhs_ndim
    rsub = [""] * rhs_ndim
    names = iter(_letters(26))
    batch = []
    for i, j in zip(lb, rb):
        lsub[i] = rsub[j] = c = next(names)
        batch.append(c)
    for i, j in zip(lc, rc):
        lsub[i] = rsub[j] = next(names)
    free = []
    for sub in (lsub, rsub):
        for i, s in enumerate(sub):
            if not s:
                sub[i] = c = next(names)
                free.append(c)
    return f"{''.join(lsub)},{''.join(rsub)}->{''.join(batch + free)}"


def _dot_general(lhs, rhs, *, contracting_dims, batch_dims):
    spec = dot_subscripts(lhs.ndim, rhs.ndim, contracting_dims, batch_dims)
    with np.errstate(**QUIET):
        out = np.einsum(spec, wide(lhs), wide(rhs))
    return narrow(out, lhs.dtype)


def conv_values(lhs: np.ndarray, rhs: np.ndarray, *, window_strides, padding, lhs_dilation,
                rhs_dilation, feature_group_count, layout="channels_first") -> np.ndarray:
    """Cross-correlation in widened precision (float64 / complex128), by explicit loops."""
    if layout == "channels_last":  # by the channels_first loops on the moved channel axis
        out = conv_values(np.moveaxis(lhs, -1, 1), rhs, window_strides=window_strides,
                          padding=padding, lhs_dilation=lhs_dilation, rhs_dilation=rhs_dilation,
                          feature_group_count=feature_group_count)
        return np.moveaxis(out, 1, -1)
    strides, ld, rd = window_strides, lhs_dilation, rhs_dilation
    x, w = wide(lhs), wide(rhs)
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    g = feature_group_count
    # input dilated by ld and padded by (lo, hi); negative padding crops
    dil = [(s - 1) * d + 1 if s else 0 for s, d in zip(x.shape[2:], ld)]
    full = [lo + hi + s for (lo, hi), s in zip(padding, dil)]
    xp = np.zeros((n, c, *full), dtype=x.dtype)
    for pos in itertools.product(*[range(s) for s in x.shape[2:]]):
        dst = [lo + p * d for (lo, _), p, d in zip(padding, pos, ld)]
        if all(0 <= q < f for q, f in zip(dst, full)):
            xp[(slice(None), slice(None), *dst)] = x[(slice(None), slice(None), *pos)]
    win = [(k - 1) * d + 1 for k, d in zip(w.shape[2:], rd)]
    out_sp = [(f - k) // s + 1 for f, k, s in zip(full, win, strides)]
    out = np.zeros((n, o, *out_sp), dtype=x.dtype)
    og = o // g
    xg = xp.reshape((n, g, cg, *full))
    wg = w.reshape((g, og, cg, *w.shape[2:]))
    for opos in itertools.product(*[range(s) for s in out_sp]):
        acc = np.zeros((n, g, og), dtype=x.dtype)
        for kpos in itertools.product(*[range(k) for k in w.shape[2:]]):
            src = tuple(p * s + k * d for p, s, k, d in zip(opos, strides, kpos, rd))
            acc = acc + np.einsum("ngc,goc->ngo", xg[(slice(None),) * 3 + src], wg[(...,) + kpos])
        out[(slice(None), slice(None), *opos)] = acc.reshape(n, o)
    return out


def _conv_general(lhs, rhs, **params):
    with np.errstate(**QUIET):
        return narrow(conv_values(lhs, rhs, **params), lhs.dtype)


REDUCTION_REFERENCE: dict[str, Callable[..., np.ndarray]] = {
    "reduce_sum": _reducer(_fsum), "reduce_prod": _reducer(_prod),
    "reduce_max": _reducer(_extreme(max)), "reduce_min": _reducer(_extreme(min)),
    "reduce_and": _reducer(all), "reduce_or": _reducer(any),
    "argmax": _arg(True), "argmin": _arg(False), "cumsum": _cumsum,
    "sort": _sort, "argsort": _argsort, "dot_general": _dot_general,
    "conv_general": _conv_general,
}
