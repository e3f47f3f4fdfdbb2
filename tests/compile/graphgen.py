"""Random graphs over the core catalog, for testing compiler passes.

`graphs(device)` draws a small program (1-12 steps), traces it and returns
``(graph, example_inputs)``. Each step picks a core primitive and applies it to
earlier values of fitting avals with valid params (checked against the shape rule
before binding); values are reused, and steps plant work for the passes: duplicate
nodes (CSE), x*1, x+-0, x*0, x/1, transposes of transposes, reshape chains, identity
slices/pads/broadcasts/converts (simplify), elementwise chains (fusion), convolutions in
both layouts (layout), compiled sub-programs traced as `call` nodes (inline), constants
captured from outside and inputs turned into constants after tracing (fold), and control
flow: `cond`/`switch` on computed or constant predicates, `fori_loop` with static bounds (a
scan) or a computed trip count (a while loop), `scan` over a value's leading axis, their
bodies random sub-programs that may close over the enclosing program's values.

Inputs are float32/float64/int32/bool/complex64, 0-d, 0-size and size-1 axes included,
some non-contiguous (views made with the backend's own ops, or Fortran-ordered host
arrays). Results are unique, so passes may be held to bitwise equality: float -> int
conversion goes through clamp and a NaN select (out-of-range casts are unspecified),
bitcast only goes int32 -> float32 (no NaN payload is ever exposed), scatter indices are
in range and distinct, sorts are stable.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import strategies as st

from tenferro_core import catalog
from tenferro_core import dtypes as D
from tenferro_core.errors import TenferroError
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile as tf_compile
from tenferro_runtime import default_runtime, lax, trace
from tenferro_runtime.testing.cases_structural import _factor_shape
from tenferro_runtime.testing.conformance import present
from tenferro_runtime.testing.strategies import SIDES, Domain, arrays, layouts, shapes

P = catalog.BY_NAME
DTYPES = (D.float32, D.float64, D.int32, D.bool_, D.complex64)
MAX_SIZE = 256
UNARY, BINARY = catalog.elementwise.UNARY, catalog.elementwise.BINARY
REDUCE = tuple(P[n] for n in ("reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "reduce_and",
                              "reduce_or"))


class Drawn(tuple):
    """(graph, example_inputs); prints the graph readably in hypothesis' reports."""

    def __repr__(self) -> str:
        graph, inputs = self
        consts = {i: np.asarray(c) for i, c in enumerate(graph.consts.values())}
        return f"\n{graph}\ninputs: {[np.asarray(x) for x in inputs]!r}\nconsts (in order): {consts!r}"


class Builder:
    """The values of a program being traced and how to add to them."""

    def __init__(self, draw: Any, device: str, inputs: list[Any], depth: int = 0):
        self.draw, self.device, self.vals, self.depth = draw, device, list(inputs), depth
        self.trace = inputs[0]._trace

    def steps(self, n: int) -> None:
        for _ in range(n):
            out = self.draw(st.sampled_from(OPS))(self)
            if out is not None:
                self.vals.append(out)

    def pick(self, pred: Any = None) -> Any:
        """An earlier value whose aval passes `pred`, often one of the latest (deeper chains)."""
        cands = [v for v in self.vals if pred is None or pred(v._aval)]
        if len(cands) > 2 and self.draw(st.booleans()):
            cands = cands[-2:]
        return self.draw(st.sampled_from(cands)) if cands else None

    def bind(self, name: str, *args: Any, **params: Any) -> Any:
        """prim(*args, **params) when the shape rule accepts it and the result is small, else None."""
        prim = P[name]
        avals = tuple(a._aval for a in args)
        try:
            outs = prim.abstract_eval(avals, prim.check_params(params, avals))
        except TenferroError:
            return None
        if any(o.size > MAX_SIZE for o in outs):
            return None
        return prim.bind(*args, **params)

    def const(self, shape: tuple, dtype: D.DType, dom: Domain | None = None) -> Any:
        """A tensor captured from outside the program."""
        return xp.asarray(self.draw(arrays(dtype, tuple(shape), dom or Domain())), device=self.device)

    def full(self, shape: tuple, dtype: D.DType, value: Any) -> Any:
        return P["full"].bind(shape=tuple(shape), fill_value=value, dtype=dtype, device=self.device)

    def partner(self, x: Any) -> Any:
        """Another value of x's aval: an earlier one, x itself, or a new constant."""
        how = self.draw(st.sampled_from(("val", "val", "self", "const")))
        if how == "val":
            y = self.pick(lambda a: a == x._aval)
            if y is not None:
                return y
        return x if how == "self" else self.const(x.shape, x.dtype)

    def axes(self, ndim: int) -> tuple[int, ...]:
        return tuple(self.draw(st.lists(st.integers(0, max(ndim - 1, 0)), unique=True, max_size=ndim)))


def _prim_fits(prim: Any, a: Any, n: int) -> bool:
    try:
        prim.abstract_eval((a,) * n, prim.check_params({}, (a,) * n))
        return True
    except TenferroError:
        return False


def op_unary(b: Builder) -> Any:
    x = b.pick()
    prims = [p for p in UNARY if _prim_fits(p, x._aval, 1)]
    return b.draw(st.sampled_from(prims)).bind(x) if prims else None


def op_binary(b: Builder) -> Any:
    x = b.pick()
    prims = [p for p in BINARY if _prim_fits(p, x._aval, 2)]
    return b.draw(st.sampled_from(prims)).bind(x, b.partner(x)) if prims else None


def op_chain(b: Builder) -> None:
    """Elementwise ops one after another: a group for fusion."""
    for _ in range(b.draw(st.integers(2, 5))):
        y = b.draw(st.sampled_from((op_unary, op_binary, op_binary)))(b)
        if y is not None:
            b.vals.append(y)


def op_trap(b: Builder) -> Any:
    """An identity (or near-identity) the simplifier may rewrite, right or wrong."""
    x = b.pick()
    k, sh, dt = x.dtype.kind, x.shape, x.dtype
    kind = b.draw(st.sampled_from(("add0", "sub0", "mul1", "mul0", "div1", "pow1", "neg2", "conj2",
                                   "max", "and", "cvt", "reshape", "perm", "slice", "pad", "bcast",
                                   "rev2", "cat", "select")))
    one, zero = (True, False) if k == "b" else (1, 0)
    if k in "fc":
        zero = b.draw(st.sampled_from((0.0, -0.0)))
    arith = {"add0": ("add", zero), "sub0": ("sub", zero), "mul1": ("mul", one), "mul0": ("mul", zero),
             "div1": ("div", one), "pow1": ("pow", one), "max": ("maximum", None),
             "and": ("bitwise_and", None)}
    if kind in arith:
        name, v = arith[kind]
        y = x if v is None else b.full(sh, dt, v)
        args = (y, x) if b.draw(st.booleans()) else (x, y)
        return b.bind(name, *args)
    if kind in ("neg2", "conj2", "rev2"):
        name = {"neg2": "neg", "conj2": "conj", "rev2": "reverse"}[kind]
        params = {"dimensions": b.axes(x.ndim)} if kind == "rev2" else {}
        y = b.bind(name, x, **params)
        return None if y is None else b.bind(name, y, **params)
    if kind == "select":
        pred = b.full(sh, D.bool_, b.draw(st.booleans()))
        return b.bind("select", pred, x, b.partner(x))
    ident = {"cvt": ("convert", {"new_dtype": dt}), "reshape": ("reshape", {"new_sizes": sh}),
             "perm": ("transpose", {"permutation": tuple(range(x.ndim))}),
             "slice": ("slice", {"start_indices": (0,) * x.ndim, "limit_indices": sh}),
             "bcast": ("broadcast_in_dim", {"shape": sh, "broadcast_dimensions": tuple(range(x.ndim))}),
             "cat": ("concatenate", {"dimension": 0})}
    if kind in ident:
        name, params = ident[kind]
        return b.bind(name, x, **params)
    return b.bind("pad", x, b.full((), dt, zero), padding_config=((0, 0, 0),) * x.ndim)


def op_select(b: Builder) -> Any:
    x = b.pick()
    pred = b.pick(lambda a: a.dtype is D.bool_ and a.shape == x.shape)
    if pred is None:
        pred = b.bind("lt", x, b.partner(x)) if x.dtype.kind in "biuf" else None
    return None if pred is None else b.bind("select", pred, x, b.partner(x))


def op_clamp(b: Builder) -> Any:
    x = b.pick(lambda a: a.dtype.kind in "biuf")
    return None if x is None else b.bind("clamp", b.partner(x), x, b.partner(x))


def op_convert(b: Builder) -> Any:
    x = b.pick()
    to = b.draw(st.sampled_from(DTYPES))
    if to.kind in "iu" and x.dtype.kind in "fc":  # out-of-range and NaN -> int are unspecified
        if x.dtype.kind == "c":
            x = b.bind("real", x)
        bound = float(b.draw(st.sampled_from((100, 1000, 2**20))))
        x = b.bind("clamp", b.full(x.shape, x.dtype, -bound), x, b.full(x.shape, x.dtype, bound))
        x = b.bind("select", b.bind("ne", x, x), b.full(x.shape, x.dtype, 0.0), x)
    return b.bind("convert", x, new_dtype=to)


def op_bitcast(b: Builder) -> Any:
    x = b.pick(lambda a: a.dtype is D.int32)
    return None if x is None else b.bind("bitcast_convert", x, new_dtype=D.float32)


def op_reshape(b: Builder) -> Any:
    x = b.pick()
    for _ in range(b.draw(st.integers(1, 2))):  # sometimes a chain
        x = b.bind("reshape", x, new_sizes=_factor_shape(b.draw, x.size))
    return x


def op_transpose(b: Builder) -> Any:
    x = b.pick()
    for _ in range(b.draw(st.integers(1, 3))):  # transposes of transposes
        x = b.bind("transpose", x, permutation=tuple(b.draw(st.permutations(range(x.ndim)))))
    return x


def op_broadcast(b: Builder) -> Any:
    x = b.pick(lambda a: a.ndim <= 3)
    if x is None:
        return None
    out_rank = x.ndim + b.draw(st.integers(0, 4 - x.ndim))
    dims = sorted(b.draw(st.lists(st.integers(0, max(out_rank - 1, 0)), min_size=x.ndim,
                                  max_size=x.ndim, unique=True)))
    out = [b.draw(st.sampled_from(SIDES)) for _ in range(out_rank)]
    for i, d in enumerate(dims):
        if x.shape[i] != 1 or b.draw(st.booleans()):
            out[d] = x.shape[i]
    return b.bind("broadcast_in_dim", x, shape=tuple(out), broadcast_dimensions=tuple(dims))


def op_slice(b: Builder) -> Any:
    x = b.pick()
    starts = [b.draw(st.integers(0, n)) for n in x.shape]
    limits = [b.draw(st.integers(s, n)) for s, n in zip(starts, x.shape)]
    strides = None if b.draw(st.booleans()) else tuple(b.draw(st.integers(1, 3)) for _ in x.shape)
    return b.bind("slice", x, start_indices=tuple(starts), limit_indices=tuple(limits), strides=strides)


def op_pad(b: Builder) -> Any:
    x = b.pick()
    config = []
    for n in x.shape:
        interior, lo = b.draw(st.integers(0, 2)), b.draw(st.integers(-2, 2))
        core = n + max(n - 1, 0) * interior
        config.append((lo, b.draw(st.integers(max(-2, -(core + lo)), 2)), interior))
    value = b.pick(lambda a: a.shape == () and a.dtype is x.dtype) if b.draw(st.booleans()) else None
    value = b.const((), x.dtype) if value is None else value
    return b.bind("pad", x, value, padding_config=tuple(config))


def op_concatenate(b: Builder) -> Any:
    x = b.pick(lambda a: a.ndim >= 1)
    if x is None:
        return None
    dim = b.draw(st.integers(0, x.ndim - 1))

    def fits(a: Any) -> bool:
        return a.dtype is x.dtype and a.ndim == x.ndim and all(
            m == n for i, (m, n) in enumerate(zip(a.shape, x.shape)) if i != dim)

    more = [b.pick(fits) for _ in range(b.draw(st.integers(0, 2)))]
    return b.bind("concatenate", x, *more, dimension=dim)


def op_reverse(b: Builder) -> Any:
    x = b.pick()
    return b.bind("reverse", x, dimensions=b.axes(x.ndim))


def op_reduce(b: Builder) -> Any:
    prim = b.draw(st.sampled_from(REDUCE))
    x = b.pick()
    return b.bind(prim.name, x, axes=b.axes(x.ndim))


def op_arg(b: Builder) -> Any:
    x = b.pick(lambda a: a.ndim >= 1)
    if x is None:
        return None
    return b.bind(b.draw(st.sampled_from(("argmax", "argmin"))), x,
                  axis=b.draw(st.integers(0, x.ndim - 1)), index_dtype=D.int32)


def op_scan(b: Builder) -> Any:
    x = b.pick(lambda a: a.ndim >= 1)
    if x is None:
        return None
    name = b.draw(st.sampled_from(("cumsum", "sort", "argsort")))
    axis = b.draw(st.integers(0, x.ndim - 1))
    if name == "cumsum":
        return b.bind(name, x, axis=axis, reverse=b.draw(st.booleans()))
    extra = {"index_dtype": D.int32} if name == "argsort" else {}
    return b.bind(name, x, dimension=axis, descending=b.draw(st.booleans()), stable=True, **extra)


def op_dot(b: Builder) -> Any:
    x = b.pick(lambda a: a.dtype.kind in "iufc")
    if x is None:
        return None
    perm = b.draw(st.permutations(range(x.ndim)))
    nc = b.draw(st.integers(0, min(2, x.ndim)))
    nb = b.draw(st.integers(0, min(1, x.ndim - nc)))
    lc, lb = tuple(perm[:nc]), tuple(perm[nc:nc + nb])
    shared = [x.shape[i] for i in lc + lb]
    y = b.pick(lambda a: a.dtype is x.dtype) if b.draw(st.booleans()) else x
    rc_rb: list[int] = []
    for n in shared:  # match the shared axes in y by size
        free = [j for j in range(y.ndim) if y.shape[j] == n and j not in rc_rb]
        if not free:
            break
        rc_rb.append(free[0])
    if len(rc_rb) < len(shared):
        free_r = [b.draw(st.sampled_from(SIDES)) for _ in range(b.draw(st.integers(0, 2)))]
        y = b.const(tuple(shared + free_r), x.dtype, Domain(-10, 10, specials=False))
        rc_rb = list(range(len(shared)))
    return b.bind("dot_general", x, y, contracting_dims=(lc, tuple(rc_rb[:nc])),
                  batch_dims=(lb, tuple(rc_rb[nc:])))


def op_conv(b: Builder) -> Any:
    x = b.pick(lambda a: a.dtype.kind in "fc")
    if x is None:
        return None
    last = b.draw(st.booleans())
    if x.ndim not in (3, 4):
        x = b.bind("reshape", x, new_sizes=(1, x.size, 1) if last else (1, 1, x.size))
    c, spatial = (x.shape[-1], x.shape[1:-1]) if last else (x.shape[1], x.shape[2:])
    g = b.draw(st.sampled_from([k for k in (1, 2) if c % k == 0]))
    window = tuple(b.draw(st.integers(1, 3)) for _ in spatial)
    rhs = b.const((b.draw(st.integers(1, 2)) * g, c // g, *window), x.dtype, Domain(-4, 4, specials=False))
    ints = st.tuples(*[st.integers(1, 2) for _ in spatial])
    pads = tuple(b.draw(st.tuples(st.integers(-1, 2), st.integers(0, 2))) for _ in spatial)
    return b.bind("conv_general", x, rhs, window_strides=b.draw(ints), padding=pads,
                  lhs_dilation=b.draw(ints), rhs_dilation=b.draw(ints), feature_group_count=g,
                  layout="channels_last" if last else "channels_first")


def op_create(b: Builder) -> Any:
    like = b.pick()
    shape = like.shape if b.draw(st.booleans()) else b.draw(shapes(max_rank=3))
    dtype = b.draw(st.sampled_from(DTYPES))
    if dtype is not D.bool_ and len(shape) and b.draw(st.booleans()):
        return b.bind("iota", dtype=dtype, shape=shape, dimension=b.draw(st.integers(0, len(shape) - 1)),
                      device=b.device)
    if b.draw(st.booleans()):
        return b.const(shape, dtype)
    values = {"b": (True, False), "i": (0, 1, -1, 2)}.get(
        dtype.kind, (0.0, 1.0, -1.0, 2.5, -0.0, math.nan, math.inf))
    return b.full(shape, dtype, b.draw(st.sampled_from(values)))


def _indices(b: Builder, x: Any, unique: bool) -> tuple[Any, tuple[int, ...]]:
    axes = b.axes(x.ndim)
    batch = b.draw(shapes(max_rank=2, max_side=3))
    if unique:  # in range and distinct rows: scatter results are unique
        space = math.prod(x.shape[a] for a in axes)
        count = min(math.prod(batch), space)
        batch = (count,)
        flat = b.draw(st.permutations(range(space)))[:count]
        rows = np.array([np.unravel_index(i, [x.shape[a] for a in axes]) for i in flat],
                        dtype=np.int32).reshape(count, len(axes))
        return xp.asarray(rows, device=b.device), axes
    hi = max(x.shape, default=0) + 1
    return b.const(batch + (len(axes),), D.int32, Domain(-2, hi)), axes


def op_gather(b: Builder) -> Any:
    x = b.pick()
    idx, axes = _indices(b, x, unique=False)
    return b.bind("gather", x, idx, axes=axes)


def op_scatter(b: Builder) -> Any:
    x = b.pick()
    idx, axes = _indices(b, x, unique=True)
    ushape = idx.shape[:-1] + tuple(n for i, n in enumerate(x.shape) if i not in axes)
    upd = b.pick(lambda a: a.shape == ushape and a.dtype is x.dtype)
    upd = b.const(ushape, x.dtype) if upd is None else upd
    return b.bind(b.draw(st.sampled_from(("scatter", "scatter_add"))), x, idx, upd, axes=axes)


def op_dynamic(b: Builder) -> Any:
    x = b.pick()

    def start(n: int) -> Any:
        s = b.pick(lambda a: a.shape == () and a.dtype is D.int32) if b.draw(st.booleans()) else None
        return b.const((), D.int32, Domain(-2, n + 2)) if s is None else s

    starts = [start(n) for n in x.shape]
    if b.draw(st.booleans()):
        sizes = tuple(b.draw(st.integers(0, n)) for n in x.shape)
        return b.bind("dynamic_slice", x, *starts, slice_sizes=sizes)
    upd = b.pick(lambda a: a.dtype is x.dtype and a.ndim == x.ndim and all(
        u <= n for u, n in zip(a.shape, x.shape)))
    return None if upd is None else b.bind("dynamic_update_slice", x, upd, *starts)


def op_copy(b: Builder) -> Any:
    return b.bind("copy", b.pick())


def op_dup(b: Builder) -> Any:
    """Bind an earlier node again on the same operands: a common subexpression."""
    nodes = b.trace.graph.nodes
    if not nodes:
        return None
    n = b.draw(st.sampled_from(nodes))
    consts = b.trace.graph.consts
    args = [consts[v] if v in consts else b.trace._tracer(v) for v in n.inputs]
    out = n.prim.bind(*args, **n.params)
    return out[0] if n.prim.multiple_results else out


def op_call(b: Builder) -> Any:
    """A compiled sub-program, traced as a `call` node: inlining has work."""
    if b.depth >= 2:
        return None
    args = [b.pick() for _ in range(b.draw(st.integers(1, 2)))]

    def sub(*xs: Any) -> Any:
        inner = Builder(b.draw, b.device, list(xs), b.depth + 1)
        inner.steps(b.draw(st.integers(1, 4)))
        return inner.vals[-1]

    return tf_compile(sub)(*args)


def _body(b: Builder, xs: list) -> Builder:
    """A branch or loop body: random steps over its arguments, sometimes reading values of
    the enclosing program as well (closed over, lifted into the body by its trace)."""
    inner = Builder(b.draw, b.device, list(xs), b.depth + 1)
    if b.draw(st.booleans()):
        inner.vals += [b.pick() for _ in range(b.draw(st.integers(1, 2)))]
    inner.steps(b.draw(st.integers(1, 3)))
    return inner


def _of_aval(inner: Builder, aval: Any) -> Any:
    """A value of a body with `aval` (a loop's carry, the first branch's result), or None."""
    cands = [v for v in inner.vals if v._aval.shape == aval.shape and v._aval.dtype == aval.dtype]
    return inner.draw(st.sampled_from(cands)) if cands else None


def _count(b: Builder, limit: int) -> Any:
    """An int32 scalar from an earlier value, its number of nonzero entries at most `limit`:
    a data-dependent predicate, branch index or trip count."""
    x = b.pick()
    nonzero = x if x.dtype == xp.bool else x != 0
    n = xp.astype(xp.sum(xp.astype(nonzero, xp.int32)), xp.int32)
    return xp.minimum(n, xp.asarray(limit, dtype=xp.int32, device=b.device))


def op_cond(b: Builder) -> Any:
    """`cond` on a computed or constant predicate, or `switch` over 2-4 branches; the first
    branch traced returns its last value, the others one of theirs with its aval (else zeros)."""
    if b.depth >= 2:
        return None
    ops = [b.pick() for _ in range(b.draw(st.integers(1, 2)))]
    first_aval: list = []

    def first(*xs: Any) -> Any:
        out = _body(b, list(xs)).vals[-1]
        first_aval.append(out._aval)
        return out

    def other(*xs: Any) -> Any:
        a = first_aval[-1]
        out = _of_aval(_body(b, list(xs)), a)
        return lax.full(shape=a.shape, fill_value=0, dtype=a.dtype, device=a.device) if out is None else out

    if b.draw(st.booleans()):
        computed = b.draw(st.booleans())
        pred = _count(b, 1) > 0 if computed else xp.asarray(b.draw(st.booleans()), device=b.device)
        return lax.cond(pred, other, first, *ops)  # traced false branch first
    return lax.switch(_count(b, 3), [first] + [other] * b.draw(st.integers(1, 3)), *ops)


def op_loop(b: Builder) -> Any:
    """`fori_loop` over a carry, 0-3 times: Python int bounds (a scan) or a computed trip
    count (a while loop); the body may read the loop index."""
    if b.depth >= 2:
        return None
    init = b.pick()

    def body(i: Any, c: Any) -> Any:
        out = _of_aval(_body(b, [c, i] if b.draw(st.booleans()) else [c]), c._aval)
        return c if out is None else out

    if b.draw(st.integers(0, 2)) == 0:
        return lax.fori_loop(xp.asarray(0, dtype=xp.int32, device=b.device), _count(b, 3), body, init)
    return lax.fori_loop(0, b.draw(st.integers(0, 3)), body, init)


def op_lscan(b: Builder) -> Any:
    """`scan` over an earlier value's leading axis (0-size included), forward or reversed,
    with a carry; the final carry or the stacked per-step results."""
    if b.depth >= 2:
        return None
    xs = b.pick(lambda a: a.ndim >= 1)
    if xs is None:
        return None
    init = b.pick()

    def f(c: Any, x: Any) -> Any:
        inner = _body(b, [c, x])
        out = _of_aval(inner, c._aval)
        return (c if out is None else out), inner.vals[-1]

    carry, ys = lax.scan(f, init, xs, reverse=b.draw(st.booleans()))
    return ys if b.draw(st.booleans()) else carry


OPS = (op_unary,) * 3 + (op_binary,) * 4 + (op_trap,) * 4 + (op_dup, op_conv, op_chain, op_call) * 2 + (
    op_cond, op_loop, op_lscan) * 2 + (
    op_select, op_clamp, op_convert, op_bitcast, op_reshape, op_transpose, op_broadcast, op_slice,
    op_pad, op_concatenate, op_reverse, op_reduce, op_arg, op_scan, op_dot, op_create,
    op_gather, op_scatter, op_dynamic, op_copy)


@st.composite
def inputs(draw: Any, device: str) -> list[Any]:
    """1-3 tensors on `device`: shared or fresh shapes and dtypes, some non-contiguous."""
    shape, dtype = draw(shapes(max_rank=3)), draw(st.sampled_from(DTYPES))
    out = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 3)) == 0:
            shape = draw(shapes(max_rank=3))
        if draw(st.integers(0, 3)) == 0:
            dtype = draw(st.sampled_from(DTYPES))
        dom = Domain(complex_specials=draw(st.booleans()))
        host = draw(arrays(dtype, shape, dom))
        layout = draw(layouts(shape))
        if layout.kind == "contiguous" and host.ndim >= 2 and draw(st.booleans()):
            out.append(xp.asarray(np.asfortranarray(host), device=device))  # a transposed host buffer
        else:
            out.append(present(host, layout, default_runtime().device(device))[0])
    return out


@st.composite
def graphs(draw: Any, device: str, max_steps: int = 12) -> Drawn:
    """(graph, example_inputs): a traced random program over the core catalog on `device`."""
    args = draw(inputs(device))

    def program(*xs: Any) -> Any:
        b = Builder(draw, device, list(xs))
        b.steps(draw(st.integers(1, max_steps)))
        picks = draw(st.lists(st.integers(0, len(b.vals) - 1), min_size=0, max_size=2))
        return tuple([b.vals[-1]] + [b.vals[i] for i in picks])

    graph = trace(program, *args)
    frozen = [draw(st.integers(0, 3)) == 0 for _ in args]
    if any(frozen):  # some inputs become captured constants: constant folding gets work
        graph.consts.update({v: a for v, a, f in zip(graph.inputs, args, frozen) if f})
        graph.inputs = [v for v, f in zip(graph.inputs, frozen) if not f]
        args = [a for a, f in zip(args, frozen) if not f]
    return Drawn((graph, args))


__all__ = ["DTYPES", "Drawn", "graphs", "inputs"]
