"""JVP and transpose rules for the structural primitives (layout, slicing, indexing).

Signatures and the complex convention are those of `tenferro_ad.ad_util`. Rules use
only `tenferro_runtime.lax` on their operands, so they trace; they branch on shapes,
dtypes and params only. The exported `JVP` and `TRANSPOSE` also hold the tables of
`reductions` and `contraction` (the plugin reads this module only).

Linear primitives have no JVP entry: `tenferro_ad.jvp.linear_jvp` derives theirs from the
catalog's `linear` flags. Decisions at degenerate points:

- Index operands (gather/scatter indices, dynamic_slice starts) never carry tangents.
- `gather` clamps its indices, `scatter`/`scatter_add` drop out-of-range rows: the
  transpose of gather clamps before scatter-adding, and the update cotangent of a scatter
  is zero on dropped rows.
- `scatter` (replace) is differentiated as if its in-range index rows were unique: the
  tangent is `scatter(t_operand, indices, t_updates)`. With duplicate rows the tangent,
  like the primal, holds an unspecified duplicate's value, and the transpose gives every
  duplicate the cotangent of the written place. `scatter` is not flagged linear in the
  catalog, but its JVP emits scatter on tangents, so it has a transpose rule too.
- `pad`: the padding-value cotangent is the sum of the cotangent over the padded places,
  taken with an explicit 0/1 mask (exact; no `sum(ct) - sum(operand part)` cancellation).
"""

from __future__ import annotations

from typing import Any

from tenferro_runtime import lax

from ..ad_util import Zero, instantiate, is_undefined, is_zero, zeros
from . import contraction, reductions


def _aval(x: Any):
    return x.aval


def _scalar(value: Any, aval) -> Any:
    """A 0-d constant of aval's dtype on aval's device."""
    return lax.full(shape=(), fill_value=value, dtype=aval.dtype, device=aval.device)


# --- layout -----------------------------------------------------------------------------


def _reshape_t(ct, x, *, new_sizes):
    """Reshape back to the operand's shape."""
    av = _aval(x)
    return (Zero(av) if is_zero(ct) else lax.reshape(ct, new_sizes=av.shape),)


def _transpose_t(ct, x, *, permutation):
    """Transpose by the inverse permutation."""
    if is_zero(ct):
        return (Zero(_aval(x)),)
    inv = [0] * len(permutation)
    for i, p in enumerate(permutation):
        inv[p] = i
    return (lax.transpose(ct, permutation=tuple(inv)),)


def _broadcast_in_dim_t(ct, x, *, shape, broadcast_dimensions):
    """Sum over the new and the stretched axes, then reshape to the operand's shape."""
    av = _aval(x)
    if is_zero(ct):
        return (Zero(av),)
    bd = broadcast_dimensions
    summed = [d for d in range(len(shape)) if d not in bd]
    summed += [d for i, d in enumerate(bd) if av.shape[i] == 1 and shape[d] != 1]
    y = lax.reduce_sum(ct, axes=tuple(sorted(summed))) if summed else ct
    if _aval(y).shape != av.shape:
        y = lax.reshape(y, new_sizes=av.shape)
    return (y,)


def _convert_jvp(primals, tangents, *, new_dtype):
    """The tangent converts too; converting to an integer or bool dtype gives a Zero."""
    out = lax.convert(primals[0], new_dtype=new_dtype)
    t = tangents[0]
    if is_zero(t) or not new_dtype.is_inexact:
        return out, Zero(_aval(out))
    return out, lax.convert(t, new_dtype=new_dtype)


def _convert_t(ct, x, *, new_dtype):
    """Convert back (complex -> real takes the real part, real -> complex adds 0j, as JAX)."""
    av = _aval(x)
    if is_zero(ct) or not av.dtype.is_inexact:
        return (Zero(av),)
    return (lax.convert(ct, new_dtype=av.dtype),)


def _copy_t(ct, x):
    return (Zero(_aval(x)) if is_zero(ct) else ct,)


def _reverse_t(ct, x, *, dimensions):
    return (Zero(_aval(x)) if is_zero(ct) else lax.reverse(ct, dimensions=dimensions),)


# --- slicing ----------------------------------------------------------------------------


def _slice_t(ct, x, *, start_indices, limit_indices, strides):
    """Zero-pad back: `start` before, interior `stride - 1`, the rest after."""
    av = _aval(x)
    if is_zero(ct):
        return (Zero(av),)
    config = []
    for s, st, n, m in zip(start_indices, strides, av.shape, _aval(ct).shape):
        used = m + max(m - 1, 0) * (st - 1)
        config.append((s, n - s - used, st - 1))
    return (lax.pad(ct, _scalar(0, av), padding_config=tuple(config)),)


def _dynamic_slice_t(ct, x, *starts, slice_sizes):
    """Write the cotangent into zeros at the (clamped) starts."""
    av = _aval(x)
    none = (None,) * len(starts)
    if is_zero(ct):
        return (Zero(av),) + none
    return (lax.dynamic_update_slice(zeros(av), ct, *starts),) + none


def _dynamic_update_slice_t(ct, x, update, *starts):
    """Operand: ct with the window zeroed; update: the window of ct."""
    none = (None,) * len(starts)
    uav = _aval(update)
    cx = cu = None
    if is_zero(ct):
        cx = Zero(_aval(x)) if is_undefined(x) else None
        cu = Zero(uav) if is_undefined(update) else None
        return (cx, cu) + none
    if is_undefined(x):
        cx = lax.dynamic_update_slice(ct, zeros(uav), *starts)
    if is_undefined(update):
        cu = lax.dynamic_slice(ct, *starts, slice_sizes=uav.shape)
    return (cx, cu) + none


def _pad_t(ct, x, padding_value, *, padding_config):
    """Operand: crop/unpad then stride out the interior; padding value: sum over padded places."""
    av = _aval(x)
    pav = _aval(padding_value)
    cx = cp = None
    if is_zero(ct):
        return (Zero(av) if is_undefined(x) else None, Zero(pav) if is_undefined(padding_value) else None)
    if is_undefined(x):
        unpad = tuple((-lo, -hi, 0) for lo, hi, _ in padding_config)
        y = lax.pad(ct, _scalar(0, av), padding_config=unpad)
        strides = tuple(interior + 1 for _, _, interior in padding_config)
        if any(s != 1 for s in strides):
            y = lax.slice(y, start_indices=(0,) * av.ndim, limit_indices=_aval(y).shape,
                          strides=strides)
        cx = y
    if is_undefined(padding_value):
        mask = lax.pad(zeros(av), _scalar(1, av), padding_config=padding_config)
        ctav = _aval(ct)
        cp = lax.mul(ct, mask)
        if ctav.ndim:
            cp = lax.reduce_sum(cp, axes=tuple(range(ctav.ndim)))
    return (cx, cp)


def _concatenate_t(ct, *xs, dimension):
    """Slice each operand's part back out of the cotangent."""
    out = []
    off = 0
    ctav = None if is_zero(ct) else _aval(ct)
    for x in xs:
        av = _aval(x)
        n = av.shape[dimension]
        if not is_undefined(x):
            out.append(None)
        elif ctav is None:
            out.append(Zero(av))
        else:
            start = [0] * av.ndim
            limit = list(ctav.shape)
            start[dimension], limit[dimension] = off, off + n
            out.append(lax.slice(ct, start_indices=tuple(start), limit_indices=tuple(limit)))
        off += n
    return tuple(out)


# --- gather / scatter -------------------------------------------------------------------


def _bounds_like(indices, values):
    """A tensor shaped like `indices` holding values[j] in column j (last axis)."""
    iav = _aval(indices)
    cols = [lax.full(shape=(1,), fill_value=v, dtype=iav.dtype, device=iav.device) for v in values]
    vec = cols[0] if len(cols) == 1 else lax.concatenate(*cols, dimension=0)
    return lax.broadcast_in_dim(vec, shape=iav.shape, broadcast_dimensions=(iav.ndim - 1,))


def _clamped(indices, sizes):
    """Indices clamped into [0, n - 1] per column, as gather clamps them."""
    if not sizes:
        return indices
    lo = _bounds_like(indices, [0] * len(sizes))
    hi = _bounds_like(indices, [n - 1 for n in sizes])
    return lax.minimum(lax.maximum(indices, lo), hi)


def _rows_in_range(indices, sizes):
    """Bool per index row: all of its indices lie in [0, n) (the rows scatter keeps)."""
    iav = _aval(indices)
    ok = lax.logical_and(lax.ge(indices, _bounds_like(indices, [0] * len(sizes))),
                         lax.lt(indices, _bounds_like(indices, list(sizes))))
    return lax.reduce_and(ok, axes=(iav.ndim - 1,))


def _gather_kept(ct, indices, uav, sizes, axes):
    """The cotangent of scatter updates: ct at the index rows, zero on dropped rows."""
    g = lax.gather(ct, indices, axes=axes)
    if not sizes:
        return g
    nb = _aval(indices).ndim - 1
    keep = lax.broadcast_in_dim(_rows_in_range(indices, sizes), shape=uav.shape,
                                broadcast_dimensions=tuple(range(nb)))
    return lax.select(keep, g, zeros(uav))


def _gather_t(ct, x, indices, *, axes):
    """Scatter-add the cotangent into zeros at the clamped indices."""
    av = _aval(x)
    if is_zero(ct):
        return (Zero(av), None)
    idx = _clamped(indices, [av.shape[a] for a in axes])
    return (lax.scatter_add(zeros(av), idx, ct, axes=axes), None)


def _scatter_jvp(primals, tangents, *, axes):
    """scatter(t_operand, indices, t_updates); exact when the in-range index rows are unique."""
    x, indices, updates = primals
    out = lax.scatter(x, indices, updates, axes=axes)
    tx, tu = tangents[0], tangents[2]
    if is_zero(tx) and is_zero(tu):
        return out, Zero(_aval(out))
    return out, lax.scatter(instantiate(tx), indices, instantiate(tu), axes=axes)


def _scatter_t(ct, x, indices, updates, *, axes):
    """Operand: ct with the written places zeroed; updates: ct at the kept rows (unique rows)."""
    uav = _aval(updates)
    sizes = [_aval(x).shape[a] for a in axes]
    cx = cu = None
    if is_undefined(x):
        cx = Zero(_aval(x)) if is_zero(ct) else lax.scatter(ct, indices, zeros(uav), axes=axes)
    if is_undefined(updates):
        cu = Zero(uav) if is_zero(ct) else _gather_kept(ct, indices, uav, sizes, axes)
    return (cx, None, cu)


def _scatter_add_jvp(primals, tangents, *, axes):
    """Linear in (operand, updates); a Zero update tangent leaves the operand tangent as is."""
    x, indices, updates = primals
    out = lax.scatter_add(x, indices, updates, axes=axes)
    tx, tu = tangents[0], tangents[2]
    if is_zero(tu):
        return out, (Zero(_aval(out)) if is_zero(tx) else tx)
    return out, lax.scatter_add(instantiate(tx), indices, tu, axes=axes)


def _scatter_add_t(ct, x, indices, updates, *, axes):
    """Operand: ct; updates: ct at the kept rows."""
    uav = _aval(updates)
    sizes = [_aval(x).shape[a] for a in axes]
    cx = cu = None
    if is_undefined(x):
        cx = Zero(_aval(x)) if is_zero(ct) else ct
    if is_undefined(updates):
        cu = Zero(uav) if is_zero(ct) else _gather_kept(ct, indices, uav, sizes, axes)
    return (cx, None, cu)


# The linear primitives without an entry here (reshape, transpose, broadcast_in_dim, slice,
# dynamic_slice, dynamic_update_slice, pad, concatenate, reverse, gather, copy) take the
# generic `tenferro_ad.jvp.linear_jvp`. convert is not linear into integer dtypes; scatter_add
# keeps a Zero update tangent symbolic.
_JVP = {
    "convert": _convert_jvp,
    "scatter": _scatter_jvp,
    "scatter_add": _scatter_add_jvp,
}

_TRANSPOSE = {
    "reshape": _reshape_t,
    "transpose": _transpose_t,
    "broadcast_in_dim": _broadcast_in_dim_t,
    "convert": _convert_t,
    "slice": _slice_t,
    "dynamic_slice": _dynamic_slice_t,
    "dynamic_update_slice": _dynamic_update_slice_t,
    "pad": _pad_t,
    "concatenate": _concatenate_t,
    "reverse": _reverse_t,
    "gather": _gather_t,
    "scatter": _scatter_t,
    "scatter_add": _scatter_add_t,
    "copy": _copy_t,
}

JVP: dict = {**_JVP, **reductions.JVP, **contraction.JVP}
TRANSPOSE: dict = {**_TRANSPOSE, **reductions.TRANSPOSE, **contraction.TRANSPOSE}
