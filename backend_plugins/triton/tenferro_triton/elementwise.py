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
from dataclasses import dataclass, field
from typing import Any

from tenferro_core import dtypes as D
from tenferro_runtime.caches import LRUCache
from tenferro_runtime.eager import params_key

from . import codegen
from .cache import interpreted
from .executor import Unsupported

BLOCK = 1024
"""Elements per program (at most; fewer for smaller outputs)."""

_KERNELS = LRUCache("triton elementwise kernels", 1024)  # (group key, strides, block) -> launch data
_BITS = {1: D.uint8, 2: D.int16, 4: D.int32, 8: D.int64}


@dataclass
class _Access:
    """A read or write of the kernel: a group input ("in"), a constant passed by pointer
    ("const"), an iota's index ("iota") or an output ("out"); `map` gives, per axis of the
    value, the iteration axis it walks (None for size-1 axes)."""

    kind: str
    slot: int
    shape: tuple
    map: tuple
    strides: tuple = ()  # fixed ones (constants, outputs, iota); inputs' come per call


@dataclass
class _Spec:
    """What a group's kernels share, whatever the strides of its operands."""

    key: tuple
    name: str
    space: tuple
    out_avals: list
    consts: list  # buffers passed by pointer, in order
    accesses: list = field(default_factory=list)
    lines: list = field(default_factory=list)  # body, with @OFFk@ / @MASKk@ per access k
    used_inputs: list = field(default_factory=list)
    stored: list = field(default_factory=list)  # output indices written by the kernel


def group_kernel(group: Any, device: Any) -> Any:
    """A kernel ``(*input buffers) -> [output buffers]`` running one generated Triton kernel
    for the fused `group` on torch `device`; raises `Unsupported` (the group then runs its
    torch kernels) for a dtype or primitive without generated code."""
    spec = _analyze(group, device)
    import torch

    dev = torch.device(device.id)
    outs = [(a.shape, _torch_dtype(a.dtype)) for a in spec.out_avals]
    table: dict = {}

    def launcher(strides: tuple) -> Any:
        if not spec.stored:  # every output is empty: nothing to launch
            fn, grid, warps = None, 0, 0
        else:
            fn, grid, warps = _KERNELS.get_or_build((spec.key, strides, BLOCK), _build, spec,
                                                    strides)
        used, stored = spec.used_inputs, spec.stored
        consts = spec.consts

        def run(bufs: tuple) -> list:
            results = [torch.empty(s, dtype=t, device=dev) for s, t in outs]
            if grid:
                args = [bufs[i] for i in used] + consts + [results[j] for j in stored]
                if dev.type == "cuda" and torch.cuda.current_device() != dev.index:
                    with torch.cuda.device(dev):
                        fn[(grid,)](*args, num_warps=warps)
                else:
                    fn[(grid,)](*args, num_warps=warps)
            return results

        return run

    def kernel(*bufs: Any) -> list:
        strides = tuple([b.stride() for b in bufs])
        run = table.get(strides)
        if run is None:
            run = table[strides] = launcher(strides)
        return run(bufs)

    kernel.__name__ = spec.name
    return kernel


def _torch_dtype(dtype: D.DType) -> Any:
    from tenferro_torch.ops.common import TO_TORCH

    return TO_TORCH[dtype]


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
                raise Unsupported(f"outputs of shapes {o.aval.shape} and {space} in one group "
                                  f"(no axis map from the one onto the other)")
            seeds.append((o, m))
            need = _propagate(group.nodes, seeds)
    prims = [n.prim.name for n in group.nodes if n.prim.name != "broadcast_in_dim"]
    name = "ew_" + "_".join(dict.fromkeys(prims[:4]))
    spec = _Spec(tuple(key), name, space, [o.aval for o in group.outputs], [])
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

    if type(t) is not Tensor or t._aval.device is not device:
        raise Unsupported("a group constant is not a tensor on the group's device")
    if t._aval.dtype not in codegen.TL:
        raise Unsupported(f"a group constant of dtype {t._aval.dtype.name}")
    flat = t._buf.reshape(-1)
    if flat.numel() == 0:
        return None  # never read
    bits = flat.view(_torch_dtype(_BITS[flat.element_size()]))
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
    names: dict = {}
    lines, check = spec.lines, interpreted()

    def access(kind: str, slot: int, shape: tuple, m: tuple, strides: tuple = ()) -> int:
        spec.accesses.append(_Access(kind, slot, shape, m, strides))
        return len(spec.accesses) - 1

    def emit(name: str, expr: str, dtype: D.DType, what: str) -> None:
        lines.append(f"{name} = {expr}  # {what}")
        if check:  # the interpreter checks every value's type (codegen's promise)
            lines.append(f"tl.static_assert({name}.dtype == {codegen.TL[dtype]})")

    for i, v in enumerate(group.inputs):
        for m in need.get(v, ()):
            if i not in spec.used_inputs:
                spec.used_inputs.append(i)
            k = access("in", i, v.aval.shape, m)
            names[v, m] = f"x{k}"
            emit(f"x{k}", f"tl.load(in{i} + @OFF{k}@, mask=mask)", v.aval.dtype,
                 f"input {i} {v.aval.str_short()}")
    for j, (v, t) in enumerate(group.consts.items()):
        if not need.get(v):
            continue
        if literals[v] is not None:  # one value: a literal, whatever the map
            emit(f"k{j}", literals[v], v.aval.dtype, f"constant {v.aval.str_short()}")
            names.update(((v, m), f"k{j}") for m in need[v])
            continue
        slot = len(spec.consts)
        spec.consts.append(t._buf.contiguous())
        for m in need[v]:
            k = access("const", slot, v.aval.shape, m, _contiguous(v.aval.shape))
            names[v, m] = f"c{k}"
            emit(f"c{k}", f"tl.load(const{slot} + @OFF{k}@, mask=mask)", v.aval.dtype,
                 f"constant {v.aval.str_short()}")
    count = 0
    for n in group.nodes:
        prim, o = n.prim.name, n.outputs[0]
        for m in need.get(o, ()):
            if prim == "broadcast_in_dim":
                x, bd = n.inputs[0], n.params["broadcast_dimensions"]
                names[o, m] = names[x, tuple(None if x.aval.shape[i] == 1 else m[bd[i]]
                                             for i in range(len(bd)))]
                continue
            dtype, out = o.aval.dtype, f"v{count}"
            count += 1
            if prim == "full":
                expr = codegen.constant(n.params["fill_value"], dtype, "[BLOCK]")
                if expr is None:
                    raise Unsupported(f"full of {n.params['fill_value']!r} has no exact literal")
            elif prim == "iota":
                dim = n.params["dimension"]
                k = access("iota", 0, o.aval.shape, m,
                           tuple(int(d == dim) for d in range(len(o.aval.shape))))
                expr = codegen.cast(f"(@OFF{k}@)", D.int64, dtype)
            else:
                expr = codegen.expression(prim, [names[u, m] for u in n.inputs],
                                          [u.aval.dtype for u in n.inputs], dtype, n.params)
            emit(out, expr, dtype, prim)
            names[o, m] = out
    for j, o in enumerate(group.outputs):
        if o.aval.size == 0:
            continue
        m = out_maps[o]
        k = access("out", j, o.aval.shape, m, _contiguous(o.aval.shape))
        spec.stored.append(j)
        lines.append(f"tl.store(out{j} + @OFF{k}@, {names[o, m]}, mask=@MASK{k}@)")


def _build(spec: _Spec, strides: tuple) -> tuple:
    """(jit function, programs, warps) of `spec` for inputs of these strides."""
    space = spec.space
    numel = math.prod(space)
    block = max(16, min(BLOCK, 1 << max(numel - 1, 0).bit_length()))
    effs, masks = [], []
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
    # merge neighbouring axes every access walks alike (row-major within the pair)
    groups: list = []  # [size, first axis, per-access stride]
    for d, n in enumerate(space):
        if n == 1:
            continue
        if groups and all(e[groups[-1][1]] == e[d] * n for e in effs) and all(
                (groups[-1][1] in mk) == (d in mk) for mk in masks):
            groups[-1][0] *= n
            for e in effs:
                e[groups[-1][1]] = e[d]
        else:
            groups.append([n, d])
    sizes = [g[0] for g in groups]
    flat = _contiguous(tuple(sizes))
    wide = numel + block >= 2**31 or any(
        sum((g[0] - 1) * abs(e[g[1]]) for g in groups) >= 2**31 for e in effs)
    needed: set = set()
    offsets = []
    for e, mk in zip(effs, masks):
        st = [e[g[1]] for g in groups]
        if st == list(flat) and sizes:
            offsets.append("offs")
        else:
            offsets.append(codegen.strided_offset([f"i{c}" for c in range(len(groups))], st))
            needed.update(c for c, s in enumerate(st) if s)
        needed.update(c for c, g in enumerate(groups) if g[1] in mk)
    pid = "pid.to(tl.int64)" if wide else "pid"
    head = ["pid = tl.program_id(0)", f"offs = {pid} * BLOCK + tl.arange(0, BLOCK)",
            f"mask = offs < {numel}"]
    for c in sorted(needed):
        inner = math.prod(sizes[c + 1:])
        idx = f"offs // {inner}" if inner > 1 else "offs"
        head.append(f"i{c} = {idx} % {sizes[c]}" if c else f"i{c} = {idx}")
    if any(o == "0" for o in offsets):
        head.append("zero = offs * 0")
    body = []
    for line in spec.lines:
        for k, (o, mk) in enumerate(zip(offsets, masks)):
            line = line.replace(f"@OFF{k}@", "zero" if o == "0" else o)
            mask = " & ".join(["mask"] + [f"(i{c} == 0)" for c, g in enumerate(groups) if g[1] in mk])
            line = line.replace(f"@MASK{k}@", mask)
        body.append(line)
    params = [f"in{i}" for i in spec.used_inputs] + [f"const{i}" for i in range(len(spec.consts))]
    params += [f"out{j}" for j in spec.stored]
    avals = ", ".join(a.str_short() for a in spec.out_avals)
    source = "\n".join([
        '"""Generated by tenferro_triton.elementwise: one fused elementwise group."""',
        "import triton", "import triton.language as tl", "", f"BLOCK = tl.constexpr({block})",
        "", "", "@triton.jit", f"def {spec.name}({', '.join(params)}):",
        f"    # iteration space {space} ({numel} elements), outputs {avals}",
        f"    # input strides {strides}, merged axes {tuple(sizes)}",
        *("    " + line for line in head + body), ""])
    fn = codegen.load(source, spec.name)
    warps = min(4, max(1, block // 256))
    return fn, -(-numel // block), warps


def bench_chain(n_ops: int = 10, numel: int = 1 << 26, device: str = "torch:cuda:0") -> dict:
    """Bandwidth of a fused chain of `n_ops` float32 elementwise ops (one read, one write)
    against ``y.copy_(x)`` on a GPU: {"fused_gbps", "copy_gbps", "ratio", "ms"}."""
    import torch
    from triton.testing import do_bench

    from tenferro_runtime import array_api as xp
    from tenferro_runtime import default_runtime, lax, trace
    from tenferro_runtime.passes.fusion import fuse_elementwise

    def chain(x: Any) -> Any:
        two = xp.asarray(1.0001, dtype=D.float32, device=device)
        for i in range(n_ops):
            x = [lax.mul, lax.add, lax.sub, lax.maximum][i % 4](x, lax.broadcast_in_dim(
                two, shape=x.shape, broadcast_dimensions=()))
        return x

    x = xp.asarray(torch.rand(numel, device=device.partition(":")[2]), device=device)
    fused = fuse_elementwise(trace(chain, x))
    (node,) = [n for n in fused.nodes if n.prim.name == "fused"]
    kernel = group_kernel(node.params["graph"], default_runtime().device(device))
    buf, out = x._buf, torch.empty_like(x._buf)
    ms = do_bench(lambda: kernel(buf))
    copy_ms = do_bench(lambda: out.copy_(buf))
    gbytes = 2 * numel * 4 / 1e9
    return {"fused_gbps": gbytes / ms * 1e3, "copy_gbps": gbytes / copy_ms * 1e3,
            "ratio": copy_ms / ms, "ms": ms}


__all__ = ["BLOCK", "bench_chain", "group_kernel"]
