"""Canonical params (DESIGN.md section 7): `check_params` returns one exact form.

Every spelling of a param (None or the resolved default, list or tuple, NumPy or Python
int) traces to one node with equal params of exact types; a bad spelling (a float or a
bool for an int, an int for a bool) is an ArgumentError on every call, before and after a
valid call with equal values has warmed the eager caches.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tenferro_core import catalog
from tenferro_core import dtypes as D
from tenferro_core.avals import Aval
from tenferro_core.errors import ArgumentError
from tenferro_core.primitive import Primitive
from tenferro_fft._ops import fft_p
from tenferro_linalg._decomp_ops import qr_p, solve_triangular_p, svd_p
from tenferro_linalg._solve_ops import lstsq_p
from tenferro_runtime import lax
from tenferro_runtime.array_api import asarray
from tenferro_runtime.graph import trace
from tenferro_runtime.testing.conformance import SPECS, context
from tenferro_runtime.testing.reference import REFERENCE

F32, F64 = D.float32, D.float64


def exact(v):
    """`v` with the type of every leaf spelled out, so == also compares types."""
    if isinstance(v, tuple):
        return ("tuple", tuple(exact(i) for i in v))
    if isinstance(v, list):
        return ("list", tuple(exact(i) for i in v))
    if isinstance(v, dict):
        return ("dict", tuple((k, exact(i)) for k, i in v.items()))
    return (type(v), v)


def assert_exact(got, want):
    assert exact(got) == exact(want), (got, want)


def x34():
    return asarray(np.arange(12.0).reshape(3, 4))


def node_params(fn, *args):
    """The params of the one node `fn` traces to."""
    (node,) = trace(fn, *args).nodes
    return node.params


# ---- one canonical node per spelling ---------------------------------------------------

I = np.int64
I32 = np.int32

SPELLINGS = [
    # (primitive, operands, spellings of the params, the canonical params)
    ("reduce_sum", [x34], [{"axes": (1,)}, {"axes": [1]}, {"axes": (I(1),)}, {"axes": np.array([1])},
                           {"axes": (I32(1),)}, {"axes": range(1, 2)}],
     {"axes": (1,)}),
    ("reduce_max", [x34], [{"axes": (0, 1)}, {"axes": [0, I(1)]}, {"axes": np.array([0, 1])}],
     {"axes": (0, 1)}),
    ("transpose", [x34], [{"permutation": (1, 0)}, {"permutation": [1, 0]},
                          {"permutation": np.array([1, 0])}, {"permutation": (I(1), I32(0))}],
     {"permutation": (1, 0)}),
    ("reverse", [x34], [{"dimensions": (0,)}, {"dimensions": [0]}, {"dimensions": np.array([0])}],
     {"dimensions": (0,)}),
    ("slice", [x34],
     [{"start_indices": (0, 1), "limit_indices": (3, 4)},
      {"start_indices": (0, 1), "limit_indices": (3, 4), "strides": None},
      {"start_indices": [0, 1], "limit_indices": [3, 4], "strides": [1, 1]},
      {"start_indices": np.array([0, 1]), "limit_indices": (I(3), 4), "strides": (1, I(1))}],
     {"start_indices": (0, 1), "limit_indices": (3, 4), "strides": (1, 1)}),
    ("broadcast_in_dim", [lambda: asarray(np.ones(3))],
     [{"shape": (2, 3), "broadcast_dimensions": (1,)},
      {"shape": [2, 3], "broadcast_dimensions": [1]},
      {"shape": np.array([2, 3]), "broadcast_dimensions": (I(1),)}],
     {"shape": (2, 3), "broadcast_dimensions": (1,)}),
    ("reshape", [x34], [{"new_sizes": (2, 6)}, {"new_sizes": [2, 6]}, {"new_sizes": np.array([2, 6])},
                        {"new_sizes": (I(2), I32(6))}],
     {"new_sizes": (2, 6)}),
    ("cumsum", [x34],
     [{"axis": 1}, {"axis": I(1), "reverse": False}, {"axis": 1, "reverse": np.bool_(False)}],
     {"axis": 1, "reverse": False}),
    ("sort", [x34],
     [{"dimension": 1}, {"dimension": I(1), "descending": False, "stable": True},
      {"dimension": 1, "descending": np.bool_(False), "stable": np.bool_(True)}],
     {"dimension": 1, "descending": False, "stable": True}),
    ("convert", [x34], [{"new_dtype": F32}, {"new_dtype": "float32"}, {"new_dtype": np.float32},
                        {"new_dtype": np.dtype("float32")}],
     {"new_dtype": F32}),
    ("conv_general", [lambda: asarray(np.ones((1, 2, 5))), lambda: asarray(np.ones((3, 2, 2)))],
     [{}, {"window_strides": None, "padding": None, "lhs_dilation": None, "rhs_dilation": None},
      {"window_strides": [1], "padding": [[0, 0]], "lhs_dilation": (I(1),), "rhs_dilation": np.array([1]),
       "feature_group_count": I(1)}],
     {"window_strides": (1,), "padding": ((0, 0),), "lhs_dilation": (1,), "rhs_dilation": (1,),
      "feature_group_count": 1, "layout": "channels_first"}),
    ("pad", [x34, lambda: asarray(np.float64(0))],
     [{"padding_config": ((1, 1, 0), (0, 2, 1))}, {"padding_config": [[1, 1, 0], [0, 2, 1]]},
      {"padding_config": np.array([[1, 1, 0], [0, 2, 1]])},
      {"padding_config": [(I(1), 1, 0), (0, I32(2), 1)]}],
     {"padding_config": ((1, 1, 0), (0, 2, 1))}),
    ("dot_general", [x34, lambda: asarray(np.ones((4, 2)))],
     [{"contracting_dims": ((1,), (0,))}, {"contracting_dims": [[1], [0]], "batch_dims": [[], []]},
      {"contracting_dims": (np.array([1]), (I(0),)), "batch_dims": ((), ())}],
     {"contracting_dims": ((1,), (0,)), "batch_dims": ((), ())}),
]


@pytest.mark.parametrize("name,makers,spellings,canonical", SPELLINGS, ids=[s[0] for s in SPELLINGS])
def test_every_spelling_traces_to_one_canonical_node(name, makers, spellings, canonical):
    prim = catalog.BY_NAME[name]
    args = [m() for m in makers]
    for params in spellings:
        got = node_params(lambda *xs, p=params: prim.bind(*xs, **p), *args)
        assert_exact(got, canonical)
        assert list(got) == list(prim.params)  # every schema key, in schema order
        # and the eager path accepts it and agrees with the canonical spelling
        np.testing.assert_array_equal(prim.bind(*args, **params).numpy(),
                                      prim.bind(*args, **canonical).numpy())


def test_strides_none_and_unit_strides_are_one_node_for_cse():
    x = x34()

    def f(x):
        a = lax.slice(x, start_indices=(0, 0), limit_indices=(3, 4))
        b = lax.slice(x, start_indices=(0, 0), limit_indices=(3, 4), strides=(1, 1))
        return a, b

    first, second = trace(f, x).nodes
    assert_exact(first.params, second.params)


def test_creation_params_are_canonical():
    for shape in ((2, 3), [2, 3], np.array([2, 3]), (I(2), I32(3))):
        p = catalog.iota.check_params({"shape": shape, "dimension": I(1), "device": "numpy:cpu",
                                       "dtype": "int32"})
        assert_exact(p, {"dtype": D.int32, "shape": (2, 3), "dimension": 1, "device": "numpy:cpu"})
        out = lax.iota(shape=shape, dimension=I(1), dtype="int32", device="numpy:cpu")
        np.testing.assert_array_equal(out.numpy(), np.broadcast_to(np.arange(3, dtype=np.int32), (2, 3)))
    for given_, want in ((1.5, 1.5), (np.float64(1.5), 1.5), (np.float32(0.5), 0.5), (I(2), 2),
                         (np.bool_(True), True), (True, True), (np.complex64(1j), 1j), (2, 2)):
        p = catalog.full.check_params({"shape": [2], "fill_value": given_, "dtype": np.float64,
                                       "device": "numpy:cpu"})
        assert_exact(p["fill_value"], want)
        assert_exact(p["shape"], (2,))
        assert p["dtype"] is F64


def test_extension_payloads_are_canonical():
    z = asarray(np.ones((3, 4), np.complex128))
    for axes, norm, inverse in (((1,), "ortho", False), ([I(1)], np.str_("ortho"), np.bool_(False))):
        p = node_params(lambda z, a=axes, n=norm, i=inverse: fft_p.bind(z, axes=a, norm=n, inverse=i), z)
        assert_exact(p, {"axes": (1,), "inverse": False, "norm": "ortho"})
    a = asarray(np.eye(3) + 1.0)
    for trans in (1, I(1), I32(1)):
        p = node_params(lambda a, t=trans: solve_triangular_p.bind(a, a, trans=t), a)
        assert_exact(p, {"lower": False, "unit_diagonal": False, "trans": 1})
    assert_exact(node_params(lambda a: svd_p.bind(a, full_matrices=np.bool_(False)), a),
                 {"full_matrices": False})
    assert_exact(node_params(lambda a: qr_p.bind(a, mode=np.str_("complete")), a), {"mode": "complete"})
    # rcond=None is resolved to numpy.linalg.lstsq's default, eps * max(M, N)
    eps = float(np.finfo(np.float64).eps)
    for rcond in ({}, {"rcond": None}, {"rcond": eps * 3}, {"rcond": np.float64(eps * 3)}):
        assert_exact(node_params(lambda a, r=rcond: lstsq_p.bind(a, a, **r), a), {"rcond": eps * 3})


# ---- hypothesis: spellings of int sequences ------------------------------------------

SPELL = st.sampled_from([tuple, list, np.array,
                         lambda v: tuple(I(i) for i in v), lambda v: [I32(i) for i in v]])


@given(st.permutations(range(4)), SPELL)
def test_any_spelling_of_a_permutation_is_the_tuple_of_ints(perm, spell):
    x = asarray(np.zeros((1, 2, 3, 4)))
    p = node_params(lambda x: lax.transpose(x, permutation=spell(perm)), x)
    assert_exact(p, {"permutation": tuple(perm)})


@given(st.lists(st.integers(0, 3), unique=True), SPELL)
def test_any_spelling_of_reduction_axes_is_the_tuple_of_ints(axes, spell):
    p = catalog.reduce_sum.check_params({"axes": spell(axes)}, (Aval((1, 2, 3, 4), F64),))
    assert_exact(p, {"axes": tuple(axes)})


@given(st.lists(st.integers(1, 3), min_size=2, max_size=2), st.booleans(), SPELL)
def test_slice_strides_resolve_to_one_form(strides, explicit, spell):
    base = {"start_indices": (0, 0), "limit_indices": (3, 4)}
    params = {**base, "strides": spell(strides)} if explicit else base
    want = {**base, "strides": tuple(strides) if explicit else (1, 1)}
    assert_exact(node_params(lambda x: lax.slice(x, **params), x34()), want)


def test_check_params_is_idempotent_on_every_catalog_probe():
    ctx = context(asarray(0.0).device)
    for prim in catalog.PRIMITIVES:
        spec = SPECS[prim.name]
        for dtype in (F64, D.int64, D.bool_, D.complex128):
            avals, params = spec.probe(dtype, ctx)
            if prim.nin == 0:
                params = {**params, "device": "numpy:cpu"}
            once = prim.check_params(params, avals)
            assert list(once) == list(prim.params)
            assert_exact(prim.check_params(once, avals), once)
            assert None not in once.values() or prim.name not in ("slice", "conv_general")


def test_kernels_and_references_read_resolved_params():
    """No consumer re-derives a default: called with the resolved params, they agree."""
    lhs, rhs = np.arange(10.0).reshape(1, 2, 5), np.ones((3, 2, 2))
    p = catalog.conv_general.check_params({}, (Aval(lhs.shape, F64), Aval(rhs.shape, F64)))
    want = REFERENCE["conv_general"](lhs, rhs, **p)
    got = lax.conv_general(asarray(lhs), asarray(rhs))
    np.testing.assert_allclose(got.numpy(), want)


def test_missing_avals_for_a_rank_dependent_default_is_a_clear_error():
    params = {"start_indices": (0,), "limit_indices": (2,)}
    with pytest.raises(ArgumentError, match="pass the operand avals"):
        catalog.slice.check_params(params)
    # no default to resolve: avals are not needed
    assert catalog.slice.check_params({**params, "strides": [1]})["strides"] == (1,)
    assert catalog.reduce_sum.check_params({"axes": [0]}) == {"axes": (0,)}


def test_resolve_is_a_constructor_argument():
    def resolve(avals, params):
        if params["k"] is None:
            params["k"] = avals[0].ndim
        return params

    from tenferro_core.params import p_int, p_optional

    prim = Primitive("resolve_probe", lambda x, *, k: (x.shape, x.dtype),
                     params={"k": (p_optional(p_int), None)}, resolve=resolve)
    assert prim.check_params({}, (Aval((2, 3), F64),)) == {"k": 2}
    assert prim.check_params({"k": I(5)}) == {"k": 5}


# ---- bad spellings: rejected on every call, cache warm or cold ------------------------

# (label, call with the bad params, call with the valid params of equal value)
def _op(name, makers, **params):
    def call():
        return catalog.BY_NAME[name].bind(*(m() for m in makers), **params)

    return call


def _conv(**params):
    return _op("conv_general", [lambda: asarray(np.ones((1, 2, 5))), lambda: asarray(np.ones((3, 2, 2)))],
               **params)


def _full(**params):
    return lambda: lax.full(**{"shape": (2,), "fill_value": 1.0, "dtype": F64, "device": "numpy:cpu",
                               **params})


def _iota(**params):
    return lambda: lax.iota(**{"shape": (2, 3), "dimension": 1, "device": "numpy:cpu", **params})


ones3 = lambda: asarray(np.ones(3))  # noqa: E731
scalar0 = lambda: asarray(np.float64(0))  # noqa: E731
cplx = lambda: asarray(np.ones((3, 4), np.complex128))  # noqa: E731
sq = lambda: asarray(np.eye(3) + 1.0)  # noqa: E731

BAD = [
    ("reduce_sum-float", _op("reduce_sum", [x34], axes=(1.0,)), _op("reduce_sum", [x34], axes=(1,))),
    ("reduce_sum-bool", _op("reduce_sum", [x34], axes=(True,)), _op("reduce_sum", [x34], axes=(1,))),
    ("reduce_sum-scalar", _op("reduce_sum", [x34], axes=1.0), _op("reduce_sum", [x34], axes=(1,))),
    ("reduce_max-float", _op("reduce_max", [x34], axes=[0.0]), _op("reduce_max", [x34], axes=[0])),
    ("reduce_max-bool", _op("reduce_max", [x34], axes=(False,)), _op("reduce_max", [x34], axes=(0,))),
    ("transpose-float", _op("transpose", [x34], permutation=(1.0, 0.0)),
     _op("transpose", [x34], permutation=(1, 0))),
    ("transpose-bool", _op("transpose", [x34], permutation=(True, False)),
     _op("transpose", [x34], permutation=(1, 0))),
    ("reverse-bool", _op("reverse", [x34], dimensions=(True,)), _op("reverse", [x34], dimensions=(1,))),
    ("reverse-float", _op("reverse", [x34], dimensions=(0.0,)), _op("reverse", [x34], dimensions=(0,))),
    ("slice-strides-float", _op("slice", [x34], start_indices=(0, 0), limit_indices=(3, 4), strides=(1.0, 1)),
     _op("slice", [x34], start_indices=(0, 0), limit_indices=(3, 4), strides=(1, 1))),
    ("slice-strides-bool", _op("slice", [x34], start_indices=(0, 0), limit_indices=(3, 4), strides=(True, 1)),
     _op("slice", [x34], start_indices=(0, 0), limit_indices=(3, 4), strides=(1, 1))),
    ("slice-start-float", _op("slice", [x34], start_indices=(0.0, 0), limit_indices=(3, 4)),
     _op("slice", [x34], start_indices=(0, 0), limit_indices=(3, 4))),
    ("pad-float", _op("pad", [x34, scalar0], padding_config=((1.0, 1, 0), (0, 0, 0))),
     _op("pad", [x34, scalar0], padding_config=((1, 1, 0), (0, 0, 0)))),
    ("pad-bool", _op("pad", [x34, scalar0], padding_config=((True, 1, 0), (0, 0, False))),
     _op("pad", [x34, scalar0], padding_config=((1, 1, 0), (0, 0, 0)))),
    ("broadcast-shape-float", _op("broadcast_in_dim", [ones3], shape=(2.0, 3), broadcast_dimensions=(1,)),
     _op("broadcast_in_dim", [ones3], shape=(2, 3), broadcast_dimensions=(1,))),
    ("broadcast-dims-bool", _op("broadcast_in_dim", [ones3], shape=(2, 3), broadcast_dimensions=(True,)),
     _op("broadcast_in_dim", [ones3], shape=(2, 3), broadcast_dimensions=(1,))),
    ("reshape-float", _op("reshape", [x34], new_sizes=(12.0,)), _op("reshape", [x34], new_sizes=(12,))),
    ("reshape-bool", _op("reshape", [x34], new_sizes=(True, 12)), _op("reshape", [x34], new_sizes=(1, 12))),
    ("conv-strides-float", _conv(window_strides=(1.0,)), _conv(window_strides=(1,))),
    ("conv-padding-bool", _conv(padding=((False, False),)), _conv(padding=((0, 0),))),
    ("conv-dilation-bool", _conv(rhs_dilation=(True,)), _conv(rhs_dilation=(1,))),
    ("conv-groups-bool", _conv(feature_group_count=True), _conv(feature_group_count=1)),
    ("conv-groups-float", _conv(feature_group_count=1.0), _conv(feature_group_count=1)),
    ("cumsum-axis-bool", _op("cumsum", [x34], axis=True), _op("cumsum", [x34], axis=1)),
    ("cumsum-axis-float", _op("cumsum", [x34], axis=1.0), _op("cumsum", [x34], axis=1)),
    ("cumsum-reverse-int0", _op("cumsum", [x34], axis=0, reverse=0),
     _op("cumsum", [x34], axis=0, reverse=False)),
    ("cumsum-reverse-int1", _op("cumsum", [x34], axis=0, reverse=1),
     _op("cumsum", [x34], axis=0, reverse=True)),
    ("sort-dimension-bool", _op("sort", [x34], dimension=True), _op("sort", [x34], dimension=1)),
    ("sort-descending-int", _op("sort", [x34], dimension=0, descending=1),
     _op("sort", [x34], dimension=0, descending=True)),
    ("sort-stable-int", _op("sort", [x34], dimension=0, stable=0),
     _op("sort", [x34], dimension=0, stable=False)),
    ("convert-none", _op("convert", [x34], new_dtype=None), _op("convert", [x34], new_dtype=F64)),
    ("convert-bad-name", _op("convert", [x34], new_dtype="float33"), _op("convert", [x34], new_dtype=F32)),
    ("iota-dimension-bool", _iota(dimension=True), _iota(dimension=1)),
    ("iota-shape-float", _iota(shape=(2.0, 3)), _iota(shape=(2, 3))),
    ("full-shape-float", _full(shape=(2.0,)), _full(shape=(2,))),
    ("full-shape-bool", _full(shape=(True,)), _full(shape=(1,))),
    ("full-fill-str", _full(fill_value="1"), _full(fill_value=1)),
    ("full-fill-array", _full(fill_value=np.ones(1)), _full(fill_value=1.0)),
    ("fft-axes-float", lambda: fft_p.bind(cplx(), axes=(1.0,)), lambda: fft_p.bind(cplx(), axes=(1,))),
    ("fft-axes-bool", lambda: fft_p.bind(cplx(), axes=(True,)), lambda: fft_p.bind(cplx(), axes=(1,))),
    ("fft-inverse-int", lambda: fft_p.bind(cplx(), axes=(1,), inverse=1),
     lambda: fft_p.bind(cplx(), axes=(1,), inverse=True)),
    ("linalg-trans-bool", lambda: solve_triangular_p.bind(sq(), sq(), trans=True),
     lambda: solve_triangular_p.bind(sq(), sq(), trans=1)),
    ("linalg-trans-float", lambda: solve_triangular_p.bind(sq(), sq(), trans=1.0),
     lambda: solve_triangular_p.bind(sq(), sq(), trans=1)),
    ("linalg-lower-int", lambda: solve_triangular_p.bind(sq(), sq(), lower=1),
     lambda: solve_triangular_p.bind(sq(), sq(), lower=True)),
    ("linalg-svd-int", lambda: svd_p.bind(sq(), full_matrices=0),
     lambda: svd_p.bind(sq(), full_matrices=False)),
]


@pytest.mark.parametrize("bad,good", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_spelling_is_rejected_before_and_after_a_valid_call(bad, good):
    with pytest.raises(ArgumentError, match="expects"):
        bad()
    good()
    good()  # the eager caches now hold this signature
    with pytest.raises(ArgumentError, match="expects"):
        bad()


def test_rejections_name_expected_given_and_what_to_do():
    with pytest.raises(ArgumentError) as err:
        lax.reduce_sum(x34(), axes=(1.0,))
    msg = str(err.value)
    assert "reduce_sum" in msg and "'axes'" in msg and "1.0 (a float)" in msg and "pass Python ints" in msg
    with pytest.raises(ArgumentError, match=r"True or False, got 0 \(an int\); pass a bool"):
        lax.cumsum(x34(), axis=0, reverse=0)


@pytest.mark.parametrize("bad", [(1.0,), (True,), (np.bool_(True),), (np.float64(1),), "1", 1, None])
def test_bad_axes_are_rejected_traced_too(bad):
    with pytest.raises(ArgumentError):
        trace(lambda x: lax.reduce_sum(x, axes=bad), x34())


def test_a_choice_of_the_right_type_but_unknown_is_a_value_error_and_another_type_a_type_error():
    from tenferro_core.errors import ArgumentValueError
    from tenferro_core.params import p_choice

    check = p_choice("reduced", "complete")
    assert check("qr", "mode", "complete") == "complete"
    with pytest.raises(ArgumentValueError, match=r"qr: parameter 'mode' expects one of \('reduced', "
                                                 r"'complete'\), got 'full'") as err:
        check("qr", "mode", "full")
    assert isinstance(err.value, ValueError) and isinstance(err.value, ArgumentError)
    with pytest.raises(ArgumentError) as err:
        check("qr", "mode", 3)
    assert not isinstance(err.value, ValueError)
    import tenferro_linalg as la

    with pytest.raises(ValueError, match="mode"):
        la.qr(asarray(np.eye(2)), mode="full")
