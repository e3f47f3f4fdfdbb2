"""Generated elementwise kernels (elementwise.py, codegen.py) in Triton's CPU interpreter on
torch:cpu (or compiled for the GPU on torch:cuda:0 with TENFERRO_TRITON_REAL=1, conftest.py).

Every elementwise primitive per torch dtype against the NumPy kernels on drawn values
(float results within a few ulp of float64 NumPy rounded to the dtype, NaN and infinity in
the same places, signed zeros alike; integers and bools exact), drawn groups (chains and
DAGs with broadcasts, constants, iota and full, non-contiguous and stride-0 operands,
outputs of several shapes, 0-size and 0-d) against the NumPy kernels node by node, the
fallback and its logged reason, the kernel cache, TENFERRO_TRITON_DUMP, and
``compile(f, backend="triton")`` end to end with gradients.
"""

from __future__ import annotations

import logging
import math
import os
import re
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tenferro_runtime.passes as passes
import tenferro_torch.plugin as torch_plugin
import tenferro_triton.plugin as triton_plugin
from tenferro_ad import grad
from tenferro_core import catalog
from tenferro_core import dtypes as D
from tenferro_core.avals import Aval
from tenferro_core.errors import DTypeError
from tenferro_core.extension import define_op
from tenferro_core.plugins import hookimpl
from tenferro_numpy.kernels import KERNELS
from tenferro_runtime import Runtime, compile, lax, trace, use_runtime
from tenferro_runtime import array_api as xp
from tenferro_runtime.graph import Graph, Node, Var
from tenferro_runtime.testing.conformance import host_of, present, resolve_device, to_device
from tenferro_runtime.testing.strategies import Domain, arrays, layouts
from tenferro_runtime.testing.tolerance import assert_close
from tenferro_triton import codegen, elementwise
from tenferro_triton.executor import Unsupported

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy on NaN, inf, casts
DEVICE = "torch:cuda:0" if os.environ.get("TENFERRO_TRITON_REAL") == "1" else "torch:cpu"  # see conftest.py
DEV = resolve_device(DEVICE)
TORCH_DEVICE = DEVICE.partition(":")[2]
DTYPES = (D.bool_, D.int8, D.int16, D.int32, D.int64, D.uint8, D.float16, D.bfloat16,
          D.float32, D.float64)
HALF = (D.float16, D.bfloat16)
N = 67  # values per drawn operand: not a power of two, fewer than a block
_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
_FEW = max(2, settings().max_examples // 25)  # per (primitive, dtype): 4 in CI
_GROUPS = max(min(settings().max_examples, 80), settings().max_examples // 2)

# ---- single primitives ---------------------------------------------------------------

_TRANSCENDENTAL = {  # the conformance kit's domains; logistic reaches float32's subnormals
    "exp": (-10, 10), "expm1": (-10, 10), "log": (-10, 100), "log1p": (-10, 100),
    "sin": (-100, 100), "cos": (-100, 100), "tan": (-100, 100), "asin": (-1.5, 1.5),
    "acos": (-1.5, 1.5), "atan": (-100, 100), "sinh": (-10, 10), "cosh": (-10, 10),
    "tanh": (-20, 20), "asinh": (-100, 100), "acosh": (0, 100), "atanh": (-1.5, 1.5),
    "sqrt": (-10, 100), "rsqrt": (-10, 100), "logistic": (-110, 110),
}
_SMALL = Domain(-3, 3, extra=(-1.0, 0.5, 1.0))


def _domains(prim: str, dtype: D.DType, nin: int) -> tuple[Domain, ...]:
    if prim in _TRANSCENDENTAL:
        return (Domain(*_TRANSCENDENTAL[prim]),)
    if prim in ("floor", "ceil", "round", "trunc"):
        return (Domain(extra=tuple(k / 2 for k in range(-9, 10))),)
    if prim in ("eq", "ne", "lt", "le", "gt", "ge"):
        return (_SMALL, _SMALL)
    if prim == "pow":
        return {"i": (Domain(), Domain(-3, 130)), "u": (Domain(), Domain(0, 130)),
                "f": (Domain(-10, 10), Domain(-5, 5, extra=(0.5, 2.0, 3.0)))}[dtype.kind]
    if prim in ("shift_left", "shift_right"):
        return (Domain(), Domain(extra=tuple(range(-2, 67))))
    return (Domain(),) * nin


def _values(draw: Any, dtype: D.DType, dom: Domain, shape: tuple = (N,)) -> np.ndarray:
    if dtype is D.bfloat16:  # drawn in float32, rounded
        return draw(arrays(D.float32, shape, dom)).astype(dtype.numpy)
    return draw(arrays(dtype, shape, dom))


def _buf(host: np.ndarray) -> Any:
    return DEV.backend.from_host(np.ascontiguousarray(host), TORCH_DEVICE)


def _host(buf: Any) -> np.ndarray:
    return np.asarray(DEV.backend.to_host(buf))


def _accepts(prim: Any, avals: list) -> bool:
    avals = tuple(Aval(s, d) for s, d in avals)
    try:
        prim.abstract_eval(avals, prim.check_params({}, avals))
    except DTypeError:
        return False
    return True


def _operands(prim: Any, dtype: D.DType) -> list:
    if prim.name == "select":
        return [D.bool_, dtype, dtype]
    return [dtype] * prim.nin


SINGLE = [(p.name, d.name) for p in catalog.elementwise.PRIMITIVES for d in DTYPES
          if _accepts(p, [((N,), t) for t in _operands(p, d)])]
_KERNELS: dict = {}


def _kernel(fn: Any, dtypes: list, shape: tuple = (N,)) -> Any:
    """group_kernel of `fn` traced on zeros of these dtypes (one per signature)."""
    key = (fn, tuple(dtypes), shape)
    if key not in _KERNELS:
        examples = [to_device(np.zeros(shape, d.numpy), DEV) for d in dtypes]
        _KERNELS[key] = elementwise.group_kernel(trace(fn, *examples), DEV)
    return _KERNELS[key]


def _reference(prim: str, args: list, params: dict, out: D.DType) -> np.ndarray:
    """NumPy kernel of `prim`: floats computed in float64 and rounded to `out` (moves of bits
    and conversions on the operands themselves)."""
    if prim not in ("select", "convert", "bitcast_convert"):
        args = [a.astype(np.float64) if a.dtype.kind in "fV" else a for a in args]
    with np.errstate(all="ignore"):
        return np.asarray(KERNELS[prim](*args, **params)).astype(out.numpy)


_BITS = {D.float16: (10, -14), D.bfloat16: (7, -126), D.float32: (23, -126), D.float64: (52, -1022)}


def assert_ulps(actual: np.ndarray, expected: np.ndarray, dtype: D.DType, ulps: float,
                zeros: bool = True, what: str = "", where: np.ndarray | None = None) -> None:
    """Floats: NaN and infinities in the same places, finite values within `ulps` units in
    the last place of `expected`, signed zeros alike (when `zeros`); others exact. `where`
    restricts the comparison (unspecified results)."""
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    keep = np.ones(actual.shape, bool) if where is None else where
    if dtype.kind not in "f":
        bad = (actual != expected) & keep
    else:
        a, e = actual.astype(np.float64), expected.astype(np.float64)
        p, emin = _BITS[dtype]
        ex = np.frexp(np.abs(np.where(np.isfinite(e), e, 0)))[1]
        ulp = np.ldexp(1.0, np.maximum(ex - 1, emin) - p)
        with np.errstate(invalid="ignore"):
            near = np.abs(a - e) <= ulps * ulp
        bad = np.where(np.isnan(e), ~np.isnan(a), np.where(np.isfinite(e), ~near, a != e))
        if zeros:
            bad |= (e == 0) & (a == 0) & (np.signbit(a) != np.signbit(e))
        bad &= keep
    if bad.any():
        i = np.flatnonzero(bad)[:5]
        raise AssertionError(f"{what}: {bad.sum()} of {bad.size} differ; at {i.tolist()}: got "
                             f"{actual.ravel()[i]!r}, expected {expected.ravel()[i]!r}")


@pytest.mark.parametrize(("prim_name", "dtype_name"), SINGLE, ids=[f"{p}-{d}" for p, d in SINGLE])
@settings(max_examples=_FEW, suppress_health_check=_HEALTH)
@given(data=st.data())
def test_primitive_matches_numpy(prim_name: str, dtype_name: str, data: Any) -> None:
    prim, dtype = catalog.BY_NAME[prim_name], D.as_dtype(dtype_name)
    ins = _operands(prim, dtype)
    doms = _domains(prim_name, dtype, len(ins))
    args = [_values(data.draw, d, doms[i] if i < len(doms) else Domain()) for i, d in enumerate(ins)]
    (out,) = _kernel(prim.bind, ins)(*[_buf(a) for a in args])
    out_dtype = D.bool_ if out.dtype is torch.bool else dtype
    expected = _reference(prim_name, args, {}, out_dtype)
    ulps = 1 if dtype in HALF else 2
    assert_ulps(_host(out), expected, out_dtype, ulps, zeros=prim_name not in (
        "maximum", "minimum", "clamp"), what=f"{prim_name}({dtype_name}) of {args}")


def _convert_all(x: Any) -> tuple:
    return tuple(lax.convert(x, new_dtype=t) for t in DTYPES)


@pytest.mark.parametrize("dtype_name", [d.name for d in DTYPES])
@settings(max_examples=2 * _FEW, suppress_health_check=_HEALTH)
@given(data=st.data())
def test_convert_matches_numpy(dtype_name: str, data: Any) -> None:
    """One group converting to every dtype; float -> int compared where it is specified."""
    dtype = D.as_dtype(dtype_name)
    x = _values(data.draw, dtype, Domain(-300, 300))
    outs = _kernel(_convert_all, [dtype])(_buf(x))
    for target, out in zip(DTYPES, outs):
        expected = _reference("convert", [x], {"new_dtype": target}, target)
        where = None
        if dtype.kind == "f" and target.kind in "iu":
            info = np.iinfo(target.numpy)
            with np.errstate(invalid="ignore"):
                t = np.trunc(x.astype(np.float64))
                where = np.isfinite(t) & (t >= info.min) & (t <= info.max)
        assert_ulps(_host(out), expected, target, 1 if target in HALF else 0,
                    what=f"convert {dtype_name} -> {target.name} of {x}", where=where)


_WIDTH = {8: (D.int8, D.uint8), 16: (D.int16, D.float16, D.bfloat16), 32: (D.int32, D.float32),
          64: (D.int64, D.float64)}


@pytest.mark.parametrize("dtype_name", [d.name for d in DTYPES if d is not D.bool_])
@settings(max_examples=_FEW, suppress_health_check=_HEALTH)
@given(data=st.data())
def test_bitcast_keeps_bits(dtype_name: str, data: Any) -> None:
    """Every bit pattern (NaN payloads included) to every dtype of the same width."""
    dtype = D.as_dtype(dtype_name)
    targets = _WIDTH[dtype.bits]
    raw = data.draw(arrays(D.as_dtype(f"uint{dtype.bits}") if dtype.bits == 8 else
                           {16: D.int16, 32: D.int32, 64: D.int64}[dtype.bits], (N,)))
    x = raw.view(dtype.numpy)

    def bitcast_all(v: Any) -> tuple:
        return tuple(lax.bitcast_convert(v, new_dtype=t) for t in targets)

    outs = _kernel(bitcast_all, [dtype])(_buf(x))
    for t, out in zip(targets, outs):
        assert _host(out).tobytes() == x.tobytes(), f"bitcast {dtype_name} -> {t.name}"


@pytest.mark.parametrize("dtype_name", [d.name for d in DTYPES if d is not D.bool_])
def test_iota_and_full(dtype_name: str) -> None:
    """Nodes without operands (tracing folds them into constants, so the group is built by
    hand): iota along each axis, full with edge values (converted as `convert` does)."""
    dtype = D.as_dtype(dtype_name)
    shape = (3, 5)
    fills = [True, -1, 7, 2.5, -0.0, 2**63 - 1] + ([math.inf, math.nan, 1e300] if dtype.kind == "f"
                                                    else [])
    params = [("iota", {"dtype": dtype, "shape": shape, "dimension": k}) for k in (0, 1)]
    params += [("full", {"shape": shape, "fill_value": v, "dtype": dtype}) for v in fills]
    x = Var(Aval(shape, dtype, DEV))
    y = Var(Aval(shape, dtype, DEV))
    nodes = [Node(catalog.BY_NAME["neg"], [x], {}, [y])]
    for name, ps in params:
        prim = catalog.BY_NAME[name]
        nodes.append(Node(prim, [], prim.check_params({**ps, "device": DEV}, ()),
                          [Var(Aval(shape, dtype, DEV))]))
    group = Graph(inputs=[x], nodes=nodes, outputs=[n.outputs[0] for n in nodes])
    outs = elementwise.group_kernel(group, DEV)(_buf(np.arange(15).reshape(shape).astype(dtype.numpy)))
    for out, (name, ps) in zip(outs[1:], params):
        with np.errstate(all="ignore"):
            ref = np.asarray(KERNELS[name](**ps, device=None))
        assert _host(out).tobytes() == ref.tobytes(), f"{name} {ps}: {_host(out)}"


# ---- drawn groups ----------------------------------------------------------------------

_UNARY = ("neg", "abs", "sin", "tanh", "logistic", "floor", "round", "sqrt_abs", "exp_tanh")
_BINARY = ("add", "sub", "mul", "maximum", "minimum", "atan2", "div_safe")


class Program:
    """A drawn elementwise program: inputs of shapes broadcastable to `space`, constants,
    steps (replayed with lax, so it can be traced) and the values it returns."""

    def __init__(self, dtype: D.DType, space: tuple):
        self.dtype, self.space = dtype, space
        self.inputs: list = []  # (host values, presentation)
        self.consts: list = []  # host values
        self.shapes: list = []  # per value
        self.steps: list = []
        self.outputs: list = []

    def __repr__(self) -> str:
        ins = [(h.shape, how) for h, how in self.inputs]
        return (f"Program({self.dtype.name}, space={self.space}, inputs={ins}, consts="
                f"{[c.shape for c in self.consts]}, steps={self.steps}, outputs={self.outputs})")

    def __call__(self, *xs: Any) -> tuple:
        consts = [to_device(c, DEV) for c in self.consts]
        vals = list(xs)
        for step in self.steps:
            vals.append(self._apply(step, vals, consts))
        return tuple(vals[i] for i in self.outputs)

    def _apply(self, step: tuple, v: list, consts: list) -> Any:
        op, *a = step
        dt, space = self.dtype, self.space
        if op == "const":
            return consts[a[0]]
        if op == "bcast":
            return lax.broadcast_in_dim(v[a[0]], shape=space, broadcast_dimensions=a[1])
        if op == "full":
            return lax.full(shape=space, fill_value=a[0], dtype=dt, device=DEV)
        if op == "iota":
            return lax.convert(lax.iota(dtype=D.int32, shape=space, dimension=a[0], device=DEV),
                               new_dtype=dt)
        x = v[a[0]]
        if op == "sqrt_abs":
            return lax.sqrt(lax.abs(x))
        if op == "exp_tanh":
            return lax.exp(lax.tanh(x))
        if op in _UNARY:
            return getattr(lax, op)(x)
        y = v[a[1]]
        if op == "div_safe":  # a denominator >= 1 keeps chains well conditioned
            one = lax.full(shape=x.shape, fill_value=1, dtype=dt, device=DEV)
            return lax.div(x, lax.add(lax.abs(y), one))
        if op == "select":
            return lax.select(lax.lt(x, y), x, lax.neg(y))
        if op == "clamp":
            return lax.clamp(lax.minimum(x, y), v[a[2]], lax.maximum(x, y))
        if op == "int":  # through int32: round, clamp, shift, rem, back
            zero = lax.full(shape=x.shape, fill_value=0, dtype=dt, device=DEV)
            i = lax.convert(lax.clamp(lax.full(shape=x.shape, fill_value=-99, dtype=dt, device=DEV),
                                      lax.round(lax.select(lax.isnan(x), zero, lax.add(x, y))),
                                      lax.full(shape=x.shape, fill_value=99, dtype=dt, device=DEV)),
                            new_dtype=D.int32)
            k = lax.full(shape=x.shape, fill_value=3, dtype=D.int32, device=DEV)
            return lax.convert(lax.rem(lax.shift_left(i, k), lax.add(k, k)), new_dtype=dt)
        return getattr(lax, op)(x, y)


SPACES = ((5, 7), (3, 4, 5), (37,), (2, 3), (6, 1, 5), (3, 1), (130,), (1,), (), (4, 0), (2, 9))


@st.composite
def programs(draw: Any) -> Program:
    dtype = draw(st.sampled_from((D.float32, D.float32, D.float64, D.float16, D.bfloat16)))
    space = draw(st.sampled_from(SPACES))
    p = Program(dtype, space)
    dom = Domain(-4, 4)
    bcasts: list = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(("full", "full", "dropped", "ones", "scalar")))
        if kind == "full" or not space:
            shape, dims = space, tuple(range(len(space)))
        elif kind == "scalar":
            shape, dims = (), ()
        else:  # an axis dropped (broadcast along it) or kept with size 1
            k = draw(st.integers(0, len(space) - 1))
            if kind == "dropped":
                shape, dims = space[:k] + space[k + 1:], tuple(d for d in range(len(space)) if d != k)
            else:
                shape, dims = space[:k] + (1,) + space[k + 1:], tuple(range(len(space)))
        how = draw(st.sampled_from(("plain", "layout", "stride0")))
        p.inputs.append((_values(draw, dtype, dom, shape), how))
        p.shapes.append(shape)
        bcasts.append(dims)
    for i, dims in enumerate(bcasts):
        if p.shapes[i] != space:
            if draw(st.booleans()):  # work on the small value first (maybe returned)
                p.steps.append((draw(st.sampled_from(_UNARY)), i))
                p.shapes.append(p.shapes[i])
                i = len(p.shapes) - 1
            p.steps.append(("bcast", i, dims))
            p.shapes.append(space)
    for _ in range(draw(st.integers(0, 2))):  # constants: scalars (literals), uniform, arrays
        kind = draw(st.sampled_from(("scalar", "uniform", "array", "special")))
        if kind == "special":
            c = np.asarray(draw(st.sampled_from((math.nan, -0.0, math.inf, 0.5))), dtype.numpy)
        else:
            c = _values(draw, dtype, Domain(-3, 3), () if kind == "scalar" else space)
            if kind == "uniform" and c.size:
                c = np.full(space, c.reshape(-1)[0], dtype.numpy)
        p.consts.append(c)
        p.steps.append(("const", len(p.consts) - 1))
        p.shapes.append(c.shape)
        if c.shape != space:
            p.steps.append(("bcast", len(p.shapes) - 1, ()))
            p.shapes.append(space)
    for _ in range(draw(st.integers(1, 6))):
        full = [i for i, s in enumerate(p.shapes) if s == space]
        op = draw(st.sampled_from(_UNARY + _BINARY + ("select", "clamp", "int", "iota", "full")))
        if op == "iota" and space:
            p.steps.append(("iota", draw(st.integers(0, len(space) - 1))))
        elif op == "full":
            p.steps.append(("full", draw(st.sampled_from((2.0, -1.5, 0.0)))))
        elif op in _UNARY:
            p.steps.append((op, draw(st.sampled_from(full))))
        elif op in ("select", "int") or op in _BINARY:
            p.steps.append((op, draw(st.sampled_from(full)), draw(st.sampled_from(full))))
        elif op == "clamp":
            p.steps.append((op, *(draw(st.sampled_from(full)) for _ in range(3))))
        else:
            continue
        p.shapes.append(space)
    last = len(p.shapes) - 1
    if last < len(p.inputs) or p.steps[-1][0] == "const":  # outputs are node results
        p.steps.append(("neg", last))
        p.shapes.append(p.shapes[last])
        last += 1
    made = [i for i, s in enumerate(p.steps, len(p.inputs)) if s[0] != "const" and i != last]
    p.outputs = [last] + (draw(st.lists(st.sampled_from(made), max_size=2, unique=True)) if made
                          else [])
    return p


def _present(host: np.ndarray, how: str, data: Any) -> Any:
    if how == "layout":
        return present(host, data.draw(layouts(host.shape)), DEV)[0]
    if how == "stride0" and host.size and any(n > 1 for n in host.shape):
        k = next(i for i, n in enumerate(host.shape) if n > 1)
        small = np.ascontiguousarray(host[(slice(None),) * k + (slice(0, 1),)])
        host[...] = small  # the values the broadcast view holds
        return lax.broadcast_in_dim(to_device(small, DEV), shape=host.shape,
                                    broadcast_dimensions=tuple(range(host.ndim)))
    return to_device(host, DEV)


def _eval_numpy(graph: Any, args: list) -> list:
    """The graph node by node with the NumPy kernels (floats in float64, rounded per node)."""
    env = dict(zip(graph.inputs, args))
    env.update((v, host_of(t)) for v, t in graph.consts.items())
    for n in graph.nodes:
        params = {k: v for k, v in n.params.items() if k != "device"}
        ins = [env[v] for v in n.inputs]
        if n.prim.name in ("broadcast_in_dim", "iota", "full"):
            out = np.asarray(KERNELS[n.prim.name](*ins, **params, **(
                {"device": None} if not ins else {})))
        else:
            out = _reference(n.prim.name, ins, params, n.outputs[0].aval.dtype)
        env[n.outputs[0]] = out.astype(n.outputs[0].aval.dtype.numpy)
    return [env[v] for v in graph.outputs]


@settings(max_examples=_GROUPS, suppress_health_check=_HEALTH)
@given(program=programs(), data=st.data(), block=st.sampled_from((16, 1024)))
def test_drawn_groups_match_numpy(program: Program, data: Any, block: int) -> None:
    tensors = [_present(h, how, data) for h, how in program.inputs]
    graph = trace(program, *tensors)
    saved, elementwise.BLOCK = elementwise.BLOCK, block  # 16: several programs per kernel
    try:
        outs = elementwise.group_kernel(graph, DEV)(*[t._buf for t in tensors])
    finally:
        elementwise.BLOCK = saved
    expected = _eval_numpy(graph, [h for h, _ in program.inputs])
    for out, exp, v in zip(outs, expected, graph.outputs):
        assert tuple(out.shape) == v.aval.shape and out.is_contiguous()
        assert_close(_host(out), exp, v.aval.dtype, mult=4, what=str(graph))


def test_dag_with_views_constants_and_smaller_outputs() -> None:
    """(5, 7) from a transposed view, a (7,) input (returned after exp), a stride-0 (5, 7)
    view, a (5, 1) input (returned negated), constants (0-d, NaN, uniform: literals; an
    array: a pointer); blocks of 16 elements, so 3 programs."""
    rng = np.random.default_rng(0)
    a_host = rng.standard_normal((5, 7)).astype(np.float32)
    a = lax.transpose(to_device(np.ascontiguousarray(a_host.T), DEV), permutation=(1, 0))
    b = to_device(rng.standard_normal(7).astype(np.float32), DEV)
    c = lax.broadcast_in_dim(to_device(rng.standard_normal((1, 7)).astype(np.float32), DEV),
                             shape=(5, 7), broadcast_dimensions=(0, 1))
    d = to_device(rng.standard_normal((5, 1)).astype(np.float32), DEV)
    k = [to_device(np.float32(0.1), DEV), to_device(np.float32(math.nan), DEV),
         to_device(np.full((5, 7), -2.5, np.float32), DEV),
         to_device(rng.standard_normal((5, 7)).astype(np.float32), DEV)]

    def fn(a: Any, b: Any, c: Any, d: Any) -> tuple:
        eb = lax.exp(b)
        x = lax.mul(a, lax.broadcast_in_dim(eb, shape=(5, 7), broadcast_dimensions=(1,)))
        x = lax.add(lax.add(x, c), lax.broadcast_in_dim(d, shape=(5, 7), broadcast_dimensions=(0, 1)))
        x = lax.select(lax.gt(x, k[2]), x, lax.mul(k[3], lax.broadcast_in_dim(
            k[0], shape=(5, 7), broadcast_dimensions=())))
        i = lax.convert(lax.iota(dtype=D.int32, shape=(5, 7), dimension=1, device=DEV),
                        new_dtype=D.float32)
        nan = lax.broadcast_in_dim(k[1], shape=(5, 7), broadcast_dimensions=())
        return lax.maximum(lax.add(x, i), lax.select(lax.lt(i, x), nan, x)), eb, lax.neg(d)

    graph = trace(fn, a, b, c, d)
    assert c._buf.stride() == (0, 1) and a._buf.stride() == (1, 5)
    saved, elementwise.BLOCK = elementwise.BLOCK, 16
    try:
        outs = elementwise.group_kernel(graph, DEV)(a._buf, b._buf, c._buf, d._buf)
    finally:
        elementwise.BLOCK = saved
    hosts = [a_host, host_of(b), host_of(c), host_of(d)]
    for out, exp in zip(outs, _eval_numpy(graph, hosts)):
        assert_ulps(_host(out), exp, D.float32, 0)


def test_chain_kernel_of_the_benchmark() -> None:
    kernel, buf, reference = elementwise.chain_kernel(10, 1000, DEVICE)
    assert_ulps(_host(kernel(buf)[0]), reference(_host(buf)), D.float32, 0)


def test_outputs_of_unrelated_shapes_and_zero_size() -> None:
    """Outputs (2, 3) and (3, 2) from one (3,) input; a 0-size output next to a 0-d one."""
    x = to_device(np.arange(3.0, dtype=np.float32), DEV)

    def fn(v: Any) -> tuple:
        e = lax.exp(v)
        return (lax.broadcast_in_dim(e, shape=(2, 3), broadcast_dimensions=(1,)),
                lax.broadcast_in_dim(lax.neg(e), shape=(3, 2), broadcast_dimensions=(0,)), e)

    a, b, e = elementwise.group_kernel(trace(fn, x), DEV)(x._buf)
    ref = np.exp(np.arange(3.0)).astype(np.float32)
    np.testing.assert_array_equal(_host(a), np.broadcast_to(ref, (2, 3)))
    np.testing.assert_array_equal(_host(b), np.broadcast_to(-ref[:, None], (3, 2)))
    np.testing.assert_array_equal(_host(e), ref)
    s, z = to_device(np.float32(2.0), DEV), to_device(np.zeros((0, 4), np.float32), DEV)
    outs = elementwise.group_kernel(trace(lambda u, w: (lax.sin(w), lax.cos(u)), s, z), DEV)(
        s._buf, z._buf)
    assert outs[0].shape == (0, 4)  # cos within 2 ulp, as the device's libm gives it
    np.testing.assert_array_max_ulp(_host(outs[1]), np.float32(np.cos(2.0)), maxulp=2)


def test_unsupported_dtypes_raise() -> None:
    z = to_device(np.ones(3, np.complex64), DEV)
    with pytest.raises(Unsupported, match="complex64"):
        elementwise.group_kernel(trace(lambda v: lax.mul(v, v), z), DEV)
    assert codegen.expression("add", ["a", "b"], [D.complex64] * 2, D.complex64) is None


# ---- the kernel cache, dumps, int64 indexing ---------------------------------------------


@pytest.fixture
def loads(monkeypatch: Any) -> list:
    """The sources codegen.load is asked for from now on."""
    seen: list = []
    real = codegen.load

    def spy(source: str, name: str) -> Any:
        seen.append(source)
        return real(source, name)

    monkeypatch.setattr(codegen, "load", spy)
    return seen


def test_one_source_per_signature(loads: list) -> None:
    x = to_device(np.arange(12.0, dtype=np.float32).reshape(3, 4) + 0.125, DEV)
    fn = lambda v: lax.mul(lax.sin(v), v)  # noqa: E731
    for _ in range(3):  # each call builds a new kernel for the group, as each compile does
        kernel = elementwise.group_kernel(trace(fn, x), DEV)
        kernel(x._buf)
        kernel(x._buf)
    assert len(loads) == 1
    xt = lax.transpose(to_device(np.ascontiguousarray(x.numpy().T), DEV), permutation=(1, 0))
    out = kernel(xt._buf)  # other strides: one more source, same values
    assert len(loads) == 2 and "input strides ((1, 3),)" in loads[1]
    np.testing.assert_array_equal(_host(out[0]), _host(kernel(x._buf)[0]))


def test_dump_logs_and_writes_sources(monkeypatch: Any, caplog: Any, tmp_path: Any) -> None:
    x = to_device(np.arange(5.0, dtype=np.float32) + 0.375, DEV)
    monkeypatch.setenv("TENFERRO_TRITON_DUMP", "1")
    with caplog.at_level(logging.WARNING, logger="tenferro_triton.codegen"):
        elementwise.group_kernel(trace(lambda v: lax.cosh(v), x), DEV)(x._buf)
    assert "def ew_cosh(in0, out0):" in caplog.text and "M.cosh(x0)" in caplog.text
    monkeypatch.setenv("TENFERRO_TRITON_DUMP", str(tmp_path))
    elementwise.group_kernel(trace(lambda v: lax.sinh(v), x), DEV)(x._buf)
    (path,) = tmp_path.glob("ew_sinh_*.py")
    assert "M.sinh(x0)" in path.read_text()


def test_large_offsets_index_in_int64(loads: list) -> None:
    """Offsets past 2**31 (here a stride: no such buffer is allocated) use int64 indices."""
    x = to_device(np.zeros((2, 3), np.float32), DEV)
    spec = elementwise._analyze(trace(lambda v: lax.abs(v), x), DEV)
    elementwise._build(spec, ((2**31, 1),))
    elementwise._build(spec, ((3, 1),))
    assert "pid.to(tl.int64)" in loads[0] and "i0 * 2147483648" in loads[0]
    assert "pid.to(tl.int64)" not in loads[1] and "offs = pid * BLOCK" in loads[1]


# ---- the same sources compiled for a GPU (no GPU needed) ---------------------------------

_PTR = {D.bool_: "*i1", D.int8: "*i8", D.int16: "*i16", D.int32: "*i32", D.int64: "*i64",
        D.uint8: "*u8", D.float16: "*fp16", D.bfloat16: "*bf16", D.float32: "*fp32",
        D.float64: "*fp64"}


def _compile_for_a_gpu() -> None:
    """Run in a fresh Python without TRITON_INTERPRET (the test below): per dtype, one group
    of every primitive taking it, every convert and bitcast from it, and a strided DAG with
    int64 offsets, generated for libdevice and compiled to sm_90 machine code."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from tenferro_triton.cache import interpreted

    assert not interpreted()
    target = GPUTarget("cuda", 90, 32)

    def compile_group(graph: Any, strides: tuple) -> str:
        fn, _, warps = elementwise._build(elementwise._analyze(graph, DEV), strides)
        avals = {f"in{i}": v.aval for i, v in enumerate(graph.inputs)}
        avals.update((f"out{j}", v.aval) for j, v in enumerate(graph.outputs))
        avals.update((f"const{j}", v.aval) for j, v in enumerate(graph.consts))
        sig = {name: _PTR[avals[name].dtype] for name in fn.arg_names}
        kernel = triton.compile(ASTSource(fn=fn, signature=sig, constexprs={}), target=target,
                                options={"num_warps": warps, **elementwise.OPTIONS})
        return kernel.asm["ptx"]

    for d in DTYPES:
        prims = [p for p in catalog.elementwise.PRIMITIVES
                 if _accepts(p, [((5, 3), t) for t in _operands(p, d)])]

        def every(x: Any, y: Any, z: Any, b: Any, prims: list = prims, d: D.DType = d) -> tuple:
            outs = [p.bind(*([b, x, y] if p.name == "select" else [x, y, z][:p.nin])) for p in prims]
            outs += [lax.convert(x, new_dtype=t) for t in DTYPES]
            return (*outs, *(lax.bitcast_convert(x, new_dtype=t) for t in DTYPES
                             if t.bits == d.bits and D.bool_ not in (t, d)))

        examples = [to_device(np.zeros((5, 3), t.numpy), DEV) for t in (d, d, d, D.bool_)]
        compile_group(trace(every, *examples), ((3, 1),) * 4)
    x = to_device(np.zeros((4, 6), np.float32), DEV)
    v = to_device(np.zeros(6, np.float32), DEV)
    c = to_device(np.arange(24, dtype=np.float32).reshape(4, 6), DEV)

    def dag(x: Any, v: Any) -> tuple:
        e = lax.exp(v)
        y = lax.sqrt(lax.div(x, lax.broadcast_in_dim(e, shape=(4, 6), broadcast_dimensions=(1,))))
        return lax.add(y, c), e

    ptx = compile_group(trace(dag, x, v), ((2**31, 1), (1,)))
    assert "div.rn.f32" in ptx and "sqrt.rn.f32" in ptx and "div.full.f32" not in ptx


def test_generated_kernels_compile_for_a_gpu(tmp_path: Any) -> None:
    """The interpreter runs what a GPU would compile; this compiles it (Triton's NVIDIA
    backend and ptxas run without a GPU), with libdevice in place of NumPy."""
    import os
    import subprocess
    import sys

    pytest.importorskip("triton.backends.nvidia.compiler")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TENFERRO_TRITON_CACHE=str(tmp_path / "tenferro"), TRITON_CACHE_DIR=str(tmp_path))
    here = os.path.dirname(__file__)
    code = (f"import sys; sys.path.insert(0, {here!r}); import test_elementwise_codegen as t; "
            f"t._compile_for_a_gpu()")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-4000:]


# ---- the executor: compile(backend="triton"), fallbacks, gradients ------------------------


def test_compile_runs_generated_kernels_with_gradients(caplog: Any) -> None:
    x = xp.asarray(torch.linspace(-2, 2, 12, dtype=torch.float32, device=TORCH_DEVICE).reshape(3, 4),
                   device=DEVICE)
    w = xp.asarray(torch.linspace(0.5, 1.5, 4, dtype=torch.float32, device=TORCH_DEVICE), device=DEVICE)

    def f(x: Any, w: Any) -> Any:
        y = xp.tanh(x * w + 1.0) * xp.exp(-x)
        return xp.sum(xp.where(y > 0, y, 0.5 * y) ** 2)

    with caplog.at_level(logging.DEBUG, logger="tenferro_triton"):
        compiled = compile(f, backend="triton")
        value = compiled(x, w)
        gx, gw = grad(compiled, argnums=(0, 1))(x, w)
    assert re.search(r"triton executor: [1-9]\d* generated kernel", caplog.text)
    ref = f(x, w)
    rgx, rgw = grad(f, argnums=(0, 1))(x, w)
    assert_close(value.numpy(), ref.numpy(), D.float32, mult=4)
    assert_close(gx.numpy(), rgx.numpy(), D.float32, mult=4)
    assert_close(gw.numpy(), rgw.numpy(), D.float32, mult=4)
    xt = lax.transpose(xp.asarray(torch.linspace(-1, 1, 12, device=TORCH_DEVICE).reshape(4, 3),
                                  device=DEVICE), permutation=(1, 0))  # a non-contiguous argument
    assert_close(compiled(xt, w).numpy(), f(xt, w).numpy(), D.float32, mult=4)


def test_complex_group_falls_back_with_its_reason(caplog: Any) -> None:
    z = xp.asarray(torch.tensor([1 + 2j, -0.5j, 3.0], dtype=torch.complex64, device=TORCH_DEVICE),
                   device=DEVICE)
    f = lambda v: xp.exp(v) * v + 1  # noqa: E731
    with caplog.at_level(logging.INFO, logger="tenferro_triton"):
        out = compile(f, backend="triton")(z)
    np.testing.assert_allclose(out.numpy(), f(z).numpy(), rtol=1e-6)
    assert "runs the torch kernels" in caplog.text and "complex64" in caplog.text


def test_unsupported_primitive_falls_back_with_its_reason(caplog: Any) -> None:
    twice = define_op("test_elementwise_codegen.twice.v1", lambda x: (x.shape, x.dtype),
                      category="elementwise")

    class Plugin:
        __name__ = "test_elementwise_codegen"

        @hookimpl
        def tenferro_register(self, registry: Any) -> None:
            registry.add_op(twice)
            registry.add_kernel("torch", twice, lambda b: b * 2)

    with use_runtime(Runtime([passes, torch_plugin, triton_plugin, Plugin()])):
        x = xp.asarray(torch.arange(4.0, device=TORCH_DEVICE), device=DEVICE)
        f = lambda v: xp.sin(twice.bind(xp.cos(v)) + 1)  # noqa: E731
        with caplog.at_level(logging.INFO, logger="tenferro_triton"):
            out = compile(f, backend="triton")(x)
        np.testing.assert_allclose(out.numpy(), np.sin(2 * np.cos(np.arange(4.0)) + 1), rtol=1e-6)
    assert "no generated code for test_elementwise_codegen.twice.v1(float32)" in caplog.text
