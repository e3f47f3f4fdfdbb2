"""Complex values and the fft family. ONNX Runtime has no complex tensors; ONNX's DFT works on
real tensors with a trailing axis of 2 (real, imaginary), so a complex value is exported as
that pair form everywhere, graph inputs and outputs included. The fft ops lower to DFT
(opset >= 20); a few elementwise ops (real, imag, abs, conj, add, sub, neg, mul, convert)
have pair-form rules; any other primitive on complex values is an ExportError."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tenferro_core import dtypes as D

from ._builder import Builder
from .errors import ExportError

_NORMS = {"backward": (1.0, None), "ortho": (None, None), "forward": (None, 1.0)}


def is_complex(node: Any) -> bool:
    return any(v.aval.dtype.kind == "c" for v in (*node.inputs, *node.outputs))


def _real_dt(dt: Any) -> Any:
    return D.float64 if dt in (D.complex128, D.float64) else D.float32


def pair(b: Builder, x: str, aval: Any) -> str:
    """`x` in pair form: a real tensor gets a zero imaginary part."""
    if aval.dtype.kind == "c":
        return x
    rd = _real_dt(aval.dtype)
    if aval.dtype != rd:
        x = b.cast(x, rd)
    x = b.op("Unsqueeze", [x, b.ints([-1])])
    return b.op("Pad", [x, b.ints([0] * (len(aval.shape) + 1) + [0] * len(aval.shape) + [1])])


def _part(b: Builder, x: str, k: int) -> str:
    return b.op("Squeeze", [b.op("Slice", [x, b.ints([k]), b.ints([k + 1]), b.ints([-1])]), b.ints([-1])])


def _join(b: Builder, re: str, im: str) -> str:
    return b.op("Concat", [b.op("Unsqueeze", [re, b.ints([-1])]), b.op("Unsqueeze", [im, b.ints([-1])])],
                axis=-1)


def _conj(b: Builder, x: str, rd: Any) -> str:
    return b.op("Mul", [x, b.const(np.array([1, -1], dtype=rd.numpy))])


def _dft(b: Builder, x: str, axis: int, n: int, inverse: bool, onesided: bool = False) -> str:
    b.need(20, "DFT with the axis as an input")
    return b.op("DFT", [x, "", b.const(np.array(axis, np.int64))],
                inverse=int(inverse), onesided=int(onesided))


def _scale(b: Builder, x: str, n: int, norm: str, inverse: bool, rd: Any) -> str:
    # ONNX's DFT: forward unscaled, inverse scaled by 1/n (numpy's "backward")
    if norm == "backward" or n == 0:
        return x
    f = (math.sqrt(n) if inverse else 1 / math.sqrt(n)) if norm == "ortho" else (n if inverse else 1 / n)
    return b.op("Mul", [x, b.scalar(f, rd)])


def fft(b: Builder, node: Any, ins: list[str]) -> str:
    p = node.params
    a = node.inputs[0].aval
    rd = _real_dt(a.dtype)
    x = pair(b, ins[0], a)
    for axis in p["axes"]:
        n = a.shape[axis]
        x = _scale(b, _dft(b, x, axis, n, p["inverse"]), n, p["norm"], p["inverse"], rd)
    return x


def rfft(b: Builder, node: Any, ins: list[str]) -> str:
    p = node.params
    a = node.inputs[0].aval
    rd = _real_dt(a.dtype)
    x = ins[0] if a.dtype == rd else b.cast(ins[0], rd)
    x = b.op("Unsqueeze", [x, b.ints([-1])])
    *rest, last = p["axes"]
    n = a.shape[last]
    x = _scale(b, _dft(b, x, last, n, False, onesided=True), n, p["norm"], False, rd)
    for axis in rest:
        x = _scale(b, _dft(b, x, axis, a.shape[axis], False), a.shape[axis], p["norm"], False, rd)
    return x


def _fit(b: Builder, x: str, shape: list, axis: int, n: int) -> str:
    """`x` cropped or zero-padded along `axis` to length n (pair form)."""
    m = shape[axis]
    if m > n:
        x = b.op("Slice", [x, b.ints([0]), b.ints([n]), b.ints([axis])])
    elif m < n:
        pads = [0] * (2 * (len(shape) + 1))
        pads[len(shape) + 1 + axis] = n - m
        x = b.op("Pad", [x, b.ints(pads)])
    shape[axis] = n
    return x


def irfft(b: Builder, node: Any, ins: list[str]) -> str:
    p = node.params
    a = node.inputs[0].aval
    rd = _real_dt(a.dtype)
    x, shape = ins[0], list(a.shape)
    *rest, last = p["axes"]
    for axis, n in zip(rest, p["s"][:-1]):
        x = _fit(b, x, shape, axis, n)
        x = _scale(b, _dft(b, x, axis, n, True), n, p["norm"], True, rd)
    n = p["s"][-1]
    half = n // 2 + 1
    x = _fit(b, x, shape, last, half)
    # the full Hermitian spectrum: X[n-k] = conj(X[k]) for k = 1 .. n - half
    k = n - half
    if k > 0:
        mirror = b.op("Slice", [x, b.ints([k]), b.ints([0]), b.ints([last]), b.ints([-1])])
        x = b.op("Concat", [x, _conj(b, mirror, rd)], axis=last)
    y = _scale(b, _dft(b, x, last, n, True), n, p["norm"], True, rd)
    return _part(b, y, 0)


def _c_real(b: Builder, node: Any, ins: list[str]) -> str:
    return _part(b, ins[0], 0)


def _c_imag(b: Builder, node: Any, ins: list[str]) -> str:
    return _part(b, ins[0], 1)


def _c_abs(b: Builder, node: Any, ins: list[str]) -> str:
    x = ins[0]
    return b.op("Sqrt", [b.op("ReduceSum", [b.op("Mul", [x, x]), b.ints([-1])], keepdims=0)])


def _c_conj(b: Builder, node: Any, ins: list[str]) -> str:
    return _conj(b, ins[0], _real_dt(node.inputs[0].aval.dtype))


def _c_same(op_type: str) -> Any:
    def rule(b: Builder, node: Any, ins: list[str]) -> str:
        return b.op(op_type, ins)
    return rule


def _c_mul(b: Builder, node: Any, ins: list[str]) -> str:
    x, y = ins
    xr, xi, yr, yi = _part(b, x, 0), _part(b, x, 1), _part(b, y, 0), _part(b, y, 1)
    re = b.op("Sub", [b.op("Mul", [xr, yr]), b.op("Mul", [xi, yi])])
    im = b.op("Add", [b.op("Mul", [xr, yi]), b.op("Mul", [xi, yr])])
    return _join(b, re, im)


def _c_convert(b: Builder, node: Any, ins: list[str]) -> str:
    src, dst = node.inputs[0].aval, node.params["new_dtype"]
    if dst.kind == "c":
        x = pair(b, ins[0], src)
        return x if _real_dt(src.dtype) == _real_dt(dst) else b.cast(x, _real_dt(dst))
    return b.cast(_part(b, ins[0], 0), dst)


class _Shim:
    """A node seen in pair form: avals with a trailing 2, params adjusted by the caller."""

    def __init__(self, node: Any, params: dict):
        from tenferro_core.avals import Aval

        def paired(v: Any) -> Any:
            a = v.aval
            if a.dtype.kind != "c":
                return v
            return _Var(Aval((*a.shape, 2), _real_dt(a.dtype), a.device))

        self.prim, self.site, self.params = node.prim, node.site, params
        self.inputs = [paired(v) for v in node.inputs]
        self.outputs = [paired(v) for v in node.outputs]


class _Var:
    def __init__(self, aval: Any):
        self.aval = aval


def _structural(adjust: Any) -> Any:
    """A structural primitive's real rule on the pair form, its params extended to the last axis."""
    def rule(b: Builder, node: Any, ins: list[str]) -> str:
        from .lower import rule_for

        n = len(node.outputs[0].aval.shape)
        return rule_for(node.prim.name)(b, _Shim(node, adjust(dict(node.params), n, node)), ins)
    return rule


def _adj_reshape(p: dict, n: int, node: Any) -> dict:
    return {**p, "new_sizes": (*p["new_sizes"], 2)}


def _adj_transpose(p: dict, n: int, node: Any) -> dict:
    return {**p, "permutation": (*p["permutation"], n)}


def _adj_broadcast(p: dict, n: int, node: Any) -> dict:
    return {**p, "shape": (*p["shape"], 2), "broadcast_dimensions": (*p["broadcast_dimensions"], n)}


def _adj_same(p: dict, n: int, node: Any) -> dict:
    return p


COMPLEX_RULES: dict[str, Any] = {
    "reshape": _structural(_adj_reshape), "transpose": _structural(_adj_transpose),
    "broadcast_in_dim": _structural(_adj_broadcast), "slice": _structural(_adj_same),
    "concatenate": _structural(_adj_same), "reverse": _structural(_adj_same),
    "real": _c_real, "imag": _c_imag, "abs": _c_abs, "conj": _c_conj, "add": _c_same("Add"),
    "sub": _c_same("Sub"), "neg": _c_same("Neg"), "mul": _c_mul, "convert": _c_convert,
    "copy": _c_same("Identity"),
    "tenferro_fft.fft.v1": fft, "tenferro_fft.rfft.v1": rfft, "tenferro_fft.irfft.v1": irfft,
}


def complex_rule(node: Any) -> Any:
    fn = COMPLEX_RULES.get(node.prim.name)
    if fn is None:
        raise ExportError(
            f"{node.prim.name} (at {node.site}) on complex values cannot be exported: ONNX Runtime has no "
            f"complex tensors, so complex values are exported as (real, imag) pairs and only "
            f"{sorted(COMPLEX_RULES)} have pair-form rules; compute on xp.real/xp.imag parts instead")
    return fn


__all__ = ["COMPLEX_RULES", "complex_rule", "is_complex", "pair"]
