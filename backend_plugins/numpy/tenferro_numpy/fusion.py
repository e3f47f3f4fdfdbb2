"""The numpy kernel for `fused`: a group's nodes as generated Python that writes ufunc results
into scratch buffers whose value is dead (``out=``) instead of allocating one per node.

Bitwise what the group's kernels give node by node: only primitives whose kernel is a ufunc
(or one ufunc under np.errstate) are written with ``out=``; broadcast_in_dim stays a view;
convert copies with the cast `astype` uses; every other primitive calls its kernel. NumPy may
take another inner loop for another memory order, so buffers are reused only when every input
is C-ordered (the common case); other inputs run a body that allocates as the kernels do.
The generated function is made once per group: by the backend's `specialize` when the group's
dispatch entry is built (kept there), else kept in the group graph's derived data.
"""

from __future__ import annotations

import warnings
from functools import partial
from typing import Any

import numpy as np

from tenferro_runtime.graph_prims import GroupKernels
from tenferro_runtime.scalar_groups import scalar_group

from . import kernels as K

# ufunc warnings from generated code (inf - inf, log(0)) are as silent as the kernels' own
warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"tenferro_numpy\.fusion$")

# kernels that are one ufunc under np.errstate for operands of these dtype kinds
# (pow of floats calls its kernel: NumPy's power takes a sqrt for a scalar exponent of 0.5)
_ERRSTATE_UFUNCS = {K._div: (np.true_divide, "fc"), K._rem: (np.fmod, "biufc"),
                    K._pow: (np.power, "u")}
# ufuncs that are one correctly rounded IEEE operation (or exact) per element on real dtypes:
# their bits do not depend on the inner loop NumPy picks, so any memory order may write into
# scratch buffers (transcendentals may differ between strided and contiguous loops)
_EXACT = frozenset(getattr(np, n) for n in (
    "add", "subtract", "multiply", "true_divide", "negative", "positive", "absolute", "maximum",
    "minimum", "sqrt", "sign", "floor", "ceil", "trunc", "rint", "equal", "not_equal", "less",
    "less_equal", "greater", "greater_equal", "logical_and", "logical_or", "logical_xor",
    "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "fmod", "isnan", "isinf",
    "isfinite", "left_shift", "right_shift"))
# shifts whose kernel is this ufunc where every shift count is in [0, bits): by a constant
# count (the rotations of the threefry random bits, for instance) the node is the ufunc
_SHIFTS = {"shift_left": np.left_shift, "shift_right": np.right_shift}
# NumPy deprecates a positional out for these
_KEYWORD_OUT = frozenset((np.maximum, np.minimum))
# kernels whose result is always a new array (C-ordered for C-ordered operands)
_FRESH = (np.where, K._select, K._convert, K._clamp, K._div, K._rem, K._pow, K._rsqrt, K._logistic)


def _c_ordered(b: np.ndarray) -> bool:
    """True when NumPy allocates C-contiguous results for `b` (zero strides do not count)."""
    if b.flags.c_contiguous:
        return True
    last = None
    for n, s in zip(b.shape, b.strides):
        if n > 1 and s:
            if s < 0 or (last is not None and s >= last):
                return False
            last = s
    return True


def _ufunc(kernel: Any, dtype: np.dtype) -> tuple[Any, bool] | None:
    """(the ufunc `kernel` is for operands of `dtype`, whether it needs np.errstate), or None."""
    if (isinstance(kernel, partial) and isinstance(kernel.func, np.ufunc) and not kernel.args
            and kernel.keywords == {"out": ...}):
        return kernel.func, False
    uf, kinds = next((u for k, u in _ERRSTATE_UFUNCS.items() if k is kernel), (None, ""))
    return (uf, True) if dtype.kind in kinds else None


def _node_ufunc(graph: Any, node: Any, kernel: Any) -> tuple[Any, bool] | None:
    """`_ufunc` of the node's kernel, or the shift ufunc of a shift by constant in-range counts."""
    if not node.inputs or len(node.outputs) != 1:
        return None
    dtype = node.inputs[0].aval.dtype.numpy
    uf = _SHIFTS.get(node.prim.name)
    if uf is not None:
        count = graph.consts.get(node.inputs[1])
        if (count is None or dtype.kind not in "iu" or count._buf.dtype != dtype
                or not np.all((count._buf >= 0) & (count._buf < dtype.itemsize * 8))):
            return None
        return uf, False
    return _ufunc(kernel, dtype)


def _kernel_table(graph: Any) -> Any:
    avals = [v.aval for v in graph.inputs] + [v.aval for v in graph.consts]
    kernels = getattr(avals[0].device, "kernels", None) if avals else None
    if kernels is None:
        return lambda prim: K.KERNELS.get(prim.name)
    return kernels.get


def _compile(graph: Any) -> tuple[Any, str]:
    """(the generated function, its source) for `graph`."""
    kernel = _kernel_table(graph)
    kernels = [kernel(n.prim) for n in graph.nodes]
    if any(k is None for k in kernels):  # a decomposition runs: evaluate the group node by node
        return partial(_via_eval, graph), "# eval_graph (a node has no numpy kernel)"
    scalar = scalar_group(graph)  # one-element integer values: operators on NumPy scalars
    if scalar is not None:
        return scalar
    glb: dict[str, Any] = {"np": np, "__name__": __name__, "_ok": _c_ordered, "_QUIET": K._QUIET,
                           "_set": K.quiet_on, "_reset": K.quiet_off}
    args, names = _operands(graph, glb)
    exact = _layout_exact(graph, kernels)
    fast, quiet, reused = _body(graph, kernels, glb, dict(names), reuse=True, c_order=exact)
    lines = [f"def fused({', '.join(args)}):"]
    if exact:  # any memory order: scratch buffers are allocated C-ordered and reused
        lines += _quieted(fast, 1) if quiet else ["    " + s for s in fast]
        src = "\n".join(lines) + "\n"
        exec(compile(src, f"<tenferro_numpy fused group {id(graph):#x}>", "exec"), glb)
        return glb["fused"], src
    plain, _, _ = _body(graph, kernels, glb, dict(names), reuse=False)
    if reused and all(_c_ordered(c._buf) for c in graph.consts.values()):
        # the flag inline: a C-contiguous operand (the common case) costs no call
        checks = " and ".join(f"({a}.flags.c_contiguous or _ok({a}))" for a in args) or "True"
        lines.append(f"    if {checks}:")
        lines += _quieted(fast, 2) if quiet else ["        " + s for s in fast]
    lines += ["    " + s for s in plain]
    src = "\n".join(lines) + "\n"
    exec(compile(src, f"<tenferro_numpy fused group {id(graph):#x}>", "exec"), glb)
    return glb["fused"], src


def _operands(graph: Any, glb: dict) -> tuple[list, dict]:
    """(the generated function's input names, value -> name), the group's constants bound in
    the code's globals `glb`."""
    args = [f"b{i}" for i in range(len(graph.inputs))]
    names: dict[Any, str] = dict(zip(graph.inputs, args))
    for j, (v, c) in enumerate(graph.consts.items()):
        glb[f"c{j}"], names[v] = c._buf, f"c{j}"
    return args, names


def _quieted(body: list, depth: int) -> list:
    """`body`'s lines at `depth` run with NumPy's IEEE warnings off (`kernels.quiet_on`)."""
    pad = "    " * depth
    return [f"{pad}_t = _set()", f"{pad}try:", *[f"{pad}    {s}" for s in body],
            f"{pad}finally:", f"{pad}    _reset(_t)"]


def _layout_exact(graph: Any, kernels: list) -> bool:
    """True when every node is an `_EXACT` ufunc on real float32/float64/int/bool operands or
    a broadcast (a view): the group's bits are the same for any memory order of its inputs."""
    for node, k in zip(graph.nodes, kernels):
        if k is K._broadcast_in_dim:
            continue
        uf = _node_ufunc(graph, node, k)
        kinds = {v.aval.dtype.numpy.char for v in (*node.inputs, *node.outputs)}
        if uf is None or uf[0] not in _EXACT or len(node.outputs) != 1 or not kinds <= set("?bBhHiIlLqQfd"):
            return False
    return True


def _expanded(node: Any) -> tuple:
    """The broadcast_in_dim operand's shape with size-1 axes where the result broadcasts."""
    shape, dims = node.params["shape"], node.params["broadcast_dimensions"]
    expanded = [1] * len(shape)
    for j, d in enumerate(dims):
        expanded[d] = node.inputs[0].aval.shape[j]
    return tuple(expanded)


def _lazy_broadcasts(graph: Any, kernels: list) -> set[int]:
    """The broadcast_in_dim nodes that may stay a reshape to `_expanded` (NumPy's ufuncs
    broadcast size-1 axes themselves): no group output, and every user a ufunc node whose
    operands' shapes broadcast to its result's shape. np.broadcast_to is ~3 us of Python."""
    from tenferro_runtime.graph import Var

    outputs = {v for v in graph.outputs if isinstance(v, Var)}
    producer: dict[Any, int] = {}
    users: dict[Any, list] = {}
    for i, n in enumerate(graph.nodes):
        producer.update((v, i) for v in n.outputs)
        for v in n.inputs:
            users.setdefault(v, []).append(i)
    lazy = {i for i, (n, k) in enumerate(zip(graph.nodes, kernels))
            if k is K._broadcast_in_dim and n.outputs[0] not in outputs and users.get(n.outputs[0])
            and all(_node_ufunc(graph, graph.nodes[j], kernels[j]) is not None for j in users[n.outputs[0]])}

    def shape(v: Any) -> tuple:
        i = producer.get(v)
        return _expanded(graph.nodes[i]) if i in lazy else v.aval.shape

    changed = True
    while changed:
        changed = False
        for i in sorted(lazy):
            for j in users[graph.nodes[i].outputs[0]]:
                node = graph.nodes[j]
                try:
                    ok = np.broadcast_shapes(*(shape(v) for v in node.inputs)) == node.outputs[0].aval.shape
                except ValueError:
                    ok = False
                if not ok:
                    lazy.discard(i)
                    changed = True
                    break
    return lazy


def _body(graph: Any, kernels: list, glb: dict, names: dict, reuse: bool,
          c_order: bool = False) -> tuple[list[str], bool, bool]:
    """Statement lines computing `graph`'s nodes and returning its outputs, whether they need
    np.errstate, and whether they write into a buffer twice. With `reuse`, ufuncs and
    converts write into dead scratch buffers; with `c_order`, new ones are C-ordered."""
    from tenferro_runtime.graph import Var

    end = len(graph.nodes)
    last = {v: end for v in graph.outputs if isinstance(v, Var)}
    for i, n in enumerate(graph.nodes):
        for v in n.inputs:
            last[v] = max(last.get(v, i), i)
    alias: dict[Any, frozenset] = {}  # value -> scratch buffers it may share memory with
    users: dict[int, set] = {}  # scratch buffer -> values that may share its memory
    info: dict[int, tuple] = {}  # scratch buffer -> (shape, dtype)
    lines: list[str] = []
    quiet = reused = False
    lazy = _lazy_broadcasts(graph, kernels)

    def bind(v: Any, name: str, bufs: frozenset) -> None:
        names[v], alias[v] = name, bufs
        for b in bufs:
            users[b].add(v)

    def scratch(i: int, v: Any, ins: list) -> int | None:
        """A dead scratch buffer node `i` may write `v` into (only operands exactly it read it)."""
        if not reuse:
            return None
        key = (v.aval.shape, v.aval.dtype)
        found = []
        for b, k in info.items():
            if k == key and all(last.get(u, i) <= i for u in users[b]) and all(
                    alias.get(x, frozenset()).isdisjoint((b,)) or names[x] == f"s{b}" for x in ins):
                found.append(b)
        mine = [b for b in found if any(names[x] == f"s{b}" for x in ins)]
        return (mine or found or [None])[0]

    def new(v: Any) -> tuple[str, frozenset]:
        b = len(info)
        info[b], users[b] = (v.aval.shape, v.aval.dtype), set()
        return f"s{b}", frozenset((b,))

    for i, (node, k) in enumerate(zip(graph.nodes, kernels)):
        ins = node.inputs
        a = [names[x] for x in ins]
        inner = frozenset().union(*(alias.get(x, frozenset()) for x in ins))
        out = node.outputs[0] if len(node.outputs) == 1 else None
        uf = _node_ufunc(graph, node, k)
        if uf is not None and reuse:
            quiet |= uf[1]
            glb[uf[0].__name__] = uf[0]
            b = scratch(i, out, ins)
            call = f"{uf[0].__name__}({', '.join(a)}, out="
            if b is None:
                name, bufs = new(out)
                if c_order:
                    glb[f"t{i}"] = out.aval.dtype.numpy
                    lines.append(f"{name} = {call}np.empty({out.aval.shape}, t{i}))")
                else:
                    lines.append(f"{name} = {call}...)")
            else:  # out as a positional argument: ~40 ns less argument parsing per call
                name, bufs, reused = f"s{b}", frozenset((b,)), True
                out_arg = f"out={name}" if uf[0] in _KEYWORD_OUT else name
                lines.append(f"{uf[0].__name__}({', '.join(a)}, {out_arg})")
            bind(out, name, bufs)
        elif k is K._broadcast_in_dim:
            view = (a[0] if _expanded(node) == ins[0].aval.shape else
                    f"{a[0]}.reshape({_expanded(node)})")
            lines.append(f"v{i} = {view}" if i in lazy else
                         f"v{i} = np.broadcast_to({view}, {node.params['shape']})")
            bind(out, f"v{i}", inner)
        elif k is K._convert and reuse and (b := scratch(i, out, ins)) is not None:
            src = a[0]
            if ins[0].aval.dtype.kind == "c" and out.aval.dtype.kind not in "cb":
                src = f"np.real({src})"
            quiet |= ins[0].aval.dtype.kind in "fc"
            lines.append(f"np.copyto(s{b}, {src}, casting='unsafe')")  # astype's cast
            bind(out, f"s{b}", frozenset((b,)))
            reused = True
        else:
            glb[f"k{i}"] = k
            call = f"k{i}({', '.join(a)}"
            if node.params:
                glb[f"p{i}"] = node.params
                call += f", **p{i}" if a else f"**p{i}"
            if reuse and out is not None and any(k is f for f in _FRESH):  # a new C-ordered buffer
                name, bufs = new(out)
                lines.append(f"{name} = {call})")
                bind(out, name, bufs)
                continue
            outs = [f"v{i}_{j}" for j in range(len(node.outputs))]
            target = ", ".join(outs) + ("," if node.prim.multiple_results and len(outs) == 1 else "")
            lines.append(f"{target or '_'} = {call})")
            for v, name in zip(node.outputs, outs):
                bind(v, name, inner)
    lines.append(GroupKernels.returned(graph, names, glb))
    return lines, quiet, reused


def _via_eval(graph: Any, *bufs: Any) -> tuple:
    """The group evaluated node by node through the runtime (a node has no numpy kernel)."""
    from tenferro_runtime.graph import eval_graph
    from tenferro_runtime.tensor import Tensor

    ts = [Tensor._new(b, v.aval) for b, v in zip(bufs, graph.inputs)]
    return tuple(t._buf for t in eval_graph(graph, *ts))


def _compile_into(graph: Any) -> tuple[Any, str]:
    """(`fused_into(*bufs, *outs)`, its source): the group writing output j into `outs[j]`
    where it is an array (C-contiguous, of the output's shape and dtype) and allocating it
    where it is None. Where an output's final buffer is a scratch buffer the group's ufuncs
    allocate, that allocation is the given array (the same loops, so the same bits); other
    outputs (an input, a view, a fresh kernel result, an output twice) are copied into it.
    A scan writes its stacked outputs in place this way (plan_codegen.generate_scan)."""
    from tenferro_runtime.graph import Var

    kernels = [_kernel_table(graph)(n.prim) for n in graph.nodes]
    n_out = len(graph.outputs)
    outs = [f"o{j}" for j in range(n_out)]
    glb: dict[str, Any] = {"np": np, "__name__": __name__, "_ok": _c_ordered,
                           "_run": _GROUPS.code(graph)[0], "_set": K.quiet_on, "_reset": K.quiet_off}
    args, names = _operands(graph, glb)
    lines = [f"def fused_into({', '.join(args + outs)}):"]
    direct: dict[int, str] = {}  # output -> the scratch buffer allocated as it
    fast: list = []
    if not any(k is None for k in kernels) and graph.nodes:
        fast, quiet, _ = _body(graph, kernels, glb, names, reuse=True)
        fast = fast[:-1]  # the return, made below
        seen: set = set()
        for j, v in enumerate(graph.outputs):
            name = names.get(v) if isinstance(v, Var) else None
            if not name or name in seen or not name.startswith("s"):
                continue
            seen.add(name)
            first = next((k for k, line in enumerate(fast) if line.startswith(f"{name} = ")), None)
            if first is not None and fast[first].endswith("out=...)"):
                fast[first] = fast[first][:-len("...)")] + f"{outs[j]} if {outs[j]} is not None else ...)"
                direct[j] = name
        values = [names[v] if isinstance(v, Var) else f"r{j}" for j, v in enumerate(graph.outputs)]
        for j, v in enumerate(graph.outputs):
            if not isinstance(v, Var):
                glb[f"r{j}"] = v._buf
        fast += [f"res = [{', '.join(values)}]"]
        fast += _copied([j for j in range(n_out) if j not in direct], outs)  # written in place: done
        fast = _quieted(fast, 2) if quiet else ["        " + line for line in fast]
        checks = " and ".join(f"({a}.flags.c_contiguous or _ok({a}))" for a in args) or "True"
        lines += [f"    if {checks}:", *fast, "        return res"]
    lines.append(f"    res = list(_run({', '.join(args)}))")
    lines += ["    " + line for line in _copied(range(n_out), outs)]
    lines.append("    return res")
    src = "\n".join(lines) + "\n"
    exec(compile(src, f"<tenferro_numpy fused group into {id(graph):#x}>", "exec"), glb)
    return glb["fused_into"], src


def _copied(js: Any, outs: list) -> list:
    """Lines copying each output j of `js` into its given array (the same values)."""
    lines = []
    for j in js:
        lines += [f"if {outs[j]} is not None:", f"    np.copyto({outs[j]}, res[{j}])",
                  f"    res[{j}] = {outs[j]}"]
    return lines


_GROUPS = GroupKernels("numpy_fused", _compile)
fused_kernel = _GROUPS.kernel
generated_source = _GROUPS.source


def specialized(graph: Any) -> Any:
    """The group's kernel (GroupKernels.specialized) with `into`: building `fused_into`
    (`_compile_into`, made once per group graph, on first use) for a loop writing the
    group's outputs into given arrays, and `empty`, the allocation those arrays come from."""
    kernel = _GROUPS.specialized(graph)
    kernel.into = lambda: _into(graph)[0]
    kernel.empty = np.empty
    return kernel


def _into(graph: Any) -> tuple[Any, str]:
    """`_compile_into(graph)`, kept in the group graph's derived data."""
    return graph.derived("numpy_fused_into", lambda: _compile_into(graph))


def into_source(graph: Any) -> str:
    """The generated `fused_into` code of `graph` (for debugging and tests)."""
    return _into(graph)[1]


__all__ = ["fused_kernel", "generated_source", "into_source", "specialized"]
