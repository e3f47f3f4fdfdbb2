"""Contractions: dot_general and N-d convolution."""

from __future__ import annotations

from ..errors import ShapeError
from ..params import p_conv_layout, p_int_pairs, p_ints, p_nonneg_int, p_optional
from ..primitive import REQUIRED, Primitive
from ._rules import check_axes, check_kinds, same_dtypes


def _dot_general(lhs, rhs, *, contracting_dims, batch_dims):
    dtype = same_dtypes("dot_general", (lhs, rhs))
    check_kinds("dot_general", lhs, "iufc")
    if len(contracting_dims) != 2 or len(batch_dims) != 2:
        raise ShapeError(
            "dot_general: contracting_dims and batch_dims are pairs (lhs_axes, rhs_axes), "
            f"got {contracting_dims} and {batch_dims}"
        )
    (lc, rc), (lb, rb) = contracting_dims, batch_dims
    check_axes("dot_general", lc + lb, lhs.ndim, "lhs contracting + batch axes")
    check_axes("dot_general", rc + rb, rhs.ndim, "rhs contracting + batch axes")
    for kind, la, ra in (("contracting", lc, rc), ("batch", lb, rb)):
        if len(la) != len(ra) or any(lhs.shape[i] != rhs.shape[j] for i, j in zip(la, ra)):
            raise ShapeError(
                f"dot_general: {kind} axes must pair up with equal sizes, got lhs axes {la} "
                f"(sizes {[lhs.shape[i] for i in la]}) and rhs axes {ra} "
                f"(sizes {[rhs.shape[j] for j in ra]})"
            )
    free_l = [n for i, n in enumerate(lhs.shape) if i not in lc and i not in lb]
    free_r = [n for i, n in enumerate(rhs.shape) if i not in rc and i not in rb]
    return tuple([lhs.shape[i] for i in lb] + free_l + free_r), dtype


dot_general = Primitive(
    "dot_general",
    _dot_general,
    nin=2,
    params={
        "contracting_dims": (p_int_pairs, REQUIRED),
        "batch_dims": (p_int_pairs, ((), ())),
    },
    linear=(),  # bilinear, not jointly linear
    doc="General tensor contraction; output axes are batch, lhs free, rhs free.",
)


def _conv(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation, feature_group_count,
          layout="channels_first"):
    dtype = same_dtypes("conv_general", (lhs, rhs))
    check_kinds("conv_general", lhs, "fc")
    nsp = lhs.ndim - 2
    last = layout == "channels_last"
    if nsp < 1 or rhs.ndim != lhs.ndim:
        spelled = "(N, *spatial, C)" if last else "(N, C, *spatial)"
        raise ShapeError(
            f"conv_general: expected lhs {spelled} and rhs (O, C/groups, *window) of equal "
            f"rank >= 3 ({layout}), got {lhs.shape} and {rhs.shape}"
        )
    # the channels_first view of lhs: (N, C, *spatial)
    shape = (lhs.shape[0], lhs.shape[-1], *lhs.shape[1:-1]) if last else lhs.shape
    strides, ld, rd = window_strides, lhs_dilation, rhs_dilation
    if not (len(strides) == len(padding) == len(ld) == len(rd) == nsp):
        raise ShapeError(
            f"conv_general: window_strides, padding, lhs_dilation and rhs_dilation need {nsp} "
            f"entries (spatial rank), got {strides}, {padding}, {ld}, {rd}"
        )
    if min(strides + ld + rd) < 1 or any(len(p) != 2 for p in padding):
        raise ShapeError(
            "conv_general: strides and dilations must be >= 1 and padding (low, high) pairs, "
            f"got {strides}, {ld}, {rd}, {padding}"
        )
    g = feature_group_count
    n, c = shape[:2]
    o, cg = rhs.shape[:2]
    if g < 1 or c % g or o % g or cg != c // g:
        raise ShapeError(
            f"conv_general: with feature_group_count={g}, lhs channels ({c}, axis "
            f"{-1 if last else 1} in {layout}) and rhs outputs "
            f"({o}) must divide by it and rhs input channels must be {c}//{g}; got {cg}"
        )
    out = []
    for i in range(nsp):
        size_in = (shape[2 + i] - 1) * ld[i] + 1 if shape[2 + i] else 0
        size_k = (rhs.shape[2 + i] - 1) * rd[i] + 1
        span = size_in + padding[i][0] + padding[i][1] - size_k
        if span < 0:
            raise ShapeError(
                f"conv_general: spatial axis {i}: the window ({size_k} after dilation) is larger "
                f"than the padded input ({size_in + padding[i][0] + padding[i][1]})"
            )
        out.append(span // strides[i] + 1)
    return ((n, *out, o) if last else (n, o, *out)), dtype


def _resolve_conv(avals, params):
    """None strides, padding and dilations: the identity ones, per spatial axis of lhs."""
    p = params
    if None in (p["window_strides"], p["padding"], p["lhs_dilation"], p["rhs_dilation"]):
        nsp = max(avals[0].ndim - 2, 0)
        one = (1,) * nsp
        for key in ("window_strides", "lhs_dilation", "rhs_dilation"):
            if p[key] is None:
                p[key] = one
        if p["padding"] is None:
            p["padding"] = ((0, 0),) * nsp
    return p


conv_general = Primitive(
    "conv_general",
    _conv,
    nin=2,
    params={
        "window_strides": (p_optional(p_ints), None),
        "padding": (p_optional(p_int_pairs), None),
        "lhs_dilation": (p_optional(p_ints), None),
        "rhs_dilation": (p_optional(p_ints), None),
        "feature_group_count": (p_nonneg_int, 1),
        "layout": (p_conv_layout, "channels_first"),
    },
    resolve=_resolve_conv,
    linear=(),  # bilinear, not jointly linear
    doc="N-d cross-correlation, rhs (O, C/groups, *window); lhs and output (N, C, *spatial) "
    "(layout='channels_first') or (N, *spatial, C) (layout='channels_last').",
)

PRIMITIVES = (dot_general, conv_general)

__all__ = [p.name for p in PRIMITIVES]
