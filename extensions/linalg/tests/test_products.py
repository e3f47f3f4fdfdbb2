"""Products and norms against NumPy on generated inputs, their edge cases (empty axes,
overflow-safe scaling, non-finite values), bad input, and their derivatives (through the
core rules) with `check_grads`.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tenferro_ad as ad
import tenferro_linalg as la
from tenferro_ad.testing import check_grads
from tenferro_core.errors import ArgumentError, AxisError, DTypeError, ShapeError
from tenferro_runtime import array_api as xp

FLOATS = ("float32", "float64", "complex64", "complex128")
NUMERIC = (*FLOATS, "int32", "int64", "uint8")
TOL = {"float32": 3e-5, "complex64": 3e-5, "float64": 1e-12, "complex128": 1e-12}
INF = math.inf


def rand(rng, shape, dtype):
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 7, shape).astype(dtype)
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def present(a: np.ndarray, transposed: bool):
    """A tensor over a non-contiguous (reversed-axes) view of a, or over a itself."""
    if transposed and a.ndim >= 2:
        return xp.asarray(np.ascontiguousarray(a.T).T)
    return xp.asarray(a)


def close(got, want, dtype):
    tol = TOL.get(dtype, 0)
    np.testing.assert_allclose(got.numpy(), want, rtol=tol, atol=tol)


seeds = st.integers(0, 2**32 - 1).map(np.random.default_rng)
shapes = st.lists(st.integers(0, 3), min_size=0, max_size=3).map(tuple)


# ---- cross, outer, diagonal, trace -------------------------------------------------------


@given(batch=shapes, dtype=st.sampled_from(NUMERIC), rng=seeds, data=st.data())
def test_cross_matches_numpy(batch, dtype, rng, data):
    pos = data.draw(st.integers(0, len(batch)), label="vector axis")
    s1 = (*batch[:pos], 3, *batch[pos:])
    drop = data.draw(st.integers(0, pos), label="leading axes x2 lacks")
    s2 = tuple(1 if data.draw(st.booleans()) and i != pos else d for i, d in enumerate(s1))[drop:]
    axis = pos - len(s1)
    a, b = rand(rng, s1, dtype), rand(rng, s2, dtype)
    got = la.cross(xp.asarray(a), present(b, data.draw(st.booleans())), axis=axis)
    want = np.cross(a, b, axis=axis)
    assert got.shape == want.shape and got.dtype.name == want.dtype.name
    close(got, want, dtype)


def test_cross_non_negative_axis_and_promotion():
    a, b = np.arange(6.0).reshape(3, 2), np.array([[1, 0], [0, 1], [2, 2]], np.int32)
    got = la.cross(xp.asarray(a), xp.asarray(b), axis=0)
    assert got.dtype.name == "float64"
    np.testing.assert_allclose(got.numpy(), np.cross(a, b, axis=0))


@given(shape=st.tuples(shapes, st.integers(0, 4), st.integers(0, 4)),
       dtype=st.sampled_from((*NUMERIC, "bool")), offset=st.integers(-5, 5), rng=seeds,
       transposed=st.booleans())
def test_diagonal_and_trace_match_numpy(shape, dtype, offset, rng, transposed):
    batch, m, n = shape
    a = rand(rng, (*batch, m, n), dtype) if dtype != "bool" else rng.random((*batch, m, n)) < 0.5
    x = xp.matrix_transpose(xp.asarray(np.swapaxes(a, -1, -2).copy())) if transposed else xp.asarray(a)
    got = la.diagonal(x, offset=offset)
    want = np.diagonal(a, offset, -2, -1)
    assert got.shape == want.shape and got.dtype.name == want.dtype.name
    np.testing.assert_array_equal(got.numpy(), want)
    if dtype == "bool":
        return
    tr = la.trace(x, offset=offset)
    want_tr = np.trace(a, offset, -2, -1, dtype={"int32": np.int64, "uint8": np.uint64}.get(dtype))
    assert tr.shape == batch and tr.dtype.name == want_tr.dtype.name
    close(tr, want_tr, dtype)


def test_trace_dtype_argument():
    a = np.arange(9, dtype=np.int32).reshape(3, 3)
    got = la.trace(xp.asarray(a), dtype=xp.float32)
    assert got.dtype.name == "float32" and got.numpy() == 12


@given(n=st.integers(0, 4), m=st.integers(0, 4), d1=st.sampled_from(NUMERIC), d2=st.sampled_from(NUMERIC),
       rng=seeds)
def test_outer_matches_numpy(n, m, d1, d2, rng):
    a, b = rand(rng, (n,), d1), rand(rng, (m,), d2)
    got = la.outer(xp.asarray(a), xp.asarray(b))
    assert got.shape == (n, m)
    np.testing.assert_allclose(got.numpy(), np.outer(a, b).astype(got.dtype.numpy), rtol=1e-6)


def test_core_products_are_the_namespace_functions():
    assert la.matmul is xp.matmul and la.matrix_transpose is xp.matrix_transpose
    assert la.tensordot is xp.tensordot and la.vecdot is xp.vecdot


# ---- vector_norm -------------------------------------------------------------------------

ORDS = (2, 1, 0, INF, -INF, 3, 0.5, -1, -2.5)


@st.composite
def axes_for(draw, ndim):
    kind = draw(st.sampled_from(("none", "int", "tuple")))
    if kind == "none" or ndim == 0:
        return None
    if kind == "int":
        return draw(st.integers(-ndim, ndim - 1))
    chosen = draw(st.lists(st.integers(0, ndim - 1), unique=True, min_size=1, max_size=ndim))
    return tuple(a - ndim if draw(st.booleans()) else a for a in chosen)


@given(shape=shapes, dtype=st.sampled_from(FLOATS), ord=st.sampled_from(ORDS), keepdims=st.booleans(),
       rng=seeds, data=st.data())
def test_vector_norm_matches_numpy(shape, dtype, ord, keepdims, rng, data):
    a = rand(rng, shape, dtype)
    if data.draw(st.booleans(), label="some zeros") and a.size:
        a.reshape(-1)[:: 2] = 0
    axis = data.draw(axes_for(len(shape)), label="axis")
    red = range(len(shape)) if axis is None else [axis] if isinstance(axis, int) else axis
    empty = any(shape[i] == 0 for i in red)
    if empty and ord == -INF:
        with pytest.raises(ShapeError, match="empty axis"):
            la.vector_norm(xp.asarray(a), axis=axis, ord=ord)
        return
    got = la.vector_norm(present(a, data.draw(st.booleans())), axis=axis, keepdims=keepdims, ord=ord)
    if empty:  # NumPy raises for some ords here; the documented values are 0, or inf for p < 0
        want = np.full(np.sum(a, axis=axis, keepdims=keepdims).shape, INF if ord < 0 else 0.0)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            want = np.linalg.vector_norm(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64),
                                         axis=axis, keepdims=keepdims, ord=ord)
    assert got.shape == np.shape(want) and got.dtype.name == np.finfo(dtype).dtype.name
    close(got, want, dtype)


@pytest.mark.parametrize("dtype,big", [("float64", 1e200), ("float64", 1e-200), ("float32", 1e30),
                                       ("float32", 1e-30), ("complex128", 1e200)])
@pytest.mark.parametrize("ord", [2, 3, 0.5])
def test_vector_norm_neither_overflows_nor_underflows(dtype, big, ord):
    v = np.array([3.0, 4.0, 0.0]) * big
    want = np.linalg.vector_norm(np.array([3.0, 4.0, 0.0]), ord=ord) * big
    got = la.vector_norm(xp.asarray(v.astype(dtype)), ord=ord).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5)
    m = la.matrix_norm(xp.asarray(v.astype(dtype).reshape(1, 3))).numpy()
    np.testing.assert_allclose(m, 5 * big, rtol=1e-5)


def test_vector_norm_of_non_finite_values():
    assert la.vector_norm(xp.asarray(np.array([np.inf, 1.0]))).numpy() == INF
    assert la.vector_norm(xp.asarray(np.array([-np.inf, 1.0])), ord=3).numpy() == INF
    assert np.isnan(la.vector_norm(xp.asarray(np.array([np.nan, 1.0]))).numpy())


# ---- matrix_norm -------------------------------------------------------------------------

MATRIX_ORDS = ("fro", "nuc", 1, -1, 2, -2, INF, -INF)


@given(batch=shapes.map(lambda s: s[:2]), m=st.integers(1, 4), n=st.integers(1, 4),
       dtype=st.sampled_from(FLOATS), ord=st.sampled_from(MATRIX_ORDS), keepdims=st.booleans(), rng=seeds,
       transposed=st.booleans())
def test_matrix_norm_matches_numpy(batch, m, n, dtype, ord, keepdims, rng, transposed):
    a = rand(rng, (*batch, m, n), dtype)
    got = la.matrix_norm(present(a, transposed), ord=ord, keepdims=keepdims)
    wa = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
    want = np.linalg.matrix_norm(wa, ord=ord, keepdims=keepdims)
    assert got.shape == want.shape and got.dtype.name == np.finfo(dtype).dtype.name
    close(got, want, dtype)


@pytest.mark.parametrize("ord", MATRIX_ORDS)
@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 3), (3, 0), (0, 2)])
def test_matrix_norm_of_empty_matrices(ord, shape):
    x = xp.asarray(np.zeros(shape))
    negative = ord in (-1, -2, -INF)
    empty_min_axis = {-1: shape[-1], -INF: shape[-2], -2: min(shape[-2:])}.get(ord, 1) == 0
    if negative and empty_min_axis:
        with pytest.raises(ShapeError, match="empty axis"):
            la.matrix_norm(x, ord=ord)
        return
    got = la.matrix_norm(x, ord=ord)
    assert got.shape == shape[:-2]
    np.testing.assert_array_equal(got.numpy(), 0.0)


# ---- bad input ---------------------------------------------------------------------------


def test_bad_input_to_products():
    v3, m = xp.asarray(np.ones(3)), xp.asarray(np.ones((2, 3)))
    with pytest.raises(ShapeError, match="size 3"):
        la.cross(xp.asarray(np.ones(2)), xp.asarray(np.ones(2)))
    with pytest.raises(AxisError, match="out of range"):
        la.cross(v3, v3, axis=1)
    with pytest.raises(AxisError, match="ambiguous"):
        la.cross(m, v3, axis=0)
    with pytest.raises(ShapeError, match="broadcast"):
        la.cross(xp.asarray(np.ones((2, 3))), xp.asarray(np.ones((4, 3))))
    with pytest.raises(ShapeError, match="at least 1-d"):
        la.cross(xp.asarray(1.0), v3)
    with pytest.raises(DTypeError, match="bool"):
        la.cross(xp.asarray(np.ones(3, bool)), v3)
    with pytest.raises(ArgumentError, match="axis must be an int"):
        la.cross(v3, v3, axis=-1.0)
    with pytest.raises(ShapeError, match="1-d"):
        la.outer(m, v3)
    with pytest.raises(ShapeError, match="at least 2 dimensions"):
        la.diagonal(v3)
    with pytest.raises(ShapeError, match="at least 2 dimensions"):
        la.trace(v3)
    with pytest.raises(ArgumentError, match="offset must be an int"):
        la.diagonal(m, offset=1.5)
    with pytest.raises(ArgumentError, match="Tensor"):
        la.diagonal(np.ones((2, 2)))


def test_bad_input_to_norms():
    v, m = xp.asarray(np.ones(3)), xp.asarray(np.ones((2, 3)))
    for ord in (3, "foo", True, None, -3):
        with pytest.raises(ArgumentError, match="ord must be one of"):
            la.matrix_norm(m, ord=ord)
    for ord in (float("nan"), "fro", True, None):
        with pytest.raises(ArgumentError, match="ord must be a real number"):
            la.vector_norm(v, ord=ord)
    with pytest.raises(ShapeError, match="at least 2 dimensions"):
        la.matrix_norm(v)
    with pytest.raises(DTypeError, match="int64"):
        la.vector_norm(xp.asarray(np.ones(3, np.int64)))
    with pytest.raises(DTypeError, match="int64"):
        la.matrix_norm(xp.asarray(np.ones((2, 2), np.int64)))
    with pytest.raises(AxisError, match="out of range"):
        la.vector_norm(m, axis=2)
    with pytest.raises(AxisError, match="repeated"):
        la.vector_norm(m, axis=(0, -2))
    with pytest.raises(ArgumentError, match="keepdims"):
        la.vector_norm(v, keepdims=1)
    with pytest.raises(ArgumentError, match="keepdims"):
        la.matrix_norm(m, keepdims="yes")


# ---- derivatives -------------------------------------------------------------------------


def grad_args(dtype, *shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [xp.asarray(rand(rng, s, dtype)) for s in shapes]


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("ord", [2, 1, 3, INF, -INF, 0.5, -1])
@pytest.mark.parametrize("axis", [None, -1, (0, 2)])
def test_vector_norm_second_order(dtype, ord, axis):
    check_grads(lambda x: la.vector_norm(x, axis=axis, ord=ord), grad_args(dtype, (2, 3, 2)), order=2)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("ord", ["fro", 1, -1, INF, -INF])
def test_matrix_norm_second_order(dtype, ord):
    check_grads(lambda x: la.matrix_norm(x, ord=ord, keepdims=True), grad_args(dtype, (2, 3, 4)), order=2)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("ord", ["nuc", 2, -2])
def test_spectral_matrix_norms_first_order(dtype, ord):
    check_grads(lambda x: la.matrix_norm(x, ord=ord), grad_args(dtype, (2, 3, 4)), order=1)


@pytest.mark.parametrize("ord", [2, 1, 3, 0.5, INF])
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_norm_gradient_at_zero_is_zero(ord, dtype):
    """The documented subgradient choice: 0 (as JAX), never NaN."""
    zero = xp.asarray(np.zeros((2, 3), dtype))
    g = ad.grad(lambda x: la.vector_norm(x, ord=ord))(zero).numpy()
    np.testing.assert_array_equal(g, 0)
    if ord == 2:
        np.testing.assert_array_equal(ad.grad(la.matrix_norm)(zero).numpy(), 0)
        h = ad.hessian(lambda x: la.vector_norm(x))(xp.asarray(np.zeros(3))).numpy()
        assert np.isfinite(h).all()


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_products_differentiate_through_the_core_rules(dtype):
    a, b = grad_args(dtype, (2, 3), (1, 3), seed=1)
    check_grads(lambda x, y: la.cross(x, y), (a, b), order=2)
    m, = grad_args(dtype, (2, 3, 4), seed=2)
    check_grads(lambda x: la.trace(x, offset=1), (m,), order=1)
    check_grads(lambda x: la.diagonal(x, offset=-1), (m,), order=1)
    u, v = grad_args(dtype, (3,), (4,), seed=3)
    check_grads(la.outer, (u, v), order=2)
