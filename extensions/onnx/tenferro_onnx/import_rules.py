"""ONNX op type -> tenferro: `rule(ctx, inputs, attrs, node) -> value(s)`.

A value is a tenferro tensor (or tracer) or a NumPy array known ahead (initializers,
constants, shapes); ops on known values alone are computed with NumPy, which folds the shape
arithmetic exporters emit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._builder import FROM_ONNX
from .errors import UnsupportedOnnxOpError


def attributes(node: Any) -> dict:
    from onnx import helper

    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


class Ctx:
    """The device tensors are made on, the initializers (as NumPy), and tensors made of them."""

    def __init__(self, device: Any, inits: dict):
        self.device = device
        self.inits = inits
        self._made: dict[int, Any] = {}

    def value(self, env: dict, name: str) -> Any:
        if name in env:
            return env[name]
        if name in self.inits:
            return self.inits[name]
        raise UnsupportedOnnxOpError(f"ONNX value {name!r} is read before any node makes it")

    def tensor(self, v: Any) -> Any:
        if isinstance(v, np.ndarray) or np.isscalar(v):
            hit = self._made.get(id(v))
            if hit is None or hit[0] is not v:
                from tenferro_runtime.array_api import asarray

                hit = (v, asarray(np.asarray(v), device=self.device))
                self._made[id(v)] = hit
            return hit[1]
        return v


def static(v: Any, what: str, node: Any) -> np.ndarray:
    """The concrete value of `v` (a data-dependent value here is unsupported)."""
    if v is None or isinstance(v, np.ndarray):
        return v
    from tenferro_runtime.tracing import Tracer

    if isinstance(v, Tracer):
        raise UnsupportedOnnxOpError(
            f"ONNX node {node.name or '(unnamed)'!r} ({node.op_type}): its {what} depends on the input data; "
            f"tenferro traces static shapes, so only values known ahead (constants, shapes) are supported")
    return np.asarray(v)


def _all_static(vs: list) -> bool:
    return all(v is None or isinstance(v, np.ndarray) for v in vs)


def _xp() -> Any:
    from tenferro_runtime import array_api

    return array_api


def _lax() -> Any:
    from tenferro_runtime import lax

    return lax


def _ew(np_fn: Any, xp_fn: Any) -> Any:
    """Elementwise with broadcasting: NumPy on known values, tenferro otherwise."""
    def rule(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
        if _all_static(ins):
            return np.asarray(np_fn(*ins))
        return xp_fn(*[ctx.tensor(x) for x in ins])
    return rule


def _name(attr: str) -> Any:
    def fn(*xs: Any) -> Any:
        return getattr(_xp(), attr)(*xs)
    return fn


def _int_div_np(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
        return (np.sign(a) * np.sign(b) * q).astype(a.dtype)
    return a / b


def _div(a: Any, b: Any) -> Any:
    xp = _xp()
    if a.dtype.kind in "iu":
        a, b = xp.broadcast_arrays(a, b)
        return _lax().div(a, b)
    return xp.divide(a, b)


def _mod(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    xp = _xp()
    if _all_static(ins):
        a, b = ins
        return np.fmod(a, b) if attrs.get("fmod", 0) else np.mod(a, b)
    a, b = xp.broadcast_arrays(*[ctx.tensor(x) for x in ins])
    return _lax().rem(a, b) if attrs.get("fmod", 0) else xp.remainder(a, b)


def _variadic(np_fn: Any, xp_fn: Any, mean: bool = False) -> Any:
    def rule(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
        if _all_static(ins):
            out = ins[0]
            for x in ins[1:]:
                out = np_fn(out, x)
            return out / len(ins) if mean else out
        ts = [ctx.tensor(x) for x in ins]
        out = ts[0]
        for x in ts[1:]:
            out = xp_fn(out, x)
        return out / len(ins) if mean else out
    return rule


def _unary(xp_name: str, np_fn: Any = None) -> Any:
    def rule(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
        if np_fn is not None and _all_static(ins):
            return np.asarray(np_fn(ins[0]))
        return getattr(_xp(), xp_name)(ctx.tensor(ins[0]))
    return rule


def _nn(name: str) -> Any:
    import tenferro_nn.functional as F

    return getattr(F, name)


def _bitshift(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    left = attrs["direction"] == "LEFT"
    if _all_static(ins):
        return np.left_shift(*ins) if left else np.right_shift(*ins)
    a, b = _xp().broadcast_arrays(*[ctx.tensor(x) for x in ins])
    return (_lax().shift_left if left else _lax().shift_right)(a, b)


def _relu(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    x = ctx.tensor(ins[0])
    return _xp().maximum(x, _xp().zeros((), dtype=x.dtype, device=x.device))


def _leaky(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    x = ctx.tensor(ins[0])
    return _xp().where(x >= 0, x, x * attrs.get("alpha", 0.01))


def _gelu(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    return _nn("gelu")(ctx.tensor(ins[0]), approximate=attrs.get("approximate", "none"))


def _isinf(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    xp = _xp()
    x = ctx.tensor(ins[0])
    pos, neg = attrs.get("detect_positive", 1), attrs.get("detect_negative", 1)
    inf = xp.isinf(x)
    if pos and neg:
        return inf
    return xp.logical_and(inf, x > 0) if pos else xp.logical_and(inf, x < 0)


def _where(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    if _all_static(ins):
        return np.where(*ins)
    c, a, b = [ctx.tensor(x) for x in ins]
    return _xp().where(c, a, b)


def _clip(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    xp = _xp()
    x = ctx.tensor(ins[0])
    lo = ins[1] if len(ins) > 1 else None
    hi = ins[2] if len(ins) > 2 else None
    if lo is not None:
        x = xp.maximum(x, ctx.tensor(lo))
    if hi is not None:
        x = xp.minimum(x, ctx.tensor(hi))
    return x


def _cast(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    from tenferro_core import dtypes as D

    to = FROM_ONNX.get(attrs["to"])
    if to is None:
        raise UnsupportedOnnxOpError(f"ONNX node {node.name!r} (Cast): target type {attrs['to']} is not "
                                     f"supported")
    if isinstance(ins[0], np.ndarray) and to != "bfloat16":
        return ins[0].astype(D.as_dtype(to).numpy)
    return _xp().astype(ctx.tensor(ins[0]), getattr(_xp(), to if to != "bool" else "bool"))


def _cast_like(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    from ._builder import ONNX_DTYPE

    like = ins[1]
    if isinstance(like, np.ndarray):
        dt = "bool" if like.dtype == bool else like.dtype.name
    else:
        dt = like.dtype.name
    return _cast(ctx, ins[:1], {"to": ONNX_DTYPE[dt]}, node)


def _identity(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    return ins[0]


def _dropout(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    x = ins[0]
    if len(node.output) > 1 and node.output[1]:
        shape = tuple(x.shape)
        return [x, np.ones(shape, dtype=bool)]
    return x


# ---- structural ----------------------------------------------------------------------------------

def _reshape(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    x = ins[0]
    shape = [int(s) for s in static(ins[1], "target shape", node)]
    if not attrs.get("allowzero", 0):
        shape = [int(x.shape[i]) if s == 0 else s for i, s in enumerate(shape)]
    if isinstance(x, np.ndarray):
        return x.reshape(shape)
    return _xp().reshape(x, tuple(shape))


def _transpose(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    x = ins[0]
    perm = attrs.get("perm", list(range(len(x.shape)))[::-1])
    if isinstance(x, np.ndarray):
        return np.transpose(x, perm)
    return _xp().permute_dims(x, tuple(perm))


def _flatten(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    x = ins[0]
    axis = attrs.get("axis", 1)
    axis = axis + len(x.shape) if axis < 0 else axis
    lead = int(np.prod(x.shape[:axis]))
    shape = (lead, int(np.prod(x.shape[axis:])))
    return x.reshape(shape) if isinstance(x, np.ndarray) else _xp().reshape(x, shape)


def _axes(ins: list, attrs: dict, node: Any, k: int = 1) -> Any:
    if len(ins) > k and ins[k] is not None:
        return [int(a) for a in static(ins[k], "axes", node)]
    a = attrs.get("axes")
    return None if a is None else list(a)


def _squeeze(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    x = ins[0]
    axes = _axes(ins, attrs, node)
    nd = len(x.shape)
    if axes is None:
        axes = [i for i, n in enumerate(x.shape) if n == 1]
    axes = tuple(a % nd for a in axes) if nd else ()
    if isinstance(x, np.ndarray):
        return np.squeeze(x, axis=axes)
    shape = tuple(n for i, n in enumerate(x.shape) if i not in axes)
    return _xp().reshape(x, shape)


def _unsqueeze(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    x = ins[0]
    axes = _axes(ins, attrs, node)
    nd = len(x.shape) + len(axes)
    axes = sorted(a % nd for a in axes)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return x.reshape(shape) if isinstance(x, np.ndarray) else _xp().reshape(x, tuple(shape))


def _concat(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    axis = attrs["axis"]
    if _all_static(ins):
        return np.concatenate(ins, axis=axis)
    ts = [ctx.tensor(x) for x in ins]
    return _xp().concat(ts, axis=axis % len(ts[0].shape))


def _slice(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    x = ins[0]
    starts = static(ins[1], "starts", node)
    ends = static(ins[2], "ends", node)
    nd = len(x.shape)
    axes = static(ins[3], "axes", node) if len(ins) > 3 and ins[3] is not None else np.arange(len(starts))
    steps = (static(ins[4], "steps", node) if len(ins) > 4 and ins[4] is not None
             else np.ones(len(starts), np.int64))
    idx = [slice(None)] * nd
    for s, e, a, st in zip(starts, ends, axes, steps):
        n = x.shape[int(a) % nd]
        s, e, st = int(s), int(e), int(st)
        s = max(-n - 1, min(s, n)) if st < 0 else s
        e = max(-n - 1, min(e, n))
        if st < 0 and e < -n:
            e = None
        idx[int(a) % nd] = slice(s, e, st)
    if isinstance(x, np.ndarray):
        return x[tuple(idx)]
    return _slice_tensor(x, idx)


def _slice_tensor(x: Any, idx: list) -> Any:
    lax = _lax()
    starts, limits, strides, flips = [], [], [], []
    for axis, (sl, n) in enumerate(zip(idx, x.shape)):
        s, e, st = sl.indices(n)
        if st < 0:
            flips.append(axis)
            # the same elements ascending, then reversed
            count = len(range(s, e, st))
            s, e, st = (s - (count - 1) * (-st), s + 1, -st) if count else (0, 0, 1)
        starts.append(s)
        limits.append(max(e, s))
        strides.append(st)
    y = lax.slice(x, start_indices=tuple(starts), limit_indices=tuple(limits), strides=tuple(strides))
    return lax.reverse(y, dimensions=tuple(flips)) if flips else y


def _expand(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    x = ins[0]
    shape = tuple(int(s) for s in static(ins[1], "shape", node))
    out = np.broadcast_shapes(tuple(x.shape), shape)
    if isinstance(x, np.ndarray):
        return np.broadcast_to(x, out).copy()
    return _xp().broadcast_to(x, out)


def _norm_index(ctx: Ctx, idx: Any, n: int) -> Any:
    if isinstance(idx, np.ndarray):
        return np.where(idx < 0, idx + n, idx).astype(np.int64)
    xp = _xp()
    return xp.where(idx < 0, idx + n, idx)


def _gather(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    x, idx = ins
    axis = attrs.get("axis", 0) % max(len(x.shape), 1)
    idx = _norm_index(ctx, idx, x.shape[axis])
    if _all_static([x, idx]):
        return np.take(x, idx, axis=axis)
    xp = _xp()
    t = ctx.tensor(x)
    i = ctx.tensor(idx)
    flat = xp.reshape(i, (-1,)) if len(i.shape) != 1 else i
    y = xp.take(t, flat, axis=axis)
    shape = tuple(t.shape[:axis]) + tuple(i.shape) + tuple(t.shape[axis + 1:])
    return xp.reshape(y, shape)


def _gather_elements(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    x, idx = ins
    axis = attrs.get("axis", 0) % len(x.shape)
    i = ctx.tensor(_norm_index(ctx, idx, x.shape[axis]))
    return _xp().take_along_axis(ctx.tensor(x), i, axis=axis)


def _gather_nd(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    if attrs.get("batch_dims", 0):
        raise UnsupportedOnnxOpError(f"ONNX node {node.name!r} (GatherND): batch_dims > 0 is not supported")
    x, idx = ctx.tensor(ins[0]), ctx.tensor(ins[1])
    k = idx.shape[-1]
    return _lax().gather(x, idx, axes=tuple(range(k)))


def _scatter_nd(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    x, idx, upd = [ctx.tensor(v) for v in ins]
    k = idx.shape[-1]
    red = attrs.get("reduction", "none")
    lax = _lax()
    if red == "none":
        return lax.scatter(x, idx, upd, axes=tuple(range(k)))
    if red == "add":
        return lax.scatter_add(x, idx, upd, axes=tuple(range(k)))
    raise UnsupportedOnnxOpError(f"ONNX node {node.name!r} (ScatterND): reduction {red!r} is not supported")


def _pad(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    if attrs.get("mode", "constant") != "constant":
        raise UnsupportedOnnxOpError(f"ONNX node {node.name!r} (Pad): mode {attrs['mode']!r} is not "
                                     f"supported")
    x = ctx.tensor(ins[0])
    pads = [int(p) for p in static(ins[1], "pads", node)]
    nd = len(x.shape)
    axes = _axes(ins, attrs, node, 3) or list(range(nd))
    k = len(axes)
    cfg = [(0, 0, 0)] * nd
    for j, a in enumerate(axes):
        cfg[a % nd] = (pads[j], pads[k + j], 0)
    value = ins[2] if len(ins) > 2 and ins[2] is not None else np.zeros((), x.dtype.numpy)
    v = _xp().astype(_xp().reshape(ctx.tensor(value), ()), x.dtype)
    return _lax().pad(x, v, padding_config=tuple(cfg))


def _shape(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    shape = np.array(ins[0].shape, dtype=np.int64)
    start, end = attrs.get("start", 0), attrs.get("end", None)
    return shape[start:end]


def _size(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    return np.array(int(np.prod(ins[0].shape)), dtype=np.int64)


def _constant(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    from onnx import numpy_helper

    if "value" in attrs:
        return numpy_helper.to_array(attrs["value"])
    for key, dt in (("value_float", np.float32), ("value_int", np.int64), ("value_floats", np.float32),
                    ("value_ints", np.int64)):
        if key in attrs:
            return np.array(attrs[key], dtype=dt)
    raise UnsupportedOnnxOpError(f"ONNX node {node.name!r} (Constant): attribute {sorted(attrs)} not "
                                 f"supported")


def _constant_of_shape(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    from onnx import numpy_helper

    shape = tuple(int(s) for s in static(ins[0], "shape", node))
    value = numpy_helper.to_array(attrs["value"]).reshape(-1)[0] if "value" in attrs else np.float32(0)
    return np.full(shape, value, dtype=np.asarray(value).dtype)


def _range(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    s, e, d = (static(v, "bounds", node) for v in ins)
    return np.arange(s, e, d, dtype=np.asarray(s).dtype)


def _split(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    x = ins[0]
    axis = attrs.get("axis", 0) % len(x.shape)
    n = x.shape[axis]
    if len(ins) > 1 and ins[1] is not None:
        sizes = [int(s) for s in static(ins[1], "split", node)]
    elif "split" in attrs:
        sizes = list(attrs["split"])
    else:
        k = attrs.get("num_outputs", len(node.output))
        step = -(-n // k)
        sizes = [min(step, n - i * step) for i in range(k)]
    outs, start = [], 0
    for size in sizes:
        idx = [slice(None)] * len(x.shape)
        idx[axis] = slice(start, start + size, 1)
        outs.append(x[tuple(idx)] if isinstance(x, np.ndarray) else _slice_tensor(x, idx))
        start += size
    return outs


def _tile(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    reps = tuple(int(r) for r in static(ins[1], "repeats", node))
    if isinstance(ins[0], np.ndarray):
        return np.tile(ins[0], reps)
    return _xp().tile(ins[0], reps)


def _trilu(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    k = int(static(ins[1], "k", node)) if len(ins) > 1 and ins[1] is not None else 0
    x = ctx.tensor(ins[0])
    return _xp().triu(x, k=k) if attrs.get("upper", 1) else _xp().tril(x, k=k)


def _ew_rules() -> dict:
    xp_lambda = {
        "Add": (np.add, lambda a, b: a + b), "Sub": (np.subtract, lambda a, b: a - b),
        "Mul": (np.multiply, lambda a, b: a * b), "Div": (_int_div_np, _div),
        "Pow": (np.power, _name("pow")), "Equal": (np.equal, _name("equal")),
        "Less": (np.less, _name("less")), "LessOrEqual": (np.less_equal, _name("less_equal")),
        "Greater": (np.greater, _name("greater")),
        "GreaterOrEqual": (np.greater_equal, _name("greater_equal")),
        "And": (np.logical_and, _name("logical_and")), "Or": (np.logical_or, _name("logical_or")),
        "Xor": (np.logical_xor, _name("logical_xor")), "BitwiseAnd": (np.bitwise_and, _name("bitwise_and")),
        "BitwiseOr": (np.bitwise_or, _name("bitwise_or")),
        "BitwiseXor": (np.bitwise_xor, _name("bitwise_xor")),
    }
    out = {k: _ew(*v) for k, v in xp_lambda.items()}
    unary = {"Neg": ("negative", np.negative), "Abs": ("abs", np.abs), "Sign": ("sign", np.sign),
             "Exp": ("exp", None), "Log": ("log", None), "Sqrt": ("sqrt", None),
             "Reciprocal": ("reciprocal", None),
             "Sin": ("sin", None), "Cos": ("cos", None), "Tan": ("tan", None), "Asin": ("asin", None),
             "Acos": ("acos", None), "Atan": ("atan", None), "Sinh": ("sinh", None), "Cosh": ("cosh", None),
             "Tanh": ("tanh", None), "Asinh": ("asinh", None), "Acosh": ("acosh", None),
             "Atanh": ("atanh", None),
             "Floor": ("floor", np.floor), "Ceil": ("ceil", np.ceil), "Round": ("round", None),
             "IsNaN": ("isnan", None), "Not": ("logical_not", np.logical_not),
             "BitwiseNot": ("bitwise_invert", np.invert)}
    out.update({k: _unary(*v) for k, v in unary.items()})
    return out


RULES: dict[str, Any] = {
    **_ew_rules(), "Mod": _mod, "Max": _variadic(np.maximum, lambda a, b: _xp().maximum(a, b)),
    "Min": _variadic(np.minimum, lambda a, b: _xp().minimum(a, b)),
    "Sum": _variadic(np.add, lambda a, b: a + b), "Mean": _variadic(np.add, lambda a, b: a + b, mean=True),
    "BitShift": _bitshift, "Relu": _relu, "LeakyRelu": _leaky, "Gelu": _gelu, "IsInf": _isinf,
    "Where": _where, "Clip": _clip,
    "Sigmoid": lambda c, i, a, n: _nn("sigmoid")(c.tensor(i[0])),
    "Erf": lambda c, i, a, n: _nn("erf")(c.tensor(i[0])),
    "Softplus": lambda c, i, a, n: _xp().logaddexp(c.tensor(i[0]), 0.0),
    "Cast": _cast, "CastLike": _cast_like, "Identity": _identity, "Dropout": _dropout,
    "Reshape": _reshape, "Transpose": _transpose, "Flatten": _flatten, "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze, "Concat": _concat, "Slice": _slice, "Expand": _expand, "Gather": _gather,
    "GatherElements": _gather_elements, "GatherND": _gather_nd, "ScatterND": _scatter_nd, "Pad": _pad,
    "Shape": _shape, "Size": _size, "Constant": _constant, "ConstantOfShape": _constant_of_shape,
    "Range": _range, "Split": _split, "Tile": _tile, "Trilu": _trilu,
}

from .import_nn import NN_RULES  # noqa: E402  (its rules use the helpers above)

RULES.update(NN_RULES)

__all__ = ["Ctx", "RULES", "attributes", "static"]
