"""Reference implementations of the structural primitives, by explicit index arithmetic.

Each walks output (or input) positions and computes the source position from
the primitive's definition, rather than calling the NumPy function of the
same name, so that a backend built on those functions is actually checked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .numerics import QUIET, kind, narrow, wide


def _empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return np.zeros(shape, dtype=dtype)


def _grid(x: np.ndarray, per_axis: list[np.ndarray]) -> np.ndarray:
    """x at the outer product of per-axis integer positions (a copy)."""
    if not per_axis:
        return np.array(x, copy=True)
    return np.array(x[np.ix_(*[np.asarray(p, dtype=np.intp) for p in per_axis])], copy=True)


def _reshape(x, *, new_sizes):
    flat = [x[idx] for idx in np.ndindex(x.shape)]  # C (row-major) order
    return np.array(flat, dtype=x.dtype).reshape(new_sizes)


def _transpose(x, *, permutation):
    out_shape = tuple(x.shape[p] for p in permutation)
    out = _empty(out_shape, x.dtype)
    for idx in np.ndindex(out_shape):
        src = [0] * x.ndim
        for i, p in enumerate(permutation):
            src[p] = idx[i]
        out[idx] = x[tuple(src)]
    return out


def _broadcast_in_dim(x, *, shape, broadcast_dimensions):
    out = _empty(tuple(shape), x.dtype)
    for idx in np.ndindex(tuple(shape)):
        src = tuple(0 if x.shape[i] == 1 else idx[d] for i, d in enumerate(broadcast_dimensions))
        out[idx] = x[src]
    return out


def convert_values(x: np.ndarray, npd: np.dtype) -> np.ndarray:
    """convert: wrap ints, truncate floats to ints, real part of complex, nonzero -> True;
    any dtype to any, bfloat16 included (both ways)."""
    npd = np.dtype(npd)
    k = kind(x.dtype)
    w = wide(x)
    if kind(npd) == "b":
        return np.asarray(w != 0, dtype=bool)
    if k == "c" and kind(npd) != "c":
        w = w.real
        k = "f"
    if kind(npd) in "iu" and k == "f":
        with np.errstate(**QUIET):
            w = np.trunc(w).astype(object)
    return narrow(w, npd)  # ints wrap; Python ints reach floats through float64


def _convert(x, *, new_dtype):
    return convert_values(x, new_dtype.numpy)


def _bitcast(x, *, new_dtype):
    return np.frombuffer(x.tobytes(order="C"), dtype=new_dtype.numpy).reshape(x.shape).copy()


def _slice(x, *, start_indices, limit_indices, strides):
    return _grid(x, [np.arange(s, e, st) for s, e, st in zip(start_indices, limit_indices, strides)])


def clamped_starts(shape, starts, sizes) -> list[int]:
    """Start indices clamped so the window [s, s + k) fits in [0, n) (as in JAX)."""
    return [min(max(int(np.asarray(s).item()), 0), n - k) for s, n, k in zip(starts, shape, sizes)]


def _dynamic_slice(x, *starts, slice_sizes):
    st = clamped_starts(x.shape, starts, slice_sizes)
    return _grid(x, [np.arange(s, s + k) for s, k in zip(st, slice_sizes)])


def _dynamic_update_slice(x, update, *starts):
    out = np.array(x, copy=True)
    st = clamped_starts(x.shape, starts, update.shape)
    for idx in np.ndindex(update.shape):
        out[tuple(s + i for s, i in zip(st, idx))] = update[idx]
    return out


def _pad(x, padding_value, *, padding_config):
    shape = tuple(lo + hi + n + max(n - 1, 0) * it for (lo, hi, it), n in zip(padding_config, x.shape))
    out = np.full(shape, padding_value, dtype=x.dtype)
    src, dst = [], []
    for (lo, _, it), n, size in zip(padding_config, x.shape, shape):
        pos = lo + np.arange(n) * (it + 1)  # where input element i lands
        keep = (pos >= 0) & (pos < size)
        src.append(np.arange(n)[keep])
        dst.append(pos[keep])
    if x.ndim == 0:
        return np.array(x, copy=True)
    out[np.ix_(*dst)] = x[np.ix_(*src)]
    return out


def _concatenate(*xs, dimension):
    shape = list(xs[0].shape)
    shape[dimension] = sum(x.shape[dimension] for x in xs)
    out = _empty(tuple(shape), xs[0].dtype)
    offset = 0
    for x in xs:
        for idx in np.ndindex(x.shape):
            dst = list(idx)
            dst[dimension] += offset
            out[tuple(dst)] = x[idx]
        offset += x.shape[dimension]
    return out


def _reverse(x, *, dimensions):
    return _grid(x, [n - 1 - np.arange(n) if ax in dimensions else np.arange(n)
                     for ax, n in enumerate(x.shape)])


def _rest_shape(x: np.ndarray, axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(n for i, n in enumerate(x.shape) if i not in axes)


def _selector(x: np.ndarray, axes: tuple[int, ...], row: list[int]) -> tuple[Any, ...]:
    sel: list[Any] = [slice(None)] * x.ndim
    for a, i in zip(axes, row):
        sel[a] = i
    return tuple(sel)


def _gather(x, indices, *, axes):
    batch = indices.shape[:-1]
    out = _empty(batch + _rest_shape(x, axes), x.dtype)
    if out.size == 0:
        return out
    for b in np.ndindex(batch):
        row = [min(max(int(v), 0), x.shape[a] - 1) for v, a in zip(indices[b].tolist(), axes)]
        out[b] = x[_selector(x, axes, row)]
    return out


def scatter_rows(x: np.ndarray, indices: np.ndarray, axes: tuple[int, ...]):
    """(batch position, in-range index row) pairs; out-of-range rows are dropped."""
    for b in np.ndindex(indices.shape[:-1]):
        row = [int(v) for v in indices[b].tolist()]
        if all(0 <= i < x.shape[a] for i, a in zip(row, axes)):
            yield b, row


def scatter_candidates(x, indices, updates, axes) -> dict[tuple[int, ...], list[Any]]:
    """For each written position of the result, every update value that may land there."""
    cands: dict[tuple[int, ...], list[Any]] = {}
    rest = _rest_shape(x, axes)
    for b, row in scatter_rows(x, indices, axes):
        for r in np.ndindex(rest):
            pos, it = [], iter(r)
            lookup = dict(zip(axes, row))
            for ax in range(x.ndim):
                pos.append(lookup[ax] if ax in lookup else next(it))
            cands.setdefault(tuple(pos), []).append(updates[b + r])
    return cands


def _scatter(x, indices, updates, *, axes):
    out = np.array(x, copy=True)
    for pos, values in scatter_candidates(x, indices, updates, axes).items():
        out[pos] = values[-1]
    return out


def _scatter_add(x, indices, updates, *, axes):
    acc = wide(x).copy()
    wu = wide(updates)
    for b, row in scatter_rows(x, indices, axes):
        sel = _selector(x, axes, row)
        if x.dtype.kind == "b":
            acc[sel] = acc[sel] | wu[b]
        else:
            acc[sel] = acc[sel] + wu[b]
    return narrow(acc, x.dtype)


def _iota(*, dtype, shape, dimension, device):
    vals = np.zeros(tuple(shape), dtype=object)
    for idx in np.ndindex(tuple(shape)):
        vals[idx] = idx[dimension]
    return narrow(vals, dtype.numpy) if dtype.kind in "iu" else vals.astype(np.float64).astype(dtype.numpy)


def _full(*, shape, fill_value, dtype, device):
    one = convert_values(np.asarray(fill_value), dtype.numpy)
    return np.array(np.broadcast_to(one, tuple(shape)), copy=True)


def _copy(x):
    return np.array(x, copy=True)


STRUCTURAL_REFERENCE: dict[str, Callable[..., np.ndarray]] = {
    "reshape": _reshape, "transpose": _transpose, "broadcast_in_dim": _broadcast_in_dim,
    "convert": _convert, "bitcast_convert": _bitcast, "slice": _slice,
    "dynamic_slice": _dynamic_slice, "dynamic_update_slice": _dynamic_update_slice,
    "pad": _pad, "concatenate": _concatenate, "reverse": _reverse, "gather": _gather,
    "scatter": _scatter, "scatter_add": _scatter_add, "iota": _iota, "full": _full,
    "copy": _copy,
}
