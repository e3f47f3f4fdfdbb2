"""Lowering rules of the structural, indexing, reduction and contraction primitives.

Shapes are static in a tenferro graph, so shapes, index grids and iotas are constants.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np

from tenferro_core import dtypes as D

from ._builder import Builder, np_dtype
from .errors import ExportError
from .rules_elementwise import _real_only, _trunc


def _aval(node: Any, i: int = 0) -> Any:
    return node.inputs[i].aval


def _out(node: Any, i: int = 0) -> Any:
    return node.outputs[i].aval


def _reshape(b: Builder, x: str, shape: tuple) -> str:
    return b.op("Reshape", [x, b.shape(shape)], allowzero=1)


def reshape(b: Builder, node: Any, ins: list[str]) -> str:
    return _reshape(b, ins[0], node.params["new_sizes"])


def transpose(b: Builder, node: Any, ins: list[str]) -> str:
    if len(node.params["permutation"]) == 0:
        return b.op("Identity", ins)
    return b.op("Transpose", ins, perm=list(node.params["permutation"]))


def broadcast_in_dim(b: Builder, node: Any, ins: list[str]) -> str:
    shape, dims = node.params["shape"], node.params["broadcast_dimensions"]
    src = _aval(node).shape
    mid = [1] * len(shape)
    for i, d in enumerate(dims):
        mid[d] = src[i]
    x = ins[0] if tuple(mid) == tuple(src) else _reshape(b, ins[0], tuple(mid))
    if tuple(mid) == tuple(shape):
        return b.op("Identity", [x]) if x == ins[0] else x
    return b.broadcast_const(x, shape)  # broadcasting consumers read x itself


def slice_(b: Builder, node: Any, ins: list[str]) -> str:
    p = node.params
    n = len(p["start_indices"])
    if n == 0:
        return b.op("Identity", ins)
    strides = p["strides"] or (1,) * n
    starts, limits = list(p["start_indices"]), list(p["limit_indices"])
    for i, size in enumerate(_aval(node).shape):
        if b.dynamic(size):  # a dynamic axis: count from its end
            starts[i] = starts[i] - size if starts[i] > size // 2 else starts[i]
            if limits[i] == size:
                limits[i] = int(np.iinfo(np.int64).max)
            elif limits[i] > size // 2:
                limits[i] -= size
    return b.op("Slice", [ins[0], b.ints(starts), b.ints(limits), b.ints(range(n)), b.ints(strides)])


def _starts(b: Builder, node: Any, starts: list[str], sizes: tuple) -> str:
    """The clamped start indices as one int64 vector."""
    shape = _aval(node).shape
    parts = []
    for k, (s, size, n) in enumerate(zip(starts, sizes, shape)):
        s = b.cast(s, D.int64) if node.inputs[len(node.inputs) - len(starts) + k].aval.dtype != D.int64 else s
        if node.inputs[len(node.inputs) - len(starts) + k].aval.dtype == D.uint64:
            s = b.op("Where", [b.op("Less", [s, b.scalar(0, D.int64)]), b.scalar(n, D.int64), s])
        if b.dynamic(n):  # the axis's run-time size
            top = b.op("Sub", [b.op("Squeeze", [b.shape([n]), b.ints([0])]), b.scalar(size, D.int64)])
            s = b.op("Min", [b.op("Max", [s, b.scalar(0, D.int64)]), top])
        else:
            s = b.op("Clip", [s, b.scalar(0, D.int64), b.scalar(max(n - size, 0), D.int64)])
        parts.append(_reshape(b, s, (1,)))
    return b.op("Concat", parts, axis=0)


def dynamic_slice(b: Builder, node: Any, ins: list[str]) -> str:
    # per axis, a Gather of start + arange(size): static sizes, data-dependent starts
    sizes = node.params["slice_sizes"]
    if not sizes:
        return b.op("Identity", ins[:1])
    start = _starts(b, node, ins[1:], sizes)
    x = ins[0]
    for axis, size in enumerate(sizes):
        if size == _aval(node).shape[axis]:
            continue  # the whole axis: its start clamps to 0
        s = b.op("Gather", [start, b.scalar(axis, D.int64)], axis=0)
        idx = b.op("Add", [b.const(np.arange(size, dtype=np.int64), hint="range"), s])
        x = b.op("Gather", [x, idx], axis=axis)
    return x if x != ins[0] else b.op("Identity", [x])


def dynamic_update_slice(b: Builder, node: Any, ins: list[str]) -> str:
    x, upd, starts = ins[0], ins[1], ins[2:]
    ushape = _aval(node, 1).shape
    if not ushape:
        return b.op("Identity", [upd])
    start = _starts(b, node, starts, ushape)
    grid = np.stack(np.meshgrid(*[np.arange(n) for n in ushape], indexing="ij"), axis=-1).astype(np.int64)
    idx = b.op("Add", [b.const(grid, hint="grid"), start])
    return b.op("ScatterND", [x, idx, upd])


def _pad_interior(b: Builder, x: str, shape: list, axis: int, interior: int, value: str, dt: Any) -> str:
    """`x` with `interior` copies of `value` between neighbours along `axis`."""
    n = shape[axis]
    if interior == 0 or n <= 1:
        return x
    y = b.op("Unsqueeze", [x, b.ints([axis + 1])])
    pads = [0] * (2 * (len(shape) + 1))
    pads[len(shape) + 1 + axis + 1] = interior
    y = b.op("Pad", [y, b.ints(pads), value])
    merged = shape[:axis] + [n * (interior + 1)] + shape[axis + 1:]
    y = _reshape(b, y, tuple(merged))
    keep = n + (n - 1) * interior
    shape[axis] = keep
    return b.op("Slice", [y, b.ints([0]), b.ints([keep]), b.ints([axis])])


def pad_general(b: Builder, x: str, shape: tuple, config: tuple, value: str, dt: Any) -> str:
    shape = list(shape)
    for axis, (_, _, interior) in enumerate(config):
        x = _pad_interior(b, x, shape, axis, interior, value, dt)
    # pad by the positive lo/hi, then crop by the negative ones
    pads = [max(lo, 0) for lo, _, _ in config] + [max(hi, 0) for _, hi, _ in config]
    if any(pads):
        x = b.op("Pad", [x, b.ints(pads), value])
        shape = [n + max(lo, 0) + max(hi, 0) for n, (lo, hi, _) in zip(shape, config)]
    starts, ends, axes = [], [], []
    for axis, (lo, hi, _) in enumerate(config):
        if lo < 0 or hi < 0:
            s = -lo if lo < 0 else 0
            e = shape[axis] + (hi if hi < 0 else 0)
            starts.append(s)
            ends.append(max(e, s))
            axes.append(axis)
    if axes:
        x = b.op("Slice", [x, b.ints(starts), b.ints(ends), b.ints(axes)])
    return x


def pad(b: Builder, node: Any, ins: list[str]) -> str:
    _real_only(node)
    out = pad_general(b, ins[0], _aval(node).shape, node.params["padding_config"], ins[1], _aval(node).dtype)
    return b.op("Identity", [out]) if out == ins[0] else out


def concatenate(b: Builder, node: Any, ins: list[str]) -> str:
    return b.op("Concat", ins, axis=node.params["dimension"])


def reverse(b: Builder, node: Any, ins: list[str]) -> str:
    dims = node.params["dimensions"]
    if not dims:
        return b.op("Identity", ins)
    big = np.iinfo(np.int64).min
    return b.op("Slice", [ins[0], b.ints([-1] * len(dims)), b.ints([big] * len(dims)), b.ints(dims),
                          b.ints([-1] * len(dims))])


def _axes_first(b: Builder, x: str, ndim: int, axes: tuple) -> tuple[str, list]:
    perm = list(axes) + [a for a in range(ndim) if a not in axes]
    if perm == list(range(ndim)):
        return x, perm
    return b.op("Transpose", [x], perm=perm), perm


def _index_rows(b: Builder, node: Any, idx: str, axes: tuple) -> str:
    dt = _aval(node, 1).dtype
    if dt == D.uint64:  # beyond int64: clamp (gather) or out of range (scatter) either way
        big = np.iinfo(np.int64).max
        idx = b.op("Min", [idx, b.const(np.array(big, np.uint64), hint="c")])
    if dt != D.int64:
        idx = b.cast(idx, D.int64)
    return idx


def gather(b: Builder, node: Any, ins: list[str]) -> str:
    x, idx = ins
    axes = node.params["axes"]
    shape = _aval(node).shape
    batch = _aval(node, 1).shape[:-1]
    if not axes:
        y = _reshape(b, x, (1,) * len(batch) + tuple(shape))
        return b.op("Expand", [y, b.shape(batch + tuple(shape))])
    if int(np.prod(_out(node).shape)) == 0:
        out = _out(node)
        return b.full(0, out.dtype, out.shape)
    idx = _index_rows(b, node, idx, axes)
    hi = np.array([max(shape[a] - 1, 0) for a in axes], dtype=np.int64)
    idx = b.op("Min", [b.op("Max", [idx, b.scalar(0, D.int64)]), b.const(hi)])
    xt, _ = _axes_first(b, x, len(shape), axes)
    return b.op("GatherND", [xt, idx])


def _scatter(add: bool) -> Any:
    def rule(b: Builder, node: Any, ins: list[str]) -> str:
        x, idx, upd = ins
        axes = node.params["axes"]
        xa = _aval(node)
        shape, dt = xa.shape, xa.dtype
        if not axes or int(np.prod(_aval(node, 2).shape)) == 0 or int(np.prod(shape)) == 0:
            if not axes:  # every row writes (adds) the whole x
                return _scatter_all(b, node, ins)
            return b.op("Identity", [x])
        idx = _index_rows(b, node, idx, axes)
        xt, perm = _axes_first(b, x, len(shape), axes)
        tshape = [shape[p] for p in perm]
        # out-of-range rows go to an extra row (index n0) of the first scattered axis, cut after
        n = np.array([shape[a] for a in axes], dtype=np.int64)
        bad = b.op("Or", [b.op("Less", [idx, b.scalar(0, D.int64)]),
                          b.op("GreaterOrEqual", [idx, b.const(n)])])
        bad_row = b.op("ReduceMax", [b.cast(bad, D.uint8), b.ints([-1])], keepdims=1)
        dummy = np.zeros(len(axes), np.int64)
        dummy[0] = shape[axes[0]]
        idx = b.op("Where", [b.cast(bad_row, D.bool_), b.const(dummy), idx])
        fill = b.full(0, dt, (1, *tshape[1:]))
        xt = b.op("Concat", [xt, fill], axis=0)
        if dt == D.bool_:
            xt, upd = b.cast(xt, D.uint8), b.cast(upd, D.uint8)
        red = "add" if add else None
        if add and dt == D.bool_:  # logical or: count the writes in int32, then > 0
            xt, upd = b.cast(xt, D.int32), b.cast(upd, D.int32)
            y = b.op("ScatterND", [xt, idx, upd], reduction="add")
            y = b.op("Greater", [y, b.scalar(0, D.int32)])
            y = b.op("Slice", [y, b.ints([0]), b.ints([shape[axes[0]]]), b.ints([0])])
            inv = [perm.index(i) for i in range(len(shape))]
            return y if inv == list(range(len(shape))) else b.op("Transpose", [y], perm=inv)
        if add and dt.kind == "f" and dt.bits < 32:  # no half-precision ScatterND add kernel
            y = _scatter(True)(b, _with_dtype(node, D.float32), [b.cast(x, D.float32), ins[1],
                                                                   b.cast(upd, D.float32)])
            return b.cast(y, dt)
        y = b.op("ScatterND", [xt, idx, upd], reduction=red)
        if dt == D.bool_:
            y = b.cast(y, D.bool_)
        y = b.op("Slice", [y, b.ints([0]), b.ints([shape[axes[0]]]), b.ints([0])])
        inv = [perm.index(i) for i in range(len(shape))]
        return y if inv == list(range(len(shape))) else b.op("Transpose", [y], perm=inv)
    return rule


class _Retyped:
    def __init__(self, node: Any, dtype: Any):
        from tenferro_core.avals import Aval

        self.prim, self.params, self.site, self.outputs = node.prim, node.params, node.site, node.outputs
        self.inputs = [_V(Aval(v.aval.shape, dtype if i != 1 else v.aval.dtype, v.aval.device))
                       for i, v in enumerate(node.inputs)]


class _V:
    def __init__(self, aval: Any):
        self.aval = aval


def _with_dtype(node: Any, dtype: Any) -> Any:
    return _Retyped(node, dtype)


def _scatter_all(b: Builder, node: Any, ins: list[str]) -> str:
    """axes = (): each batch row writes (or adds) all of x."""
    x, _, upd = ins
    ua = _aval(node, 2)
    nb = len(ua.shape) - len(_aval(node).shape)
    if int(np.prod(ua.shape[:nb])) == 0:
        return b.op("Identity", [x])
    if nb == 0:  # one row
        if node.prim.name == "scatter":
            return b.op("Identity", [upd])
        return b.op("Or" if _aval(node).dtype == D.bool_ else "Add", [x, upd])
    if node.prim.name == "scatter":
        last = b.op("Gather", [_reshape(b, upd, (-1, *_aval(node).shape)), b.scalar(-1, D.int64)], axis=0)
        return last
    dt = _aval(node).dtype
    if dt == D.bool_:
        s = b.op("ReduceMax", [b.cast(upd, D.uint8), b.ints(range(nb))], keepdims=0)
        return b.op("Or", [x, b.cast(s, D.bool_)])
    if dt.kind in "iu":
        total = _int_reduce(b, upd, ua.shape, tuple(range(nb)), True, dt)
    else:
        total = b.op("ReduceSum", [upd, b.ints(range(nb))], keepdims=0)
    return b.op("Add", [x, total])


def iota(b: Builder, node: Any, ins: list[str]) -> str:
    p = node.params
    shape, dim, dt = p["shape"], p["dimension"], p["dtype"]
    if b.dynamic(shape[dim]):
        n = b.op("Squeeze", [b.shape([shape[dim]]), b.ints([0])])
        line = b.op("Range", [b.scalar(0, D.int64), n, b.scalar(1, D.int64)])
        r = _reshape(b, b.cast(line, dt), tuple(shape[dim] if i == dim else 1 for i in range(len(shape))))
    else:
        line = np.arange(shape[dim]).astype(np_dtype(dt))
        r = b.const(line.reshape([shape[dim] if i == dim else 1 for i in range(len(shape))]), hint="iota")
    return b.op("Expand", [r, b.shape(shape)])


def full(b: Builder, node: Any, ins: list[str]) -> str:
    p = node.params
    if p["dtype"].kind == "c":
        raise ExportError(f"full (at {node.site}): complex constants have no ONNX lowering")
    v = p["fill_value"]
    arr = np.array(v).astype(np_dtype(p["dtype"])) if not isinstance(v, complex) else np.array(v.real)
    return b.full(arr.astype(np_dtype(p["dtype"])), p["dtype"], p["shape"])


def copy(b: Builder, node: Any, ins: list[str]) -> str:
    return b.op("Identity", ins)


# ---- reductions ------------------------------------------------------------------------------

def _reduce(op_type: str, bool_op: str | None = None) -> Any:
    def rule(b: Builder, node: Any, ins: list[str]) -> str:
        _real_only(node)
        axes = node.params["axes"]
        x = ins[0]
        dt = _aval(node).dtype
        if not axes:
            return b.op("Identity", [x])
        if dt.kind in "iu" and op_type in ("ReduceSum", "ReduceProd"):
            return _int_reduce(b, x, _aval(node).shape, axes, op_type == "ReduceSum", dt)
        if dt == D.bool_ and bool_op is not None:
            r = b.op(bool_op, [b.cast(x, D.uint8), b.ints(axes)], keepdims=0)
            return b.cast(r, D.bool_)
        pooled = _as_max_pool(b, node, x) if op_type == "ReduceMax" else None
        if pooled is not None:
            return pooled
        r = b.op(op_type, [x, b.ints(axes)], keepdims=0)
        if dt.kind == "f" and op_type in ("ReduceMax", "ReduceMin"):  # NaN wins wherever it is
            nan = b.op("ReduceMax", [b.cast(b.op("IsNaN", [x]), D.uint8), b.ints(axes)], keepdims=0)
            r = b.op("Where", [b.cast(nan, D.bool_), b.scalar(np.nan, dt), r])
        return r
    return rule


def _int_reduce(b: Builder, x: str, shape: tuple, axes: tuple, add: bool, dt: Any) -> str:
    """Exact integer sum/product (onnxruntime's ReduceSum/ReduceProd round int64 through
    double): the reduced axes moved last and flattened; CumSum's last element for a sum, halving
    products for a product."""
    keep = [a for a in range(len(shape)) if a not in axes]
    perm = keep + list(axes)
    if perm != list(range(len(shape))):
        x = b.op("Transpose", [x], perm=perm)
    rest = tuple(shape[a] for a in keep)
    k = int(np.prod([shape[a] for a in axes]))
    if k == 0 or int(np.prod(rest)) == 0:
        return b.full(0 if add else 1, dt, rest)
    x = _reshape(b, x, rest + (k,))
    n = len(rest)
    if add:
        c = b.op("CumSum", [x, b.scalar(n, D.int64)])
        return b.op("Gather", [c, b.scalar(k - 1, D.int64)], axis=n)
    size = 1 << (k - 1).bit_length()
    if size != k:
        pads = [0] * (n + 1) + [0] * n + [size - k]
        x = b.op("Pad", [x, b.ints(pads), b.scalar(1, dt)])
    while size > 1:
        size //= 2
        lo = b.op("Slice", [x, b.ints([0]), b.ints([size]), b.ints([n])])
        hi = b.op("Slice", [x, b.ints([size]), b.ints([2 * size]), b.ints([n])])
        x = b.op("Mul", [lo, hi])
    return _reshape(b, x, rest)


def _as_max_pool(b: Builder, node: Any, x: str) -> str | None:
    """reduce_max over the window axes of (N, C, H/kh, kh, W/kw, kw) reshaped from (N, C, H, W) (a
    non-overlapping max pool, as tenferro-nn writes it) as MaxPool; a window holding NaN gives NaN
    (MaxPool alone skips it)."""
    prod = b.root.producers.get(x)
    a = _aval(node)
    if prod is None or prod[0] != "Reshape" or node.params["axes"] != (3, 5) or a.dtype != D.float32:
        return None
    src = b.root.avals.get(prod[1][0])
    if src is None or len(src.shape) != 4 or len(a.shape) != 6 or any(b.dynamic(n) for n in a.shape[2:]):
        return None
    n, c, h, w = src.shape
    if a.shape != (n, c, a.shape[2], a.shape[3], a.shape[4], a.shape[5]) or \
            (a.shape[2] * a.shape[3], a.shape[4] * a.shape[5]) != (h, w):
        return None
    k = [a.shape[3], a.shape[5]]
    xs = prod[1][0]
    pool = b.op("MaxPool", [xs], kernel_shape=k, strides=k)
    nan = b.op("MaxPool", [b.cast(b.op("IsNaN", [xs]), D.float32)], kernel_shape=k, strides=k)
    return b.op("Where", [b.cast(nan, D.bool_), b.scalar(np.nan, D.float32), pool])


def _arg(op_type: str) -> Any:
    def rule(b: Builder, node: Any, ins: list[str]) -> str:
        _real_only(node)
        axis = node.params["axis"]
        x = ins[0]
        dt = _aval(node).dtype
        if dt == D.bool_:
            x = b.cast(x, D.int32)
        r = b.op(op_type, [x], axis=axis, keepdims=0)
        if dt.kind == "f":  # the first NaN wins
            nan = b.cast(b.op("IsNaN", [x]), D.int32)
            first = b.op("ArgMax", [nan], axis=axis, keepdims=0)
            anynan = b.cast(b.op("ReduceMax", [nan, b.ints([axis])], keepdims=0), D.bool_)
            r = b.op("Where", [anynan, first, r])
        return b.cast(r, node.params["index_dtype"])
    return rule


def cumsum(b: Builder, node: Any, ins: list[str]) -> str:
    _real_only(node)
    return b.op("CumSum", [ins[0], b.scalar(node.params["axis"], D.int64)],
                reverse=int(node.params["reverse"]))


_SORT_KEY = {"b": D.uint8, "i": None, "u": None, "f": None}


def _argsort_indices(b: Builder, node: Any, x: str) -> str:
    """Stable sort indices (int64) along `dimension`, NaNs last ascending, first descending."""
    p = node.params
    a = _aval(node)
    axis, desc = p["dimension"], p["descending"]
    n = a.shape[axis]
    k = b.ints([n])
    if a.dtype.kind != "f":
        _, idx = b.op("TopK", [x, k], outs=2, axis=axis, largest=int(desc), sorted=1)
        return idx
    nan = b.op("IsNaN", [x])
    fill = b.scalar(-np.inf if desc else np.inf, a.dtype)
    key = b.op("Where", [nan, fill, x])
    _, idx = b.op("TopK", [key, k], outs=2, axis=axis, largest=int(desc), sorted=1)
    # stable partition by NaN-ness: NaNs after (ascending) or before (descending)
    nan_s = b.cast(b.op("GatherElements", [nan, idx], axis=axis), D.int32)
    _, order = b.op("TopK", [nan_s, k], outs=2, axis=axis, largest=int(desc), sorted=1)
    return b.op("GatherElements", [idx, order], axis=axis)


def sort(b: Builder, node: Any, ins: list[str]) -> str:
    _real_only(node)
    if _aval(node).shape[node.params["dimension"]] == 0:
        return b.op("Identity", ins)
    idx = _argsort_indices(b, node, ins[0])
    return b.op("GatherElements", [ins[0], idx], axis=node.params["dimension"])


def argsort(b: Builder, node: Any, ins: list[str]) -> str:
    _real_only(node)
    if _aval(node).shape[node.params["dimension"]] == 0:
        out = _out(node)
        return b.full(0, out.dtype, out.shape)
    return b.cast(_argsort_indices(b, node, ins[0]), node.params["index_dtype"])


# ---- contractions ----------------------------------------------------------------------------

def dot_general(b: Builder, node: Any, ins: list[str]) -> str:
    _real_only(node)
    (lc, rc), (lb, rb) = node.params["contracting_dims"], node.params["batch_dims"]
    la, ra = _aval(node), _aval(node, 1)
    out = _out(node)
    if 0 in la.shape or 0 in ra.shape:  # an empty operand: sums of nothing (ORT traps on it)
        return b.full(0, out.dtype, out.shape)
    nl, nr = len(la.shape), len(ra.shape)
    if (nl == nr >= 2 and lc == (nl - 1,) and rc == (nr - 2,) and lb == rb == tuple(range(nl - 2))
            and la.dtype.kind == "f"):
        return b.op("MatMul", ins)
    if la.dtype.kind == "f" and not lb and nr == 2 and lc == (nl - 1,) and nl >= 1:
        # x @ w.T (a linear layer): MatMul with the weight transposed (folded by runtimes)
        w = ins[1] if rc == (0,) else b.op("Transpose", [ins[1]], perm=[1, 0])
        if nl == 1:
            row = b.op("Unsqueeze", [ins[0], b.ints([0])])
            return b.op("Squeeze", [b.op("MatMul", [row, w]), b.ints([0])])
        return b.op("MatMul", [ins[0], w])
    letters = iter(string.ascii_letters)
    lt, rt = [""] * nl, [""] * nr
    for i, j in zip(lb, rb):
        lt[i] = rt[j] = next(letters)
    for i, j in zip(lc, rc):
        lt[i] = rt[j] = next(letters)
    for t in (lt, rt):
        for i, c in enumerate(t):
            if not c:
                t[i] = next(letters)
    out = ([lt[i] for i in lb] + [lt[i] for i in range(nl) if i not in lb and i not in lc]
           + [rt[i] for i in range(nr) if i not in rb and i not in rc])
    eq = f"{''.join(lt)},{''.join(rt)}->{''.join(out)}"
    return b.op("Einsum", ins, equation=eq)


def conv_general(b: Builder, node: Any, ins: list[str]) -> str:
    _real_only(node)
    p = node.params
    x, w = ins
    la = _aval(node)
    nsp = len(la.shape) - 2
    last = p["layout"] == "channels_last"
    if last:
        x = b.op("Transpose", [x], perm=[0, nsp + 1, *range(1, nsp + 1)])
        shape = (la.shape[0], la.shape[-1], *la.shape[1:-1])
    else:
        shape = la.shape
    lhs_dil = p["lhs_dilation"]
    pads = p["padding"]
    if any(d != 1 for d in lhs_dil) or any(lo < 0 or hi < 0 for lo, hi in pads):
        zero = b.scalar(0, la.dtype)
        cfg = ((0, 0, 0), (0, 0, 0)) + tuple((lo, hi, d - 1) for (lo, hi), d in zip(pads, lhs_dil))
        x = pad_general(b, x, shape, cfg, zero, la.dtype)
        pads = ((0, 0),) * nsp
    y = b.op("Conv", [x, w], strides=list(p["window_strides"]), dilations=list(p["rhs_dilation"]),
             group=p["feature_group_count"], pads=[lo for lo, _ in pads] + [hi for _, hi in pads])
    if last:
        y = b.op("Transpose", [y], perm=[0, *range(2, nsp + 2), 1])
    return y


RULES: dict[str, Any] = {
    "reshape": reshape, "transpose": transpose, "broadcast_in_dim": broadcast_in_dim, "slice": slice_,
    "dynamic_slice": dynamic_slice, "dynamic_update_slice": dynamic_update_slice, "pad": pad,
    "concatenate": concatenate, "reverse": reverse, "gather": gather, "scatter": _scatter(False),
    "scatter_add": _scatter(True), "iota": iota, "full": full, "copy": copy,
    "reduce_sum": _reduce("ReduceSum"), "reduce_prod": _reduce("ReduceProd"),
    "reduce_max": _reduce("ReduceMax", "ReduceMax"), "reduce_min": _reduce("ReduceMin", "ReduceMin"),
    "reduce_and": _reduce("ReduceMin", "ReduceMin"), "reduce_or": _reduce("ReduceMax", "ReduceMax"),
    "argmax": _arg("ArgMax"), "argmin": _arg("ArgMin"), "cumsum": cumsum, "sort": sort,
    "argsort": argsort, "dot_general": dot_general, "conv_general": conv_general,
}

__all__ = ["RULES", "_trunc", "pad_general"]
