"""The ONNX graph builder the lowering rules write into: fresh value names, nodes, deduplicated
constants (initializers), opset checks, and the dtype tables."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._ort import BOOL_OUT, BROADCASTING, INT64_OUT, ORDER, carrier
from .errors import ExportError

MIN_OPSET = 18
"""Lowest opset export and import support (ReduceMax/ReduceMin/Pad take axes as inputs,
BitwiseNot, ScatterND reductions max/min)."""

DEFAULT_OPSET = 23
"""The opset export writes by default: the newest one every op of the rule table runs at in
onnxruntime 1.32 (see `default_opset`)."""

# tenferro dtype name -> onnx.TensorProto data type number
ONNX_DTYPE = {"bool": 9, "int8": 3, "int16": 5, "int32": 6, "int64": 7, "uint8": 2, "uint16": 4,
              "uint32": 12, "uint64": 13, "float16": 10, "bfloat16": 16, "float32": 1, "float64": 11,
              "complex64": 14, "complex128": 15}
FROM_ONNX = {v: k for k, v in ONNX_DTYPE.items()}


def onnx_dtype(dtype: Any) -> int:
    return ONNX_DTYPE[dtype.name]


def np_dtype(dtype: Any) -> np.dtype:
    if dtype.name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return dtype.numpy


class Builder:
    """Nodes of one ONNX graph (the main graph or a control-flow body). Sub-builders share the
    root's name counter and initializers, so every name is unique in the model and every
    constant is stored once (subgraphs read outer-scope initializers)."""

    def __init__(self, opset: int, root: Builder | None = None):
        self.opset = opset
        self.root = root or self
        self.nodes: list[Any] = []
        self.site = "?"  # the call site of the tenferro node being lowered
        self.prim = "?"
        if root is None:
            self.counts: dict[str, int] = {}
            self.taken: set[str] = set()
            self.initializers: dict[str, np.ndarray] = {}  # name -> C-contiguous value
            self.const_names: dict[tuple, str] = {}
            # dynamic axes: sentinel size -> (axis label, the name of its runtime size, int64 [1])
            self.dims: dict[int, tuple[str, str]] = {}
            self.types: dict[str, str] = {}  # value name -> dtype name (where known)
            self.scalars: dict[str, Any] = {}  # value name -> the one value it repeats (where known)
            self.expanded: dict[str, str] = {}  # Expand output -> its broadcastable source
            self.small: set[str] = set()  # constants (possibly smaller than the values they meet)
            self.producers: dict[str, tuple] = {}  # value name -> (op type, inputs)
            self.avals: dict[str, Any] = {}  # value name -> the tenferro aval it holds

    def sub(self) -> Builder:
        b = Builder(self.opset, self.root)
        b.site, b.prim = self.site, self.prim
        return b

    def fresh(self, hint: str) -> str:
        r = self.root
        hint = "".join(c if c.isalnum() or c in "_./:" else "_" for c in hint) or "v"
        n = r.counts.get(hint, 0)
        name = hint if n == 0 else f"{hint}_{n}"
        while name in r.taken:
            n += 1
            name = f"{hint}_{n}"
        r.counts[hint] = n + 1
        r.taken.add(name)
        return name

    def reserve(self, name: str) -> str:
        """`name` itself if it is free, else a fresh variant of it."""
        if name not in self.root.taken:
            self.root.taken.add(name)
            return name
        return self.fresh(name)

    def need(self, opset: int, what: str) -> None:
        if self.opset < opset:
            raise ExportError(f"{self.prim} (at {self.site}): {what} needs ONNX opset >= {opset}, the "
                              f"export asked for opset {self.opset}; export with opset={opset} or newer")

    def op(self, op_type: str, inputs: list[str], *, outs: int = 1, hint: str | None = None,
           **attrs: Any) -> Any:
        """Append an ONNX node; its output name (a list of `outs` names when outs != 1). Where
        onnxruntime has no kernel for the operands' dtype (`_ort.SUPPORTED`), the node runs in a
        carrier dtype between casts."""
        types = self.root.types
        if op_type in BROADCASTING:
            inputs = self._unexpanded(inputs)
        data = 1 if op_type == "Where" else 0
        dt = types.get(inputs[data]) if len(inputs) > data and inputs[data] else None
        c = carrier(op_type, dt) if dt is not None else None
        if c is not None:
            return self._carried(op_type, inputs, dt, c, outs, hint, attrs)
        return self._emit(op_type, inputs, outs, hint, attrs)

    def _unexpanded(self, inputs: list[str]) -> list[str]:
        """Inputs of a broadcasting op with Expands of constants replaced by their sources,
        where another input has the full shape (so the result's shape is unchanged)."""
        r = self.root
        if not any(x in r.expanded for x in inputs):
            return inputs
        if not any(x not in r.expanded and x not in r.small for x in inputs):
            return inputs
        return [r.expanded.get(x, x) for x in inputs]

    def _emit(self, op_type: str, inputs: list[str], outs: int, hint: str | None, attrs: dict) -> Any:
        from onnx import helper

        names = [self.fresh(hint or op_type.lower()) for _ in range(outs)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op_type, list(inputs), names, **attrs))
        types = self.root.types
        self.root.producers[names[0]] = (op_type, tuple(inputs))
        for i, n in enumerate(names):
            t = _out_type(op_type, [types.get(x) for x in inputs], attrs, i)
            if t is not None:
                types[n] = t
        return names[0] if outs == 1 else names

    def _carried(self, op_type: str, inputs: list[str], dt: str, c: str, outs: int, hint: Any,
                 attrs: dict) -> Any:
        types = self.root.types
        order = dt == "uint64" and op_type in ORDER  # flip the sign bit: uint64 order as int64
        flip = self.const(np.array(np.iinfo(np.int64).min, np.int64), hint="signbit") if order else None

        def to_c(x: str) -> str:
            y = self._emit("Cast", [x], 1, None, {"to": ONNX_DTYPE[c]})
            return self._emit("BitwiseXor", [y, flip], 1, None, {}) if order else y

        def back(x: str) -> str:
            if order:
                x = self._emit("BitwiseXor", [x, flip], 1, None, {})
            return self._emit("Cast", [x], 1, hint, {"to": ONNX_DTYPE[dt]})

        first = 1 if op_type == "Where" else 0
        orig = [types.get(x) for x in inputs]
        ins = [to_c(x) if i >= first and x and types.get(x) == dt else x for i, x in enumerate(inputs)]
        res = self._emit(op_type, ins, outs, None, attrs)
        res = res if isinstance(res, list) else [res]
        res = [back(r) if _out_type(op_type, orig, attrs, i) == dt else r for i, r in enumerate(res)]
        return res[0] if outs == 1 else res

    def settype(self, name: str, dtype: Any) -> str:
        self.root.types[name] = dtype.name
        return name

    def const(self, value: Any, dtype: Any = None, hint: str = "const") -> str:
        """An initializer holding `value` (deduplicated by dtype, shape and bytes)."""
        arr = np.asarray(value, dtype=None if dtype is None else np_dtype(dtype))
        if self.root.dims and arr.ndim:
            self.check_static(arr.shape, "a constant")
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        r = self.root
        hit = r.const_names.get(key)
        if hit is None:
            hit = r.const_names[key] = self.fresh(hint)
            r.initializers[hit] = np.array(arr, order="C")
            r.types[hit] = _np_name(arr.dtype)
            r.small.add(hit)
        return hit

    def named_const(self, arr: np.ndarray, name: str) -> str:
        """An initializer under a chosen name (a module parameter's path)."""
        name = self.reserve(name)
        self.root.initializers[name] = np.ascontiguousarray(arr)
        self.root.types[name] = _np_name(arr.dtype)
        return name

    def dynamic(self, n: int) -> list[int]:
        """The sentinel sizes whose product divides `n` (its dynamic factors), in order."""
        out = []
        if n <= 0:
            return out
        for s in self.root.dims:
            while n % s == 0:
                out.append(s)
                n //= s
        return out

    def shape(self, values: Any) -> str:
        """A 1-D int64 shape whose entries that carry a dynamic axis's sentinel size are
        computed from the runtime size of that axis (static entries stay constants)."""
        values = [int(v) for v in values]
        if not self.root.dims or not any(self.dynamic(v) for v in values):
            return self.ints(values)
        parts = []
        for v in values:
            fs = self.dynamic(v)
            if not fs:
                parts.append(self.ints([v]))
                continue
            k = v
            for f in fs:
                k //= f
            e = self.root.dims[fs[0]][1]
            for f in fs[1:]:
                e = self.op("Mul", [e, self.root.dims[f][1]])
            parts.append(e if k == 1 else self.op("Mul", [e, self.ints([k])]))
        return self.op("Concat", parts, axis=0, hint="shape")

    def check_static(self, shape: tuple, what: str) -> None:
        """ExportError when a constant of `shape` would depend on a dynamic axis."""
        for n in shape:
            fs = self.dynamic(int(n))
            if fs:
                raise ExportError(
                    f"{self.prim} (at {self.site}): {what} would have a size that depends on the "
                    f"dynamic axis {self.root.dims[fs[0]][0]!r}, which its ONNX lowering cannot compute "
                    f"at run time (opset {self.opset}); export without that dynamic axis")

    def scalar(self, value: Any, dtype: Any) -> str:
        return self.const(np.array(value, dtype=np_dtype(dtype)), hint="c")

    def ints(self, values: Any) -> str:
        return self.const(np.array(list(values), dtype=np.int64), hint="shape")

    def full(self, value: Any, dtype: Any, shape: tuple) -> str:
        return self.repeat(self.scalar(value, dtype), np.asarray(value).reshape(()).item(), shape)

    def repeat(self, scalar: str, value: Any, shape: tuple) -> str:
        """`scalar` (a 0-d constant holding `value`) expanded to `shape`, remembered as one value."""
        out = self.op("Expand", [scalar, self.shape(shape)])
        self.root.scalars[out] = self.root.scalars[scalar] = value
        self.root.expanded[out] = scalar
        return out

    def broadcast_const(self, source: str, shape: tuple) -> str:
        """`source` (numpy-broadcastable to `shape`, same rank) expanded to `shape`; ops that
        broadcast read `source` itself where another operand has the full shape."""
        out = self.op("Expand", [source, self.shape(shape)])
        self.root.expanded[out] = source
        return out

    def scalar_value(self, name: str) -> Any:
        """The one value `name` repeats, where known (a constant fill), else None."""
        return self.root.scalars.get(name)

    def constant_value(self, name: str) -> np.ndarray | None:
        """The value of `name` where it is an initializer, else None."""
        return self.root.initializers.get(name)

    def cast(self, x: str, dtype: Any) -> str:
        return self.op("Cast", [x], to=onnx_dtype(dtype))


def _np_name(dt: np.dtype) -> str:
    return "bfloat16" if dt.name == "bfloat16" else ("bool" if dt == np.bool_ else dt.name)


def _out_type(op: str, ins: list, attrs: dict, i: int) -> str | None:
    """The dtype name of output `i` of an ONNX node (None where not tracked)."""
    if op in BOOL_OUT:
        return "bool"
    if op in INT64_OUT or (op == "TopK" and i == 1):
        return "int64"
    if op == "Cast":
        return FROM_ONNX.get(attrs["to"])
    if op == "Where":
        return ins[1] if len(ins) > 1 else None
    if op in ("If", "Loop", "Scan"):
        return None
    return ins[0] if ins else None


__all__ = ["Builder", "DEFAULT_OPSET", "FROM_ONNX", "MIN_OPSET", "ONNX_DTYPE", "np_dtype", "onnx_dtype"]
