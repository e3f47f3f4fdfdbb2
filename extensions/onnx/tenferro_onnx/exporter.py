"""`export(fn, *example_args)`: trace a tenferro function (a module, a compiled function) and
write it as an ONNX model.

Graph inputs are named after the function's parameters, module parameters become
initializers named by their paths, every node is lowered by the rule table (lower.py), and
the result is deterministic: the same function and examples give byte-identical models.
Dynamic axes are traced at sentinel sizes (primes no real shape uses), so every shape the
lowering needs is computed at run time from the inputs' actual sizes.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tenferro_core.errors import ArgumentError, ArgumentValueError

from ._builder import DEFAULT_OPSET, MIN_OPSET, Builder, onnx_dtype
from .errors import OpsetError

SENTINELS = (997, 991, 983, 977, 971, 967, 953, 947)
EXTERNAL_THRESHOLD = 1 << 30
"""Total initializer bytes above which `export(path=...)` stores weights as external data
(protobuf files are limited to 2 GiB)."""


def check_opset(opset: Any, who: str = "export") -> int:
    import onnx

    if opset is None:
        return DEFAULT_OPSET
    if isinstance(opset, bool) or not isinstance(opset, (int, np.integer)):
        raise ArgumentError(f"{who}: opset must be an int, got {type(opset).__name__}")
    newest = onnx.defs.onnx_opset_version()
    if opset < MIN_OPSET or opset > newest:
        raise OpsetError(f"{who}: opset {opset} is outside what tenferro-onnx supports ({MIN_OPSET} to "
                         f"{newest}, default {DEFAULT_OPSET}); pass opset={DEFAULT_OPSET} or convert "
                         f"the model with onnx.version_converter")
    return int(opset)


def _is_module(x: Any) -> bool:
    return any(c.__name__ == "Module" and c.__module__.startswith("tenferro_nn") for c in type(x).__mro__)


def _param_names(fn: Any, n: int) -> list[str]:
    target = fn.forward if _is_module(fn) else getattr(fn, "__wrapped__", fn)
    try:
        params = [p for p in inspect.signature(target).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    except (TypeError, ValueError):
        params = []
    names = []
    for i in range(n):
        if i < len(params) and params[i].kind is not params[i].VAR_POSITIONAL:
            names.append(params[i].name)
        elif params and params[-1].kind is params[-1].VAR_POSITIONAL:
            names.append(f"{params[-1].name}_{i - len(params) + 1}")
        else:
            names.append(f"input_{i}")
    return names


def _param_paths(mods: list, fn_mod: bool, mod_pos: list[int]) -> list[str]:
    """Each module leaf's state-dict path (prefixed by the argument's name when several
    modules are exported together)."""
    from tenferro_nn.module import leaf_names

    out = []
    labels = (["" if fn_mod else None] if fn_mod else []) + [f"arg{i}" for i in mod_pos]
    for m, label in zip(mods, labels):
        prefix = "" if len(mods) == 1 or not label else f"{label}."
        for k, n in enumerate(leaf_names(m)):
            out.append(prefix + (n if n is not None else f"param_{k}"))
    return out


def _dynamic_spec(dynamic_axes: Any) -> dict[str, dict[int, str]]:
    """{input or output name: {axis: label}} from torch.onnx's forms ({name: [axes]} or
    {name: {axis: label}})."""
    if dynamic_axes is None:
        return {}
    if not isinstance(dynamic_axes, Mapping):
        raise ArgumentError(f"export: dynamic_axes must map input/output names to axes, got "
                            f"{type(dynamic_axes).__name__}; for example {{'x': {{0: 'batch'}}}}")
    out = {}
    for name, axes in dynamic_axes.items():
        if isinstance(axes, Mapping):
            out[name] = {int(a): str(label) for a, label in axes.items()}
        elif isinstance(axes, Sequence):
            out[name] = {int(a): f"{name}_dim{int(a)}" for a in axes}
        else:
            raise ArgumentError(f"export: dynamic_axes[{name!r}] must be a list of axes or a dict "
                                f"axis -> label, got {axes!r}")
    return out


def export(fn: Any, *example_args: Any, opset: int | None = None,
           dynamic_axes: Mapping[str, Any] | None = None, path: str | os.PathLike | None = None,
           input_names: Sequence[str] | None = None, output_names: Sequence[str] | None = None,
           external_data: bool | None = None) -> Any:
    """Trace `fn(*example_args)` and return it as an `onnx.ModelProto` (written to `path` when
    given). Module arguments (and a module `fn`) become initializers named by parameter path;
    every other tensor leaf of the examples is a graph input. `dynamic_axes`
    ({name: {axis: label}} or {name: [axes]}) leaves those axes symbolic."""
    from tenferro_runtime.graph import trace
    from tenferro_runtime.pytree import tree_flatten, tree_unflatten
    from tenferro_runtime.tensor import Tensor

    opset = check_opset(opset)
    if not callable(fn):
        raise ArgumentError(f"export expects a function, module or compiled function, got "
                            f"{type(fn).__name__}; call export(fn, *example_args)")
    # modules (fn itself, module arguments) are traced as inputs that become named initializers
    mod_pos = [i for i, a in enumerate(example_args) if _is_module(a)]
    fn_mod = _is_module(fn)
    mods = ([fn] if fn_mod else []) + [example_args[i] for i in mod_pos]
    p_leaves, p_tree = tree_flatten(mods)
    p_names = _param_paths(mods, fn_mod, mod_pos)
    dyn_pos = [i for i, a in enumerate(example_args) if not _is_module(a)]
    arg_names = _param_names(fn, len(example_args))
    leaves, tree = tree_flatten(tuple(example_args[i] for i in dyn_pos))
    leaf_names: list[str] = []
    for i in dyn_pos:
        sub = tree_flatten(example_args[i])[0]
        tensors = [x for x in sub if isinstance(x, (Tensor, np.ndarray))]
        base = arg_names[i]
        leaf_names += [base] if len(tensors) == 1 else [f"{base}.{k}" for k in range(len(tensors))]
    if input_names is not None:
        if len(input_names) != len(leaf_names):
            raise ArgumentValueError(f"export: input_names has {len(input_names)} names for "
                                     f"{len(leaf_names)} tensor inputs ({leaf_names})")
        leaf_names = list(input_names)
    spec = _dynamic_spec(dynamic_axes)
    # trace at sentinel sizes for the dynamic axes of inputs
    labels: dict[str, int] = {}
    avals, k = [], 0
    from tenferro_runtime.array_api import asarray

    for x in leaves:
        if isinstance(x, np.ndarray):
            x = asarray(x)
        if isinstance(x, Tensor):
            aval = x._aval
            axes = spec.get(leaf_names[k], {})
            k += 1
            if axes:
                shape = list(aval.shape)
                for a, label in axes.items():
                    if not -len(shape) <= a < len(shape):
                        raise ArgumentValueError(f"export: dynamic axis {a} of input "
                                                 f"{leaf_names[k - 1]!r} is out of range for shape "
                                                 f"{tuple(aval.shape)}")
                    if label not in labels:
                        if len(labels) == len(SENTINELS):
                            raise ArgumentValueError(f"export: at most {len(SENTINELS)} dynamic axis labels")
                        labels[label] = SENTINELS[len(labels)]
                    shape[a] = labels[label]
                aval = type(aval)(tuple(shape), aval.dtype, aval.device)
            avals.append(aval)
        else:
            avals.append(x)
    unknown = set(spec) - set(leaf_names)

    n_p = len(p_leaves)

    def flat(*xs: Any) -> Any:
        ms = tree_unflatten(p_tree, list(xs[:n_p]))
        f = ms[0] if fn_mod else fn
        args = list(example_args)
        for i, m in zip(mod_pos, ms[1:] if fn_mod else ms):
            args[i] = m
        for i, v in zip(dyn_pos, tree_unflatten(tree, list(xs[n_p:]))):
            args[i] = v
        return f(*args)

    graph = trace(flat, *[t._aval for t in p_leaves], *avals)
    outs_flat = list(graph.outputs)
    out_names = list(output_names) if output_names is not None else (
        ["output"] if len(outs_flat) == 1 else [f"output_{i}" for i in range(len(outs_flat))])
    if len(out_names) != len(outs_flat):
        raise ArgumentValueError(f"export: output_names has {len(out_names)} names for "
                                 f"{len(outs_flat)} outputs")
    unknown -= set(out_names)
    if unknown:
        raise ArgumentValueError(f"export: dynamic_axes names {sorted(unknown)}, which are neither inputs "
                                 f"{leaf_names} nor outputs {out_names}")
    name = getattr(fn, "__name__", type(fn).__name__)
    params = list(zip(p_names, p_leaves))
    model = build_model(graph, opset, leaf_names, out_names, params, labels, str(name))
    if path is not None:
        save(model, path, external_data)
    return model


def build_model(graph: Any, opset: int, in_names: list[str], out_names: list[str],
                params: list[tuple[str, Any]], labels: dict[str, int], name: str) -> Any:
    import onnx
    from onnx import helper

    from . import __version__
    from .lower import host_array, lower_graph

    b = Builder(opset)
    env: dict = {}
    p_vars, inputs = graph.inputs[:len(params)], graph.inputs[len(params):]
    for v, n in zip(inputs, in_names):
        env[v] = b.settype(b.reserve(n), _stored(v.aval.dtype))
    for n in out_names:
        b.reserve(n)
    for v, (pname, t) in zip(p_vars, params):  # module parameters, by their paths
        env[v] = b.named_const(host_array(t, v.aval.dtype), pname)
    dims: dict[int, tuple[str, str]] = {}
    label_of = {s: lab for lab, s in labels.items()}
    for v, n in zip(inputs, in_names):
        for axis, size in enumerate(v.aval.shape):
            if size in label_of and size not in dims:
                dims[size] = (label_of[size], b.op("Shape", [n], start=axis, end=axis + 1,
                                                   hint=f"{label_of[size]}_size"))
    b.dims = dims
    outs = lower_graph(b, graph, env)
    for o, n in zip(outs, out_names):
        b.nodes.append(helper.make_node("Identity", [o], [n]))

    def vi(n: str, aval: Any) -> Any:
        shape = [label_of.get(d, d) if d in label_of else d for d in aval.shape]
        if aval.dtype.kind == "c":  # (real, imag) pairs
            shape.append(2)
        return helper.make_tensor_value_info(n, onnx_dtype(_stored(aval.dtype)), shape)

    out_avals = [v.aval for v in graph.outputs]
    b.nodes = prune(b.nodes, out_names)
    read = set().union(*(_reads(n) for n in b.nodes)) if b.nodes else set()
    ops = [helper.make_opsetid("", opset)]
    # built in place: make_graph and make_model copy every initializer (twice 538 MB, 4.5 s,
    # for SmolLM2-135M)
    model = onnx.ModelProto(ir_version=helper.find_min_ir_version_for(ops),
                            producer_name="tenferro-onnx", producer_version=__version__,
                            opset_import=ops)
    g = model.graph
    g.name = name
    g.node.extend(b.nodes)
    g.input.extend(vi(n, v.aval) for n, v in zip(in_names, inputs))
    g.output.extend(vi(n, a) for n, a in zip(out_names, out_avals))
    for n, arr in b.initializers.items():
        if n in read:
            _fill_tensor(g.initializer.add(), n, arr)
    _label_subgraphs(g, label_of)
    named = zip([*in_names, *out_names], [*inputs, *graph.outputs])
    pairs = [n for n, v in named if v.aval.dtype.kind == "c"]
    if pairs:  # so that import_model can take complex arguments for them
        helper.set_model_props(model, {COMPLEX_PAIRS: ",".join(pairs)})
    return model


def _fill_tensor(t: Any, name: str, arr: np.ndarray) -> None:
    """Write `arr` into the empty TensorProto `t` as raw little-endian bytes (one copy)."""
    from onnx import helper

    t.name = name
    t.data_type = helper.np_dtype_to_tensor_dtype(arr.dtype)
    t.dims.extend(arr.shape)
    t.raw_data = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()


COMPLEX_PAIRS = "tenferro.complex_pairs"
"""Model metadata key: the comma-separated graph inputs and outputs that hold complex values
as (real, imag) pairs."""


def _reads(node: Any) -> set[str]:
    """Every name `node` reads, in its sub-graphs too (outer-scope references)."""
    names = set(node.input)
    for attr in node.attribute:
        for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            for n in sub.node:
                names |= _reads(n)
    return names


def prune(nodes: list, outputs: list[str]) -> list:
    """`nodes` without those whose results nothing reads (lowering leaves unused Expands)."""
    live = set(outputs)
    kept = []
    for n in reversed(nodes):
        if any(o in live for o in n.output):
            kept.append(n)
            live |= _reads(n)
    return kept[::-1]


def _stored(dtype: Any) -> Any:
    """The dtype ONNX holds values of `dtype` in (complex: real pairs)."""
    from tenferro_core import dtypes as D

    return {"complex64": D.float32, "complex128": D.float64}.get(dtype.name, dtype)


def _label_subgraphs(g: Any, label_of: dict[int, str]) -> None:
    """Sentinel sizes in sub-graph value infos become their labels (symbolic dims)."""
    if not label_of:
        return
    for node in g.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                for vi in list(sub.input) + list(sub.output):
                    for d in vi.type.tensor_type.shape.dim:
                        if d.HasField("dim_value") and d.dim_value in label_of:
                            d.dim_param = label_of[d.dim_value]
                _label_subgraphs(sub, label_of)


def save(model: Any, path: Any, external_data: bool | None = None) -> None:
    """Write `model` to `path`; weights go to `<path>.data` when `external_data` (default: when
    the initializers exceed EXTERNAL_THRESHOLD bytes)."""
    import onnx

    from tenferro_core.errors import TenferroIOError

    path = os.fspath(path)
    if external_data is None:
        external_data = sum(len(t.raw_data) for t in model.graph.initializer) > EXTERNAL_THRESHOLD
    try:
        if external_data:
            copy = onnx.ModelProto()
            copy.CopyFrom(model)
            onnx.save_model(copy, path, save_as_external_data=True, all_tensors_to_one_file=True,
                            location=os.path.basename(path) + ".data", size_threshold=1024)
        else:
            onnx.save_model(model, path)
    except OSError as err:
        raise TenferroIOError(f"export: cannot write {path!r}: {err.strerror or err}", err.errno,
                              path) from err


__all__ = ["EXTERNAL_THRESHOLD", "check_opset", "export", "save"]
