"""A fused elementwise group as the source of one numba function.

A group (passes/fusion.py: elementwise and broadcast_in_dim nodes, the constants they read,
its outputs) becomes one function: its 0-d values first, as scalars; then one loop nest per
shape its nodes compute in (an optimizer's update of parameters of several shapes has one
per shape): one loop per axis (LLVM unrolls short inner ones: a pooling window's axes of 2),
or one loop over all elements where nothing is broadcast, each node one scalar expression
in it. Operands are read at their own index, 0
along the axes they are broadcast on; a value one loop computes and another broadcasts is
kept in an array. Every result is cast to its dtype, so integers wrap as NumPy's do.

The primitives with code here (`EXACT`) are those whose results are exactly rounded (+ - *
/ sqrt, comparisons, selects, conversions, min/max with NumPy's NaN and signed-zero rules),
so a generated loop gives the NumPy kernels' bits. Transcendental functions are left to
NumPy, whose SIMD loops are faster than LLVM's scalar libm calls (a GELU group over 262k
elements took 5.3 ms as a loop, 1.0 ms in NumPy) and define the reference bits. Anything
else raises `Unsupported` and the group runs its NumPy kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tenferro_core import dtypes as D


class Unsupported(Exception):
    """No generated code for this group; the message says why."""


CAST: dict[Any, str] = {
    D.bool_: "np.bool_", D.int8: "np.int8", D.int16: "np.int16", D.int32: "np.int32",
    D.int64: "np.int64", D.uint8: "np.uint8", D.uint16: "np.uint16", D.uint32: "np.uint32",
    D.uint64: "np.uint64", D.float32: "np.float32", D.float64: "np.float64",
}
"""The dtypes a generated function handles, and NumPy's name for each (numba's casts)."""

_F, _I, _U, _B = "f", "i", "u", "b"
# primitive -> {operand kinds: expression}; operands are names ({0}, {1}, {2})
EXACT: dict[str, dict[str, str]] = {
    "neg": {"fiu": "-{0}"},
    "abs": {"fi": "abs({0})", "u": "{0}"},
    "sqrt": {"f": "np.sqrt({0})"},
    "floor": {"f": "np.floor({0})"}, "ceil": {"f": "np.ceil({0})"}, "trunc": {"f": "np.trunc({0})"},
    "isnan": {"f": "np.isnan({0})"}, "isinf": {"f": "np.isinf({0})"},
    "isfinite": {"f": "np.isfinite({0})"},
    "logical_not": {"b": "not {0}"},
    "bitwise_not": {"iu": "~{0}", "b": "not {0}"},
    "add": {"fiu": "{0} + {1}"}, "sub": {"fiu": "{0} - {1}"}, "mul": {"fiu": "{0} * {1}"},
    "div": {"f": "{0} / {1}"},
    # NumPy's maximum/minimum: NaN if either is NaN, the second operand where they compare equal
    "maximum": {"f": "({0} if ({0} > {1} or {0} != {0}) else {1})", "iu": "max({0}, {1})"},
    "minimum": {"f": "({0} if ({0} < {1} or {0} != {0}) else {1})", "iu": "min({0}, {1})"},
    "eq": {"fiub": "{0} == {1}"}, "ne": {"fiub": "{0} != {1}"}, "lt": {"fiu": "{0} < {1}"},
    "le": {"fiu": "{0} <= {1}"}, "gt": {"fiu": "{0} > {1}"}, "ge": {"fiu": "{0} >= {1}"},
    "logical_and": {"b": "({0} and {1})"}, "logical_or": {"b": "({0} or {1})"},
    "logical_xor": {"b": "({0} != {1})"},
    "bitwise_and": {"iu": "{0} & {1}", "b": "({0} and {1})"},
    "bitwise_or": {"iu": "{0} | {1}", "b": "({0} or {1})"},
    "bitwise_xor": {"iu": "{0} ^ {1}", "b": "({0} != {1})"},
    "select": {"bfiub": "({1} if {0} else {2})"},
}
# No pow, not even on 0-d values: numba's (LLVM's) differs from NumPy's power in the last bit
# for 183 of 0.9 ** 1..1999 in float32 (103 in float64), so an optimizer's bias corrections stay
# NumPy's (a cut, stages.py).


def _kind(dtype: Any) -> str:
    if dtype is D.bool_:
        return _B
    return {"f": _F, "i": _I, "u": _U}[dtype.numpy.kind]


def expression(name: str, in_dtypes: list, out_dtype: Any, args: list[str], params: dict) -> str:
    """The numba expression of one elementwise primitive on operand names, cast to
    `out_dtype`; raises Unsupported where there is none."""
    if name == "convert":
        src, dst = in_dtypes[0], out_dtype
        if src is dst:
            return args[0]
        if dst is D.bool_:
            return f"({args[0]} != 0)"
        if _kind(src) == _F and _kind(dst) != _F:
            raise Unsupported(f"convert {src} -> {dst} (float to integer) has no generated code")
        return f"{CAST[dst]}({args[0]})"
    if name in ("shift_left", "shift_right"):  # NumPy's kernel: 0 (or the sign) past the width
        x, y = args
        kind, cast, bits = _kind(in_dtypes[0]), CAST[out_dtype], in_dtypes[0].numpy.itemsize * 8
        if kind not in (_I, _U):
            raise Unsupported(f"{name} of {in_dtypes[0]} has no generated code")
        fill = f"({cast}(-1) if {x} < 0 else {cast}(0))" if name == "shift_right" and kind == _I \
            else f"{cast}(0)"
        op = "<<" if name == "shift_left" else ">>"
        return f"({cast}({x} {op} {y}) if 0 <= {y} < {bits} else {fill})"
    if name == "clamp":  # lo, x, hi: minimum(maximum(x, lo), hi), as the NumPy kernel
        lo, x, hi = args
        inner = expression("maximum", [in_dtypes[1]] * 2, out_dtype, [x, lo], {})
        return expression("minimum", [in_dtypes[1]] * 2, out_dtype, [inner, hi], {})
    table = EXACT.get(name)
    if table is None:
        raise Unsupported(f"{name} has no generated code")
    kind = _kind(in_dtypes[1] if name == "select" else in_dtypes[0])
    for allowed, template in table.items():
        if kind in allowed:
            return f"{CAST[out_dtype]}({template.format(*args)})"
    raise Unsupported(f"{name} of {in_dtypes[0]} has no generated code")


@dataclass
class Source:
    """A group's generated function: its source, the name it defines, what each argument is
    (("input", k): group input k, an array or, 0-d, a scalar; ("const", var): a constant) and
    what each group output is (("result", k): the function's k-th result; ("input", k) and
    ("const", var): returned as they are). `pointer_args`: the array inputs passed as the
    integer address of a C-contiguous buffer (pointers.py)."""

    text: str
    name: str
    args: list = field(default_factory=list)
    scalar_args: set = field(default_factory=set)
    pointer_args: set = field(default_factory=set)
    outputs: list = field(default_factory=list)
    result_avals: list = field(default_factory=list)


def _literal(value: Any, dtype: Any) -> str:
    if dtype is D.bool_:
        return f"np.bool_({bool(value)})"
    if _kind(dtype) == _F:
        v = float(value)
        text = repr(v) if math.isfinite(v) else "np.nan" if math.isnan(v) else ("np.inf" if v > 0 else
                                                                                  "-np.inf")
        return f"{CAST[dtype]}({text})"
    return f"{CAST[dtype]}({int(value)})"


def input_aliases(graph: Any) -> dict[int, int]:
    """{output position: input index} for the outputs that are inputs as they are."""
    return {p: graph.inputs.index(v) for p, v in enumerate(graph.outputs) if v in graph.inputs}


def in_place_candidates(graph: Any) -> dict[int, list[int]]:
    """{output position: the inputs its generated loop may write it into}: an input of the
    output's shape (at least one axis) and dtype, read only at the loop's own index (never
    broadcast) and not itself an output; an output held at one position only and computed
    by a loop (not a broadcast or a fill: those may be scalars `generate` fills in after the
    loops). With every store of such a result after the iteration's loads (`generate`'s
    `alias`), each element is read before it is overwritten."""
    broadcast = {n.inputs[0] for n in graph.nodes if n.prim.name == "broadcast_in_dim"}
    produced = {o for n in graph.nodes if n.prim.name not in ("broadcast_in_dim", "full")
                for o in n.outputs}
    outputs = list(graph.outputs)
    found: dict[int, list[int]] = {}
    for p, v in enumerate(outputs):
        if v not in produced or outputs.count(v) != 1 or not v.aval.shape:
            continue
        ins = [i for i, a in enumerate(graph.inputs)
               if a.aval.shape == v.aval.shape and a.aval.dtype is v.aval.dtype
               and a not in broadcast and a not in outputs]
        if ins:
            found[p] = ins
    return found


def generate(graph: Any, uniform_consts: dict, pointers: bool = False,
             alias: dict[int, int] | None = None) -> Source:
    """The Source of fused group `graph`. `uniform_consts` maps constant vars whose every
    element is one value (0-d, or a stride-0 view) to that value: they become scalars. With
    `pointers`, array inputs are addresses, viewed as arrays first (`Source.pointer_args`).
    `alias` maps output positions to the inputs they are written into (pairs from
    `in_place_candidates`, each input once): no allocation, and their stores come last in
    each iteration."""
    from tenferro_runtime.graph import Var

    for v in [*graph.inputs, *graph.consts, *(o for n in graph.nodes for o in n.outputs)]:
        if v.aval.dtype not in CAST:
            raise Unsupported(f"dtype {v.aval.dtype} has no generated code")
    src = Source("", "fused_group")
    scalars: dict[Var, str] = {}  # values known everywhere: 0-d ones, and broadcasts of them
    arrays: dict[Var, str] = {}  # values read from an array at the reader's own index
    arg_names = []
    lines: list[str] = []
    for k, v in enumerate(graph.inputs):
        name = f"a{k}"
        src.args.append(("input", k))
        arg_names.append(name)
        if v.aval.shape == ():
            src.scalar_args.add(len(src.args) - 1)
            scalars[v] = name
        else:
            arrays[v] = name
            if pointers:
                src.pointer_args.add(len(src.args) - 1)
                lines.append(f"{name} = nb.carray(voidptr({name}), {v.aval.shape!r}, "
                             f"{CAST[v.aval.dtype]})")
    for k, v in enumerate(graph.consts):
        name = f"c{k}"
        src.args.append(("const", v))
        arg_names.append(name)
        if v in uniform_consts or v.aval.shape == ():
            src.scalar_args.add(len(src.args) - 1)
            scalars[v] = name
        else:
            arrays[v] = name
    shape_of = {o: o.aval.shape for n in graph.nodes for o in n.outputs}
    loops: dict[tuple, list] = {}  # shape -> nodes computed in its loop, in order
    for n in graph.nodes:
        out = n.outputs[0]
        if len(n.outputs) != 1:
            raise Unsupported(f"{n.prim.name} has {len(n.outputs)} results")
        if n.prim.name == "broadcast_in_dim" and n.inputs[0] in scalars:
            scalars[out] = scalars[n.inputs[0]]
        elif n.prim.name == "full":
            scalars[out] = _literal(n.params["fill_value"], out.aval.dtype)
        elif out.aval.shape == ():
            ins = [scalars[v] for v in n.inputs]
            name = f"v{len(lines)}"
            dts = [v.aval.dtype for v in n.inputs]
            lines.append(f"{name} = {expression(n.prim.name, dts, out.aval.dtype, ins, n.params)}")
            scalars[out] = name
        else:
            loops.setdefault(out.aval.shape, []).append(n)
    # values one loop computes and another reads through a broadcast: kept in arrays
    computed_in = {o: s for s, ns in loops.items() for n in ns for o in n.outputs}
    kept: dict[Var, str] = {}
    deps: dict[tuple, set] = {s: set() for s in loops}
    for s, ns in loops.items():
        for n in ns:
            if n.prim.name == "broadcast_in_dim" and n.inputs[0] in computed_in:
                src_shape = computed_in[n.inputs[0]]
                if src_shape != s:
                    deps[s].add(src_shape)
                    kept.setdefault(n.inputs[0], f"t{len(kept)}")
    order = _topological(deps)
    outputs = list(graph.outputs)
    results: dict[Var, str] = {}
    for v in outputs:
        if v in graph.inputs:
            src.outputs.append(("input", graph.inputs.index(v)))
        elif v in graph.consts:
            src.outputs.append(("const", v))
        else:
            if v not in results:
                results[v] = f"r{len(results)}"
                src.result_avals.append(v.aval)
            src.outputs.append(("result", list(results).index(v)))
    if not results:
        raise Unsupported("the group computes none of its outputs")
    for v, name in kept.items():
        lines.append(f"{name} = np.empty({shape_of[v]!r}, {CAST[v.aval.dtype]})")
    # a result written into an input is stored through the input's own name: LLVM then
    # sees one array read and written, with no overlap test that would fail (and leave the
    # loop scalar, 5x slower)
    into = {graph.outputs[p]: arrays[graph.inputs[i]] for p, i in (alias or {}).items()}
    if any(v not in computed_in for v in into):
        raise Unsupported("an output written into an input is not computed by a loop")
    results.update(into)
    for v, name in results.items():
        if v in computed_in and v not in into:
            lines.append(f"{name} = np.empty({v.aval.shape!r}, {CAST[v.aval.dtype]})")
    for s in order:
        lines += _loop(s, loops[s], scalars, arrays, kept, results, set(into))
    for v, name in results.items():
        if v in scalars and v not in computed_in:  # a 0-d result, or a broadcast scalar
            value = scalars[v]
            lines.append(f"{name} = np.full({v.aval.shape!r}, {value}, {CAST[v.aval.dtype]})"
                         if v.aval.shape else f"{name} = {value}")
    ret = ", ".join(results.values())
    body = "\n".join(f"    {line}" for line in [*lines, f"return ({ret},)"])
    src.text = f"def {src.name}({', '.join(arg_names)}):\n{body}\n"
    return src


def _topological(deps: dict) -> list:
    order: list = []
    state: dict = {}

    def visit(s: tuple) -> None:
        if state.get(s) == 1:
            raise Unsupported("the group's loops read each other's values")
        if state.get(s) == 2:
            return
        state[s] = 1
        for d in sorted(deps[s]):
            visit(d)
        state[s] = 2
        order.append(s)

    for s in deps:
        visit(s)
    return order


def _flat(nodes: list) -> bool:
    """Whether a loop reads every array at its own index (no broadcast) and needs no axis
    index (no iota): then it runs over the flattened elements."""
    return not any(n.prim.name in ("broadcast_in_dim", "iota") for n in nodes)


def _loop(shape: tuple, nodes: list, scalars: dict, arrays: dict, kept: dict, results: dict,
          last: set) -> list:
    """One loop nest over `shape` computing `nodes` (one flat loop where `_flat`); the
    stores of the results in `last` after every other line of the iteration."""
    rank = len(shape)
    flat = rank > 1 and _flat(nodes)
    idx = ["j"] if flat else [f"i{d}" for d in range(rank - 1)] + ["j"]
    views: dict[str, str] = {}  # array -> its flat view, in a flat loop

    def elem(array: str) -> str:
        if not flat:
            return f"{array}[{', '.join(idx)}]"
        views.setdefault(array, f"{array}_f")
        return f"{views[array]}[j]"

    if rank == 1 or flat:
        head = [f"for j in range({math.prod(shape)}):"]
        pad = "    "
    else:  # one loop per axis: LLVM unrolls short inner ones (a pooling window's axes of 2)
        head = [f"{'    ' * d}for {name} in range({n}):" for d, (name, n) in enumerate(zip(idx, shape))]
        pad = "    " * rank
    body: list[str] = []
    stores: list[str] = []
    local: dict = {}

    def operand(v: Any) -> str:
        if v in scalars:
            return scalars[v]
        if v in local:
            return local[v]
        if v in arrays:  # an input or constant of this loop's shape
            name = f"x{len(body)}"
            body.append(f"{name} = {elem(arrays[v])}")
            local[v] = name
            return name
        raise Unsupported(f"a value of shape {v.aval.shape} read in a loop over {shape}")

    for n in nodes:
        out = n.outputs[0]
        name = f"w{len(body)}"
        if n.prim.name == "iota":
            body.append(f"{name} = {CAST[out.aval.dtype]}({idx[n.params['dimension']]})")
        elif n.prim.name == "broadcast_in_dim":
            src_v = n.inputs[0]
            if src_v in local and src_v.aval.shape == shape:  # broadcast to its own shape
                local[out] = local[src_v]
                continue
            store = arrays.get(src_v) or kept.get(src_v)
            if store is None:
                raise Unsupported("a broadcast of a value that is not kept")
            dims = n.params["broadcast_dimensions"]
            at = [idx[d] if src_v.aval.shape[a] == shape[d] else "0" for a, d in enumerate(dims)]
            body.append(f"{name} = {store}[{', '.join(at)}]" if at else f"{name} = {store}[()]")
        else:
            args = [operand(v) for v in n.inputs]
            dts = [v.aval.dtype for v in n.inputs]
            body.append(f"{name} = {expression(n.prim.name, dts, out.aval.dtype, args, n.params)}")
        local[out] = name
        if out in kept:
            body.append(f"{elem(kept[out])} = {name}")
        if out in results:
            (stores if out in last else body).append(f"{elem(results[out])} = {name}")
    n = math.prod(shape)
    return [f"{view} = {array}.reshape({n})" for array, view in views.items()] + head + [
        pad + line for line in body + stores]


__all__ = ["CAST", "EXACT", "Source", "Unsupported", "expression", "generate", "in_place_candidates",
           "input_aliases"]
