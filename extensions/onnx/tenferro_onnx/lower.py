"""Lowering a tenferro Graph into a Builder: the rule table, the walk over nodes, and the
"cannot export" table (primitive -> why)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._builder import Builder, np_dtype
from .errors import ExportError
from .rules_complex import complex_rule, is_complex

CANNOT_EXPORT: dict[str, str] = {
    "bitcast_convert": "ONNX has BitCast only from opset 26, which onnxruntime 1.32 cannot run; export "
                       "with opset=26 to get it anyway",
    "tenferro_ad.custom_vjp_lin.v1": "a linearized custom_vjp exists only inside reverse-mode AD; export "
                                     "the function itself, not its gradient's internals",
    "tenferro_ad.checkpoint_lin.v1": "a linearized checkpoint exists only inside reverse-mode AD",
    "tenferro_linalg.cholesky.v1": "ONNX has no Cholesky decomposition",
    "tenferro_linalg.eigh.v1": "ONNX has no eigendecomposition",
    "tenferro_linalg.eigvalsh.v1": "ONNX has no eigendecomposition",
    "tenferro_linalg.eig.v1": "ONNX has no eigendecomposition",
    "tenferro_linalg.eigvals.v1": "ONNX has no eigendecomposition",
    "tenferro_linalg.svd.v1": "ONNX has no singular value decomposition",
    "tenferro_linalg.svdvals.v1": "ONNX has no singular value decomposition",
    "tenferro_linalg.qr.v1": "ONNX has no QR decomposition",
    "tenferro_linalg.lu_factor.v1": "ONNX has no LU decomposition",
    "tenferro_linalg.lu_pivots_to_permutation.v1": "ONNX has no LU decomposition",
    "tenferro_linalg.lu_solve.v1": "ONNX has no LU decomposition or triangular solve",
    "tenferro_linalg.solve_triangular.v1": "ONNX has no triangular solve",
    "tenferro_linalg.expm.v1": "ONNX has no matrix exponential",
    "tenferro_linalg.expm_frechet.v1": "ONNX has no matrix exponential",
    "tenferro_linalg.solve.v1": "ONNX has no linear solve",
    "tenferro_linalg.inv.v1": "ONNX has no matrix inverse",
    "tenferro_linalg.adjugate.v1": "ONNX has no matrix inverse or decomposition",
    "tenferro_linalg.slogdet.v1": "ONNX has Det but no sign/log-determinant pair",
    "tenferro_linalg.pinv.v1": "ONNX has no singular value decomposition",
    "tenferro_linalg.lstsq.v1": "ONNX has no least-squares solver",
}
"""Registered ops that export raises `ExportError` for, with the reason (documented in
docs/onnx.md; the coverage test checks each raises)."""


CANNOT_EXPORT_FAMILIES: dict[str, str] = {
    "tenferro_distributed": "a collective across processes has no ONNX counterpart (an ONNX model runs in "
                            "one process); export the per-process function",
}
"""Op families (the id's package) none of whose ops export, with the reason."""


def cannot_export(name: str) -> str | None:
    """Why `name` cannot be exported (None: it is not documented as unexportable)."""
    why = CANNOT_EXPORT.get(name)
    if why is None and "." in name:
        why = CANNOT_EXPORT_FAMILIES.get(name.split(".", 1)[0])
    return why


def rules() -> dict[str, Any]:
    from .rules_array import RULES as ARRAY
    from .rules_complex import COMPLEX_RULES
    from .rules_elementwise import RULES as ELEMENTWISE
    from .rules_graph import RULES as GRAPH

    fft = {k: v for k, v in COMPLEX_RULES.items() if k.startswith("tenferro_fft.")}
    return {**ELEMENTWISE, **ARRAY, **GRAPH, **fft}


_RULES: dict[str, Any] = {}


def rule_for(name: str) -> Any:
    """The lowering of op `name`: its rule, else (for a registered extension op with a
    decomposition that is not documented as unexportable) its decomposition's, inlined."""
    if not _RULES:
        _RULES.update(rules())
    fn = _RULES.get(name)
    if fn is None and "." in name and cannot_export(name) is None:
        from tenferro_runtime import default_runtime

        op = default_runtime().ops.get(name)
        if op is not None and op.decomposition is not None:
            return _decomposed
    return fn


def _decomposed(b: Builder, node: Any, ins: list[str]) -> list[str]:
    """An extension op (tenferro_nn's log_softmax and nll in a graph traced on torch) as its
    decomposition into core primitives, traced on the node's operands and inlined."""
    from tenferro_runtime.passes.inline import decomposition_graph

    graph = decomposition_graph(node)
    return lower_graph(b, graph, dict(zip(graph.inputs, ins)))


def lower_graph(b: Builder, graph: Any, env: dict) -> list[str]:
    """Lower `graph`'s nodes into `b`; `env` maps its input Vars to ONNX names (constants are
    added as initializers). The names of its outputs."""
    b.root.avals.update((n, v.aval) for v, n in env.items() if isinstance(n, str))
    for v, c in graph.consts.items():
        if v not in env:
            env[v] = const_value(b, host_array(c, v.aval.dtype))
    for node in graph.nodes:
        lower_node(b, node, env)
    outs = []
    for v in graph.outputs:
        if v in env:
            outs.append(env[v])
        else:  # a literal output
            outs.append(b.const(np.asarray(v), hint="const"))
    return outs


def host_array(value: Any, dtype: Any) -> np.ndarray:
    """A constant as ONNX stores it: complex values as (real, imag) pairs on a last axis."""
    arr = np.asarray(value)
    if dtype.kind == "c":
        return np.stack([arr.real, arr.imag], axis=-1)
    return arr.astype(np_dtype(dtype), copy=False)


def const_value(b: Builder, arr: np.ndarray) -> str:
    """A captured constant: one value broadcast (array_api materializes Python scalars at the
    operand's shape) is an Expand of a scalar, whose shape may follow a dynamic axis."""
    if arr.size > 1 and arr.dtype.kind != "V":
        flat = arr.reshape(-1)
        if (flat == flat[:1]).all() or (arr.dtype.kind == "f" and np.isnan(flat).all()):
            return b.repeat(b.const(flat[0], hint="c"), flat[0].item(), arr.shape)
    one = arr
    if arr.size > 1 and arr.dtype.kind != "V":  # repeated along some axes (a broadcast bias)
        nan = arr.dtype.kind == "f"
        for a in range(arr.ndim):
            first = one.take([0], axis=a)
            if one.shape[a] > 1 and np.array_equal(np.broadcast_to(first, one.shape), one, equal_nan=nan):
                one = first
        ramp = _ramp(b, one)
        if ramp is not None:
            return ramp if one.shape == arr.shape else b.broadcast_const(ramp, arr.shape)
        if one.size < arr.size and not any(b.dynamic(n) for n in one.shape):
            return b.broadcast_const(b.const(one, hint="const"), arr.shape)
    if b.root.dims and any(b.dynamic(n) for n in arr.shape):
        axis = next((n for n in one.shape if b.dynamic(n)), next(n for n in arr.shape if b.dynamic(n)))
        raise ExportError(
            f"a captured constant of shape {arr.shape} (computed at trace time from Python-level sizes, "
            f"e.g. xp.arange(x.shape[1]) or a mask built from it) depends on the dynamic axis "
            f"{b.root.dims[b.dynamic(axis)[0]][0]!r}; only "
            f"constants repeated or counting (arange) along a dynamic axis can follow it at run time: "
            f"build it from the traced tensor, or export without that dynamic axis (opset {b.opset})")
    return b.const(arr, hint="const")


def _ramp(b: Builder, one: np.ndarray) -> str | None:
    """`one` (repeated axes already reduced) as Range(start, ...) when it counts along a single
    dynamic axis (xp.arange of a traced size), reshaped to `one`'s rank; else None."""
    long = [a for a, n in enumerate(one.shape) if n > 1]
    if len(long) != 1 or not b.dynamic(one.shape[long[0]]) or one.dtype.kind not in "iuf":
        return None
    line = one.reshape(-1)
    step = line[1] - line[0]
    if not np.array_equal(line, line[0] + step * np.arange(line.size, dtype=line.dtype)):
        return None
    from tenferro_core import dtypes as D

    dt = D.from_numpy(one.dtype)
    n = b.op("Cast", [b.op("Squeeze", [b.shape([one.shape[long[0]]]), b.ints([0])])], to=_onnx(dt))
    start = b.const(line[0], hint="c")
    stop = b.op("Add", [start, b.op("Mul", [n, b.const(step, hint="c")])])
    r = b.op("Range", [start, stop, b.const(step, hint="c")])
    return b.op("Reshape", [r, b.shape(one.shape)], allowzero=1)


def _onnx(dt: Any) -> int:
    from ._builder import onnx_dtype

    return onnx_dtype(dt)


def _all_empty(b: Builder, node: Any) -> bool:
    """Every output has a zero-size static shape (ONNX ops disagree on empty edge cases, and an
    empty constant is exact). Effectful nodes and nodes that hold graphs are lowered as usual."""
    if node.prim.effects or getattr(node.prim, "subgraphs", None) is not None:
        return False
    for v in node.outputs:
        shape = v.aval.shape
        if 0 not in shape or any(b.dynamic(n) for n in shape):
            return False
    return True


def lower_node(b: Builder, node: Any, env: dict) -> None:
    name = node.prim.name
    b.site, b.prim = node.site, name
    fn = rule_for(name)
    if fn is not None and node.outputs and _all_empty(b, node):
        env.update((v, b.const(host_array(np.zeros(v.aval.shape, np_dtype(v.aval.dtype)), v.aval.dtype),
                                hint="empty")) for v in node.outputs)
        return
    if fn is not None and is_complex(node):
        fn = complex_rule(node)
    if fn is None:
        why = cannot_export(name) or "no ONNX lowering rule is registered for it"
        raise ExportError(f"{name} (at {node.site}) cannot be exported to ONNX (opset {b.opset}): {why}")
    first = len(b.nodes)
    outs = fn(b, node, [env[v] for v in node.inputs])
    for made in b.nodes[first:]:  # where each ONNX node comes from, for the user
        if not made.doc_string:
            made.doc_string = f"{name} at {node.site}"
    if isinstance(outs, str):
        outs = [outs]
    if len(outs) != len(node.outputs):
        raise AssertionError(f"ONNX rule for {name} gave {len(outs)} outputs for {len(node.outputs)}")
    env.update(zip(node.outputs, outs))
    b.root.avals.update((o, v.aval) for o, v in zip(outs, node.outputs))


__all__ = ["CANNOT_EXPORT", "CANNOT_EXPORT_FAMILIES", "cannot_export", "lower_graph", "lower_node",
           "rule_for", "rules"]
