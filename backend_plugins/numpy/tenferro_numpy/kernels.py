"""NumPy kernels for every core primitive (semantics: docs/primitives.md).

Ufuncs are called with ``out=...`` so that 0-d operands give 0-d arrays, never
NumPy scalars (which are not buffers: no DLPack, no item assignment).
"""

from __future__ import annotations

import math
import warnings
from functools import partial
from typing import Any

import numpy as np

_QUIET = {"divide": "ignore", "invalid": "ignore", "over": "ignore", "under": "ignore"}

# IEEE special cases (inf - inf, log(0), exp overflow) give the Array API's nan/inf
# silently. Ufuncs called straight from the eager interpreter or this module warn with
# those modules' names, so this filter silences them without np.errstate (about
# 1 us a call) and leaves warnings from users' own NumPy code alone. Kernels that
# go through NumPy's Python-level functions (np.sum, np.einsum) use np.errstate.
warnings.filterwarnings("ignore", category=RuntimeWarning,
                        module=r"tenferro_(runtime\.(eager|plan|kernels|fast_paths)|numpy\.kernels)$")


try:  # np.errstate's own mechanism with its state made once: about 1 us less per call
    from numpy._core._ufunc_config import _extobj_contextvar as _ERRSTATE
    from numpy._core._ufunc_config import _make_extobj

    _QUIET_STATE = _make_extobj(**_QUIET)

    def quiet_on():
        """Turn NumPy's IEEE warnings off as ``np.errstate(**_QUIET).__enter__`` does; the
        token goes to `quiet_off`."""
        return _ERRSTATE.set(_QUIET_STATE)

    quiet_off = _ERRSTATE.reset
except (ImportError, TypeError):  # another NumPy: np.errstate itself
    def quiet_on():
        state = np.errstate(**_QUIET)
        state.__enter__()
        return state

    def quiet_off(state):
        state.__exit__(None, None, None)


def quiet(fn):
    """`fn` (a NumPy call that may warn of IEEE special values) run as under
    ``np.errstate(**_QUIET)``, which a user's "error" warnings filter cannot override."""
    def quieted(*args, _on=quiet_on, _off=quiet_off):
        token = _on()
        try:
            return fn(*args)
        finally:
            _off(token)

    return quieted


_matmul = quiet(np.matmul)
_matmul_array = quiet(partial(np.matmul, out=...))  # 1-D @ 1-D: a 0-d array, not a scalar
_multiply = quiet(np.multiply)


def _uf(fn):
    """A ufunc that always returns an ndarray (the fast path: no Python wrapper)."""
    return partial(fn, out=...)


_quiet = _uf  # quiet through the warnings filter above


def _sign(x):
    """np.sign; a complex x is scaled by a power of two first, exactly, so |x| neither
    overflows nor underflows: np.sign(1e308+1e308j) is 1j (|x| is inf) where the answer is
    (1+1j)/sqrt(2); elsewhere the scaling changes no bit."""
    if x.dtype.kind != "c":
        return np.sign(x, out=...)
    with np.errstate(**_QUIET):
        e = np.frexp(np.maximum(np.abs(x.real), np.abs(x.imag)))[1]  # 0 for 0, inf and NaN
        y = np.empty_like(x)
        y.real, y.imag = np.ldexp(x.real, -e), np.ldexp(x.imag, -e)
        return np.sign(y, out=...)


def _round_like(fn):
    def kernel(x):
        return x if x.dtype.kind in "iu" else fn(x, out=...)

    return kernel


def _log1p(x):
    """NumPy's complex log1p is log(1 + z), which loses the real part for |z| << 1; there
    ``log1p(z) = log1p(x(2 + x) + y^2) / 2 + i atan2(y, 1 + x)`` keeps every digit."""
    out = np.log1p(x, out=...)
    if x.dtype.kind != "c":
        return out
    re, im = x.real, x.imag
    near = np.abs(x) < 0.5
    real = 0.5 * np.log1p(re * (2 + re) + im * im)
    return np.where(near, (real + 1j * np.arctan2(im, 1 + re)).astype(x.dtype), out)


def _rsqrt(x):
    return np.reciprocal(np.sqrt(x), out=...)


def _logistic(x):
    with np.errstate(**_QUIET):
        if x.dtype.kind == "c":
            return np.reciprocal(1 + np.exp(-x), out=...)
        expit = _EXPIT or _load_expit()
        if x.dtype == np.float16:  # expit has no float16 loop; it would return float32
            return expit(x.astype(np.float32), out=...).astype(np.float16)
        return expit(x, out=...)


_EXPIT = None


def _load_expit():
    """scipy.special.expit, imported on the first logistic (scipy is not imported before)."""
    global _EXPIT
    from scipy.special import expit

    _EXPIT = expit
    return expit


def _imag(x):
    return np.imag(x) if x.dtype.kind == "c" else np.zeros_like(x)


def _real(x):
    return np.real(x)


def _div(x, y):
    with np.errstate(**_QUIET):
        if x.dtype.kind in "iu":
            r = np.fmod(x, y)
            return np.where(y == 0, 0, np.floor_divide(x - r, np.where(y == 0, 1, y))).astype(x.dtype)
        return np.true_divide(x, y, out=...)


def _rem(x, y):
    with np.errstate(**_QUIET):
        return np.fmod(x, y, out=...)


def _pow(x, y):
    if y.dtype.kind in "fc" and (y.ndim == 0 or not any(y.strides)) and y.size and y.flat[0] == 0.5:
        return _pow_half(x, y)
    with np.errstate(**_QUIET):
        if x.dtype.kind == "i":
            neg = y < 0
            if neg.any():
                out = np.power(x, np.where(neg, 0, y))
                odd = (y % 2) != 0
                at_neg = np.where(x == 1, 1, np.where(x == -1, np.where(odd, -1, 1), 0))
                return np.where(neg, at_neg, out).astype(x.dtype)
        return np.power(x, y, out=...)


def _pow_half(x, y):
    """x ** 0.5 as C's pow computes it: NumPy's power takes a square root for a scalar (0-d or
    broadcast) exponent of 0.5, which gives NaN for -inf and -0.0 for -0.0 where pow gives +inf
    and +0.0, and so did tenferro's pow of a 0-d tensor, against its 1-element equal."""
    shape = np.broadcast_shapes(x.shape, y.shape)
    xs = np.broadcast_to(x, shape).reshape(-1) if shape else x.reshape(1)
    with np.errstate(**_QUIET):
        out = np.power(xs, np.full(xs.shape, y.flat[0], y.dtype))
    return out.reshape(shape)


def _shift(fn, left):
    def kernel(x, y):
        bits = x.dtype.itemsize * 8
        ok = (y >= 0) & (y < bits)
        out = fn(x, np.where(ok, y, 0))
        fill = 0 if left or x.dtype.kind == "u" else np.where(x < 0, -1, 0)
        return np.where(ok, out, fill).astype(x.dtype)

    return kernel


# unsigned integers of each itemsize a branchless select moves elements' bits as
_BITS = {2: np.uint16, 4: np.uint32, 8: np.uint64}
_SIGNED = {2: np.int16, 4: np.int32, 8: np.int64}
# from this many elements the bitwise select beats np.where on an unpredictable mask (whose
# per-element branch mispredicts: 300 us on a 128x512 ReLU mask, 40 us bitwise)
SELECT_BITWISE_MIN = 4096


def _select(pred, on_true, on_false):
    """np.where(pred, on_true, on_false) with the same bits; large operands without branches:
    ``f ^ ((t ^ f) & mask)`` on the elements' bits, mask all ones where pred holds, made in
    the result's own buffer; ``t & mask`` where `on_false` is all zero bits (ReLU's gradient:
    three passes over memory instead of five), ``f & mask`` where `on_true` is."""
    dt = on_true.dtype
    n = max(pred.size, on_true.size, on_false.size)
    if (n < SELECT_BITWISE_MIN or dt != on_false.dtype or dt.itemsize not in _BITS or dt.kind not in "fiuc"
            or pred.dtype != np.bool_):
        return np.where(pred, on_true, on_false)
    u, signed = _BITS[dt.itemsize], _SIGNED[dt.itemsize]
    out = np.empty(np.broadcast_shapes(pred.shape, on_true.shape, on_false.shape), dt)
    bits = out.view(u)
    mask = out.view(signed)
    np.copyto(mask, pred)
    t, f = on_true.view(u), on_false.view(u)
    if _zero_bits(f):  # mask all ones where pred holds; the result is t's bits there
        np.negative(mask, out=mask)
        np.bitwise_and(bits, t, out=bits)
    elif _zero_bits(t):  # mask all ones where it does not
        np.subtract(mask, 1, out=mask)
        np.bitwise_and(bits, f, out=bits)
    else:
        np.negative(mask, out=mask)
        np.bitwise_and(bits, np.bitwise_xor(t, f), out=bits)
        np.bitwise_xor(bits, f, out=bits)
    return out


def _zero_bits(x):
    """Whether `x` holds one value, all of whose bits are zero (a broadcast 0, not -0.0)."""
    return bool(not any(x.strides) and x.size and not x[(0,) * x.ndim])


def _clamp(lo, x, hi):
    return np.minimum(np.maximum(x, lo), hi, out=...)


def _broadcast_in_dim(x, *, shape, broadcast_dimensions):
    expanded = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        expanded[d] = x.shape[i]
    return np.broadcast_to(x.reshape(expanded), shape)


def _convert(x, *, new_dtype):
    npd = new_dtype.numpy
    if x.dtype.kind == "c" and npd.kind not in "cb":  # complex -> bool is "nonzero", as for reals
        x = np.real(x)
    with np.errstate(**_QUIET):
        return x.astype(npd)


def _slice(x, *, start_indices, limit_indices, strides):
    return x[(*map(slice, start_indices, limit_indices, strides), ...)]


def _clamped_starts(shape, starts, sizes):
    return [min(max(int(s), 0), n - k) for s, n, k in zip(starts, shape, sizes)]


def _dynamic_slice(x, *starts, slice_sizes):
    st = _clamped_starts(x.shape, starts, slice_sizes)
    return x[(*(slice(s, s + k) for s, k in zip(st, slice_sizes)), ...)]


def _dynamic_update_slice(x, update, *starts):
    out = x.copy()
    st = _clamped_starts(x.shape, starts, update.shape)
    out[tuple(slice(s, s + k) for s, k in zip(st, update.shape))] = update
    return out


def _pad(x, value, *, padding_config):
    core = tuple(n + max(n - 1, 0) * i for n, (_, _, i) in zip(x.shape, padding_config))
    lo = [max(lo, 0) for lo, _, _ in padding_config]
    hi = [max(hi, 0) for _, hi, _ in padding_config]
    out = np.full(tuple(a + c + b for a, c, b in zip(lo, core, hi)), value, dtype=x.dtype)
    out[tuple(slice(a, a + c, i + 1) for a, c, (_, _, i) in zip(lo, core, padding_config))] = x
    crop = tuple(slice(max(-l, 0), n - max(-h, 0)) for (l, h, _), n in zip(padding_config, out.shape))
    return out[(*crop, ...)]


def _concatenate(*xs, dimension):
    return np.concatenate(xs, axis=dimension)


def _index_tuple(x, indices, axes):
    """Clipped per-axis index arrays for x transposed to (axes..., rest...)."""
    rest = [i for i in range(x.ndim) if i not in axes]
    xt = np.transpose(x, list(axes) + rest)
    idx = tuple(np.clip(indices[..., k], 0, max(x.shape[a] - 1, 0)) for k, a in enumerate(axes))
    return xt, idx


def _gather(x, indices, *, axes):
    if not axes:
        return np.broadcast_to(x, indices.shape[:-1] + x.shape)
    rest = tuple(n for i, n in enumerate(x.shape) if i not in axes)
    if indices.size == 0 or 0 in rest:  # nothing to take (an axis may even be empty)
        return np.zeros(indices.shape[:-1] + rest, dtype=x.dtype)
    xt, idx = _index_tuple(x, indices, axes)
    return xt[(*idx, ...)]


def _scatter_kernel(add):
    """scatter / scatter_add: out-of-range index rows are dropped; duplicates add (or one wins)."""

    def kernel(x, indices, updates, *, axes):
        out = x.copy()
        nrows = math.prod(indices.shape[:-1])
        if nrows == 0 or out.size == 0:
            return out
        rest = updates.shape[indices.ndim - 1:]
        upd = updates.reshape((nrows,) + rest)
        if not axes:  # every (empty) index row addresses the whole operand
            if add:  # added one row after another, as np.add.at adds duplicates below (a sum
                np.add.at(out[None], np.zeros(nrows, np.intp), upd)  # first rounds otherwise)
                return out
            return upd[-1, ...].copy()
        bounds = np.array([x.shape[a] for a in axes])
        flat = indices.reshape(nrows, len(axes)).astype(np.int64)  # uint64 >= 2**63 wraps: dropped
        keep = np.all((flat >= 0) & (flat < bounds), axis=1)
        upd, flat = upd[keep], flat[keep]
        out_t = np.transpose(out, list(axes) + [i for i in range(x.ndim) if i not in axes])
        idx = tuple(flat[:, k] for k in range(len(axes)))
        if add:
            np.add.at(out_t, idx, upd)
        else:
            out_t[idx] = upd
        return out

    return kernel


def _iota(*, dtype, shape, dimension, device):
    line = np.arange(shape[dimension], dtype=dtype.numpy)
    view = [1] * len(shape)
    view[dimension] = shape[dimension]
    return np.ascontiguousarray(np.broadcast_to(line.reshape(view), shape))


def _full(*, shape, fill_value, dtype, device):
    npd = dtype.numpy
    value = np.asarray(fill_value)
    if value.dtype.kind == "c" and npd.kind != "c":
        value = value.real
    with np.errstate(**_QUIET):
        return np.full(shape, value.astype(npd, casting="unsafe"), dtype=npd)


_REDUCE_UFUNC = {np.sum: np.add, np.prod: np.multiply, np.max: np.maximum, np.min: np.minimum}


def _reducer(fn, keep_dtype, elementwise=None):
    """A reduction kernel; `elementwise` (max, min, and, or: exact in any order; add: the
    window's elements summed in order, as accurate as NumPy's pairwise sum for at most 16
    terms, not always its bits) reduces a few elements per output by combining slices, which
    NumPy's reduce is 10-20x slower at (each output pays its inner-loop set-up: pooling
    windows and their gradients' tie counts, for instance)."""

    if fn in _REDUCE_UFUNC:  # np.sum and co. as their ufunc's reduce: no Python wrapper
        fn = _REDUCE_UFUNC[fn].reduce

    def kernel(x, *, axes):
        with np.errstate(**_QUIET):  # a user's "error" warnings filter would beat the module filter
            if (elementwise is not None and _few_per_output(x.shape, axes)
                    and not (elementwise is np.add and x.dtype == np.float16)):  # NumPy sums it in float32
                return _by_slices(elementwise, x, axes)
            if keep_dtype:
                return np.asarray(fn(x, axis=axes, dtype=x.dtype))
            return np.asarray(fn(x, axis=axes))

    return kernel


def _few_per_output(shape: tuple, axes: tuple) -> bool:
    count = math.prod(shape[a] for a in axes)
    return axes and 1 < count <= 16 and math.prod(shape) >= 64 * count


def _by_slices(op, x, axes):
    for ax in sorted(axes, reverse=True):
        lead = (slice(None),) * ax
        if x.shape[ax] == 1:
            x = x[lead + (0,)]
            continue
        out = op(x[lead + (0,)], x[lead + (1,)])
        for i in range(2, x.shape[ax]):
            op(out, x[lead + (i,)], out=out)
        x = out
    return x


def _arg(fn):
    def kernel(x, *, axis, index_dtype):
        return np.asarray(fn(x, axis=axis)).astype(index_dtype.numpy)

    return kernel


def _cumsum(x, *, axis, reverse):
    with np.errstate(**_QUIET):
        if reverse:
            return np.flip(np.cumsum(np.flip(x, axis), axis=axis, dtype=x.dtype), axis)
        return np.cumsum(x, axis=axis, dtype=x.dtype)


def _sort(x, *, dimension, descending, stable):
    out = np.sort(x, axis=dimension, kind="stable")
    return np.flip(out, dimension) if descending else out


def _argsort(x, *, dimension, descending, stable, index_dtype):
    if descending:
        n = x.shape[dimension]
        idx = n - 1 - np.flip(np.argsort(np.flip(x, dimension), axis=dimension, kind="stable"), dimension)
    else:
        idx = np.argsort(x, axis=dimension, kind="stable")
    return idx.astype(index_dtype.numpy)


def _as_matrix(x, rows, cols, r, c):
    """`x` with axes `rows` then `cols` as an (r, c) matrix: a view where one exists, either
    directly or as the transpose of the (c, r) view (a weight gradient contracting a batch and
    a sequence axis: BLAS reads it transposed), else a copy."""
    t = np.transpose(x, rows + cols)
    try:
        return t.reshape((r, c), copy=False)
    except ValueError:
        pass
    try:
        return np.transpose(x, cols + rows).reshape((c, r), copy=False).T
    except ValueError:
        return t.reshape(r, c)


WIDE_NT = 2048
"""Output elements from which `_matmul2d` computes a wide x @ W.T as (W @ x.T).T."""


def _wide(m: int, n: int, a_dtype: Any, b_dtype: Any) -> bool:
    """Whether an (m, k) @ (k, n) product is one `_matmul2d` computes as (W @ x.T).T when its
    right operand is a transposed row-major matrix."""
    return 2 <= m <= 32 and n >= 4 * m and m * n >= WIDE_NT and a_dtype.char in "fd" and b_dtype == a_dtype


def _matmul2d(a, b):
    """a @ b of matrices. OpenBLAS multiplies a row-major (m, k) by the transpose of a
    row-major (n, k), x @ W.T, up to 2.4x slower than it computes W @ x.T when few rows make
    a wide result (2 <= m <= 32, n >= 4m, m * n >= `WIDE_NT`): 16 x 576 @ 576 x 960 float32
    235 us against 126 with the copy back to row-major (the same bits in every shape
    measured; docs/performance.md). From 64 rows on the copy costs more than it saves."""
    return (_wide_matmul if _wide(a.shape[0], b.shape[1], a.dtype, b.dtype) else _matmul)(a, b)


def _transposed_right(a, b) -> bool:
    """Whether `a` is row-major and `b` a transposed row-major matrix (x @ W.T): the layout
    a wide signature computes as (W @ x.T).T."""
    return a.flags.c_contiguous and b.flags.f_contiguous and not b.flags.c_contiguous


def _wide_matmul(a, b):
    """a @ b of a wide signature: (W @ x.T).T where `b` is a transposed row-major matrix."""
    if _transposed_right(a, b):
        return np.ascontiguousarray(_matmul(b.T, a.T).T)
    return _matmul(a, b)


def _matmul2d_for(m: int, n: int, a_dtype: Any, b_dtype: Any):
    """`_matmul2d` for one signature: its shape and dtype tests made once (about 0.7 us a
    call), the layout test per call only where the signature is wide."""
    return _wide_matmul if _wide(m, n, a_dtype, b_dtype) else _matmul


def _dot_general(lhs, rhs, *, contracting_dims, batch_dims):
    (lc, rc), (lb, rb) = contracting_dims, batch_dims
    if not lb and lc == (lhs.ndim - 1,) and rc == (0,) and lhs.ndim <= 2 and rhs.ndim <= 2:
        if lhs.ndim == 2 and rhs.ndim == 2:
            return _matmul2d(lhs, rhs)
        if lhs.ndim and rhs.ndim:
            return _matmul_array(lhs, rhs)
    lf = [i for i in range(lhs.ndim) if i not in lc and i not in lb]
    rf = [i for i in range(rhs.ndim) if i not in rc and i not in rb]
    bshape = [lhs.shape[i] for i in lb]
    m = [lhs.shape[i] for i in lf]
    n = [rhs.shape[i] for i in rf]
    k = math.prod(lhs.shape[i] for i in lc)
    if not lb:  # one 2-D product: BLAS takes transposed operands as they are (no copy)
        a = _as_matrix(lhs, lf, list(lc), math.prod(m), k)
        b = _as_matrix(rhs, list(rc), rf, k, math.prod(n))
        if len(m) == 1 and len(n) == 1:
            return _matmul2d(a, b)
        return _matmul(a, b).reshape(m + n)
    a = np.transpose(lhs, list(lb) + lf + list(lc)).reshape(math.prod(bshape), math.prod(m), k)
    b = np.transpose(rhs, list(rb) + list(rc) + rf).reshape(math.prod(bshape), k, math.prod(n))
    if k == 1:  # batched outer products (per-example gradients): matmul loops per batch.
        # (einsum's product loop is 2x faster, but it adds each product to +0.0: -0.0 is lost)
        return _multiply(a, b).reshape(bshape + m + n)
    return _matmul(a, b).reshape(bshape + m + n)


def loop_operand(position: int, x: Any, length: int) -> Any:
    """The right operand `x` of a product that a loop of `length` iterations reads unchanged,
    in the form to read it in (prepared once, before the loop): a row-major float matrix whose
    rows are a multiple of 128 bytes is copied into rows 16 bytes longer. OpenBLAS then reads
    its rows without cache-set conflicts: a 16 x 128 @ 128 x 128 float32 product took 4.2 or
    5.9 us depending on where the weight lay in memory, and 4.4 us padded wherever it lies
    (docs/performance.md). BLAS takes the row stride as it is, so the bits are the same.
    Anything else, and loops too short to repay the copy, get `x` itself."""
    if position != 1 or getattr(x, "ndim", 0) != 2 or not x.size or not x.flags.c_contiguous \
            or x.dtype.char not in "fdFD" or (x.shape[1] * x.itemsize) % 128 or length * 8192 < x.nbytes:
        return x
    padded = np.empty((x.shape[0], x.shape[1] + max(16 // x.itemsize, 1)), x.dtype)[:, :x.shape[1]]
    padded[...] = x
    return padded


def matmul2d_kernel(m: int, n: int, a_dtype: Any, b_dtype: Any, small: Any = None):
    """A plain (m, k) @ (k, n) dot_general of one signature as one Python frame (the quieted
    np.matmul, the wide layout test where `_wide` holds, the BLAS thread switch where
    `small` is the thread state of a small product): the same calls `_matmul2d` makes, so
    the same bits, about 1 us less a call than the layered wrappers (a scan body's products
    pay it every step)."""
    wide = _wide(m, n, a_dtype, b_dtype)
    mm, contiguous, on, off = np.matmul, np.ascontiguousarray, quiet_on, quiet_off

    def matmul2d(lhs, rhs, contracting_dims=None, batch_dims=None):
        if small is not None and small.current != 1:
            small.use(1)
        token = on()
        try:
            if wide and _transposed_right(lhs, rhs):
                return contiguous(mm(rhs.T, lhs.T).T)
            return mm(lhs, rhs)
        finally:
            off(token)

    def matmul2d_quieted(lhs, rhs):  # the same calls, IEEE warnings already off
        if small is not None and small.current != 1:
            small.use(1)
        if wide and _transposed_right(lhs, rhs):
            return contiguous(mm(rhs.T, lhs.T).T)
        return mm(lhs, rhs)

    matmul2d.without_params = matmul2d  # type: ignore[attr-defined]  # a plan calls it on buffers
    # inside a loop that turns the warnings off once (plan_codegen.generate_scan)
    matmul2d.in_quiet = mm if small is None and not wide else matmul2d_quieted  # type: ignore[attr-defined]
    matmul2d.quiet_scope = (quiet_on, quiet_off)  # type: ignore[attr-defined]
    matmul2d.loop_operand = loop_operand  # type: ignore[attr-defined]
    return matmul2d


def plain_matmul2d(in_avals: tuple, params: dict) -> bool:
    """True for a dot_general that is one plain (m, k) @ (k, n) product (`matmul2d_kernel`)."""
    (lc, rc), (lb, _) = params["contracting_dims"], params["batch_dims"]
    return len(in_avals[0].shape) == 2 and len(in_avals[1].shape) == 2 and lc == (1,) and rc == (0,) \
        and not lb


def dot_kernel(in_avals: tuple, params: dict):
    """`_dot_general` for one signature, its index work done once: where an operand's
    permuted axes already have its matrix's shape (x @ W.T: a transposed view) the view is
    taken directly, else `_as_matrix` runs per call as before; the same views, so the same
    bits. Unbatched products only: batched ones, 0-d operands and the plain 1-D/2-D cases
    (one np.matmul already) keep the generic kernel."""
    (lc, rc), (lb, _) = params["contracting_dims"], params["batch_dims"]
    ls, rs = in_avals[0].shape, in_avals[1].shape
    dt = [a.dtype.numpy for a in in_avals]
    if plain_matmul2d(in_avals, params):
        return matmul2d_kernel(ls[0], rs[1], *dt)
    if lb or not ls or not rs or (lc == (len(ls) - 1,) and rc == (0,) and len(ls) <= 2 and len(rs) <= 2):
        return _dot_general
    lf = [i for i in range(len(ls)) if i not in lc]
    rf = [i for i in range(len(rs)) if i not in rc]
    m, n = [ls[i] for i in lf], [rs[i] for i in rf]
    k = math.prod(ls[i] for i in lc)
    mm, nn = math.prod(m), math.prod(n)
    a_perm, b_perm = lf + list(lc), list(rc) + rf
    a_view = tuple(ls[i] for i in a_perm) == (mm, k)
    b_view = tuple(rs[i] for i in b_perm) == (k, nn)
    a_id, b_id = a_perm == list(range(len(ls))), b_perm == list(range(len(rs)))
    out_shape = tuple(m + n)
    out_same = out_shape == (mm, nn)
    matmul2d = _matmul2d_for(mm, nn, *dt)

    def kernel(lhs, rhs, **_):
        if a_view:
            a = lhs if a_id else lhs.transpose(a_perm)
        else:
            a = _as_matrix(lhs, lf, list(lc), mm, k)
        if b_view:
            b = rhs if b_id else rhs.transpose(b_perm)
        else:
            b = _as_matrix(rhs, list(rc), rf, k, nn)
        if out_same:
            return matmul2d(a, b)
        return _matmul(a, b).reshape(out_shape)

    return kernel


def _conv_general(lhs, rhs, **params):
    """The generic convolution (conv.py; the numpy backend specializes it per signature)."""
    from .conv import conv_general

    return conv_general(lhs, rhs, **params)


KERNELS = {
    "neg": _uf(np.negative), "abs": _uf(np.abs), "sign": _sign, "conj": _uf(np.conj),
    "real": _real, "imag": _imag, "exp": _quiet(np.exp), "expm1": _quiet(np.expm1),
    "log": _quiet(np.log), "log1p": _log1p, "sin": _quiet(np.sin), "cos": _quiet(np.cos),
    "tan": _quiet(np.tan), "asin": _quiet(np.arcsin), "acos": _quiet(np.arccos),
    "atan": _quiet(np.arctan), "sinh": _quiet(np.sinh), "cosh": _quiet(np.cosh),
    "tanh": _quiet(np.tanh), "asinh": _quiet(np.arcsinh), "acosh": _quiet(np.arccosh),
    "atanh": _quiet(np.arctanh), "sqrt": _quiet(np.sqrt), "rsqrt": _rsqrt,
    "logistic": _logistic, "floor": _round_like(np.floor), "ceil": _round_like(np.ceil),
    "round": _round_like(np.rint), "trunc": _round_like(np.trunc), "isnan": _uf(np.isnan),
    "isinf": _uf(np.isinf), "isfinite": _uf(np.isfinite), "logical_not": _uf(np.logical_not),
    "bitwise_not": _uf(np.invert),
    "add": _uf(np.add), "sub": _uf(np.subtract), "mul": _uf(np.multiply), "div": _div,
    "rem": _rem, "pow": _pow, "maximum": _uf(np.maximum), "minimum": _uf(np.minimum),
    "atan2": _quiet(np.arctan2),
    "eq": _uf(np.equal), "ne": _uf(np.not_equal), "lt": _uf(np.less), "le": _uf(np.less_equal),
    "gt": _uf(np.greater), "ge": _uf(np.greater_equal), "logical_and": _uf(np.logical_and),
    "logical_or": _uf(np.logical_or), "logical_xor": _uf(np.logical_xor),
    "bitwise_and": _uf(np.bitwise_and), "bitwise_or": _uf(np.bitwise_or),
    "bitwise_xor": _uf(np.bitwise_xor),
    "shift_left": _shift(np.left_shift, True), "shift_right": _shift(np.right_shift, False),
    "select": _select, "clamp": _clamp,
    "reshape": lambda x, *, new_sizes: np.reshape(x, new_sizes),
    "transpose": lambda x, *, permutation: np.transpose(x, permutation),
    "broadcast_in_dim": _broadcast_in_dim, "convert": _convert,
    "bitcast_convert": lambda x, *, new_dtype: x.view(new_dtype.numpy),
    "slice": _slice, "dynamic_slice": _dynamic_slice,
    "dynamic_update_slice": _dynamic_update_slice, "pad": _pad, "concatenate": _concatenate,
    "reverse": lambda x, *, dimensions: np.flip(x, dimensions) if dimensions else x,
    "gather": _gather, "scatter": _scatter_kernel(False), "scatter_add": _scatter_kernel(True),
    "iota": _iota, "full": _full, "copy": lambda x: np.array(x, copy=True, order="C"),  # row-major
    "reduce_sum": _reducer(np.sum, True, np.add), "reduce_prod": _reducer(np.prod, True),
    "reduce_max": _reducer(np.max, False, np.maximum), "reduce_min": _reducer(np.min, False, np.minimum),
    "reduce_and": _reducer(np.all, False, np.logical_and),
    "reduce_or": _reducer(np.any, False, np.logical_or),
    "argmax": _arg(np.argmax), "argmin": _arg(np.argmin), "cumsum": _cumsum,
    "sort": _sort, "argsort": _argsort, "dot_general": _dot_general,
    "conv_general": _conv_general,
}
