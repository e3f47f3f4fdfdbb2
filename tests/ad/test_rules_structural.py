"""AD rules of the structural, reduction and contraction primitives, called directly.

JVPs are compared with central finite differences of the eager primitive; transposes
with the pairing ``sum(ct * A(t)) == sum(A^T(ct) * t)``, A being the primitive as a linear
map of its undefined operand(s) (bilinear partners fixed, jointly-linear partners zero).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_ad.ad_util import UndefinedPrimal, Zero, is_zero
from tenferro_ad.jvp import linear_jvp
from tenferro_ad.rules import structural
from tenferro_core import catalog
from tenferro_core import dtypes as D
from tenferro_runtime import Tensor, lax

F64, C128 = np.dtype("float64"), np.dtype("complex128")
H = 1e-5


@dataclass
class Case:
    args: list
    params: dict
    diff: tuple = (0,)  # operands that carry tangents
    joint: tuple = (0,)  # operands the primitive is (jointly or bi-) linear in
    bilinear: bool = False
    real_pairing: bool = False  # a real-linear (not complex-linear) map: pair real parts


class Gen:
    """Random case parameters from one hypothesis-drawn seed (even coverage in few examples)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def int(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, hi + 1))

    def flip(self, p: float = 0.5) -> bool:
        return bool(self.rng.random() < p)

    def choice(self, seq):
        return seq[self.int(0, len(seq) - 1)]

    def perm(self, n: int) -> tuple:
        return tuple(int(i) for i in self.rng.permutation(n))

    def subset(self, n: int) -> tuple:
        """Distinct axes in random order."""
        return self.perm(n)[: self.int(0, n)]

    def shape(self, min_dims=0, max_dims=3, max_side=4, zero_p=0.1) -> tuple:
        """Mostly non-empty shapes; now and then a zero-length axis."""
        sides = [self.int(1, max_side) for _ in range(self.int(min_dims, max_dims))]
        if sides and zero_p and self.flip(zero_p):
            sides[self.int(0, len(sides) - 1)] = 0
        return tuple(sides)

    def rand(self, shape, dtype):
        dtype = np.dtype(dtype)
        x = self.rng.standard_normal(shape)
        if dtype.kind == "c":
            x = x + 1j * self.rng.standard_normal(shape)
        return np.asarray(x, dtype=dtype)

    def distinct(self, shape):
        """Values at least 0.5 apart (no ties: max/min/sort are smooth for the FD step)."""
        n = int(np.prod(shape, dtype=np.int64))
        return (self.rng.permutation(n) * 0.5 + self.rng.uniform(0, 0.1)).reshape(shape)


# --- case generators, one per primitive: (gen, dtype, for_transpose) -> Case -------------


def reshape_case(g, dt, tr):
    shape = g.shape()
    size = int(np.prod(shape, dtype=np.int64))
    cands = [(size,), shape[::-1], (1,) + shape, shape + (1,)]
    cands += [(2, size // 2)] if size and size % 2 == 0 else []
    cands += [()] if size == 1 else []
    return Case([g.rand(shape, dt)], {"new_sizes": g.choice(cands)})


def transpose_case(g, dt, tr):
    shape = g.shape(max_dims=4)
    return Case([g.rand(shape, dt)], {"permutation": g.perm(len(shape))})


def broadcast_in_dim_case(g, dt, tr):
    out = g.shape(max_dims=4)
    bd = tuple(d for d in range(len(out)) if g.flip())
    shape = tuple(g.choice([out[d], 1]) for d in bd)
    return Case([g.rand(shape, dt)], {"shape": out, "broadcast_dimensions": bd})


def convert_case(g, dt, tr):
    shape = g.shape()
    if np.dtype(dt).kind == "c":
        targets = [D.complex128, D.float64]
    else:
        targets = [D.float64, D.complex128] + ([] if tr else [D.int32, D.bool_])
    new = g.choice(targets)
    real = new.kind != np.dtype(dt).kind
    return Case([g.rand(shape, dt)], {"new_dtype": new}, real_pairing=real)


def slice_case(g, dt, tr):
    shape = g.shape(max_side=6)
    start, limit, strides = [], [], []
    for n in shape:
        start.append(g.int(0, n))
        limit.append(g.int(start[-1], n))
        strides.append(g.int(1, 3))
    strides = None if g.flip(0.2) else tuple(strides)
    return Case([g.rand(shape, dt)],
                {"start_indices": tuple(start), "limit_indices": tuple(limit), "strides": strides})


def _starts(g, shape):
    itype = g.choice([np.int32, np.int64, np.uint8])
    lo = 0 if itype is np.uint8 else -2
    return [np.asarray(g.int(lo, n + 2), dtype=itype) for n in shape]


def dynamic_slice_case(g, dt, tr):
    shape = g.shape()
    sizes = tuple(g.int(0, n) for n in shape)
    return Case([g.rand(shape, dt), *_starts(g, shape)], {"slice_sizes": sizes})


def dynamic_update_slice_case(g, dt, tr):
    shape = g.shape()
    ushape = tuple(g.int(0, n) for n in shape)
    args = [g.rand(shape, dt), g.rand(ushape, dt), *_starts(g, shape)]
    return Case(args, {}, diff=(0, 1), joint=(0, 1))


def pad_case(g, dt, tr):
    shape = g.shape()
    config = []
    for n in shape:
        lo, hi, interior = g.int(-3, 3), g.int(-3, 3), g.int(0, 2)
        size = lo + hi + n + max(n - 1, 0) * interior
        config.append((lo, hi - min(size, 0), interior))
    args = [g.rand(shape, dt), g.rand((), dt)]
    return Case(args, {"padding_config": tuple(config)}, diff=(0, 1), joint=(0, 1))


def concatenate_case(g, dt, tr):
    base = list(g.shape(min_dims=1))
    dim = g.int(0, len(base) - 1)
    args = []
    for _ in range(g.int(1, 3)):
        base[dim] = g.int(0, 3)
        args.append(g.rand(tuple(base), dt))
    ops = tuple(range(len(args)))
    return Case(args, {"dimension": dim}, diff=ops, joint=ops)


def reverse_case(g, dt, tr):
    shape = g.shape()
    return Case([g.rand(shape, dt)], {"dimensions": g.subset(len(shape))})


def _index_setup(g):
    shape = g.shape(min_dims=1, zero_p=0)
    axes = g.subset(len(shape))
    return shape, axes, g.shape(max_dims=2)


def _raw_indices(g, shape, axes, batch):
    """Indices in [-1, n]: gather clamps them, scatter drops the rows out of range."""
    cols = [g.rng.integers(-1, shape[a] + 1, size=batch) for a in axes]
    return np.stack(cols, axis=-1) if cols else np.zeros(batch + (0,), np.int64)


def gather_case(g, dt, tr):
    shape, axes, batch = _index_setup(g)
    return Case([g.rand(shape, dt), _raw_indices(g, shape, axes, batch)], {"axes": axes})


def _updates_shape(shape, axes, batch):
    return batch + tuple(n for i, n in enumerate(shape) if i not in axes)


def scatter_case(g, dt, tr):
    """Index rows in range are unique; extra rows are out of range (dropped)."""
    shape, axes, batch = _index_setup(g)
    sizes = [shape[a] for a in axes]
    if not axes:  # with axes=() every row writes the whole operand: keep one
        batch = g.choice([(), (1,)])
    nrows, total = int(np.prod(batch, dtype=np.int64)), int(np.prod(sizes, dtype=np.int64))
    flat = g.rng.permutation(total)[:nrows]
    rows = np.stack(np.unravel_index(flat, sizes), axis=-1) if axes else np.zeros((len(flat), 0))
    bad = [[g.choice([-1, n]) for n in sizes] for _ in range(nrows - len(flat))]
    idx = np.concatenate([rows, np.asarray(bad, np.int64).reshape(len(bad), len(axes))]).astype(np.int64)
    idx = g.rng.permutation(idx).reshape(batch + (len(axes),))
    upd = g.rand(_updates_shape(shape, axes, batch), dt)
    return Case([g.rand(shape, dt), idx, upd], {"axes": axes}, diff=(0, 2), joint=(0, 2))


def scatter_add_case(g, dt, tr):
    shape, axes, batch = _index_setup(g)
    idx = _raw_indices(g, shape, axes, batch)
    upd = g.rand(_updates_shape(shape, axes, batch), dt)
    return Case([g.rand(shape, dt), idx, upd], {"axes": axes}, diff=(0, 2), joint=(0, 2))


def copy_case(g, dt, tr):
    return Case([g.rand(g.shape(), dt)], {})


def reduce_sum_case(g, dt, tr):
    shape = g.shape()
    return Case([g.rand(shape, dt)], {"axes": g.subset(len(shape))})


def reduce_prod_case(g, dt, tr):
    shape = g.shape(max_side=5)
    x = g.rand(shape, dt)
    if g.flip():
        x[g.rng.random(shape) < 0.3] = 0
    return Case([x], {"axes": g.subset(len(shape))})


def reduce_extremum_case(g, dt, tr):
    shape = g.shape(zero_p=0)
    axes = g.subset(len(shape))
    if g.flip(0.1) and len(shape) > len(axes):  # a zero-length kept axis
        shape = tuple(0 if i == min(set(range(len(shape))) - set(axes)) else n
                      for i, n in enumerate(shape))
    return Case([g.distinct(shape)], {"axes": axes})


def cumsum_case(g, dt, tr):
    shape = g.shape(min_dims=1)
    return Case([g.rand(shape, dt)], {"axis": g.int(0, len(shape) - 1), "reverse": g.flip()})


def sort_case(g, dt, tr):
    shape = g.shape(min_dims=1)
    return Case([g.distinct(shape)], {"dimension": g.int(0, len(shape) - 1),
                                       "descending": g.flip(), "stable": g.flip()})


def dot_general_case(g, dt, tr):
    nb, nc, nfl, nfr = (g.int(0, 2) for _ in range(4))
    keys = {"b": nb, "c": nc, "l": nfl, "r": nfr}
    size = {(k, i): g.int(1, 3) for k, n in keys.items() for i in range(n)}
    if size and g.flip(0.1):
        size[g.choice(sorted(size))] = 0
    roles = {}
    for side, free in (("lhs", "l"), ("rhs", "r")):
        ks = [(k, i) for k in ("b", "c", free) for i in range(keys[k])]
        roles[side] = [ks[j] for j in g.perm(len(ks))]
    pos = {s: {r: i for i, r in enumerate(roles[s])} for s in roles}
    cd = tuple(tuple(pos[s][("c", i)] for i in range(nc)) for s in ("lhs", "rhs"))
    bd = tuple(tuple(pos[s][("b", i)] for i in range(nb)) for s in ("lhs", "rhs"))
    args = [g.rand(tuple(size[r] for r in roles[s]), dt) for s in ("lhs", "rhs")]
    return Case(args, {"contracting_dims": cd, "batch_dims": bd}, diff=(0, 1), joint=(0, 1),
                bilinear=True)


def conv_general_case(g, dt, tr):
    nsp = g.int(1, 2)
    groups, cg, og, n = g.int(1, 3), g.int(1, 2), g.int(1, 2), g.choice([0, 1, 2, 2])
    win = [g.int(1, 3) for _ in range(nsp)]
    strides, ld, rd = (None if g.flip(0.25) else tuple(g.int(1, 3) for _ in range(nsp))
                       for _ in range(3))
    spatial = [g.int(1, 6) for _ in range(nsp)]
    spans = [(s - 1) * (ld or (1,) * nsp)[i] - (win[i] - 1) * (rd or (1,) * nsp)[i]
             for i, s in enumerate(spatial)]
    padding = None
    if not (g.flip(0.25) and min(spans) >= 0):  # else the default padding (None)
        padding = []
        for span in spans:
            lo, hi = g.int(-2, 3), g.int(-2, 3)
            padding.append((lo, hi - min(span + lo + hi, 0)))
        padding = tuple(padding)
    params = {"window_strides": strides, "padding": padding, "lhs_dilation": ld,
              "rhs_dilation": rd, "feature_group_count": groups}
    lshape = (n, groups * cg, *spatial)
    if g.flip():  # channels_last: lhs (N, *spatial, C), out (N, *spatial, O)
        params["layout"], lshape = "channels_last", (n, *spatial, groups * cg)
    args = [g.rand(lshape, dt), g.rand((groups * og, cg, *win), dt)]
    return Case(args, params, diff=(0, 1), joint=(0, 1), bilinear=True)


STRATS = {
    "reshape": reshape_case, "transpose": transpose_case, "broadcast_in_dim": broadcast_in_dim_case,
    "convert": convert_case, "slice": slice_case, "dynamic_slice": dynamic_slice_case,
    "dynamic_update_slice": dynamic_update_slice_case, "pad": pad_case,
    "concatenate": concatenate_case, "reverse": reverse_case, "gather": gather_case,
    "scatter": scatter_case, "scatter_add": scatter_add_case, "copy": copy_case,
    "reduce_sum": reduce_sum_case, "reduce_prod": reduce_prod_case,
    "reduce_max": reduce_extremum_case, "reduce_min": reduce_extremum_case,
    "cumsum": cumsum_case, "sort": sort_case, "dot_general": dot_general_case,
    "conv_general": conv_general_case,
}


@st.composite
def cases(draw, name, dtype, transpose=False):
    """A Case of primitive `name` from a hypothesis-drawn seed."""
    return STRATS[name](Gen(draw(st.integers(0, 2**32 - 1))), dtype, transpose)


REAL_ONLY = {"reduce_max", "reduce_min", "sort"}
JVP_CASES = [(n, d) for n in STRATS for d in ([F64] if n in REAL_ONLY else [F64, C128])]
TRANSPOSE_CASES = [(n, d) for n in structural.TRANSPOSE for d in (F64, C128)]


def _np(x):
    return np.asarray(x)


def _canonical(name, args, params):
    """The params a rule receives: as `check_params` returns them for these operands."""
    return catalog.BY_NAME[name].check_params(params, tuple(a.aval for a in args))


def _jvp(name):
    """The registered rule, or the generic one of a primitive declared linear."""
    return structural.JVP.get(name) or functools.partial(linear_jvp, catalog.BY_NAME[name])


def _assert_same_aval(x, aval):
    got = x.aval
    assert (got.shape, got.dtype) == (aval.shape, aval.dtype), (got, aval)


def test_tables_cover_the_differentiable_primitives():
    derived = {n for n in STRATS if catalog.BY_NAME[n].linear} - {"convert", "scatter_add"}
    assert set(structural.JVP) == set(STRATS) - derived  # the others take linear_jvp
    linear = set(STRATS) - {"reduce_prod", "reduce_max", "reduce_min", "sort"}
    assert set(structural.TRANSPOSE) == linear
    for name in ("iota", "full", "argmax", "argmin", "argsort", "bitcast_convert", "reduce_and"):
        assert name not in structural.JVP and name not in structural.TRANSPOSE


@pytest.mark.parametrize("name,dtype", JVP_CASES, ids=lambda v: str(v))
@settings(max_examples=40)
@given(data=st.data())
def test_jvp_matches_central_differences(name, dtype, data):
    case = data.draw(cases(name, dtype))
    prim, g = getattr(lax, name), Gen(0)
    args = [Tensor(a) for a in case.args]
    active = case.diff
    if len(case.diff) > 1:
        active = data.draw(st.lists(st.sampled_from(case.diff), min_size=1, unique=True))
    dirs = {i: g.rand(case.args[i].shape, case.args[i].dtype) for i in active}
    tangents = [Tensor(dirs[i]) if i in dirs else Zero(a.aval) for i, a in enumerate(args)]
    out, tout = _jvp(name)(args, tangents, **_canonical(name, args, case.params))
    expected = prim(*args, **case.params)
    _assert_same_aval(out, expected.aval)
    np.testing.assert_array_equal(_np(out), _np(expected))
    if is_zero(tout):
        _assert_same_aval(tout, expected.aval)
    if not expected.dtype.is_inexact:
        assert is_zero(tout)
        return

    def shifted(sign):
        vals = [a + sign * H * dirs[i] if i in dirs else a for i, a in enumerate(case.args)]
        return _np(prim(*(Tensor(v) for v in vals), **case.params))

    fd = (shifted(1) - shifted(-1)) / (2 * H)
    got = np.zeros_like(fd) if is_zero(tout) else _np(tout)
    if not is_zero(tout):
        _assert_same_aval(tout, expected.aval)
    scale = max(1.0, float(np.max(np.abs(fd), initial=0.0)))
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-6 * scale)


def _undefined_sets(case):
    if case.bilinear:
        return [(i,) for i in case.joint]
    sets = [(i,) for i in case.joint]
    return sets + ([case.joint] if len(case.joint) > 1 else [])


@pytest.mark.parametrize("name,dtype", TRANSPOSE_CASES, ids=lambda v: str(v))
@settings(max_examples=40)
@given(data=st.data())
def test_transpose_pairing(name, dtype, data):
    case = data.draw(cases(name, dtype, True))
    prim, g = getattr(lax, name), Gen(1)
    for undefined in _undefined_sets(case):
        vals = list(case.args)
        if not case.bilinear:  # jointly-linear partners are zero in the linear map
            for j in set(case.joint) - set(undefined):
                vals[j] = np.zeros_like(vals[j])
        ts = {i: g.rand(vals[i].shape, vals[i].dtype) for i in undefined}
        y = _np(prim(*(Tensor(ts.get(i, v)) for i, v in enumerate(vals)), **case.params))
        ct = g.rand(y.shape, y.dtype)
        ops = [UndefinedPrimal(Tensor(v).aval) if i in ts else Tensor(v) for i, v in enumerate(vals)]
        params = _canonical(name, ops, case.params)
        cts = structural.TRANSPOSE[name](Tensor(ct), *ops, **params)
        assert len(cts) == len(vals)
        rhs = 0
        for i, c in enumerate(cts):
            if i not in ts:
                assert c is None
                continue
            _assert_same_aval(c, ops[i].aval)
            if not is_zero(c):
                rhs = rhs + np.sum(_np(c) * ts[i])
        lhs = np.sum(ct * y)
        if case.real_pairing:
            lhs, rhs = np.real(lhs), np.real(rhs)
        bound = np.sum(np.abs(ct) * np.abs(y)) + sum(np.sum(np.abs(t)) for t in ts.values())
        assert abs(lhs - rhs) <= 1e-10 * (1 + bound), (undefined, lhs, rhs)


@pytest.mark.parametrize("name", list(structural.TRANSPOSE))
@settings(max_examples=10)
@given(data=st.data())
def test_transpose_of_zero_cotangent_is_zero(name, data):
    case = data.draw(cases(name, F64, True))
    args = [Tensor(a) for a in case.args]
    out = getattr(lax, name)(*args, **case.params)
    for undefined in _undefined_sets(case):
        ops = [UndefinedPrimal(a.aval) if i in undefined else a for i, a in enumerate(args)]
        cts = structural.TRANSPOSE[name](Zero(out.aval), *ops, **_canonical(name, ops, case.params))
        assert len(cts) == len(ops)
        for op, c in zip(ops, cts):
            if isinstance(op, UndefinedPrimal):
                assert is_zero(c)
                _assert_same_aval(c, op.aval)
            else:
                assert c is None


def _t(x):
    return Tensor(np.asarray(x, dtype=F64))


@pytest.mark.parametrize("name,x,expected", [
    ("reduce_max", [1.0, 3.0, 3.0, 3.0], (1 + 2 + 6) / 3),
    ("reduce_min", [4.0, -1.0, 2.0, -1.0], (1 + 6) / 2),
])
def test_extremum_splits_tangent_among_ties(name, x, expected):
    _, t = structural.JVP[name]([_t(x)], [_t([10.0, 1.0, 2.0, 6.0])], axes=(0,))
    assert float(_np(t)) == pytest.approx(expected)


def test_reduce_prod_with_zeros_is_exact():
    x = _t([[0.0, 2.0, 3.0], [0.0, 0.0, 5.0], [2.0, 0.5, 4.0]])
    out, t = structural.JVP["reduce_prod"]([x], [_t(np.ones((3, 3)))], axes=(1,))
    np.testing.assert_array_equal(_np(out), [0.0, 0.0, 4.0])
    np.testing.assert_allclose(_np(t), [6.0, 0.0, 2.0 + 8.0 + 1.0])
    _, t = structural.JVP["reduce_prod"]([x], [_t(np.eye(3))], axes=(1,))
    np.testing.assert_allclose(_np(t), [6.0, 0.0, 1.0])


def test_reduce_prod_of_empty_axis_has_zero_tangent():
    x = _t(np.ones((2, 0)))
    out, t = structural.JVP["reduce_prod"]([x], [_t(np.ones((2, 0)))], axes=(1,))
    np.testing.assert_array_equal(_np(out), [1.0, 1.0])
    assert is_zero(t) and t.aval.shape == (2,)


def test_sort_ties_follow_stable_order():
    x, t = _t([2.0, 1.0, 2.0, 1.0]), _t([1.0, 2.0, 3.0, 4.0])
    _, ta = structural.JVP["sort"]([x], [t], dimension=0, descending=False, stable=True)
    _, td = structural.JVP["sort"]([x], [t], dimension=0, descending=True, stable=True)
    np.testing.assert_array_equal(_np(ta), [2.0, 4.0, 1.0, 3.0])
    np.testing.assert_array_equal(_np(td), [1.0, 3.0, 2.0, 4.0])


def test_convert_to_integer_gives_zero_of_output_aval():
    x = _t([1.5, -2.5])
    out, t = structural.JVP["convert"]([x], [_t([1.0, 1.0])], new_dtype=D.int32)
    assert is_zero(t) and t.aval.dtype is D.int32 and t.aval.shape == (2,)
    assert t.aval.device == x.device and out.dtype is D.int32


def test_gather_transpose_clamps_like_gather():
    x = _t([1.0, 2.0, 3.0])
    idx = Tensor(np.asarray([[-5], [7], [1]]))
    ct = _t([10.0, 20.0, 30.0])
    (cx, none) = structural.TRANSPOSE["gather"](ct, UndefinedPrimal(x.aval), idx, axes=(0,))
    assert none is None
    np.testing.assert_array_equal(_np(cx), [10.0, 30.0, 20.0])


def test_scatter_add_transpose_drops_out_of_range_rows():
    x, idx = _t([1.0, 2.0, 3.0]), Tensor(np.asarray([[-1], [3], [2], [2]]))
    upd = _t([1.0, 1.0, 1.0, 1.0])
    ct = _t([10.0, 20.0, 30.0])
    cx, _, cu = structural.TRANSPOSE["scatter_add"](ct, UndefinedPrimal(x.aval), idx,
                                                     UndefinedPrimal(upd.aval), axes=(0,))
    np.testing.assert_array_equal(_np(cx), [10.0, 20.0, 30.0])
    np.testing.assert_array_equal(_np(cu), [0.0, 0.0, 30.0, 30.0])


def test_jvp_keeps_zero_partners_symbolic():
    x, u = _t(np.ones((3,))), _t(np.ones((1,)))
    s = Tensor(np.asarray(1))
    t = _t([1.0, 2.0, 3.0])
    _, tout = structural.JVP["scatter_add"]([x, Tensor(np.asarray([[0]])), u],
                                            [t, Zero(Tensor(np.asarray([[0]])).aval), Zero(u.aval)],
                                            axes=(0,))
    assert tout is t
    _, tout = structural.JVP["dot_general"]([x, x], [Zero(x.aval), t],
                                            contracting_dims=((0,), (0,)), batch_dims=((), ()))
    assert float(_np(tout)) == 6.0
    _, tout = _jvp("dynamic_update_slice")([x, u, s], [Zero(x.aval), _t([5.0]), Zero(s.aval)])
    np.testing.assert_array_equal(_np(tout), [0.0, 5.0, 0.0])
