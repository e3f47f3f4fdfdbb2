"""JVP and transpose rules for dot_general and conv_general (JAX's rules, in tenferro's layout).

Merged into `structural.JVP` / `structural.TRANSPOSE`. Both primitives are bilinear: the
JVP is the sum of the two one-sided terms, and a transpose has exactly one undefined
operand, the other being a concrete value.

conv_general in layout channels_first: lhs (N, C, *spatial), rhs (O, C/G, *window), out
(N, O, *spatial'). Both transposes are convolutions again:

- lhs: ct convolved with the spatially flipped kernel whose in/out channels are swapped
  (per group), strides and lhs_dilation exchanged, padding from JAX's
  `_conv_general_vjp_lhs_padding`.
- rhs: JAX uses `batch_group_count`, which tenferro's conv lacks. With G groups the
  same result comes from `feature_group_count=G` by folding the group axis of the
  lhs channels into its (transposed) feature axis: lhs (N, C, *s) -> (C/G, G*N, *s),
  ct (N, O, *s') -> (O, N, *s') as the kernel, output (C/G, O, *window) -> (O, C/G, ...).

layout channels_last (lhs (N, *spatial, C), out (N, *spatial', O)) transposes lhs and ct to
channels_first, applies those rules and transposes the lhs cotangent back (the JVP needs
nothing: it is the primitive again, with the same params). A zero-size operand or cotangent
gives a Zero cotangent (no degenerate convolutions).
"""

from __future__ import annotations

from typing import Any

from tenferro_runtime import lax

from ..ad_util import Zero, add_tangents, is_undefined, is_zero


def _aval(x: Any):
    return x.aval


def _bilinear_jvp(prim):
    def jvp(primals, tangents, **params):
        """d(a . b) = da . b + a . db, skipping Zero terms."""
        a, b = primals
        ta, tb = tangents
        out = prim(a, b, **params)
        t = Zero(_aval(out))
        if not is_zero(ta):
            t = add_tangents(t, prim(ta, b, **params))
        if not is_zero(tb):
            t = add_tangents(t, prim(a, tb, **params))
        return out, t

    return jvp


# --- dot_general ------------------------------------------------------------------------


def _ranges_like(*xs):
    start = 0
    for x in xs:
        yield tuple(range(start, start + len(x)))
        start += len(x)


def _argsort(seq) -> tuple[int, ...]:
    return tuple(sorted(range(len(seq)), key=lambda i: seq[i]))


def _dot_transpose_lhs(g, x_aval, y, contracting_dims, batch_dims, swap_ans=False):
    """JAX's `_dot_general_transpose_lhs`: contract g with y, then reorder to x's axes."""
    (x_contract, y_contract), (x_batch, y_batch) = contracting_dims, batch_dims
    x_kept = [i for i in range(x_aval.ndim) if i not in x_contract and i not in x_batch]
    y_nd = _aval(y).ndim
    y_kept = [i for i in range(y_nd) if i not in y_contract and i not in y_batch]
    if swap_ans:
        ans_batch, ans_y, _ = _ranges_like(x_batch, y_kept, x_kept)
    else:
        ans_batch, _, ans_y = _ranges_like(x_batch, x_kept, y_kept)
    dims = ((ans_y, tuple(y_kept)), (ans_batch, tuple(y_batch)))
    x_contract_by_y = [x_contract[i] for i in _argsort(y_contract)]
    out_axes = _argsort(list(x_batch) + x_kept + x_contract_by_y)
    identity = tuple(range(len(out_axes)))
    # (batch, g free, y free) -> x's axes; where the operands in the other order give x's axes
    # directly, contract (y, g) instead: no transpose, and a C-ordered cotangent
    nb, ng = len(ans_batch), len(x_kept)  # r's axes: batch, g's free (x_kept), y's free
    ny = len(out_axes) - nb - ng
    swapped = tuple(a if a < nb else a - nb + nb + ny if a < nb + ng else a - nb - ng + nb
                    for a in out_axes)
    if out_axes != identity and swapped == identity:
        return lax.dot_general(y, g, contracting_dims=dims[0][::-1], batch_dims=dims[1][::-1])
    r = lax.dot_general(g, y, contracting_dims=dims[0], batch_dims=dims[1])
    if out_axes != identity:
        r = lax.transpose(r, permutation=out_axes)
    return r


def _dot_general_t(ct, lhs, rhs, *, contracting_dims, batch_dims=((), ())):
    """Cotangent of the undefined operand (batch, lhs free, rhs free output order)."""
    (lc, rc), (lb, rb) = contracting_dims, batch_dims
    cl = cr = None
    if is_undefined(lhs):
        cl = Zero(_aval(lhs)) if is_zero(ct) else _dot_transpose_lhs(
            ct, _aval(lhs), rhs, contracting_dims, batch_dims)
    if is_undefined(rhs):
        cr = Zero(_aval(rhs)) if is_zero(ct) else _dot_transpose_lhs(
            ct, _aval(rhs), lhs, (rc, lc), (rb, lb), swap_ans=True)
    return (cl, cr)


# --- conv_general -----------------------------------------------------------------------


def _dilate(n: int, d: int) -> int:
    return 0 if n == 0 else 1 + d * (n - 1)


def _conv_lhs_t(g, lhs_shape, rhs, strides, padding, ld, rd, groups):
    """Conv of ct with the flipped, channel-swapped kernel (JAX's transpose_lhs)."""
    rav = _aval(rhs)
    nsp = len(lhs_shape) - 2
    gsh = _aval(g).shape
    pads = []
    for i in range(nsp):
        lhs_d = _dilate(lhs_shape[2 + i], ld[i])
        rhs_d = _dilate(rav.shape[2 + i], rd[i])
        out_d = _dilate(gsh[2 + i], strides[i])
        before = rhs_d - padding[i][0] - 1
        pads.append((before, lhs_d + rhs_d - 1 - out_d - before))
    o, cg = rav.shape[:2]
    win = rav.shape[2:]
    sp = tuple(range(2, 2 + nsp))
    w = rhs
    if groups > 1:  # (O, C/G, *w) -> (O/G, C, *w) with the group major in C
        w = lax.reshape(w, new_sizes=(groups, o // groups, cg) + win)
        w = lax.transpose(w, permutation=(1, 0, 2) + tuple(range(3, 3 + nsp)))
        w = lax.reshape(w, new_sizes=(o // groups, groups * cg) + win)
    w = lax.transpose(w, permutation=(1, 0) + sp)
    w = lax.reverse(w, dimensions=sp)
    return lax.conv_general(g, w, window_strides=tuple(ld), padding=tuple(pads),
                            lhs_dilation=tuple(strides), rhs_dilation=tuple(rd),
                            feature_group_count=groups)


def _conv_rhs_t(g, lhs, rhs_aval, strides, padding, ld, rd, groups):
    """Conv of the lhs (channels as batch) with ct as the kernel (JAX's transpose_rhs)."""
    lav = _aval(lhs)
    nsp = lav.ndim - 2
    gsh = _aval(g).shape
    pads = []
    for i in range(nsp):
        lhs_d = _dilate(lav.shape[2 + i], ld[i])
        rhs_d = _dilate(rhs_aval.shape[2 + i], rd[i])
        out_d = _dilate(gsh[2 + i], strides[i])
        lo = padding[i][0]
        pads.append((lo, (out_d - lhs_d) + (rhs_d - lo - 1)))
    n, c = lav.shape[:2]
    sp_in = lav.shape[2:]
    sp = tuple(range(2, 2 + nsp))
    x = lhs
    if groups > 1:  # (N, C, *s) -> (C/G, G*N, *s)
        x = lax.reshape(x, new_sizes=(n, groups, c // groups) + sp_in)
        x = lax.transpose(x, permutation=(2, 1, 0) + tuple(range(3, 3 + nsp)))
        x = lax.reshape(x, new_sizes=(c // groups, groups * n) + sp_in)
    else:
        x = lax.transpose(x, permutation=(1, 0) + sp)
    k = lax.transpose(g, permutation=(1, 0) + sp)
    r = lax.conv_general(x, k, window_strides=tuple(rd), padding=tuple(pads),
                         lhs_dilation=tuple(ld), rhs_dilation=tuple(strides),
                         feature_group_count=groups)
    return lax.transpose(r, permutation=(1, 0) + sp)


def _channels(x, first: bool):
    """x with its channel axis moved to 1 (first) or from 1 to the end (not first)."""
    nd = _aval(x).ndim
    perm = (0, nd - 1, *range(1, nd - 1)) if first else (0, *range(2, nd), 1)
    return lax.transpose(x, permutation=perm)


def _conv_general_t(ct, lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
                    feature_group_count, layout="channels_first"):
    """Cotangent of the undefined operand, itself a convolution. channels_last: the
    channels_first rules between transposes of lhs, ct and the lhs cotangent."""
    lav, rav = _aval(lhs), _aval(rhs)
    params = (window_strides, padding, lhs_dilation, rhs_dilation)
    degenerate = is_zero(ct) or 0 in (lav.size, rav.size, _aval(ct).size)
    last = layout == "channels_last"
    if last and not degenerate:
        ct = _channels(ct, True)
        if not is_undefined(lhs):
            lhs = _channels(lhs, True)
    lshape = (lav.shape[0], lav.shape[-1], *lav.shape[1:-1]) if last else lav.shape
    cl = cr = None
    if is_undefined(lhs):
        cl = Zero(lav) if degenerate else _conv_lhs_t(ct, lshape, rhs, *params, feature_group_count)
        if last and not degenerate:
            cl = _channels(cl, False)
    if is_undefined(rhs):
        cr = Zero(rav) if degenerate else _conv_rhs_t(ct, lhs, rav, *params, feature_group_count)
    return (cl, cr)


JVP: dict = {
    "dot_general": _bilinear_jvp(lax.dot_general),
    "conv_general": _bilinear_jvp(lax.conv_general),
}

TRANSPOSE: dict = {
    "dot_general": _dot_general_t,
    "conv_general": _conv_general_t,
}
