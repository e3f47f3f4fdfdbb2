"""`import_model(path_or_proto)`: an ONNX model as a tenferro function.

Each ONNX node binds tenferro ops (import_rules.py) on tenferro tensors; values known ahead
(initializers, Constant, Shape of a traced value) stay concrete, so shape arithmetic (Shape ->
Gather -> Concat -> Reshape, as torch.onnx emits it) folds to constants. The function traces
once per input signature into a Graph and runs it with `eval_graph`, so it works on any
device, under `grad` and inside `compile`.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from tenferro_core.errors import ArgumentError, DTypeError, ShapeError

from ._builder import FROM_ONNX, MIN_OPSET
from .errors import ModelFormatError, OpsetError, UnsupportedOnnxOpError


class OnnxFunction:
    """A callable running an ONNX model with tenferro ops; `graph(*args)` is the traced Graph
    for those arguments. Returns one tensor for a one-output model, else a tuple."""

    def __init__(self, model: Any):
        self.model = model
        g = model.graph
        self.name = g.name or "onnx_model"
        self.__name__ = self.name
        init_names = {t.name for t in g.initializer}
        self.inputs = [i for i in g.input if i.name not in init_names]
        self.output_names = [o.name for o in g.output]
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
        self._inits: dict[str, np.ndarray] = {}
        from onnx import numpy_helper

        for t in g.initializer:
            self._inits[t.name] = numpy_helper.to_array(t)
        from .exporter import COMPLEX_PAIRS

        props = {p.key: p.value for p in model.metadata_props}
        self.complex_pairs = set(filter(None, props.get(COMPLEX_PAIRS, "").split(",")))
        self._graphs: dict[tuple, Any] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<onnx model {self.name}: {len(self.inputs)} input(s), {len(self.output_names)} output(s)>"

    # ---- argument checks ------------------------------------------------------------------
    def _tensors(self, args: tuple) -> list:
        from tenferro_runtime.array_api import asarray
        from tenferro_runtime.tensor import Tensor

        if len(args) != len(self.inputs):
            raise ArgumentError(f"{self.name} takes {len(self.inputs)} input(s) "
                                f"{[i.name for i in self.inputs]}, got {len(args)}")
        out = []
        for a, spec in zip(args, self.inputs):
            t = a if isinstance(a, Tensor) else asarray(np.asarray(a))
            tt = spec.type.tensor_type
            want = FROM_ONNX.get(tt.elem_type)
            if t.dtype.kind == "c" and want in ("float32", "float64"):
                t = self._as_pairs(t, spec.name, want)
            if want is not None and t.dtype.name != want:
                raise DTypeError(f"{self.name}: input {spec.name!r} must be {want}, got {t.dtype}; convert "
                                 f"it with xp.astype(x, xp.{want})")
            if tt.HasField("shape"):
                dims = tt.shape.dim
                bad = len(dims) != t.ndim or any(
                    d.HasField("dim_value") and d.dim_value != n for d, n in zip(dims, t.shape))
                if bad:
                    shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                                  for d in dims)
                    raise ShapeError(f"{self.name}: input {spec.name!r} must have shape {shape} (named "
                                     f"dims are free), got {tuple(t.shape)}; reshape the argument or "
                                     f"export the model with that axis dynamic")
            out.append(t)
        return out

    def _as_pairs(self, t: Any, name: str, want: str) -> Any:
        """A complex argument as the (real, imag) pairs input `name` holds (exact)."""
        from tenferro_core import dtypes as D
        from tenferro_runtime import array_api as xp

        pairs_of = D.complex_of(getattr(D, want)).name
        if name not in self.complex_pairs:
            raise DTypeError(f"{self.name}: input {name!r} must be {want}, got {t.dtype}; if it holds "
                             f"complex values as (real, imag) pairs, pass "
                             f"xp.stack([xp.real(x), xp.imag(x)], axis=-1)")
        if t.dtype.name != pairs_of:
            raise DTypeError(f"{self.name}: input {name!r} holds {pairs_of} values as {want} (real, imag) "
                             f"pairs, got {t.dtype}; convert it with xp.astype(x, xp.{pairs_of})")
        return xp.stack([xp.real(t), xp.imag(t)], axis=-1)

    def graph(self, *args: Any) -> Any:
        """The traced Graph for arguments of these shapes and dtypes (built once per signature)."""
        from tenferro_runtime.graph import trace

        ts = self._tensors(args)
        key = tuple((t.shape, t.dtype, t.device) for t in ts)
        g = self._graphs.get(key)
        if g is None:
            g = trace(self._interpret, *[t._aval for t in ts])
            with self._lock:
                self._graphs.setdefault(key, g)
        return g

    def __call__(self, *args: Any) -> Any:
        from tenferro_runtime.graph import eval_graph

        ts = self._tensors(args)
        outs = eval_graph(self.graph(*ts), *ts)
        return outs[0] if len(outs) == 1 else tuple(outs)

    # ---- interpretation -------------------------------------------------------------------
    def _interpret(self, *xs: Any) -> Any:
        from .import_rules import Ctx

        ctx = Ctx(xs[0].device if xs else None, self._inits)
        env = {spec.name: x for spec, x in zip(self.inputs, xs)}
        outs = run_graph(ctx, self.model.graph, env)
        return tuple(ctx.tensor(o) for o in outs)


def run_graph(ctx: Any, graph: Any, env: dict) -> list:
    """Interpret an ONNX GraphProto's nodes on `env` (outer-scope names included); its outputs."""
    from .import_rules import RULES, attributes

    for node in graph.node:
        if node.domain not in ("", "ai.onnx"):
            raise UnsupportedOnnxOpError(
                f"ONNX node {node.name or '(unnamed)'!r}: op {node.domain}.{node.op_type} of a custom domain "
                f"is not supported by tenferro-onnx's importer; export the model with standard ops only")
        fn = RULES.get(node.op_type)
        if fn is None:
            raise UnsupportedOnnxOpError(
                f"ONNX node {node.name or '(unnamed)'!r}: op {node.op_type} is not supported by "
                f"tenferro-onnx's importer (supported: {', '.join(sorted(RULES))}); re-export the model "
                f"without it or file a request")
        ins = [ctx.value(env, n) if n else None for n in node.input]
        prev, ctx.env = getattr(ctx, "env", None), env
        try:
            outs = fn(ctx, ins, attributes(node), node)
        except UnsupportedOnnxOpError:
            raise
        except (KeyError, IndexError, NotImplementedError) as err:
            raise UnsupportedOnnxOpError(f"ONNX node {node.name or '(unnamed)'!r} ({node.op_type}): "
                                         f"{type(err).__name__}: {err}") from err
        finally:
            ctx.env = prev
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        for name, v in zip(node.output, outs):
            if name:  # NumPy gives scalars for 0-d known values: the rules take arrays
                env[name] = np.asarray(v) if isinstance(v, np.generic) else v
    return [ctx.value(env, o.name) for o in graph.output]


def import_model(path_or_proto: Any) -> OnnxFunction:
    """An ONNX model (a path, bytes or an `onnx.ModelProto`) as a tenferro function."""
    import onnx

    from .checking import load

    model = load(path_or_proto)
    try:
        onnx.checker.check_model(model)
    except Exception as err:
        raise ModelFormatError(f"the ONNX checker rejects the model: {err}; export it again or fix it "
                               f"with onnx's tools") from err
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None or opset < MIN_OPSET:
        raise OpsetError(f"the model uses ONNX opset {opset}, below the {MIN_OPSET} tenferro-onnx imports; "
                         f"convert it first: onnx.version_converter.convert_version(model, {MIN_OPSET})")
    return OnnxFunction(model)


__all__ = ["OnnxFunction", "import_model", "run_graph"]
