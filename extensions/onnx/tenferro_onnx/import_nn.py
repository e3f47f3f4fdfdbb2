"""ONNX import rules of reductions, neural-network ops, DFT/Det and control flow (If, Loop);
the elementwise and structural ones are in import_rules.py."""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import UnsupportedOnnxOpError
from .import_rules import Ctx, _axes, _lax, _nn, _slice_tensor, _xp, static

# ---- reductions ----------------------------------------------------------------------------------

def _reduce(xp_name: str) -> Any:
    def rule(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
        x = ctx.tensor(ins[0])
        axes = _axes(ins, attrs, node)
        keep = bool(attrs.get("keepdims", 1))
        if not axes:
            if attrs.get("noop_with_empty_axes", 0):
                return x
            axes = list(range(len(x.shape)))
        axes = tuple(sorted(a % len(x.shape) for a in axes)) if len(x.shape) else None
        if axes and any(x.shape[a] == 0 for a in axes) and xp_name in ("max", "min"):
            # ONNX's empty max/min: the lowest/highest value of the dtype (-inf/inf for floats)
            dt = x.dtype.numpy
            lo = -np.inf if dt.kind == "f" else (np.iinfo(dt).min if dt.kind in "iu" else False)
            hi = np.inf if dt.kind == "f" else (np.iinfo(dt).max if dt.kind in "iu" else True)
            shape = tuple(1 if i in axes else n for i, n in enumerate(x.shape)) if keep else \
                tuple(n for i, n in enumerate(x.shape) if i not in axes)
            return np.full(shape, lo if xp_name == "max" else hi, dtype=dt)
        return getattr(_xp(), xp_name)(x, axis=axes, keepdims=keep)
    return rule


def _arg(xp_name: str) -> Any:
    def rule(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
        if attrs.get("select_last_index", 0):
            raise UnsupportedOnnxOpError(f"ONNX node {node.name!r} ({node.op_type}): select_last_index=1 "
                                         f"is not supported")
        x = ctx.tensor(ins[0])
        axis = attrs.get("axis", 0) % len(x.shape)
        y = getattr(_xp(), xp_name)(x, axis=axis, keepdims=bool(attrs.get("keepdims", 1)))
        return _xp().astype(y, _xp().int64)
    return rule


def _cumsum(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    if attrs.get("exclusive", 0):
        raise UnsupportedOnnxOpError(f"ONNX node {node.name!r} (CumSum): exclusive=1 is not supported")
    x = ctx.tensor(ins[0])
    axis = int(static(ins[1], "axis", node)) % len(x.shape)
    return _lax().cumsum(x, axis=axis, reverse=bool(attrs.get("reverse", 0)))


def _topk(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    xp = _xp()
    x = ctx.tensor(ins[0])
    k = int(static(ins[1], "k", node).reshape(-1)[0])
    axis = attrs.get("axis", -1) % len(x.shape)
    idx = _lax().argsort(x, dimension=axis, descending=bool(attrs.get("largest", 1)), stable=True,
                         index_dtype=xp.int64)
    sl = [slice(None)] * len(x.shape)
    sl[axis] = slice(0, k, 1)
    idx = _slice_tensor(idx, sl)
    return [xp.take_along_axis(x, idx, axis=axis), idx]


def _softmax(name: str) -> Any:
    def rule(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
        return _nn(name)(ctx.tensor(ins[0]), attrs.get("axis", -1))
    return rule


# ---- neural-network ops --------------------------------------------------------------------------

def _matmul(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    return _xp().matmul(ctx.tensor(ins[0]), ctx.tensor(ins[1]))


def _gemm(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    xp = _xp()
    a, b = ctx.tensor(ins[0]), ctx.tensor(ins[1])
    if attrs.get("transA", 0):
        a = xp.matrix_transpose(a)
    if attrs.get("transB", 0):
        b = xp.matrix_transpose(b)
    y = xp.matmul(a, b)
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    if alpha != 1.0:
        y = y * alpha
    if len(ins) > 2 and ins[2] is not None:
        c = ctx.tensor(ins[2])
        y = y + (c * beta if beta != 1.0 else c)
    return y


def _einsum(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    from tenferro_einsum import einsum

    return einsum(attrs["equation"].replace(" ", ""), *[ctx.tensor(x) for x in ins])


def _pads(attrs: dict, nsp: int, node: Any, kernel: tuple, strides: tuple, dil: tuple,
          spatial: tuple) -> tuple:
    auto = attrs.get("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    if auto in ("NOTSET", "VALID"):
        p = list(attrs.get("pads", [0] * 2 * nsp)) if auto == "NOTSET" else [0] * 2 * nsp
        return tuple((p[i], p[nsp + i]) for i in range(nsp))
    out = []
    for n, k, s, d in zip(spatial, kernel, strides, dil):
        total = max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0)
        lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
        out.append((lo, total - lo))
    return tuple(out)


def _conv(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    x, w = ctx.tensor(ins[0]), ctx.tensor(ins[1])
    nsp = len(x.shape) - 2
    kernel = tuple(w.shape[2:])
    strides = tuple(attrs.get("strides", [1] * nsp))
    dil = tuple(attrs.get("dilations", [1] * nsp))
    pads = _pads(attrs, nsp, node, kernel, strides, dil, tuple(x.shape[2:]))
    y = _lax().conv_general(x, w, window_strides=strides, padding=pads, lhs_dilation=(1,) * nsp,
                            rhs_dilation=dil, feature_group_count=attrs.get("group", 1))
    if len(ins) > 2 and ins[2] is not None:
        y = y + _xp().reshape(ctx.tensor(ins[2]), (1, -1) + (1,) * nsp)
    return y


def _pool(kind: str) -> Any:
    def rule(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
        x = ctx.tensor(ins[0])
        if len(x.shape) != 4 or attrs.get("ceil_mode", 0):
            raise UnsupportedOnnxOpError(f"ONNX node {node.name!r} ({node.op_type}): only 2-d pooling with "
                                         f"ceil_mode=0 is supported, got input rank {len(x.shape)}")
        kernel = tuple(attrs["kernel_shape"])
        strides = tuple(attrs.get("strides", [1, 1]))
        dil = tuple(attrs.get("dilations", [1, 1]))
        pads = _pads(attrs, 2, node, kernel, strides, dil, tuple(x.shape[2:]))
        if any(lo != hi for lo, hi in pads):
            raise UnsupportedOnnxOpError(f"ONNX node {node.name!r} ({node.op_type}): asymmetric pads {pads}")
        padding = tuple(lo for lo, _ in pads)
        if kind == "max":
            out = _nn("max_pool2d")(x, kernel, stride=strides, padding=padding, dilation=dil)
            return [out] if len(node.output) == 1 else [out, None]
        return _nn("avg_pool2d")(x, kernel, stride=strides, padding=padding,
                                 count_include_pad=bool(attrs.get("count_include_pad", 0)))
    return rule


def _global_avg(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    x = ctx.tensor(ins[0])
    return _xp().mean(x, axis=tuple(range(2, len(x.shape))), keepdims=True)


def _batch_norm(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    xp = _xp()
    x, scale, bias, mean, var = [ctx.tensor(v) for v in ins[:5]]
    shape = (1, -1) + (1,) * (len(x.shape) - 2)
    inv = xp.reshape(scale, shape) / xp.sqrt(xp.reshape(var, shape) + attrs.get("epsilon", 1e-5))
    return (x - xp.reshape(mean, shape)) * inv + xp.reshape(bias, shape)


def _layer_norm(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    xp = _xp()
    x = ctx.tensor(ins[0])
    axis = attrs.get("axis", -1) % len(x.shape)
    axes = tuple(range(axis, len(x.shape)))
    mean = xp.mean(x, axis=axes, keepdims=True)
    d = x - mean
    var = xp.mean(d * d, axis=axes, keepdims=True)
    inv = 1.0 / xp.sqrt(var + attrs.get("epsilon", 1e-5))
    y = d * inv
    if len(ins) > 1 and ins[1] is not None:
        y = y * ctx.tensor(ins[1])
    if len(ins) > 2 and ins[2] is not None:
        y = y + ctx.tensor(ins[2])
    return [y, mean, inv]


def _det(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    return _xp().linalg.det(ctx.tensor(ins[0]))


def _dft(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    from tenferro_runtime.array_api import fft as xfft

    xp = _xp()
    x = ctx.tensor(ins[0])
    if len(ins) > 1 and ins[1] is not None:
        raise UnsupportedOnnxOpError(f"ONNX node {node.name!r} (DFT): dft_length is not supported")
    axis = int(static(ins[2], "axis", node)) if len(ins) > 2 and ins[2] is not None else attrs.get("axis", 1)
    axis = axis % (len(x.shape) - 1)
    real = x[..., 0]
    if x.shape[-1] == 1:
        c = real
    else:
        cdt = xp.complex64 if x.dtype == xp.float32 else xp.complex128
        c = xp.astype(real, cdt) + xp.astype(x[..., 1], cdt) * 1j
    inverse, onesided = attrs.get("inverse", 0), attrs.get("onesided", 0)
    if onesided and not inverse and x.shape[-1] == 1:
        y = xfft.rfft(c, axis=axis)
    else:
        y = (xfft.ifft if inverse else xfft.fft)(c, axis=axis)
        if onesided:
            idx = [slice(None)] * len(y.shape)
            idx[axis] = slice(0, y.shape[axis] // 2 + 1, 1)
            y = _slice_tensor(y, idx)
    return xp.stack([xp.real(y), xp.imag(y)], axis=-1)


# ---- control flow --------------------------------------------------------------------------------

def _if(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    from .importer import run_graph

    env_outer = ctx.env
    cond = ins[0]
    if isinstance(cond, np.ndarray) or not hasattr(cond, "_trace"):
        branch = attrs["then_branch"] if bool(np.asarray(cond).reshape(())) else attrs["else_branch"]
        return run_graph(ctx, branch, dict(env_outer))
    from tenferro_runtime import lax

    def branch(g: Any) -> Any:
        return lambda: tuple(ctx.tensor(v) for v in run_graph(ctx, g, dict(env_outer)))

    return list(lax.cond(_xp().reshape(ctx.tensor(cond), ()), branch(attrs["then_branch"]),
                         branch(attrs["else_branch"])))


def _loop(ctx: Ctx, ins: list, attrs: dict, node: Any) -> Any:
    from tenferro_runtime import lax

    from .importer import run_graph

    xp = _xp()
    body = attrs["body"]
    env_outer = ctx.env
    m = ins[0]
    carry = [ctx.tensor(v) for v in ins[2:]]
    n_carry = len(carry)
    n_scan = len(body.output) - 1 - n_carry
    b_in = [i.name for i in body.input]
    b_out = [o.name for o in body.output]
    static_true = ins[1] is None or (isinstance(ins[1], np.ndarray) and bool(ins[1]))
    cond_passthrough = any(n.op_type == "Identity" and n.input[0] == b_in[1] and n.output[0] == b_out[0]
                           for n in body.node) or b_out[0] == b_in[1]
    if m is not None and isinstance(m, np.ndarray) and static_true and cond_passthrough:
        length = int(m)

        def step(c: Any, i: Any) -> Any:
            env = dict(env_outer)
            env[b_in[0]] = i
            env[b_in[1]] = np.array(True)
            env.update(zip(b_in[2:], c))
            outs = [ctx.tensor(v) for v in run_graph(ctx, body, env)[1:]]
            return tuple(outs[:n_carry]), tuple(outs[n_carry:])

        final, ys = lax.scan(step, tuple(carry), xp.arange(length, dtype=xp.int64))
        return list(final) + list(ys)
    if n_scan:
        raise UnsupportedOnnxOpError(f"ONNX node {node.name!r} (Loop): scan outputs with a data-dependent "
                                     f"condition are not supported")
    limit = None if m is None else xp.reshape(ctx.tensor(m), ())
    init = (xp.asarray(np.int64(0), device=ctx.device), ctx.tensor(xp.reshape(ctx.tensor(
        ins[1] if ins[1] is not None else np.array(True)), ())), *carry)

    def cond_fn(c: Any) -> Any:
        ok = c[1]
        return ok if limit is None else xp.logical_and(ok, c[0] < limit)

    def body_fn(c: Any) -> Any:
        env = dict(env_outer)
        env[b_in[0]] = c[0]
        env[b_in[1]] = c[1]
        env.update(zip(b_in[2:], c[2:]))
        outs = run_graph(ctx, body, env)
        return (c[0] + 1, xp.reshape(ctx.tensor(outs[0]), ()), *[ctx.tensor(v) for v in outs[1:]])

    return list(lax.while_loop(cond_fn, body_fn, init)[2:])


NN_RULES: dict[str, Any] = {
    "ReduceSum": _reduce("sum"),
    "ReduceMean": _reduce("mean"),
    "ReduceMax": _reduce("max"),
    "ReduceMin": _reduce("min"),
    "ReduceProd": _reduce("prod"),
    "ArgMax": _arg("argmax"),
    "ArgMin": _arg("argmin"),
    "CumSum": _cumsum,
    "TopK": _topk,
    "Softmax": _softmax("softmax"),
    "LogSoftmax": _softmax("log_softmax"),
    "MatMul": _matmul,
    "Gemm": _gemm,
    "Einsum": _einsum,
    "Conv": _conv,
    "MaxPool": _pool("max"),
    "AveragePool": _pool("avg"),
    "GlobalAveragePool": _global_avg,
    "BatchNormalization": _batch_norm,
    "LayerNormalization": _layer_norm,
    "Det": _det,
    "DFT": _dft,
    "If": _if,
    "Loop": _loop,
}

__all__ = ["NN_RULES"]
