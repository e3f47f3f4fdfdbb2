"""The NumPy convolution, worked out once per call signature (`conv_kernel`: shapes, path,
permutations and window strides; about 35 us of Python per call otherwise, five
convolutions in each digits CNN step). `conv_general` is the same kernel looked up by shape,
after dilating and cropping its input where asked.

Both layouts run on the same channels-last padded copy (the zero padding copies anyway), so
their results are bitwise equal; channels innermost in the windows' rows make that copy a
run of contiguous reads in channels_last. Paths, by shape:

- **windows by the kernel** (the general case): one matmul per group, the windows (N * out
  spatial, window * C/G) by the kernel (window * C/G, O/G);
- **one input channel**: the windows copied per window offset (their runs are 1 element);
- **more filters than windows** (a weight's gradient as a convolution): the columns in the
  kernel's own (C, *k) order, so the kernel is a view and only the few windows are copied;
- **fewer outputs than input channels, stride 1, the output about the input's size** (an
  input's gradient as a convolution):
  each input position times the kernel at every window offset, (N * spatial, C) by
  (C, window * O), then the offsets' products added into the output, shifted: no copy of
  the windows, which would be `window` times the input.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any

import numpy as np

from . import kernels as K


def conv_general(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
                 feature_group_count, layout="channels_first"):
    """The convolution of `lhs` by `rhs` (conv_general's params)."""
    last = layout == "channels_last"
    if _direct(lhs_dilation, padding):
        return _kernel(lhs.shape, rhs.shape, np.dtype(lhs.dtype), tuple(window_strides),
                       tuple(tuple(p) for p in padding), tuple(rhs_dilation), feature_group_count,
                       last)(lhs, rhs)
    # dilated and cropped (and padded) first, then an undilated convolution of that
    x = lhs if last else np.moveaxis(lhs, 1, -1)
    none = ((0, 0, 0),)
    x = K._pad(x, np.zeros((), lhs.dtype), padding_config=none + tuple(
        (lo, hi, d - 1) for (lo, hi), d in zip(padding, lhs_dilation)) + none)
    out = _kernel(x.shape, rhs.shape, np.dtype(lhs.dtype), tuple(window_strides), ((0, 0),) * (lhs.ndim - 2),
                  tuple(rhs_dilation), feature_group_count, True)(x, rhs)
    return out if last else np.ascontiguousarray(np.moveaxis(out, -1, 1))


def _direct(lhs_dilation: Any, padding: Any) -> bool:
    """Whether `_kernel` takes the input as it is: no input dilation, no cropping."""
    return all(d == 1 for d in lhs_dilation) and all(lo >= 0 and hi >= 0 for lo, hi in padding)


def conv_kernel(in_avals: tuple, params: dict) -> Any:
    """The convolution kernel of one signature (lhs and rhs avals, canonical params)."""
    if not _direct(params["lhs_dilation"], params["padding"]):
        return conv_general
    ls, rs = in_avals[0].shape, in_avals[1].shape
    kernel = _kernel(ls, rs, np.dtype(in_avals[0].dtype.numpy), tuple(params["window_strides"]),
                     tuple(tuple(p) for p in params["padding"]), tuple(params["rhs_dilation"]),
                     params["feature_group_count"], params.get("layout", "channels_first") == "channels_last")
    conv = lambda lhs, rhs, **_: kernel(lhs, rhs)  # noqa: E731
    conv.without_params = kernel  # type: ignore[attr-defined]  # what a compiled plan calls
    return conv


@functools.lru_cache(maxsize=256)
def _kernel(ls: tuple, rs: tuple, dt: np.dtype, strides: tuple, padding: tuple, rdil: tuple, g: int,
            last: bool) -> Any:
    """`conv(lhs, rhs)` for these shapes, dtype and params (no input dilation, padding >= 0)."""
    nsp = len(ls) - 2
    to_last = None if last else (0, *range(2, 2 + nsp), 1)
    x_shape = ls if last else (ls[0], *ls[2:], ls[1])
    n, c, o, k = x_shape[0], x_shape[-1], rs[0], tuple(rs[2:])
    pshape = (n, *(s + lo + hi for s, (lo, hi) in zip(x_shape[1:-1], padding)), c)
    inner = (slice(None), *(slice(lo, lo + s) for s, (lo, _) in zip(x_shape[1:-1], padding)))
    win = tuple((s - 1) * d + 1 for s, d in zip(k, rdil))
    out_sp = tuple((s - w) // st + 1 for s, w, st in zip(pshape[1:-1], win, strides))
    out_shape = (n, *out_sp, o)
    back = None if last else (0, nsp + 1, *range(1, nsp + 1))

    def finish(out):
        out = out if back is None else out.transpose(back)
        return np.ascontiguousarray(out).astype(dt, copy=False)

    if 0 in (n, o, c) or 0 in out_sp:
        return lambda lhs, rhs: finish(np.zeros(out_shape, dt))
    rows_n = n * math.prod(out_sp)
    quiet_on, quiet_off, matmul = K.quiet_on, K.quiet_off, np.matmul

    def product(a, b):
        token = quiet_on()
        try:
            return matmul(a, b)
        finally:
            quiet_off(token)

    if g == 1 and o < c and all(st == 1 for st in strides) \
            and 4 * math.prod(x_shape[1:-1]) <= 5 * math.prod(out_sp):  # no more products than windows
        return _shifted(x_shape, to_last, o, k, rdil, padding, out_sp, dt, product, finish)

    def padded_copy(lhs):
        p = np.zeros(pshape, dt)
        p[inner] = lhs if to_last is None else lhs.transpose(to_last)
        return p

    if c == 1:  # one channel: a copy per window offset
        offsets = [((Ellipsis, *off), (slice(None), *(slice(j * d, j * d + (m - 1) * st + 1, st) for
                                                     j, d, m, st in zip(off, rdil, out_sp, strides)), 0))
                   for off in itertools.product(*(range(s) for s in k))]
        rows_shape = (n, *out_sp, *k)

        def windows(lhs):
            p = padded_copy(lhs)
            rows = np.empty(rows_shape, dt)
            for dst, src in offsets:
                rows[dst] = p[src]
            return rows.reshape(1, rows_n, -1)
    else:  # the strided windows (N, *out, C, *k) of the padded copy, a view
        item = dt.itemsize
        ps = [item * math.prod(pshape[i + 1:]) for i in range(len(pshape))]
        view_shape = (n, *out_sp, c, *k)
        view_strides = (ps[0], *(ps[1 + i] * strides[i] for i in range(nsp)), ps[-1],
                        *(ps[1 + i] * rdil[i] for i in range(nsp)))
        if g == 1 and o > rows_n:  # more filters than windows: the kernel is a view
            return lambda lhs, rhs: finish(product(
                np.ndarray(view_shape, dt, padded_copy(lhs), 0, view_strides).reshape(rows_n, -1),
                rhs.reshape(o, -1).T).reshape(out_shape))
        view_g = (n, *out_sp, g, c // g, *k)
        perm = (1 + nsp, 0, *range(1, 1 + nsp), *range(3 + nsp, 3 + 2 * nsp), 2 + nsp)

        def windows(lhs):
            view = np.ndarray(view_shape, dt, padded_copy(lhs), 0, view_strides)
            return view.reshape(view_g).transpose(perm).reshape(g, rows_n, -1)  # (G, rows, k * C/G)

    w_shape, w_perm = (g, o // g, c // g, *k), (0, *range(3, 3 + nsp), 2, 1)
    out_g = (g, n, *out_sp, o // g)
    groups_in = (*range(1, nsp + 2), 0, nsp + 2)  # np.moveaxis(out, 0, -2)

    def conv(lhs, rhs):
        # row-major whatever the weight's layout: NumPy's matmul takes another (non-BLAS) loop
        # for a strided batch of matrices, which rounds differently
        w = np.ascontiguousarray(rhs.reshape(w_shape).transpose(w_perm).reshape(g, -1, o // g))
        out = product(windows(lhs), w).reshape(out_g)  # (G, rows, O/G)
        return finish(out.transpose(groups_in).reshape(out_shape))

    return conv


def _shifted(x_shape: tuple, to_last: Any, o: int, k: tuple, rdil: tuple, padding: tuple,
             out_sp: tuple, dt: np.dtype, product: Any, finish: Any) -> Any:
    """The stride-1, one-group convolution as products of every input position with the
    kernel at every window offset, (N * spatial, C) @ (C, window * O), added into the output
    shifted by each offset (in offset order) where the window reaches the input."""
    n, sp, c = x_shape[0], x_shape[1:-1], x_shape[-1]
    nsp = len(sp)
    taps = []  # per window offset: (output region, input region) it connects
    for t, off in enumerate(itertools.product(*(range(s) for s in k))):
        dst, src = [slice(None)], [slice(None)]
        for j, d, (lo, _), m, s in zip(off, rdil, padding, out_sp, sp):
            shift = j * d - lo  # output position p reads input position p + shift
            first, stop = max(0, -shift), min(m, s - shift)
            if stop <= first:
                break
            dst.append(slice(first, stop))
            src.append(slice(first + shift, stop + shift))
        else:
            taps.append((tuple(dst), (*src, t)))
    w_perm = (1, *range(2, 2 + nsp), 0)  # (O, C, *k) -> (C, *k, O)
    rows = (n * math.prod(sp), c)
    per_tap = (n, *sp, math.prod(k), o)

    def conv(lhs, rhs):
        x = lhs if to_last is None else lhs.transpose(to_last)
        w = np.ascontiguousarray(rhs.transpose(w_perm).reshape(c, -1))  # (C, window * O): offsets, outputs
        y = product(np.ascontiguousarray(x).reshape(rows), w).reshape(per_tap)
        out = np.zeros((n, *out_sp, o), dt)
        for dst, src in taps:
            out[dst] += y[src]
        return finish(out)

    return conv


__all__ = ["conv_general", "conv_kernel"]
