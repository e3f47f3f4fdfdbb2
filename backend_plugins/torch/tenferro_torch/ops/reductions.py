"""Reductions, scans, sorting and the contractions.

torch reduces over every axis when given ``dim=()``, so the identity reduction is handled
here; ``prod`` takes one axis, so several are flattened into one; bool has no argmax and
integer matmul is CPU-only in torch (CUDA multiplies and sums instead). Sums, products and
scans accumulate in the operand's dtype (integers wrap). Convolutions refuse TF32 and
split complex operands into real products (torch's convolution op has no complex kernel).
"""

from __future__ import annotations

import functools
import math

import torch

from .common import TORCH_BY_NAME, by_kind, on_cpu, storage_address
from .structural import pad


def _reducer(fn, keep_dtype: bool, elementwise=None):
    """A reduction kernel; `elementwise` (maximum, minimum, logical and/or: exact in any
    order; add: the window's elements summed in order, float and integer types but half
    precision, which torch sums in float32) reduces a few elements per output by combining
    strided slices: torch's reductions over such windows (a pooling window's (N, C, Ho, 2,
    Wo, 2) view) run their inner loops two elements at a time, 0.66 ms for the digits CNN's
    64x32x8x8 max pool against ~0.1 ms by slices."""

    def kernel(x, *, axes):
        if not axes:
            return x
        if elementwise is not None and not _compiling() and _few_per_output(x, axes, elementwise):
            return _by_slices(elementwise, x, axes)
        return fn(x, dim=axes, dtype=x.dtype) if keep_dtype else fn(x, dim=axes)

    return kernel


_LOGICAL = (torch.logical_and, torch.logical_or)
_compiling = torch.compiler.is_compiling  # under the Inductor executor (pooling windows, convolutions)


def _few_per_output(x, axes: tuple, op) -> bool:
    count = math.prod(x.shape[a] for a in axes)
    if not (1 < count <= 16 and x.numel() >= 64 * count):
        return False
    if op in _LOGICAL:
        return x.dtype == torch.bool
    return x.dtype not in (torch.bool, torch.float16, torch.bfloat16)


def _by_slices(op, x, axes):
    for ax in sorted(axes, reverse=True):
        n = x.shape[ax]
        if n == 1:
            x = x.select(ax, 0)
            continue
        out = op(x.select(ax, 0), x.select(ax, 1))
        for i in range(2, n):
            op(out, x.select(ax, i), out=out)
        x = out
    return x


def _reduce_prod(x, *, axes):
    if not axes:
        return x
    if len(axes) == 1:
        return torch.prod(x, axes[0], dtype=x.dtype)
    rest = [i for i in range(x.ndim) if i not in axes]
    k = math.prod([x.shape[a] for a in axes])  # a list: dynamo traces it
    lines = x.permute(rest + list(axes)).reshape([x.shape[i] for i in rest] + [k])
    return torch.prod(lines, -1, dtype=x.dtype)


def _arg(fn):
    def kernel(x, *, axis, index_dtype):
        return fn(x, dim=axis).to(TORCH_BY_NAME[index_dtype.name])

    def on_bool(x, *, axis, index_dtype):
        return kernel(x.to(torch.uint8), axis=axis, index_dtype=index_dtype)

    return by_kind(iuf=kernel, b=on_bool)


def _cumsum(x, *, axis, reverse):
    if reverse:
        return torch.flip(torch.cumsum(torch.flip(x, (axis,)), axis, dtype=x.dtype), (axis,))
    return torch.cumsum(x, axis, dtype=x.dtype)


def _sort(x, *, dimension, descending, stable):
    return torch.sort(x, dim=dimension, descending=descending, stable=stable).values


def _argsort(x, *, dimension, descending, stable, index_dtype):
    idx = torch.argsort(x, dim=dimension, descending=descending, stable=stable)
    return idx.to(TORCH_BY_NAME[index_dtype.name])


def _native_matmul(x) -> bool:
    """torch.matmul takes floating and complex operands anywhere, integers only on CPU."""
    return x.is_floating_point() or x.is_complex() or x.device.type == "cpu"


def int_matmul(a, b):
    """Stacks of integer matrices multiplied elementwise and summed (wrapping), for devices
    whose torch has no integer matmul (CUDA)."""
    return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2, dtype=a.dtype)


def _dot_general(lhs, rhs, *, contracting_dims, batch_dims):
    (lc, rc), (lb, rb) = contracting_dims, batch_dims
    native = _native_matmul(lhs)
    plain = not lb and lc == (lhs.ndim - 1,) and rc == (0,) and lhs.ndim in (1, 2) and rhs.ndim in (1, 2)
    if native and plain:  # numpy.matmul's cases: one call, no reshapes
        return torch.matmul(lhs, rhs)
    lf = [i for i in range(lhs.ndim) if i not in lc and i not in lb]
    rf = [i for i in range(rhs.ndim) if i not in rc and i not in rb]
    bshape = [lhs.shape[i] for i in lb]
    m = [lhs.shape[i] for i in lf]
    n = [rhs.shape[i] for i in rf]
    k = math.prod([lhs.shape[i] for i in lc])
    if lb:
        a = lhs.permute(list(lb) + lf + list(lc)).reshape(math.prod(bshape), math.prod(m), k)
        b = rhs.permute(list(rb) + list(rc) + rf).reshape(math.prod(bshape), k, math.prod(n))
    else:  # one 2-D product (mm on transposed views: BLAS takes them as they are, no copies)
        a = lhs.permute(lf + list(lc)).reshape(math.prod(m), k)
        b = rhs.permute(list(rc) + rf).reshape(k, math.prod(n))
    out = torch.matmul(a, b) if native else int_matmul(a, b)
    return out.reshape(bshape + m + n)


def dot_kernel(in_avals: tuple, params: dict):
    """`_dot_general` for one signature with its index work done once: the permutations and
    reshapes that are no-ops for these shapes are dropped (x @ W.T is one matmul on a
    transposed view), the rest are precomputed. Same torch calls on the same views as
    `_dot_general`, so the same bits; integer operands on CUDA keep `_dot_general`."""
    (lc, rc), (lb, rb) = params["contracting_dims"], params["batch_dims"]
    lhs, rhs = in_avals[0], in_avals[1]
    if not (lhs.dtype.kind in "fc" or on_cpu(lhs)):  # `_native_matmul`, decided once
        return _dot_general
    ls, rs = lhs.shape, rhs.shape
    if not lb and lc == (len(ls) - 1,) and rc == (0,) and len(ls) in (1, 2) and len(rs) in (1, 2):
        return _matmul
    a_perm, a_shape, b_perm, b_shape, mn, out_shape = _dot_layout(
        tuple(ls), tuple(rs), (lc, rc), (lb, rb))
    a_id, b_id = a_perm == list(range(len(ls))), b_perm == list(range(len(rs)))
    a_same = tuple(ls[i] for i in a_perm) == a_shape
    b_same = tuple(rs[i] for i in b_perm) == b_shape
    out_same = mn == out_shape

    def kernel(x, y, **_):
        a = x if a_id else x.permute(a_perm)
        b = y if b_id else y.permute(b_perm)
        out = torch.matmul(a if a_same else a.reshape(a_shape), b if b_same else b.reshape(b_shape))
        return out if out_same else out.reshape(out_shape)

    return kernel


def _matmul(x, y, **_):
    return torch.matmul(x, y)


@functools.lru_cache(maxsize=1024)
def _dot_layout(ls: tuple, rs: tuple, contracting_dims: tuple, batch_dims: tuple) -> tuple:
    """(lhs permutation, its matrix shape, rhs permutation, its matrix shape, the product's
    shape, the result's shape) of a dot_general: `dot_kernel`'s index work and its out
    form's."""
    (lc, rc), (lb, rb) = contracting_dims, batch_dims
    lf = [i for i in range(len(ls)) if i not in lc and i not in lb]
    rf = [i for i in range(len(rs)) if i not in rc and i not in rb]
    lead = [math.prod(ls[i] for i in lb)] if lb else []
    m, n = math.prod(ls[i] for i in lf), math.prod(rs[i] for i in rf)
    k = math.prod(ls[i] for i in lc)
    out_shape = tuple([ls[i] for i in lb] + [ls[i] for i in lf] + [rs[i] for i in rf])
    return (list(lb) + lf + list(lc), tuple(lead + [m, k]), list(rb) + list(rc) + rf,
            tuple(lead + [k, n]), tuple(lead + [m, n]), out_shape)


def dot_out(x, y, out, *, contracting_dims, batch_dims):
    """`dot_general` written into `out` (Backend.out_kernel): the same matmul on the same
    views as `dot_kernel`, its result into a view of `out`, on as many threads as `sized`
    gives the kernel (so the same bits); a new tensor where `out` is an operand's buffer or
    not contiguous, an operand is a vector or the operands take `_dot_general`'s integer
    route."""
    from ..threads import run_sized, small_product

    (lc, rc), (lb, rb) = contracting_dims, batch_dims
    a_perm, a_shape, b_perm, b_shape, mn, _ = _dot_layout(
        tuple(x.shape), tuple(y.shape), contracting_dims, batch_dims)
    small = out.device.type == "cpu" and small_product(math.prod(a_shape) * b_shape[-1],
                                                       x.nbytes + y.nbytes)
    matrices = x.ndim > len(lc) + len(lb) and y.ndim > len(rc) + len(rb)  # else a vector product
    # the plan may give an operand's own buffer (its last use): a product cannot write there
    shared = out.numel() and storage_address(out) in (storage_address(x), storage_address(y))
    if shared or not (matrices and out.is_contiguous() and _native_matmul(x)):
        return run_sized(small, _dot_general, x, y, contracting_dims=contracting_dims,
                         batch_dims=batch_dims)
    a = x.permute(a_perm).reshape(a_shape)
    b = y.permute(b_perm).reshape(b_shape)
    run_sized(small, torch.matmul, a, b, out=out.view(mn))
    return out


def _conv_general(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
                  feature_group_count, layout="channels_first"):
    """channels_last: lhs (N, *spatial, C) is viewed as (N, C, *spatial) with channels-last
    strides (no copy), which torch convolves in that memory format (mkldnn's NHWC path on
    CPU, cuDNN's on CUDA); the result's (N, *spatial, O) view is contiguous again."""
    if layout == "channels_last":
        out = _conv_general(lhs.movedim(-1, 1), rhs, window_strides=window_strides,
                            padding=padding, lhs_dilation=lhs_dilation, rhs_dilation=rhs_dilation,
                            feature_group_count=feature_group_count)
        return out.movedim(1, -1)
    nsp = lhs.ndim - 2
    strides, ld, rd = window_strides, lhs_dilation, rhs_dilation
    symmetric = all(lo == hi >= 0 for lo, hi in padding)
    x = lhs
    if not symmetric or any(d != 1 for d in ld):  # dilate and pad (or crop) the input first
        zero = torch.zeros((), dtype=lhs.dtype, device=lhs.device)
        x = pad(lhs, zero, padding_config=((0, 0, 0), (0, 0, 0)) + tuple(
            (lo, hi, d - 1) for (lo, hi), d in zip(padding, ld)))
    pads = tuple(lo for lo, _ in padding) if x is lhs else (0,) * nsp
    win = [(k - 1) * d + 1 for k, d in zip(rhs.shape[2:], rd)]
    out_sp = tuple((s + 2 * p - w) // st + 1 for s, p, w, st in zip(x.shape[2:], pads, win, strides))
    n, c, o = lhs.shape[0], lhs.shape[1], rhs.shape[0]
    if 0 in (n, c, o) or 0 in out_sp or 0 in x.shape[2:]:  # torch refuses an empty spatial axis;
        # the windows then see padding only: zeros
        return torch.zeros((n, o) + out_sp, dtype=lhs.dtype, device=lhs.device)
    if nsp > 3:  # torch convolves 1 to 3 spatial axes
        return _conv_windows(x, rhs, pads, strides, rd, feature_group_count)

    if not x.is_complex():
        return _convolve(x, rhs, strides, pads, rd, feature_group_count)
    parts = [_convolve(a, b, strides, pads, rd, feature_group_count)
             for a, b in ((x.real, rhs.real), (x.imag, rhs.imag), (x.real, rhs.imag), (x.imag, rhs.real))]
    return torch.complex(parts[0] - parts[1], parts[2] + parts[3])


def _convolve(x, w, strides, pads, rd, groups):
    """torch's real convolution with TF32 refused. cuDNN convolves float32 in TF32 by
    default (10-bit mantissas), outside the float32 tolerance; this private op (stable,
    and torch is pinned) takes that choice as an argument, so no global flag is flipped.
    Under the Inductor executor on the CPU (no TF32 there) it is `aten.convolution`, which
    Inductor lowers itself and lays out channels-last where that pays: the digits CNN's step
    1.03-1.13x JAX `jit` -> 0.91-1.04x (docs/performance.md)."""
    if x.device.type == "cpu" and _compiling():
        return torch.ops.aten.convolution(x, w, None, strides, pads, rd, False, (0,) * len(pads), groups)
    cudnn = torch.backends.cudnn
    return torch._convolution(x, w, None, strides, pads, rd, False, (0,) * len(pads), groups,
                              cudnn.benchmark, cudnn.deterministic, cudnn.enabled, False)


def _conv_windows(x, w, pads, strides, rd, groups):
    """Any number of spatial axes: unfold the windows, then contract with einsum."""
    if any(pads):
        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        x = pad(x, zero, padding_config=((0, 0, 0), (0, 0, 0)) + tuple((p, p, 0) for p in pads))
    nsp = x.ndim - 2
    for i in range(nsp):
        span = (w.shape[2 + i] - 1) * rd[i] + 1
        x = x.unfold(2 + i, span, strides[i])[..., :: rd[i]]
    n, c, o = x.shape[0], x.shape[1], w.shape[0]
    out_sp = tuple(x.shape[2:2 + nsp])
    x = x.reshape((n, groups, c // groups) + tuple(x.shape[2:]))
    w = w.reshape((groups, o // groups) + tuple(w.shape[1:]))
    sp = "".join(chr(ord("p") + i) for i in range(nsp))
    kw = "".join(chr(ord("h") + i) for i in range(nsp))
    out = torch.einsum(f"ngc{sp}{kw},goc{kw}->ngo{sp}", x, w)
    return out.reshape((n, o) + out_sp)


KERNELS = {
    "reduce_sum": _reducer(torch.sum, True, torch.add), "reduce_prod": _reduce_prod,
    "reduce_max": _reducer(torch.amax, False, torch.maximum),
    "reduce_min": _reducer(torch.amin, False, torch.minimum),
    "reduce_and": _reducer(torch.all, False, torch.logical_and),
    "reduce_or": _reducer(torch.any, False, torch.logical_or),
    "argmax": _arg(torch.argmax), "argmin": _arg(torch.argmin), "cumsum": _cumsum,
    "sort": _sort, "argsort": _argsort, "dot_general": _dot_general,
    "conv_general": _conv_general,
}
