"""Row groups: reductions over the trailing axes fused with their elementwise producers and
consumers, each one generated Triton kernel (softmax, log-softmax, layer norm and its
backward: one kernel each instead of 4-10 launches with row-sized temporaries).

`find_groups(graph)` picks, around each row reduction (reduce_sum / max / min / prod over
the trailing axes ``C`` of an operand ``R + C``), the largest convex set of neighbouring
nodes whose values are full rows, per-row values (``R``, possibly with size-1 axes),
per-column values (``C``) or scalars of the same space: `fused` elementwise groups, single
elementwise and broadcast nodes, reshapes that only add or drop size-1 axes, and the other
reductions of that space. `row_kernel(group, device)` generates the kernel (rows_source.py:
one program per block of rows, the whole row one block up to `SINGLE_PASS_MAX` columns,
else `CHUNK`-column loops) or returns None, logging why, for the torch kernels to run.
Only `row_kernel` imports triton and torch.
"""

from __future__ import annotations

import logging
import math
import threading
from functools import lru_cache
from typing import Any

from . import codegen
from .cache import interpreted
from .codegen import TL
from .launch import Launcher
from .rows_source import (
    ROW_REDUCTIONS,
    Program,
    Unsupported,
    analyze,
    blocks,
    column_values,
    row_space,
    source,
)

log = logging.getLogger("tenferro_triton")

SINGLE_PASS_MAX = 16384
"""Rows up to this many columns are one block (each input read once); longer rows loop."""
CHUNK = 4096
"""Columns per step of the loops over long rows (a power of two)."""
ROW_ELEMS = 512
"""Elements a program handles when rows are short (more rows per program); the
interpreter takes 128x more (fewer, larger NumPy steps). H200, float32, 4096 rows, us
(`bench/gpu_rows_sweep.py`): softmax at L=256 7.6 here (2 rows, 2 warps) against 8.9 with
4096 (16 rows, 8 warps) and torch's 8.0; at L=512 9.0 against 11.2 and torch's 10.3."""
LIVE_ELEMS = 1 << 17
"""Column elements of all its values a one-pass program may hold (registers): a group of
many values (layer norm's backward) loops over chunks from shorter rows on."""
FEW_LONG_ROWS = (128, 1 << 15)
"""Fewer rows than [0] of more columns than [1] are left to torch, whose reductions spread
a row over many programs: one program per row leaves most of a GPU's SMs idle. H100, max over
the rows, float32: 8 x 262144 took 62 us generated, 14 us in torch; 16 x 131072 35 vs 14;
128 x 32768 16 vs 17.5 (kept); docs/performance.md, "GPU check"."""


# ---- groups ----------------------------------------------------------------------------

def _seed(node: Any) -> tuple | None:
    """(device, R, C) of a row reduction, else None (logged at DEBUG for reductions)."""
    from tenferro_runtime.passes.fusion import node_device

    prim = node.prim
    if prim.category != "reduction":
        return None
    x = node.inputs[0].aval
    why = None
    sp = row_space(x.shape, tuple(sorted(node.params.get("axes", ()))))
    if prim.name not in ROW_REDUCTIONS:
        why = "not a sum, max, min or prod"
    elif sp is None:
        why = f"axes {node.params['axes']} are not the trailing axes of {x.str_short()}"
    elif x.dtype not in TL or x.dtype.kind == "b":
        why = f"{x.dtype} values"
    elif math.prod(sp[0]) < FEW_LONG_ROWS[0] and math.prod(sp[1]) > FEW_LONG_ROWS[1]:
        why = f"{math.prod(sp[0])} row(s) of {math.prod(sp[1])} elements (torch splits long rows)"
    elif node_device(node) is None:
        why = "values on several devices"
    if why is not None:
        log.debug("rows: %s at %s is no row group: %s", prim.name, node.site, why)
        return None
    return (node_device(node), *sp)


def _fits_value(aval: Any, sizes: tuple) -> bool:
    from .rows_source import _candidates

    return aval.dtype in TL and bool(_candidates(aval.shape, sizes, limit=1))


def _fits_prim(node: Any) -> bool:
    prim = node.prim
    if prim.effects or len(node.outputs) != 1:
        return False
    if prim.category == "elementwise":
        return bool(node.inputs) and codegen.expression(
            prim.name, ["a"] * len(node.inputs), [v.aval.dtype for v in node.inputs],
            node.outputs[0].aval.dtype, node.params) is not None
    if prim.name == "reshape":
        return ([s for s in node.inputs[0].aval.shape if s != 1]
                == [s for s in node.outputs[0].aval.shape if s != 1])
    return prim.name == "broadcast_in_dim"


def _fits(node: Any, space: tuple) -> bool:
    """True when `node` can join a row group of `space`: elementwise work on values of it."""
    from tenferro_runtime.graph import Var
    from tenferro_runtime.graph_prims import fused_p
    from tenferro_runtime.passes.fusion import node_device

    dev, r, c = space
    if node_device(node) is not dev:
        return False
    sizes = tuple(s for s in r + c if s != 1)
    if node.prim is fused_p:
        inner = node.params["graph"]
        if not all(_fits_prim(n) for n in inner.nodes) or not all(
                isinstance(v, Var) for v in inner.outputs):
            return False
        values = [*inner.inputs, *inner.consts, *(v for n in inner.nodes for v in n.outputs)]
    elif _fits_prim(node):
        values = [*node.inputs, *node.outputs]
    else:
        return False
    return all(_fits_value(v.aval, sizes) for v in values)


def find_groups(graph: Any) -> list[list[int]]:
    """Node indices of each row group of `graph` (ascending, disjoint, convex): grown from
    each row reduction by its producers and users that fit its row space, and by the nodes
    that read the same full rows (one read of a row for all), one node at a time (lowest
    index first), skipping a node whose addition would let a path leave the group and
    re-enter it (other row groups counting as one node)."""
    from tenferro_runtime.passes.fusion import bits, closes_cycle

    nodes = graph.nodes
    producer: dict[Any, int] = {}
    readers: dict[Any, list[int]] = {}
    users: list[list[int]] = [[] for _ in nodes]
    producers: list[set] = []
    for i, n in enumerate(nodes):
        ps = {producer[v] for v in n.inputs if v in producer}
        producers.append(ps)
        for p in ps:
            users[p].append(i)
        for v in n.inputs:
            readers.setdefault(v, []).append(i)
        producer.update((v, i) for v in n.outputs)
    space = [_seed(n) for n in nodes]
    fits: dict[int, bool] = {}
    group_of: dict[int, int] = {}
    members: dict[int, int] = {}
    for s, sp in enumerate(space):
        if sp is None or s in group_of:
            continue
        m, grown, full = 1 << s, True, sp[1] + sp[2]
        while grown:
            grown = False
            near = {j for i in bits(m) for j in (*producers[i], *users[i])}
            near.update(j for i in bits(m) for v in nodes[i].inputs
                        if v.aval.shape == full for j in readers[v])
            for j in sorted(near):
                if (m >> j) & 1 or j in group_of:
                    continue
                if space[j] != sp:
                    if space[j] is not None:
                        continue
                    if j not in fits:
                        fits[j] = _fits(nodes[j], sp)
                    if not fits[j]:
                        continue
                m2 = m | (1 << j)
                if not closes_cycle(m2, m2.bit_length() - 1, users, group_of, members):
                    m, grown = m2, True
        members[s] = m
        group_of.update((j, s) for j in bits(m))
    return sorted((list(bits(m)) for m in members.values()), key=lambda g: g[0])


# ---- kernels ---------------------------------------------------------------------------

def _program(group: Any) -> tuple[Program, list]:
    """The group graph's canonical Program and the constant buffers it reads (constants
    holding one value repeated become literals of the source)."""
    index: dict[Any, int] = {}
    ins, lits, loaded = [], [], []
    for v in group.inputs:
        index[v] = len(ins)
        ins.append((v.aval.shape, v.aval.dtype))
    lit_vars = []
    for v, t in group.consts.items():
        value = _uniform(t._buf, v.aval.dtype) if v.aval.dtype in TL else None
        if value is None:
            index[v] = len(ins)
            ins.append((v.aval.shape, v.aval.dtype))
            loaded.append(t._buf)
        else:
            lit_vars.append(v)
            lits.append((v.aval.shape, v.aval.dtype, value))
    for k, v in enumerate(lit_vars):
        index[v] = len(ins) + k
    nodes = []
    for n in group.nodes:
        if len(n.outputs) != 1:
            raise Unsupported(f"{n.prim.name} has {len(n.outputs)} results")
        index[n.outputs[0]] = len(ins) + len(lits) + len(nodes)
        out = n.outputs[0].aval
        nodes.append((n.prim.name, n.prim.category, tuple(sorted(n.params.items())),
                      tuple(index[v] for v in n.inputs), (out.shape, out.dtype)))
    first_node = len(ins) + len(lits)
    outs = tuple(index.get(v, -1) for v in group.outputs)
    if any(i < first_node for i in outs):
        raise Unsupported("a group output is no node's result")
    prog = Program(tuple(ins), tuple(lits), tuple(nodes), outs)
    try:
        hash(prog)
    except TypeError:
        raise Unsupported("a node has params that do not hash") from None
    return prog, loaded


def _uniform(buf: Any, dtype: Any) -> Any:
    """The one value every element of a (small) torch buffer holds (bit for bit) when a
    literal can reproduce it, else None."""
    import torch

    n = buf.numel()
    if n == 0 or n > 1 << 16 or buf.is_complex():
        return None
    flat = buf.reshape(-1)
    if flat.is_floating_point():
        flat = flat.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()])
    if not bool((flat == flat[0]).all()):
        return None
    value = buf.reshape(-1)[0].item()
    try:
        return value if codegen.constant(value, dtype, "[1, 1]") is not None else None
    except Exception:  # noqa: BLE001  (a dtype without a NumPy twin here: load it instead)
        return None


class _RowKernel:
    """A row group's Program and layouts, with one loaded kernel per operand stride pattern."""

    def __init__(self, prog: Program, lay: Any):
        from tenferro_torch.ops.common import TO_TORCH

        self.prog, self.lay = prog, lay
        self.live = column_values(prog, lay)
        missing = {prog.value(i)[1] for i in prog.outs} - TO_TORCH.keys()
        if missing:
            raise Unsupported(f"torch has no buffers of {sorted(d.name for d in missing)}")
        self.out_types = [(prog.value(i)[0], TO_TORCH[prog.value(i)[1]]) for i in prog.outs]
        self.variants: dict = {}
        self.launches: dict = {}  # operand strides -> Launcher
        self.lock = threading.Lock()

    def variant(self, strides: tuple, wide: bool) -> tuple:
        elems = ROW_ELEMS * (128 if interpreted() else 1)
        key = (strides, wide, SINGLE_PASS_MAX, CHUNK, elems, LIVE_ELEMS)
        hit = self.variants.get(key)
        if hit is None:
            with self.lock:
                b = blocks(self.lay, SINGLE_PASS_MAX, CHUNK, elems, self.live, LIVE_ELEMS)
                src = source(self.prog, self.lay, b, strides, wide)
                hit = self.variants[key] = (codegen.load(src, "row_kernel"), b)
        return hit

    def __call__(self, bufs: list) -> list:
        import torch

        strides = tuple(b.stride() for b in bufs)
        hit = self.launches.get(strides)  # the shapes are the graph's: strides pick the kernel
        if hit is None:
            span = max((sum((s - 1) * st for s, st in zip(b.shape, b.stride()) if s) for b in bufs),
                       default=0)
            wide = span >= 2**31 - 1 or any(math.prod(s) >= 2**31 - 1 for s, _ in self.out_types)
            fn, b = self.variant(strides, wide)
            hit = self.launches[strides] = Launcher(fn, (b.grid,), num_warps=b.num_warps)
        dev = bufs[0].device
        outs = [torch.empty(shape, dtype=dt, device=dev) for shape, dt in self.out_types]
        hit(*bufs, *outs)
        return outs


@lru_cache(maxsize=512)
def _compiled(prog: Program) -> _RowKernel:
    return _RowKernel(prog, analyze(prog))


def row_kernel(group: Any, device: Any) -> Any:
    """A kernel (input buffers) -> output buffers for a row group's graph; raises
    `Unsupported` saying what the generator lacks (the executor logs it and runs the torch
    kernels)."""
    prog, consts = _program(group)
    rk = _compiled(prog)

    def kernel(*bufs: Any) -> list:
        return rk([*bufs, *consts])

    kernel.__name__ = f"triton_rows_{len(group.nodes)}"
    return kernel


# ---- benchmark -------------------------------------------------------------------------

def bench_rows(kind: str = "softmax", n_rows: int = 4096,
               row_lengths: tuple = (256, 512, 1024, 2048, 4096, 8192, 16384),
               dtype: str = "float32", device: str = "torch:cuda:0") -> list[dict]:
    """Time the generated `kind` kernel ("softmax" or "layer_norm") on (n_rows, L) inputs
    against torch.softmax / torch.nn.functional.layer_norm, per row length L (GPU only; the
    median of three alternated timings each); prints a table (ms, generated / torch) and
    returns its rows."""
    import numpy as np
    import torch
    from triton.testing import do_bench

    import tenferro_nn.functional as F
    import tenferro_runtime as tr
    from tenferro_runtime import array_api as xp
    from tenferro_runtime.passes.fusion import fuse_groups

    rng, results = np.random.default_rng(0), []
    print(f"{kind} {dtype}, {n_rows} rows: L, generated ms, torch ms, ratio, compiled-call ms")
    for L in row_lengths:
        args = [xp.asarray(rng.standard_normal((n_rows, L)).astype(dtype), device=device)]
        if kind == "softmax":
            fn = lambda x: F.softmax(x, -1)  # noqa: E731
            ref = lambda x: torch.softmax(x, -1)  # noqa: E731
        else:
            args += [xp.asarray(rng.standard_normal(L).astype(dtype), device=device) for _ in "wb"]
            fn = lambda x, w, b: F.layer_norm(x, tuple(w.shape), w, b)  # noqa: E731
            ref = lambda x, w, b: torch.nn.functional.layer_norm(x, tuple(w.shape), w, b)  # noqa: E731
        graph = tr.compile(fn).lower(*args)
        grouped = fuse_groups(graph, find_groups(graph))
        fused = [n for n in grouped.nodes if n.prim.name == "fused"]
        if len(grouped.nodes) != 1 or not fused:
            print(f"  {L}: not one row group ({[n.prim.name for n in grouped.nodes]})")
            continue
        kern = row_kernel(fused[0].params["graph"], args[0]._aval.device)
        env = {v: a._buf for v, a in zip(graph.inputs, args)}
        env.update((v, t._buf) for v, t in graph.consts.items())
        bufs = [env[v] for v in fused[0].inputs]
        torch_bufs = [a._buf for a in args]
        gen_ms, torch_ms = [], []
        for _ in range(3):  # alternated: a few-us kernel's timing drifts by 5-10% between calls
            gen_ms.append(do_bench(lambda: kern(*bufs)))  # noqa: B023
            torch_ms.append(do_bench(lambda: ref(*torch_bufs)))  # noqa: B023
        ms_gen, ms_torch = sorted(gen_ms)[1], sorted(torch_ms)[1]
        compiled = tr.compile(fn, backend="triton")
        ms_call = do_bench(lambda: compiled(*args))  # noqa: B023
        row = {"kind": kind, "rows": n_rows, "L": L, "generated_ms": ms_gen,
               "torch_ms": ms_torch, "ratio": ms_gen / ms_torch, "call_ms": ms_call}
        results.append(row)
        print(f"  {L:6d}  {ms_gen:8.4f}  {ms_torch:8.4f}  {ms_gen / ms_torch:5.2f}x  {ms_call:8.4f}")
    return results


__all__ = ["CHUNK", "SINGLE_PASS_MAX", "bench_rows", "find_groups", "row_kernel"]
