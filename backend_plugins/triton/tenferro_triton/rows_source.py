"""Triton source for a row group (rows.py): its canonical form, the layout of every value in
the (rows, cols) space, and the generated kernel.

A row group's values live in the space ``R + C`` of its reductions' operand: reductions run
over the trailing axes ``C``. Each value is a function of some axes of that space (its
*layout*: one space axis per non-1 dimension), found by propagation through the nodes:
full rows, per-row values (``R``, or ``R`` with 1s), per-column values (``C``) or scalars.
In the kernel a value is a block ``[BR or 1, BC or 1]`` (BR rows of the program, BC
columns), so broadcasts are free and a reduction is one ``tl.sum(..., axis=1)``. Rows of up
to `single_max` columns are one block (one pass: every input read once); longer rows loop
over column chunks, one loop per stage of dependent reductions plus one that stores the
rows (a multi-pass scheme: each loop recomputes the row values it needs from the inputs).
Nothing here imports triton.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tenferro_core import dtypes as D

from . import codegen
from .codegen import TL
from .executor import Unsupported

ROW_REDUCTIONS = frozenset({"reduce_sum", "reduce_max", "reduce_min", "reduce_prod"})
_WIDEN = {D.float16: D.float32, D.bfloat16: D.float32, D.int8: D.int32, D.int16: D.int32,
          D.uint8: D.int32, D.uint16: D.int32}  # sums and products accumulate wider



@dataclass(frozen=True)
class Program:
    """A row group's graph by value index (hashable: the kernel cache's key). Values are
    numbered operands first (group inputs, then constants read from memory), then
    constants baked in as literals, then node outputs in node order."""

    ins: tuple  # (shape, dtype) per operand buffer
    lits: tuple  # (shape, dtype, Python literal) per constant with one value
    nodes: tuple  # (prim name, category, sorted param items, input indices, (shape, dtype))
    outs: tuple  # value index per group output

    def value(self, i: int) -> tuple:
        """(shape, dtype) of value `i`."""
        n_in, n_lit = len(self.ins), len(self.lits)
        if i < n_in:
            return self.ins[i]
        if i < n_in + n_lit:
            return self.lits[i - n_in][:2]
        return self.nodes[i - n_in - n_lit][4]


@dataclass
class Layouts:
    """Where each value of a Program lives in the row space."""

    sizes: tuple  # canonical space axes (non-1 sizes of R + C), rows first
    n_row: int  # how many of them are row axes
    rows: int  # prod(R)
    cols: int  # prod(C)
    of: dict = field(default_factory=dict)  # value index -> layout (space axes)

    def rowvar(self, i: int) -> bool:
        return any(a < self.n_row for a in self.of[i])

    def colvar(self, i: int) -> bool:
        return any(a >= self.n_row for a in self.of[i])


def _nz(shape: tuple) -> tuple:
    return tuple(s for s in shape if s != 1)


def _candidates(shape: tuple, sizes: tuple, fixed: dict | None = None, limit: int = 2) -> list:
    """Layouts of a value of `shape` in the space (increasing axes of equal sizes),
    honouring `fixed` (position -> axis); at most `limit` of them."""
    want, fixed, found = _nz(shape), fixed or {}, []

    def walk(pos: int, start: int, acc: tuple) -> None:
        if len(found) >= limit:
            return
        if pos == len(want):
            found.append(acc)
            return
        for a in range(start, len(sizes)):
            if sizes[a] == want[pos] and fixed.get(pos, a) == a:
                walk(pos + 1, a + 1, acc + (a,))

    walk(0, 0, ())
    return found


def row_space(shape: tuple, axes: tuple) -> tuple | None:
    """(R, C) when `axes` are the trailing axes of `shape` (at least one), else None."""
    k = len(shape) - len(axes)
    if not axes or tuple(axes) != tuple(range(k, len(shape))):
        return None
    return tuple(shape[:k]), tuple(shape[k:])


def analyze(prog: Program) -> Layouts:
    """The layout of every value, or Unsupported (mixed row spaces, an op without Triton
    code, a value whose place in the space is ambiguous or used two ways)."""
    space = None
    for name, cat, params, ins, (shape, dtype) in prog.nodes:
        if dtype not in TL or any(prog.value(i)[1] not in TL for i in ins):
            bad = dtype if dtype not in TL else next(prog.value(i)[1] for i in ins
                                                     if prog.value(i)[1] not in TL)
            raise Unsupported(f"{name} on {bad} values (no Triton dtype)")
        if cat == "reduction":
            if name not in ROW_REDUCTIONS:
                raise Unsupported(f"{name} is no row reduction (sum, max, min, prod)")
            if dtype.kind == "b":
                raise Unsupported(f"{name} of bool values")
            in_shape = prog.value(ins[0])[0]
            sp = row_space(in_shape, tuple(sorted(dict(params)["axes"])))
            if sp is None:
                raise Unsupported(f"{name} over axes {dict(params)['axes']} of shape {in_shape} "
                                  f"(a row reduction runs over the trailing axes)")
            if space is not None and sp != space:
                raise Unsupported(f"reductions over two row spaces {space} and {sp}")
            space = sp
        elif cat == "elementwise":
            if not ins or codegen.expression(name, ["a"] * len(ins), [prog.value(i)[1] for i in ins],
                                             dtype, dict(params)) is None:
                raise Unsupported(f"no Triton expression for {name} on "
                                  f"{[prog.value(i)[1].name for i in ins]}")
        elif name == "reshape":
            if _nz(prog.value(ins[0])[0]) != _nz(shape):
                raise Unsupported(f"reshape {prog.value(ins[0])[0]} -> {shape} moves data "
                                  f"(only size-1 axes may come and go)")
        elif name != "broadcast_in_dim":
            raise Unsupported(f"{name} ({cat}) in a row group")
    if space is None:
        raise Unsupported("no row reduction in the group")
    r, c = space
    sizes = _nz(r) + _nz(c)
    lay = Layouts(sizes, len(_nz(r)), math.prod(r), math.prod(c))
    _propagate(prog, lay)
    return lay


def _propagate(prog: Program, lay: Layouts) -> None:
    of, n_in = lay.of, len(prog.ins) + len(prog.lits)

    def put(i: int, layout: tuple) -> bool:
        old = of.get(i)
        if old is None:
            of[i] = layout
            return True
        if old != layout:
            raise Unsupported(f"a value of shape {prog.value(i)[0]} is used along two sets of "
                              f"axes {old} and {layout} of the row space {lay.sizes}")
        return False

    full, row_axes = tuple(range(len(lay.sizes))), tuple(range(lay.n_row))
    for k, (_, cat, _, ins, _) in enumerate(prog.nodes):
        if cat == "reduction":
            put(ins[0], full)
            put(n_in + k, row_axes)
    changed = True
    while changed:
        changed = False
        for k, (name, cat, params, ins, (shape, _)) in enumerate(prog.nodes):
            out = n_in + k
            if name == "broadcast_in_dim":
                x_shape, bd = prog.value(ins[0])[0], dict(params)["broadcast_dimensions"]
                y_pos = {d: p for p, d in enumerate(d for d, s in enumerate(shape) if s != 1)}
                x_pos = [y_pos[bd[d]] for d, s in enumerate(x_shape) if s != 1]
                if out in of:
                    changed |= put(ins[0], tuple(of[out][p] for p in x_pos))
                elif ins[0] in of:
                    cands = _candidates(shape, lay.sizes, dict(zip(x_pos, of[ins[0]])))
                    if len(cands) == 1:
                        changed |= put(out, cands[0])
            elif cat != "reduction":
                group = [out, *ins]  # elementwise and reshape: one layout for all
                known = next((of[i] for i in group if i in of), None)
                if known is not None:
                    for i in group:
                        changed |= put(i, known)
        if not changed:  # values no neighbour places: their shape may say
            for i in range(n_in + len(prog.nodes)):
                if i not in of and _used(prog, i):
                    cands = _candidates(prog.value(i)[0], lay.sizes)
                    if len(cands) == 1:
                        changed |= put(i, cands[0])
    for i in range(n_in + len(prog.nodes)):
        if i not in of and _used(prog, i):
            cands = _candidates(prog.value(i)[0], lay.sizes)
            why = "fits nowhere in" if not cands else "could lie along several axes of"
            raise Unsupported(f"a value of shape {prog.value(i)[0]} {why} the row space {lay.sizes}")


def _used(prog: Program, i: int) -> bool:
    n_in = len(prog.ins) + len(prog.lits)
    return i >= n_in or i in prog.outs or any(i in n[3] for n in prog.nodes)


# ---- source ---------------------------------------------------------------------------

_HEADER = '''import triton
import triton.language as tl


@triton.jit
def _max_nan(x):
    """Row maxima (axis 1, kept), NaN where a row holds one (NumPy's and torch's max)."""
    bad = tl.max((x != x).to(tl.int8), axis=1, keep_dims=True)
    return tl.where(bad != 0, float('nan'), tl.max(x, axis=1, keep_dims=True)).to(x.dtype)


@triton.jit
def _min_nan(x):
    """Row minima (axis 1, kept), NaN where a row holds one."""
    bad = tl.max((x != x).to(tl.int8), axis=1, keep_dims=True)
    return tl.where(bad != 0, float('nan'), tl.min(x, axis=1, keep_dims=True)).to(x.dtype)


@triton.jit
def _mul(a, b):
    return a * b


'''


def _neutral(name: str, dtype: D.DType) -> str:
    if name == "reduce_sum":
        return "0"
    if name == "reduce_prod":
        return "1"
    hi = name == "reduce_min"
    if dtype.kind == "f":
        return "float('inf')" if hi else "float('-inf')"
    import numpy as np

    info = np.iinfo(dtype.numpy)
    return str(int(info.max if hi else info.min))


@dataclass
class Blocks:
    """A kernel's launch shape: BR rows by BC columns per program, `chunks` column chunks."""

    br: int
    bc: int
    chunked: bool
    grid: int
    num_warps: int


def column_values(prog: Program, lay: Layouts) -> int:
    """How many values a program holds a block of columns of (loads and computed values,
    not reshapes): what a one-pass kernel keeps in registers at worst."""
    n_in = len(prog.ins) + len(prog.lits)
    return sum(1 for i in range(n_in + len(prog.nodes)) if i in lay.of and lay.colvar(i)
               and (i < n_in or prog.nodes[i - n_in][0] != "reshape"))


def blocks(lay: Layouts, single_max: int, chunk: int, elems: int, live: int = 0,
           live_elems: int = 1 << 17) -> Blocks:
    """Block sizes: the whole row (rounded up to a power of two) when it has at most
    `single_max` columns and its `live` column values fit `live_elems` elements (at least
    1024 columns), else `chunk` columns a step; rows fill `elems` elements."""
    bc = 1 << max(lay.cols - 1, 0).bit_length()
    fit = 1 << max((live_elems // max(live, 1)).bit_length() - 1, 10)
    chunked = bc > min(single_max, fit)
    if chunked:
        bc = chunk
    br = max(1, min(1 << max(lay.rows - 1, 0).bit_length(), elems // bc))
    n = br * bc
    warps = 2 if n <= 512 else 4 if n <= 2048 else 8 if n <= 8192 else 16
    return Blocks(br, bc, chunked, max(1, -(-lay.rows // br)), warps)


class _Emitter:
    """Writes the kernel body: values by name, per scope (the row level, or one loop)."""

    def __init__(self, prog: Program, lay: Layouts, b: Blocks, strides: tuple, wide: bool):
        self.prog, self.lay, self.b, self.strides = prog, lay, b, strides
        self.n_in = len(prog.ins) + len(prog.lits)
        self.wide = wide
        self.lines: list[str] = []

    def block(self, i: int) -> str:
        return f"[{self.b.br if self.lay.rowvar(i) else 1}, {self.b.bc if self.lay.colvar(i) else 1}]"

    def offset(self, i: int, shape: tuple, strides: tuple, c: str) -> str:
        """Element offset of value `i` stored with `strides`, from row `r` and column `c`."""
        lay, dims = self.lay, [d for d, s in enumerate(shape) if s != 1]
        runs: list[list] = []  # [first axis, last axis, stride of the last dim]
        for d, a in zip(dims, lay.of[i]):
            last = runs[-1] if runs else None
            if (last and a == last[1] + 1 and (a < lay.n_row) == (last[1] < lay.n_row)
                    and last[2] == strides[d] * shape[d]):
                last[1], last[2] = a, strides[d]
            else:
                runs.append([a, a, strides[d]])
        terms = []
        for first, last, stride in runs:
            if stride == 0:
                continue
            row = first < lay.n_row
            lo, hi = (0, lay.n_row) if row else (lay.n_row, len(lay.sizes))
            expr = "r" if row else c
            below = max(math.prod(lay.sizes[last + 1:hi]), 1)  # 0: no element is read
            if below != 1:
                expr = f"({expr} // {below})"
            if first != lo:
                expr = f"({expr} % {max(math.prod(lay.sizes[first:last + 1]), 1)})"
            terms.append(expr if stride == 1 else f"{expr} * {stride}")
        return " + ".join(terms) if terms else "tl.zeros([1, 1], tl.int32)"

    def mask(self, i: int, cm: str, store: bool = False) -> str | None:
        parts = (["rm"] if self.lay.rowvar(i) else ["(tl.zeros([1, 1], tl.int32) == pid)"]
                 if store else [])  # one program stores what no row axis varies
        parts += [cm] if self.lay.colvar(i) else []
        return " & ".join(parts) or None

    def emit(self, i: int, env: dict, ind: str, scope: str, cm: str, c: str) -> str:
        """The name of value `i` in `env`, writing the lines that compute it if needed."""
        if i in env:
            return env[i]
        prog, lay = self.prog, self.lay
        name = f"v{i}{scope}"
        if i < len(prog.ins):
            shape = prog.ins[i][0]
            m = self.mask(i, cm)
            off = self.offset(i, shape, self.strides[i], c)
            load = f"tl.load(in{i} + {off}" + (f", mask={m}, other=0)" if m else ")")
            self.lines.append(f"{ind}{name} = tl.broadcast_to({load}, {self.block(i)})")
        elif i < self.n_in:
            shape, dtype, lit = prog.lits[i - len(prog.ins)]
            self.lines.append(f"{ind}{name} = {codegen.constant(lit, dtype, self.block(i))}")
        else:
            pname, cat, params, ins, (_, dtype) = prog.nodes[i - self.n_in]
            args = [self.emit(j, env, ind, scope, cm, c) for j in ins]
            if cat == "reduction":
                self.lines += self.reduce_lines(pname, args[0], prog.value(ins[0])[1], dtype,
                                                name, ind, cm, lay.colvar(ins[0]))
            elif pname == "reshape" or (pname == "broadcast_in_dim" and self.block(ins[0]) == self.block(i)):
                name = args[0]
            elif pname == "broadcast_in_dim":
                self.lines.append(f"{ind}{name} = tl.broadcast_to({args[0]}, {self.block(i)})")
            else:
                expr = codegen.expression(pname, args, [prog.value(j)[1] for j in ins], dtype, dict(params))
                self.lines.append(f"{ind}{name} = {expr}")
        env[i] = name
        return name

    def reduce_lines(self, pname: str, x: str, dt: D.DType, out: D.DType, name: str, ind: str,
                     cm: str, colvar: bool, acc: str | None = None) -> list[str]:
        """One block's reduction into `name` (single pass), or `acc`'s update (chunked)."""
        wide = _WIDEN.get(dt, dt) if pname in ("reduce_sum", "reduce_prod") else dt
        t = codegen.cast(x, dt, wide)
        if not colvar:  # an empty C (size-1 axes only): the reduction is the value itself
            return [f"{ind}{name} = {codegen.cast(t, wide, out)}"]
        masked = f"tl.where({cm}, {t}, tl.full([1, 1], {_neutral(pname, dt)}, {TL[wide]}))"
        if acc is not None:
            nan = ", propagate_nan=tl.PropagateNan.ALL" if dt.kind == "f" else ""
            update = {"reduce_sum": f"{acc} + {masked}", "reduce_prod": f"{acc} * {masked}",
                      "reduce_max": f"tl.maximum({acc}, {masked}{nan})",
                      "reduce_min": f"tl.minimum({acc}, {masked}{nan})"}[pname]
            return [f"{ind}{acc} = {update}"]
        return [f"{ind}{name} = {codegen.cast(self.combine(pname, masked, dt), wide, out)}"]

    @staticmethod
    def combine(pname: str, t: str, dt: D.DType) -> str:
        if pname == "reduce_sum":
            return f"tl.sum({t}, axis=1, keep_dims=True)"
        if pname == "reduce_prod":
            return f"tl.reduce({t}, 1, _mul, keep_dims=True)"
        fn = pname[-3:]
        if dt.kind == "f":  # tl.max drops NaNs on GPUs
            return f"_{fn}_nan({t})"
        return f"tl.{fn}({t}, axis=1, keep_dims=True)"

    def store(self, k: int, i: int, env: dict, ind: str, cm: str, c: str) -> None:
        shape = self.prog.value(i)[0]
        strides, acc = [], 1
        for s in reversed(shape):
            strides.append(acc)
            acc *= s
        off = self.offset(i, shape, tuple(reversed(strides)), c)
        v = env[i]
        self.lines.append(f"{ind}tl.store(out{k} + {off}, {v}, mask={self.mask(i, cm, store=True)})")


def source(prog: Program, lay: Layouts, b: Blocks, strides: tuple, wide: bool) -> str:
    """The generated module: a jit function ``row_kernel(in0.., out0..)``, one program per
    `b.br` rows; operand `i` is read with `strides[i]` (in elements)."""
    e = _Emitter(prog, lay, b, strides, wide)
    params = [f"in{i}" for i in range(len(prog.ins))] + [f"out{k}" for k in range(len(prog.outs))]
    e.lines += [f"def row_kernel({', '.join(params)}):", "    pid = tl.program_id(0)"]
    ar = "tl.arange(0, {})" + (".to(tl.int64)" if wide else "")
    base = "pid.to(tl.int64)" if wide else "pid"
    e.lines += [f"    r = {base} * {b.br} + {ar.format(b.br)}[:, None]", f"    rm = r < {lay.rows}"]
    ind, n_in = "    ", e.n_in
    col_outs = [(k, i) for k, i in enumerate(prog.outs) if lay.colvar(i)]
    row_outs = [(k, i) for k, i in enumerate(prog.outs) if not lay.colvar(i)]
    if not b.chunked:
        e.lines += [f"    c = {ar.format(b.bc)}[None, :]", f"    cm = c < {lay.cols}"]
        env: dict = {}
        for k, i in enumerate(prog.outs):
            e.emit(i, env, ind, "", "cm", "c")
            e.store(k, i, env, ind, "cm", "c")
        return _HEADER + "@triton.jit\n" + "\n".join(e.lines) + "\n"
    reds = [n_in + k for k, n in enumerate(prog.nodes) if n[1] == "reduction"]
    level = _levels(prog, n_in)
    env = {}  # row-level values
    stages = sorted({level[prog.nodes[i - n_in][3][0]] for i in reds})
    for p, stage in enumerate(stages):
        todo = [i for i in reds if level[prog.nodes[i - n_in][3][0]] == stage]
        targets = [prog.nodes[i - n_in][3][0] for i in todo]
        _row_deps(e, targets, env, ind)
        accs = []
        for i in todo:
            pname, _, _, (x,), (_, dt) = prog.nodes[i - n_in]
            xdt = prog.value(x)[1]
            wide_dt = _WIDEN.get(xdt, xdt) if pname in ("reduce_sum", "reduce_prod") else xdt
            acc = f"acc{i}"
            accs.append((i, acc, pname, xdt, dt, wide_dt))
            shape = f"[{b.br if lay.rowvar(x) else 1}, {b.bc}]"
            e.lines.append(f"{ind}{acc} = tl.full({shape}, {_neutral(pname, xdt)}, {TL[wide_dt]})")
        e.lines += [f"{ind}for c0 in range(0, {lay.cols}, {b.bc}):",
                    f"{ind}    c_{p} = c0 + {ar.format(b.bc)}[None, :]",
                    f"{ind}    cm_{p} = c_{p} < {lay.cols}"]
        loop_env = dict(env)
        for i, acc, pname, xdt, _, _ in accs:
            x = e.emit(prog.nodes[i - n_in][3][0], loop_env, ind + "    ", f"_{p}", f"cm_{p}", f"c_{p}")
            e.lines += e.reduce_lines(pname, x, xdt, xdt, "", ind + "    ", f"cm_{p}", True, acc)
        for i, acc, pname, xdt, dt, wide_dt in accs:
            env[i] = f"v{i}"
            e.lines.append(f"{ind}v{i} = {codegen.cast(e.combine(pname, acc, xdt), wide_dt, dt)}")
    for k, i in row_outs:
        _row_deps(e, [i], env, ind, direct=True)
        e.store(k, i, env, ind, "cm", "c")
    if col_outs:
        p = len(stages)
        _row_deps(e, [i for _, i in col_outs], env, ind)
        e.lines += [f"{ind}for c0 in range(0, {lay.cols}, {b.bc}):",
                    f"{ind}    c_{p} = c0 + {ar.format(b.bc)}[None, :]",
                    f"{ind}    cm_{p} = c_{p} < {lay.cols}"]
        loop_env = dict(env)
        for k, i in col_outs:
            e.emit(i, loop_env, ind + "    ", f"_{p}", f"cm_{p}", f"c_{p}")
            e.store(k, i, loop_env, ind + "    ", f"cm_{p}", f"c_{p}")
    return _HEADER + "@triton.jit\n" + "\n".join(e.lines) + "\n"


def _levels(prog: Program, n_in: int) -> dict:
    """Per value, how many reductions in sequence it waits for."""
    level = {i: 0 for i in range(n_in)}
    for k, (_, cat, _, ins, _) in enumerate(prog.nodes):
        lv = max((level[j] for j in ins), default=0)
        level[n_in + k] = lv + 1 if cat == "reduction" else lv
    return level


def _row_deps(e: _Emitter, targets: list, env: dict, ind: str, direct: bool = False) -> None:
    """Emit at row level the row values (no column axis) that column values `targets` read
    (or the row values `targets` themselves when `direct`)."""
    lay, prog, n_in = e.lay, e.prog, e.n_in
    seen: set = set()
    stack = list(targets)
    while stack:
        i = stack.pop()
        if i in seen or i in env:
            continue
        seen.add(i)
        if not lay.colvar(i):
            if direct or i not in targets:
                e.emit(i, env, ind, "", "cm", "c")
            continue
        if i >= n_in:
            stack += list(prog.nodes[i - n_in][3])
