"""Row groups (rows.py): row reductions with their producers and consumers as one generated
Triton kernel, run under TRITON_INTERPRET=1 through ``compile(f, backend="triton")`` on
``torch:cpu`` (compiled for the GPU on ``torch:cuda:0`` with TENFERRO_TRITON_REAL=1, see
conftest.py) and checked against the same function run eagerly on ``numpy:cpu``.

Shapes are generated: row lengths that are no powers of two, shorter than the block, 1 and
0; zero rows; batch axes; reductions over one or two trailing axes or all of them; inputs
that are contiguous, strided, transposed or broadcast (stride 0). Long rows are exercised by
shrinking `rows.SINGLE_PASS_MAX` and `rows.CHUNK` (the column loops).
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tenferro_ad
import tenferro_nn.functional as F
import tenferro_runtime as tr
from tenferro_runtime import array_api as xp
from tenferro_runtime.passes.fusion import fuse_groups
from tenferro_triton import rows
from tenferro_triton.executor import Unsupported

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # masked lanes may divide 0 by 0

DEV = "torch:cuda:0" if os.environ.get("TENFERRO_TRITON_REAL") == "1" else "torch:cpu"  # see conftest.py
FLOATS = ("float32", "float64", "float16")
TOL = {"float16": (2e-2, 2e-2), "float32": (2e-5, 2e-5), "float64": (1e-11, 1e-11)}


class Spy:
    """Counts what `rows.find_groups` and `rows.row_kernel` return while installed."""

    def __init__(self) -> None:
        self.groups: list = []  # (graph, groups) per find_groups call
        self.made = 0
        self.declined = 0
        self.sources: list[str] = []


@contextlib.contextmanager
def spying(**limits: int) -> Any:
    """A Spy on the row generator; `limits` set rows' module constants meanwhile."""
    spy = Spy()
    find, kernel, source = rows.find_groups, rows.row_kernel, rows.source

    def find_spy(graph: Any) -> list:
        groups = find(graph)
        spy.groups.append((graph, groups))
        return groups

    def kernel_spy(group: Any, device: Any) -> Any:
        try:
            k = kernel(group, device)
        except Unsupported:
            spy.declined += 1
            raise
        spy.made += 1
        return k

    def source_spy(*args: Any) -> str:
        text = source(*args)
        spy.sources.append(text)
        return text

    saved = {name: getattr(rows, name) for name in limits}
    rows._compiled.cache_clear()  # every kernel's source is made (and seen) again
    rows.find_groups, rows.row_kernel, rows.source = find_spy, kernel_spy, source_spy
    for name, value in limits.items():
        setattr(rows, name, value)
    try:
        yield spy
    finally:
        rows.find_groups, rows.row_kernel, rows.source = find, kernel, source
        for name, value in saved.items():
            setattr(rows, name, value)


def _input(a: np.ndarray, layout: str) -> Any:
    """A torch:cpu tensor holding `a`, its buffer contiguous, strided (every other element
    of a wider array), transposed (axes reversed in memory) or broadcast along axis 0."""
    if layout == "strided" and a.ndim:
        wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        wide[..., ::2] = a
        return xp.asarray(wide, device=DEV)[..., ::2]
    if layout == "transposed" and a.ndim > 1:
        t = xp.asarray(np.ascontiguousarray(a.transpose()), device=DEV)
        return xp.permute_dims(t, tuple(reversed(range(a.ndim))))
    if layout == "broadcast" and a.ndim > 1 and a.shape[0] > 1:
        a[:] = a[:1]  # the reference sees the same values
        return xp.broadcast_to(xp.asarray(np.ascontiguousarray(a[0]), device=DEV), a.shape)
    return xp.asarray(a, device=DEV)


def _values(rng: np.random.Generator, shape: tuple, dtype: str, scale: float = 1.0) -> np.ndarray:
    if dtype in FLOATS:
        return (rng.standard_normal(shape) * scale).astype(dtype)
    lo, hi = (0, 100) if dtype == "uint8" else (-60, 60)
    return rng.integers(lo, hi, shape).astype(dtype)


def _check(got: Any, ref: Any, dtype: str) -> None:
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape and got.dtype == ref.dtype, (got.shape, ref.shape, got.dtype, ref.dtype)
    if dtype in TOL:
        rtol, atol = TOL[dtype]
        np.testing.assert_allclose(got.astype("float64"), ref.astype("float64"), rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(got, ref)


def _compare(fn: Any, arrays: list, layouts: list, dtype: str, **limits: int) -> Spy:
    """`fn` compiled for the triton executor on torch:cpu inputs of `layouts` vs eager on
    numpy:cpu; returns the Spy of the run."""
    args = [_input(a, lay) for a, lay in zip(arrays, layouts)]
    ref = fn(*[xp.asarray(a) for a in arrays])
    with spying(**limits) as spy:
        got = tr.compile(fn, backend="triton")(*args)
    for g, r in zip(*(v if isinstance(v, tuple | list) else (v,) for v in (got, ref))):
        _check(g, r, dtype)
    return spy


def _one_kernel(spy: Spy) -> None:
    """The graph became one row group, generated as one kernel."""
    (graph, groups), = spy.groups
    assert len(groups) == 1 and len(groups[0]) == len(graph.nodes), (groups, str(graph))
    assert (spy.made, spy.declined) == (1, 0)


batch = st.lists(st.sampled_from([1, 2, 3, 5]), max_size=2).map(tuple)
cols = st.sampled_from([1, 2, 3, 7, 13, 17, 33])
layouts = st.sampled_from(["contiguous", "strided", "transposed", "broadcast"])


@settings(max_examples=80)
@given(op=st.sampled_from(["sum", "max", "min", "mean", "prod"]),
       dtype=st.sampled_from([*FLOATS, "int32", "int8", "uint8"]),
       lead=batch, c=st.sampled_from([0, 1, 3, 7, 13, 17, 33]), rows0=st.booleans(),
       axis=st.sampled_from(["last", "last2", "all"]), layout=layouts, seed=st.integers(0, 99))
def test_row_reductions_match_numpy(op, dtype, lead, c, rows0, axis, layout, seed):
    if op == "mean" and dtype not in FLOATS:
        dtype = "float32"
    if op in ("max", "min"):  # an empty max has no value
        c, axis = c or 5, "last" if rows0 else axis
    shape = (0, *lead, c) if rows0 else (*lead, c)
    a = _values(np.random.default_rng(seed), shape, dtype, 0.1 if op == "prod" else 1.0)
    if op == "prod" and dtype in FLOATS:
        a = (1 + a).astype(dtype)
    ax = {"last": -1, "last2": (-2, -1) if len(shape) > 1 else -1, "all": None}[axis]
    fn = {"sum": xp.sum, "max": xp.max, "min": xp.min, "mean": xp.mean, "prod": xp.prod}[op]
    kw = {"dtype": getattr(xp, dtype)} if op in ("sum", "prod") else {}  # int8 sums wrap in int8
    spy = _compare(lambda x: fn(x, axis=ax, **kw), [a], [layout], dtype)
    assert (spy.made, spy.declined) == (1, 0)


def _logsumexp(x: Any) -> Any:
    m = xp.max(x, axis=-1, keepdims=True)
    return xp.log(xp.sum(xp.exp(x - m), axis=-1)) + m[..., 0]


@settings(max_examples=50)
@given(kind=st.sampled_from(["softmax", "log_softmax", "logsumexp"]), dtype=st.sampled_from(FLOATS),
       lead=batch, c=cols, scale=st.sampled_from([1.0, 30.0]), layout=layouts, seed=st.integers(0, 99))
def test_softmax_family_is_one_kernel(kind, dtype, lead, c, scale, layout, seed):
    fn = {"softmax": lambda x: F.softmax(x, -1), "log_softmax": lambda x: F.log_softmax(x, -1),
          "logsumexp": _logsumexp}[kind]
    a = _values(np.random.default_rng(seed), (*lead, c), dtype, scale)
    _one_kernel(_compare(fn, [a], [layout], dtype))


@settings(max_examples=30)
@given(dtype=st.sampled_from(FLOATS), lead=batch, c=cols, k=st.sampled_from([1, 2]),
       affine=st.booleans(), layout=layouts, seed=st.integers(0, 99))
def test_layer_norm_forward_is_one_kernel(dtype, lead, c, k, affine, layout, seed):
    rng = np.random.default_rng(seed)
    shape = (*lead, 3, c)
    norm = shape[-k:]
    x = _values(rng, shape, dtype, 3.0)
    if affine:
        w, b = _values(rng, norm, dtype), _values(rng, norm, dtype)
        spy = _compare(lambda x, w, b: F.layer_norm(x, norm, w, b), [x, w, b],
                       [layout, "contiguous", "strided"], dtype)
    else:
        spy = _compare(lambda x: F.layer_norm(x, norm), [x], [layout], dtype)
    _one_kernel(spy)


def _ln_loss(norm: tuple) -> Any:
    return lambda x, w, b: xp.sum(xp.sin(F.layer_norm(x, norm, w, b)) * x)


@settings(max_examples=25)
@given(dtype=st.sampled_from(["float32", "float64"]), lead=batch, c=cols, layout=layouts,
       seed=st.integers(0, 99))
def test_layer_norm_backward_rows_are_generated(dtype, lead, c, layout, seed):
    rng = np.random.default_rng(seed)
    shape = (*lead, 4, c)
    arrays = [_values(rng, shape, dtype), _values(rng, (c,), dtype), _values(rng, (c,), dtype)]
    grad = tenferro_ad.grad(_ln_loss((c,)), argnums=(0, 1, 2))
    spy = _compare(grad, arrays, [layout, "contiguous", "contiguous"], dtype)
    assert spy.made >= 1 and spy.declined == 0
    (graph, groups), = spy.groups
    row_reductions = [i for i, n in enumerate(graph.nodes) if n.prim.name == "reduce_sum"
                      and n.params["axes"] == (len(shape) - 1,)]
    grouped = {i for g in groups for i in g}
    assert row_reductions and grouped >= set(row_reductions)


def test_grad_of_a_compiled_function():
    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal((6, 10)), rng.standard_normal(10), rng.standard_normal(10)
    loss = _ln_loss((10,))
    softmax_loss = lambda x: xp.sum(xp.sin(F.softmax(x, -1)) * x)  # noqa: E731
    with spying() as spy:
        got = tenferro_ad.grad(tr.compile(loss, backend="triton"), argnums=(0, 1, 2))(
            *[xp.asarray(a, device=DEV) for a in (x, w, b)])
        got_s = tenferro_ad.grad(tr.compile(softmax_loss, backend="triton"))(xp.asarray(x, device=DEV))
    ref = tenferro_ad.grad(loss, argnums=(0, 1, 2))(*[xp.asarray(a) for a in (x, w, b)])
    for g, r in zip(got, ref):
        _check(g, r, "float64")
    _check(got_s, tenferro_ad.grad(softmax_loss)(xp.asarray(x)), "float64")
    assert spy.made >= 2 and spy.declined == 0


@settings(max_examples=25)
@given(kind=st.sampled_from(["softmax", "layer_norm", "layer_norm_grad", "max", "sum_f16", "prod"]),
       c=st.sampled_from([9, 13, 33]), lead=batch, layout=layouts, seed=st.integers(0, 99))
def test_long_rows_loop_over_column_chunks(kind, c, lead, layout, seed):
    rng = np.random.default_rng(seed)
    shape = (*lead, 3, c)
    dtype = "float16" if kind == "sum_f16" else "float32"
    arrays = [_values(rng, shape, dtype)]
    if kind == "prod":
        arrays = [(1 + 0.1 * arrays[0]).astype(dtype)]
    fn = {"softmax": lambda x: F.softmax(x, -1), "max": lambda x: xp.max(x, axis=-1),
          "sum_f16": lambda x: xp.sum(x, axis=-1), "prod": lambda x: xp.prod(x, axis=-1)}.get(kind)
    if kind.startswith("layer_norm"):
        arrays += [_values(rng, (c,), dtype), _values(rng, (c,), dtype)]
        fn = (tenferro_ad.grad(_ln_loss((c,)), argnums=(0, 1, 2)) if kind == "layer_norm_grad"
              else lambda x, w, b: F.layer_norm(x, (c,), w, b))
    spy = _compare(fn, arrays, [layout] + ["contiguous"] * (len(arrays) - 1), dtype,
                   SINGLE_PASS_MAX=8, CHUNK=4)
    assert spy.made >= 1 and spy.declined == 0
    assert spy.sources and all("for c0 in range" in s for s in spy.sources)


def test_special_values():
    a = np.array([[1.0, np.nan, 2.0, 0.5, 3.0], [-np.inf, 0.0, 1.0, -np.inf, 2.0],
                  [np.inf, 1.0, 2.0, 3.0, 4.0], [-np.inf] * 5, [-0.0] * 5], dtype="float32")
    for fn in (lambda x: xp.max(x, axis=-1), lambda x: xp.min(x, axis=-1),
               lambda x: xp.sum(x, axis=-1), lambda x: F.softmax(x, -1),
               lambda x: F.log_softmax(x, -1)):
        for limits in ({}, {"SINGLE_PASS_MAX": 4, "CHUNK": 2}):  # whole rows, column chunks
            with spying(**limits) as spy:
                got = tr.compile(fn, backend="triton")(xp.asarray(a, device=DEV))
            _check(got, fn(xp.asarray(a)), "float32")
            assert spy.made == 1
    got = np.asarray(tr.compile(lambda x: xp.max(x, axis=-1), backend="triton")(
        xp.asarray(a[4:], device=DEV)))
    assert np.signbit(got).all()  # the max of -0.0s is -0.0


def test_outputs_of_every_layout_and_dtype():
    """Full rows, per-row values (kept axes, bool), per-column values and a scalar out of
    one kernel; int16 values promote to int64 before the sum."""
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 5, 9)).astype("float32"), rng.standard_normal(9).astype("float32")
    k = rng.integers(-9, 9, (2, 5, 9)).astype("int16")

    def fn(x, w, k):
        w2 = w * 2.0
        m = xp.max(x * w2, axis=-1, keepdims=True)
        e = xp.exp(x * w2 - m)
        s = xp.sum(e, axis=-1)
        t = xp.sum(k, axis=-1)
        return e / s[..., None], s, m > 0.5, w2, t, xp.asarray(3.0, device=x.device) * s[0, 0]

    args = [x, w, k]
    ref = fn(*[xp.asarray(a) for a in args])
    with spying() as spy:
        got = tr.compile(fn, backend="triton")(*[xp.asarray(a, device=DEV) for a in args])
    for g, r in zip(got, ref):
        _check(g, r, "float32" if np.asarray(r).dtype.kind == "f" else "int64")
    assert spy.made >= 1 and spy.declined == 0


def test_sibling_reductions_share_one_kernel():
    """Reductions and elementwise nodes reading the same rows join one group (one read)."""
    a = np.random.default_rng(7).standard_normal((6, 11))
    fn = lambda x: (xp.max(x, axis=-1), xp.sum(x, axis=-1), xp.mean(x * x, axis=-1))  # noqa: E731
    _one_kernel(_compare(fn, [a], ["transposed"], "float64"))


def test_kernels_are_cached_by_group_signature():
    a = xp.asarray(np.random.default_rng(2).standard_normal((4, 6)), device=DEV)
    before = rows._compiled.cache_info()
    for _ in range(2):
        tr.compile(lambda x: F.softmax(x, -1), backend="triton")(a)  # a new function each time
    after = rows._compiled.cache_info()
    assert after.hits >= before.hits + 1 and after.currsize <= before.currsize + 1


def test_column_reductions_are_no_row_groups(caplog):
    caplog.set_level(logging.DEBUG, logger="tenferro_triton")
    a = np.random.default_rng(3).standard_normal((5, 7))
    spy = _compare(lambda x: xp.sum(x, axis=0) + 1.0, [a], ["contiguous"], "float64")
    assert spy.made == 0 and spy.groups[0][1] == []
    assert "is no row group: axes (0,) are not the trailing axes of float64[5,7]" in caplog.text


def test_declined_group_falls_back_with_the_reason(caplog):
    """A row sum broadcast along rows and along columns of a square space: one value in two
    places, which the generator declines; the torch kernels give the same values."""
    caplog.set_level(logging.INFO, logger="tenferro_triton")
    a = np.random.default_rng(4).standard_normal((4, 4))

    def outer(x):
        s = xp.sum(x, axis=-1)
        return x * s[:, None] + s[None, :]

    spy = _compare(outer, [a], ["contiguous"], "float64")
    assert spy.made == 0 and spy.declined == 1
    assert "is used along two sets of axes" in caplog.text
    assert "runs the torch kernels" in caplog.text


def test_unsupported_nodes_in_a_group_fall_back(caplog):
    """argmax forced into a row group (find_groups never puts it there): declined, logged,
    and the group's nodes run their torch kernels."""
    caplog.set_level(logging.INFO, logger="tenferro_triton")
    a = np.random.default_rng(5).standard_normal((3, 8))
    fn = lambda x: xp.sum(x, axis=-1) + xp.astype(xp.argmax(x, axis=-1), xp.float64)  # noqa: E731
    find = rows.find_groups
    rows_find = lambda graph: [list(range(len(graph.nodes)))]  # noqa: E731
    with spying() as spy:
        rows.find_groups = rows_find  # inside the spy: restored with it
        got = tr.compile(fn, backend="triton")(xp.asarray(a, device=DEV))
    assert rows.find_groups is find
    _check(got, fn(xp.asarray(a)), "float64")
    assert spy.declined == 1 and "argmax is no row reduction" in caplog.text


def _convex(graph: Any, group: list) -> bool:
    """No path leaves `group` and comes back (brute force)."""
    inside = set(group)
    producer = {v: i for i, n in enumerate(graph.nodes) for v in n.outputs}
    users: dict[int, set] = {}
    for i, n in enumerate(graph.nodes):
        for v in n.inputs:
            if v in producer:
                users.setdefault(producer[v], set()).add(i)
    outside = {u for i in group for u in users.get(i, ()) if u not in inside}
    seen = set()
    while outside:
        j = outside.pop()
        if j in seen:
            continue
        seen.add(j)
        for u in users.get(j, ()):
            if u in inside:
                return False
            outside.add(u)
    return True


def test_groups_are_convex_and_disjoint():
    """A path that leaves a row group (through a sort) and comes back splits it."""
    a = np.random.default_rng(6).standard_normal((5, 6))

    def detour(x):
        s = xp.sum(x, axis=-1)
        t = xp.sort(s * 2.0)  # no elementwise op: outside the group
        return x / (s + t)[:, None], xp.max(x, axis=-1)

    x = xp.asarray(a, device=DEV)
    for fn in (detour, _ln_loss((6,)), tenferro_ad.grad(_ln_loss((6,)), argnums=(0, 1, 2))):
        args = (x,) if fn is detour else (x, x[0], x[1])
        graph = tr.compile(fn).lower(*args)
        groups = rows.find_groups(graph)
        flat = [i for g in groups for i in g]
        assert groups and len(flat) == len(set(flat))
        assert all(g == sorted(g) and _convex(graph, g) for g in groups)
        fuse_groups(graph, groups)  # raises on a cycle between groups
    _compare(detour, [a], ["contiguous"], "float64")


@pytest.mark.parametrize("shape, generated", [
    ((8, 1 << 16), False), ((127, (1 << 15) + 1), False),  # few long rows: torch's reduction
    ((128, (1 << 15) + 1), True), ((127, 1 << 15), True), ((4, 64), True),
])
def test_few_long_rows_are_left_to_torch(caplog, shape, generated):
    caplog.set_level(logging.DEBUG, logger="tenferro_triton")
    x = xp.zeros(shape, dtype=xp.float32, device=DEV)
    graph = tr.compile(lambda x: xp.max(x, axis=-1)).lower(x)
    assert bool(rows.find_groups(graph)) == generated
    assert ("torch splits long rows" in caplog.text) != generated
