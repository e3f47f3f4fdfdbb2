"""Fused elementwise groups as one generated Triton kernel each (DESIGN.md section 11).

A group (passes/fusion.py: elementwise and broadcast_in_dim nodes, the constants they read,
outputs) runs as one kernel over a 1-D grid. Each program takes BLOCK consecutive linear
indices of the iteration space (the largest output's shape), unravels them into the axes it
needs, loads every operand at its own offset (its strides, 0 along axes it is broadcast on),
evaluates the nodes as Triton expressions (codegen.py) and stores each output; an output
smaller than the iteration space is stored where the axes it lacks are 0. Axes that every
access walks alike are merged first, so contiguous operands are read at the linear index.

Shapes, strides and scalar constants are literals of the source: a kernel is generated once
per (group signature, operand strides) and cached; a call only allocates and launches.
`bench_chain` measures a fused chain's bandwidth against a copy (GPU only).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tenferro_core import dtypes as D
from tenferro_runtime.caches import LRUCache
from tenferro_runtime.eager import params_key

from . import codegen
from .cache import interpreted
from .executor import Unsupported
from .launch import Launcher

BLOCK = 1024
"""Elements per program (at most; fewer for smaller outputs)."""
OPTIONS = {"enable_fp_fusion": False}
"""Launch options: no FMA contraction, so each node rounds once, as its torch kernel does."""

_KERNELS = LRUCache("triton elementwise kernels", 1024)  # (group key, strides, block) -> launch data
_BITS = {1: D.uint8, 2: D.int16, 4: D.int32, 8: D.int64}


@dataclass
class _Access:
    """A read or write of the kernel: a group input ("in"), a constant passed by pointer
    ("const"), an iota's index ("iota") or an output ("out"). `map` gives, per axis of the
    value, the iteration axis it walks (None for size-1 axes); `strides` are fixed but for
    inputs, whose strides come with each call."""

    kind: str
    slot: int
    map: tuple
    strides: tuple = ()


@dataclass
class _Spec:
    """What a group's kernels share, whatever the strides of its operands."""

    key: tuple
    name: str
    space: tuple
    out_avals: list
    consts: list = field(default_factory=list)  # buffers passed by pointer, in order
    accesses: list = field(default_factory=list)
    lines: list = field(default_factory=list)  # the body, with @OFFk@ / @MASKk@ per access k
    used_inputs: list = field(default_factory=list)
    stored: list = field(default_factory=list)  # indices of the outputs the kernel writes


class _Unmappable(Unsupported):
    """Outputs of one group that no single iteration space covers."""


def group_kernel(group: Any, device: Any) -> Any:
    """A kernel ``(*input buffers) -> [output buffers]`` running one generated Triton kernel
    for the fused `group` on torch `device` (one per iteration space where the group's
    outputs have several, as an optimizer's update of parameters of different shapes);
    raises `Unsupported` (the group then runs its torch kernels) for a dtype or primitive
    without generated code."""
    try:
        return _space_kernel(group, device)
    except _Unmappable:
        parts = _split_by_space(group)
        if len(parts) < 2:
            raise
    kernels = [(idx, _space_kernel(sub, device)) for idx, sub in parts]
    n_out = len(group.outputs)

    def kernel(*bufs: Any) -> list:
        results: list = [None] * n_out
        for idx, k in kernels:
            for i, r in zip(idx, k(*bufs)):
                results[i] = r
        return results

    kernel.__name__ = "+".join(k.__name__ for _, k in kernels)
    return kernel


def _split_by_space(group: Any) -> list:
    """[(output indices, sub-group)] with one iteration space each: outputs of the largest
    shape first, each other output with the first space it maps onto; a sub-group keeps the
    group's inputs and the nodes its outputs need (shared scalar work is recomputed)."""
    from tenferro_runtime.graph import Graph

    spaces: list = []  # [shape, [output indices]]
    order = sorted(range(len(group.outputs)), key=lambda i: -group.outputs[i].aval.size)
    for i in order:
        shape = group.outputs[i].aval.shape
        for space, idx in spaces:
            if shape == space or _match(shape, space) is not None:
                idx.append(i)
                break
        else:
            spaces.append((shape, [i]))
    parts = []
    for _, idx in spaces:
        idx.sort()
        needed = {group.outputs[i] for i in idx}
        nodes = []
        for n in reversed(group.nodes):
            if any(o in needed for o in n.outputs):
                nodes.append(n)
                needed.update(n.inputs)
        nodes.reverse()
        sub = Graph(inputs=list(group.inputs), nodes=nodes,
                    outputs=[group.outputs[i] for i in idx],
                    consts={v: c for v, c in group.consts.items() if v in needed})
        parts.append((idx, sub))
    return parts


def _space_kernel(group: Any, device: Any) -> Any:
    """`group_kernel` for a group whose outputs share one iteration space."""
    import torch

    from tenferro_torch.ops.common import TO_TORCH

    spec = _analyze(group, device)
    dev = torch.device(device.id)
    outs = [(a.shape, TO_TORCH[a.dtype]) for a in spec.out_avals]
    launches: dict = {}  # input strides -> (jit function, programs, warps)

    def kernel(*bufs: Any) -> list:
        strides = tuple([b.stride() for b in bufs])
        launch = launches.get(strides, False)
        if launch is False:
            fn, grid, warps = _KERNELS.get_or_build(
                (spec.key, strides, BLOCK), _build, spec, strides) if spec.stored else (None, 0, 0)
            launch = launches[strides] = Launcher(fn, (grid,), **OPTIONS, num_warps=warps) if grid else None
        results = [torch.empty(s, dtype=t, device=dev) for s, t in outs]
        if launch is not None:
            args = [bufs[i] for i in spec.used_inputs] + spec.consts
            args += [results[j] for j in spec.stored]
            launch(*args)
        return results

    kernel.__name__ = spec.name
    return kernel


# ---- analysis: iteration space, which value is needed under which axis map ----------


def _analyze(group: Any, device: Any) -> _Spec:
    ids: dict = {}
    key: list = [tuple((v.aval.shape, v.aval.dtype) for v in group.inputs)]
    for v in group.inputs:
        ids[v] = len(ids)
    literals: dict = {}
    for v, t in group.consts.items():
        ids[v] = len(ids)
        lit = _literal(t, device)
        literals[v] = lit
        key.append(("const", v.aval.shape, v.aval.dtype, lit))
    for n in group.nodes:
        _check(n)
        for o in n.outputs:
            ids[o] = len(ids)
        key.append((n.prim.name, params_key(n.prim, n.params), tuple(ids[u] for u in n.inputs),
                    tuple((o.aval.shape, o.aval.dtype) for o in n.outputs)))
    key.append(tuple(ids[o] for o in group.outputs))
    live = [o for o in group.outputs if o.aval.size > 0]
    space = max((o.aval.shape for o in live), key=math.prod, default=())
    seeds = [(o, _identity(space)) for o in live if o.aval.shape == space]
    need = _propagate(group.nodes, seeds)
    for o in live:  # smaller outputs: under the map their uses give them, else any that fits
        if o.aval.shape != space:
            m = need[o][0] if need.get(o) else _match(o.aval.shape, space)
            if m is None:
                raise _Unmappable(f"outputs of shapes {o.aval.shape} and {space} in one group "
                                  f"(no axis map from the one onto the other)")
            seeds.append((o, m))
            need = _propagate(group.nodes, seeds)
    prims = [n.prim.name for n in group.nodes if n.prim.name != "broadcast_in_dim"]
    name = "ew_" + "_".join(dict.fromkeys(prims[:4]))
    spec = _Spec(tuple(key), name, space, [o.aval for o in group.outputs])
    if live:
        _body(spec, group, need, literals, dict(seeds))
    return spec


def _check(node: Any) -> None:
    prim = node.prim
    if prim.category not in ("elementwise", "broadcast"):
        raise Unsupported(f"{prim.name} is no elementwise primitive")
    dtypes = [v.aval.dtype for v in node.inputs + node.outputs]
    bad = [d.name for d in dtypes if d not in codegen.TL]
    if bad:
        raise Unsupported(f"{prim.name} on {bad[0]} (no Triton dtype)")
    if prim.name in ("broadcast_in_dim", "iota", "full"):
        return
    names = [f"a{i}" for i in range(len(node.inputs))]
    if len(node.outputs) != 1 or codegen.expression(
            prim.name, names, [v.aval.dtype for v in node.inputs], node.outputs[0].aval.dtype,
            node.params) is None:
        sig = ", ".join(v.aval.dtype.name for v in node.inputs) or node.outputs[0].aval.dtype.name
        raise Unsupported(f"no generated code for {prim.name}({sig})")


def _literal(t: Any, device: Any) -> str | None:
    """A constant's value as a literal when all its elements have the same bits (scalars,
    folded broadcasts of one), else None: it is passed by pointer."""
    from tenferro_runtime.tensor import Tensor
    from tenferro_torch.ops.common import TO_TORCH

    if type(t) is not Tensor or t._aval.device is not device:
        raise Unsupported("a group constant is not a tensor on the group's device")
    if t._aval.dtype not in codegen.TL:
        raise Unsupported(f"a group constant of dtype {t._aval.dtype.name}")
    flat = t._buf.reshape(-1)
    if flat.numel() == 0:
        return None  # never read
    bits = flat.view(TO_TORCH[_BITS[flat.element_size()]])
    if flat.numel() > 1 and not bool((bits == bits[0]).all()):
        return None
    first = bits[:1].cpu().numpy().view(t._aval.dtype.numpy)[0]  # NumPy has bfloat16 (ml_dtypes)
    return codegen.constant(first, t._aval.dtype, "[BLOCK]")


def _identity(space: tuple) -> tuple:
    return tuple(None if n == 1 else d for d, n in enumerate(space))


def _match(shape: tuple, space: tuple) -> tuple | None:
    """A map of `shape`'s axes onto distinct axes of `space` of the same sizes, in order
    where possible, or None."""
    m: list = [None] * len(shape)
    used: set = set()
    last = len(space)
    for j in reversed(range(len(shape))):
        if shape[j] == 1:
            continue
        fits = [d for d in reversed(range(len(space))) if space[d] == shape[j] and d not in used]
        if not fits:
            return None
        d = next((d for d in fits if d < last), fits[0])
        m[j], last = d, d
        used.add(d)
    return tuple(m)


def _propagate(nodes: list, seeds: list) -> dict:
    """Var -> the axis maps it is needed under, from the outputs' maps backward."""
    need: dict = {}
    for v, m in seeds:
        _add(need, v, m)
    for n in reversed(nodes):
        for m in list(need.get(n.outputs[0], ())):
            if n.prim.name == "broadcast_in_dim":
                x, bd = n.inputs[0], n.params["broadcast_dimensions"]
                _add(need, x, tuple(None if x.aval.shape[i] == 1 else m[bd[i]] for i in range(len(bd))))
            else:
                for u in n.inputs:
                    _add(need, u, m)
    return need


def _add(need: dict, v: Any, m: tuple) -> None:
    maps = need.setdefault(v, [])
    if m not in maps:
        maps.append(m)


def _contiguous(shape: tuple) -> tuple:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return tuple(reversed(strides))


# ---- the kernel body (stride-independent) and the source per strides ---------------


def _body(spec: _Spec, group: Any, need: dict, literals: dict, out_maps: dict) -> None:
    """The kernel's statements in node order, one value per (Var, axis map) needed; loads'
    offsets and stores' masks are left as @OFFk@ / @MASKk@ (they depend on strides)."""
    names: dict = {}
    lines, check = spec.lines, interpreted()

    def access(kind: str, slot: int, m: tuple, strides: tuple = ()) -> int:
        spec.accesses.append(_Access(kind, slot, m, strides))
        return len(spec.accesses) - 1

    def emit(v: Any, m: tuple, name: str, expr: str, what: str) -> None:
        names[v, m] = name
        lines.append(f"{name} = {expr}  # {what}")
        if check:  # the interpreter checks every value's type (codegen's promise)
            lines.append(f"tl.static_assert({name}.dtype == {codegen.TL[v.aval.dtype]})")

    def suffix(maps: list, m: tuple) -> str:
        return "" if len(maps) == 1 else f"_{maps.index(m)}"

    for i, v in enumerate(group.inputs):
        maps = need.get(v, [])
        if maps:
            spec.used_inputs.append(i)
        for m in maps:
            k = access("in", i, m)
            emit(v, m, f"x{i}{suffix(maps, m)}", f"tl.load(in{i} + @OFF{k}@, mask=mask)",
                 f"input {i} {v.aval.str_short()}")
    for j, (v, t) in enumerate(group.consts.items()):
        maps = need.get(v, [])
        if maps and literals[v] is not None:  # one value: a literal, whatever the map
            emit(v, maps[0], f"k{j}", literals[v], f"constant {v.aval.str_short()}")
            names.update(((v, m), f"k{j}") for m in maps)
        elif maps:
            slot = len(spec.consts)
            spec.consts.append(t._buf.contiguous())
            for m in maps:
                k = access("const", slot, m, _contiguous(v.aval.shape))
                emit(v, m, f"c{j}{suffix(maps, m)}", f"tl.load(const{slot} + @OFF{k}@, mask=mask)",
                     f"constant {v.aval.str_short()}")
    count = 0
    for n in group.nodes:
        prim, o = n.prim.name, n.outputs[0]
        for m in need.get(o, ()):
            if prim == "broadcast_in_dim":  # no code: the operand under the derived map
                x, bd = n.inputs[0], n.params["broadcast_dimensions"]
                names[o, m] = names[x, tuple(None if x.aval.shape[i] == 1 else m[bd[i]]
                                             for i in range(len(bd)))]
                continue
            dtype = o.aval.dtype
            if prim == "full":
                expr = codegen.constant(n.params["fill_value"], dtype, "[BLOCK]")
                if expr is None:
                    raise Unsupported(f"full of {n.params['fill_value']!r} has no exact literal")
            elif prim == "iota":  # the index along `dimension`: an access of unit stride there
                dim = n.params["dimension"]
                k = access("iota", 0, m, tuple(int(d == dim) for d in range(len(o.aval.shape))))
                expr = codegen.cast(f"(@OFF{k}@).to(tl.int64)", D.int64, dtype)
            else:
                expr = codegen.expression(prim, [names[u, m] for u in n.inputs],
                                          [u.aval.dtype for u in n.inputs], dtype, n.params)
            emit(o, m, f"v{count}", expr, prim)
            count += 1
    for j, o in enumerate(group.outputs):
        if o.aval.size:
            m = out_maps[o]
            k = access("out", j, m, _contiguous(o.aval.shape))
            spec.stored.append(j)
            lines.append(f"tl.store(out{j} + @OFF{k}@, {names[o, m]}, mask=@MASK{k}@)")


def _build(spec: _Spec, strides: tuple) -> tuple:
    """(jit function, programs, warps) of `spec` for inputs of these strides."""
    space = spec.space
    numel = math.prod(space)
    block = max(16, min(BLOCK, 1 << max(numel - 1, 0).bit_length()))
    effs, masks = [], []  # per access: stride along each iteration axis; axes it must be 0 on
    for a in spec.accesses:
        st = strides[a.slot] if a.kind == "in" else a.strides
        eff = [0] * len(space)
        for j, d in enumerate(a.map):
            if d is not None:
                eff[d] = st[j]
        effs.append(eff)
        image = {d for d in a.map if d is not None}
        masks.append(frozenset(d for d, n in enumerate(space) if n > 1 and d not in image)
                     if a.kind == "out" else frozenset())
    groups: list = []  # merged axes: [size, first axis]; effs keep the innermost's stride there
    for d, n in enumerate(space):
        if n == 1:
            continue
        g = groups[-1] if groups else None
        if g and all(e[g[1]] == e[d] * n for e in effs) and all(
                (g[1] in mk) == (d in mk) for mk in masks):
            g[0] *= n
            for e in effs:
                e[g[1]] = e[d]
        else:
            groups.append([n, d])
    sizes = [g[0] for g in groups]
    flat = list(_contiguous(tuple(sizes)))
    index = [f"i{c}" for c in range(len(groups))]
    wide = numel + block >= 2**31 or any(
        sum((g[0] - 1) * abs(e[g[1]]) for g in groups) >= 2**31 for e in effs)
    needed: set = set()
    subst: dict = {}
    for k, (e, mk) in enumerate(zip(effs, masks)):
        st = [e[g[1]] for g in groups]
        off = "offs" if sizes and st == flat else codegen.strided_offset(index, st)
        subst[f"@OFF{k}@"] = "zero" if off == "0" else off
        cond = [f"(i{c} == 0)" for c, g in enumerate(groups) if g[1] in mk]
        subst[f"@MASK{k}@"] = " & ".join(["mask", *cond])
        needed.update(c for c, s in enumerate(st) if s and off != "offs")
        needed.update(c for c, g in enumerate(groups) if g[1] in mk)
    head = ["pid = tl.program_id(0)",
            f"offs = {'pid.to(tl.int64)' if wide else 'pid'} * BLOCK + tl.arange(0, BLOCK)",
            f"mask = offs < {numel}"]
    for c in sorted(needed):
        inner = math.prod(sizes[c + 1:])
        idx = f"offs // {inner}" if inner > 1 else "offs"
        head.append(f"i{c} = {idx} % {sizes[c]}" if c else f"i{c} = {idx}")
    if "zero" in subst.values():
        head.append("zero = offs * 0")
    body = [re.sub(r"@(OFF|MASK)\d+@", lambda mo: subst[mo.group(0)], line) for line in spec.lines]
    params = [f"in{i}" for i in spec.used_inputs] + [f"const{i}" for i in range(len(spec.consts))]
    params += [f"out{j}" for j in spec.stored]
    source = "\n".join([
        '"""Generated by tenferro_triton.elementwise: one fused elementwise group."""',
        "import triton", "import triton.language as tl", "", f"BLOCK = tl.constexpr({block})",
        "", "", "@triton.jit", f"def {spec.name}({', '.join(params)}):",
        f"    # iteration space {space} ({numel} elements), outputs "
        f"{', '.join(a.str_short() for a in spec.out_avals)}",
        f"    # input strides {strides}, merged axes {tuple(sizes)}",
        *("    " + line for line in head + body), ""])
    fn = codegen.load(source, spec.name)
    return fn, -(-numel // block), min(4, max(1, block // 256))


def chain_kernel(n_ops: int, numel: int, device: str) -> tuple:
    """(kernel, input buffer, NumPy reference of the chain) for `bench_chain`: a float32
    vector through `n_ops` elementwise ops with 0-d constants, fused into one group."""
    import torch

    from tenferro_runtime import array_api as xp
    from tenferro_runtime import default_runtime, lax, trace
    from tenferro_runtime.passes.fusion import fuse_elementwise

    ops = [(lax.mul, np.multiply), (lax.add, np.add), (lax.sub, np.subtract),
           (lax.maximum, np.maximum)]

    def chain(x: Any) -> Any:
        c = xp.asarray(1.0001, dtype=D.float32, device=device)
        for i in range(n_ops):
            x = ops[i % 4][0](x, lax.broadcast_in_dim(c, shape=x.shape, broadcast_dimensions=()))
        return x

    def reference(x: np.ndarray) -> np.ndarray:
        for i in range(n_ops):
            x = ops[i % 4][1](x, np.float32(1.0001))
        return x

    x = xp.asarray(torch.rand(numel, device=torch.device(device.partition(":")[2])), device=device)
    (node,) = [n for n in fuse_elementwise(trace(chain, x)).nodes if n.prim.name == "fused"]
    return group_kernel(node.params["graph"], default_runtime().device(device)), x._buf, reference


def bench_chain(n_ops: int = 10, numel: int = 1 << 26, device: str = "torch:cuda:0") -> dict:
    """Bandwidth of one fused kernel for a chain of `n_ops` float32 elementwise ops (one
    read and one write per element) against ``y.copy_(x)``, on a GPU (triton.testing's
    do_bench): {"fused_gbps", "copy_gbps", "ratio" (fused / copy bandwidth), "ms"}."""
    import torch
    from triton.testing import do_bench

    kernel, buf, _ = chain_kernel(n_ops, numel, device)
    out = torch.empty_like(buf)
    ms = do_bench(lambda: kernel(buf))
    copy_ms = do_bench(lambda: out.copy_(buf))
    gbytes = 2 * numel * buf.element_size() / 1e9
    return {"fused_gbps": gbytes / ms * 1e3, "copy_gbps": gbytes / copy_ms * 1e3,
            "ratio": copy_ms / ms, "ms": ms}


__all__ = ["BLOCK", "OPTIONS", "bench_chain", "chain_kernel", "group_kernel"]
