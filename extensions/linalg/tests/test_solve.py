"""The solvers against NumPy on generated stacks of matrices, edge shapes, both kernel
paths (NumPy's batched gufuncs, SciPy for single large matrices), and bad input.

Inputs cover every LAPACK dtype, size-0 batches, 0x0 and 1x1 matrices, broadcast batch
dimensions and non-contiguous buffers; references are computed in float64/complex128
from the same values.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from linalg_cases import rand

import tenferro_linalg as la
from tenferro_core.errors import ArgumentError, DTypeError, LinAlgError, ShapeError
from tenferro_linalg._solve_kernels import SCIPY_MIN_N
from tenferro_linalg._solve_ops import lstsq_p, pinv_p, solve_p
from tenferro_runtime import array_api as xp

DTYPES = ("float32", "float64", "complex64", "complex128")
TOL = {"float32": 3e-4, "complex64": 3e-4, "float64": 1e-10, "complex128": 1e-10}
BATCHES = ((), (2,), (1,), (0,), (3,), (2, 1), (1, 3), (0, 2))
SIDES = (3, 1, 0, 2, 4, 5)
LAYOUTS = ("contiguous", "transposed", "strided")




def well_conditioned(rng, shape, dtype):
    """Random square stacks shifted away from singularity."""
    n = shape[-1]
    return (rand(rng, shape, dtype) + 3 * math.sqrt(max(n, 1)) * np.eye(n)).astype(dtype)


def with_singular_values(rng, batch, m, n, s, dtype):
    """U diag(s) V^H with random orthonormal U, V (so the rank is exactly controlled)."""
    k = min(m, n)
    u = np.linalg.qr(rand(rng, (*batch, m, k), dtype).astype(complex))[0]
    v = np.linalg.qr(rand(rng, (*batch, n, k), dtype).astype(complex))[0]
    a = (u * np.asarray(s)[..., None, :]) @ np.conj(np.swapaxes(v, -1, -2))
    return (a if np.dtype(dtype).kind == "c" else a.real).astype(dtype)


def present(a: np.ndarray, layout: str):
    """a as a tenferro tensor whose buffer has the asked layout (the kernel sees it)."""
    if layout == "transposed":
        return xp.asarray(np.swapaxes(np.ascontiguousarray(np.swapaxes(a, -1, -2)), -1, -2))
    if layout == "strided":
        big = np.zeros((*a.shape[:-1], 2 * a.shape[-1] + 1), a.dtype)
        big[..., 1::2] = a
        return xp.asarray(big[..., 1::2])
    return xp.asarray(a)


def wide(a: np.ndarray) -> np.ndarray:
    return a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)


def close(got, want, dtype, scale: float = 1.0):
    tol = TOL[dtype] * scale
    np.testing.assert_allclose(got.numpy(), want, rtol=tol, atol=tol)


@st.composite
def square_cases(draw):
    """(batch, n, dtype, layout, rng)."""
    return (draw(st.sampled_from(BATCHES)), draw(st.sampled_from(SIDES)), draw(st.sampled_from(DTYPES)),
            draw(st.sampled_from(LAYOUTS)), np.random.default_rng(draw(st.integers(0, 2**32 - 1))))


def broadcast_partner(draw, batch):
    """A batch shape that broadcasts with `batch`: a suffix of it with some sizes set to 1."""
    part = batch[len(batch) - draw(st.integers(0, len(batch))):]
    return tuple(1 if draw(st.booleans()) else d for d in part)


# ---- solve -------------------------------------------------------------------------------


@given(case=square_cases(), data=st.data())
def test_solve_matches_numpy(case, data):
    batch, n, dtype, layout, rng = case
    a = well_conditioned(rng, (*batch, n, n), dtype)
    if data.draw(st.booleans(), label="vector rhs"):
        b = rand(rng, (n,), dtype)
        want = np.linalg.solve(wide(a), wide(b)[..., None])[..., 0]
    else:
        bbatch = broadcast_partner(data.draw, batch)
        if data.draw(st.booleans(), label="rhs carries the batch"):
            batch, bbatch = bbatch, batch
            a = well_conditioned(rng, (*batch, n, n), dtype)
        b = rand(rng, (*bbatch, n, data.draw(st.sampled_from((1, 2, 0, 3)), label="k")), dtype)
        want = np.linalg.solve(wide(a), wide(b))
    got = la.solve(present(a, layout), present(b, layout) if b.ndim > 1 else xp.asarray(b))
    assert got.shape == want.shape and got.dtype.name == dtype
    close(got, want, dtype)


def test_solve_promotes_mixed_float_dtypes():
    rng = np.random.default_rng(0)
    a, b = well_conditioned(rng, (3, 3), "float32"), rand(rng, (3, 2), "complex128")
    got = la.solve(xp.asarray(a), xp.asarray(b))
    assert got.dtype.name == "complex128"
    close(got, np.linalg.solve(wide(a), b), "complex128")


def test_solve_one_matrix_against_a_stack_factors_once():
    """x1 without batch against a batched x2 takes the columns-side-by-side path."""
    rng = np.random.default_rng(1)
    a, b = well_conditioned(rng, (4, 4), "float64"), rand(rng, (2, 3, 4, 2), "float64")
    close(la.solve(xp.asarray(a), xp.asarray(b)), np.linalg.solve(a, b), "float64")


# ---- inv, det, slogdet -------------------------------------------------------------------


@given(case=square_cases())
def test_inv_det_slogdet_match_numpy(case):
    batch, n, dtype, layout, rng = case
    a = well_conditioned(rng, (*batch, n, n), dtype)
    x = present(a, layout)
    inv, det, (sign, logabs) = la.inv(x), la.det(x), la.slogdet(x)
    rdt = np.finfo(dtype).dtype.name
    assert inv.shape == a.shape and inv.dtype.name == dtype
    assert det.shape == batch and det.dtype.name == dtype
    assert sign.shape == logabs.shape == batch and sign.dtype.name == dtype and logabs.dtype.name == rdt
    close(inv, np.linalg.inv(wide(a)), dtype)
    want_sign, want_log = np.linalg.slogdet(wide(a))
    close(sign, want_sign, dtype)
    close(logabs, want_log, dtype)
    want_det = np.linalg.det(wide(a))
    close(det, want_det, dtype, scale=max(1.0, float(np.abs(want_det).max(initial=1))))


def test_empty_and_tiny_matrices_follow_numpy():
    e = xp.asarray(np.zeros((0, 0)))
    assert la.det(e).numpy() == 1.0 and la.inv(e).shape == (0, 0)
    sign, logabs = la.slogdet(e)
    assert sign.numpy() == 1.0 and logabs.numpy() == 0.0
    assert la.solve(e, xp.asarray(np.zeros((0, 2)))).shape == (0, 2)
    assert la.solve(e, xp.asarray(np.zeros(0))).shape == (0,)
    assert la.det(xp.asarray(np.zeros((0, 3, 3)))).shape == (0,)
    assert la.solve(xp.asarray(np.zeros((2, 0, 0))), xp.asarray(np.zeros((0,)))).shape == (2, 0)
    assert la.det(xp.asarray(np.array([[-2.5]]))).numpy() == -2.5
    assert la.pinv(xp.asarray(np.zeros((2, 0, 3)))).shape == (2, 3, 0)


def test_singular_determinants_are_exact_zeros():
    a = np.array([[1.0, 2.0], [0.0, 0.0]])
    assert la.det(xp.asarray(a)).numpy() == 0.0
    sign, logabs = la.slogdet(xp.asarray(a))
    assert sign.numpy() == 0.0 and logabs.numpy() == -np.inf


# ---- the SciPy path for single large matrices -------------------------------------------


@pytest.mark.parametrize("dtype", ["float64", "complex64"])
def test_scipy_path_for_single_large_matrices(dtype):
    rng = np.random.default_rng(2)
    n = SCIPY_MIN_N + 2
    a, b = well_conditioned(rng, (n, n), dtype), rand(rng, (n, 3), dtype)
    scale = 10.0
    close(la.solve(xp.asarray(a), xp.asarray(b)), np.linalg.solve(wide(a), wide(b)), dtype, scale)
    close(la.inv(xp.asarray(a)), np.linalg.inv(wide(a)), dtype, scale)
    a = (a / (3 * math.sqrt(n))).astype(dtype)  # a determinant within float32's range
    sign, logabs = np.linalg.slogdet(wide(a))
    got = la.det(xp.asarray(a)).numpy()
    np.testing.assert_allclose(np.log(np.abs(got)), logabs, rtol=TOL[dtype] * scale)
    np.testing.assert_allclose(got / np.abs(got), sign, rtol=TOL[dtype] * scale)


@pytest.mark.parametrize("n", [3, SCIPY_MIN_N + 1])
def test_singular_matrix_is_a_linalg_error(n):
    a = np.ones((n, n))
    with pytest.raises(LinAlgError, match="singular"):
        la.solve(xp.asarray(a), xp.asarray(np.ones(n)))
    with pytest.raises(LinAlgError, match="singular"):
        la.inv(xp.asarray(a))
    with pytest.raises(LinAlgError, match="singular"):
        la.inv(xp.asarray(np.stack([np.eye(n), a])))


@pytest.mark.parametrize("n", [3, SCIPY_MIN_N + 1])
def test_solve_nan_mode_fills_only_the_singular_members(n):
    rng = np.random.default_rng(3)
    good = well_conditioned(rng, (n, n), "float64")
    a = np.stack([good, np.ones((n, n))]) if n < SCIPY_MIN_N else np.ones((n, n))
    b = rand(rng, (*a.shape[:-1], 2), "float64")
    got = solve_p.bind(xp.asarray(a), xp.asarray(b), singular="nan").numpy()
    assert np.isnan(got[-1]).all()
    if a.ndim == 3:
        np.testing.assert_allclose(got[0], np.linalg.solve(good, b[0]), rtol=1e-10)


# ---- lstsq, pinv, matrix_rank ------------------------------------------------------------


@st.composite
def rank_cases(draw):
    """(batch, m, n, dtype, layout, rng, singular values with exact zeros for rank < min)."""
    batch, m, n = draw(st.sampled_from(BATCHES)), draw(st.sampled_from(SIDES)), draw(st.sampled_from(SIDES))
    k = min(m, n)
    rank = draw(st.integers(0, k))
    s = sorted(draw(st.lists(st.floats(0.5, 2.0), min_size=rank, max_size=rank)), reverse=True)
    return (batch, m, n, draw(st.sampled_from(DTYPES)), draw(st.sampled_from(LAYOUTS)),
            np.random.default_rng(draw(st.integers(0, 2**32 - 1))), s + [0.0] * (k - rank))


@given(case=rank_cases(), data=st.data())
def test_lstsq_matches_numpy(case, data):
    batch, m, n, dtype, layout, rng, s = case
    a = with_singular_values(rng, batch, m, n, s, dtype)
    vector = data.draw(st.booleans(), label="vector b")
    b = rand(rng, (m,) if vector else (*batch, m, data.draw(st.sampled_from((1, 2, 0)))), dtype)
    rcond = 1e-3 if data.draw(st.booleans(), label="explicit rcond") or 0.0 in s else None
    x, res, rank, sv = la.lstsq(present(a, layout), present(b, layout) if not vector else xp.asarray(b),
                                rcond=rcond)
    rdt = np.finfo(dtype).dtype.name
    k = 1 if vector else b.shape[-1]
    assert x.shape == (*batch, n) + (() if vector else (k,)) and x.dtype.name == dtype
    assert res.shape == (*batch, k if m > n else 0) and res.dtype.name == rdt
    assert rank.shape == batch and rank.dtype.name == "int64" and sv.shape == (*batch, min(m, n))
    bb = np.broadcast_to(b[:, None] if vector else b, (*batch, m, k))
    for i in np.ndindex(batch):
        wx, wres, wrank, ws = np.linalg.lstsq(wide(a[i]), wide(bb[i]), rcond=rcond or None)
        np.testing.assert_allclose(x.numpy()[i].reshape(wx.shape), wx, rtol=TOL[dtype], atol=TOL[dtype])
        assert rank.numpy()[i] == wrank == sum(v > 0 for v in s)
        np.testing.assert_allclose(sv.numpy()[i], ws, rtol=TOL[dtype], atol=TOL[dtype])
        if m > n:
            r = wide(bb[i]) - wide(a[i]) @ wx
            tol = TOL[dtype]
            np.testing.assert_allclose(res.numpy()[i], (np.abs(r) ** 2).sum(0), rtol=tol, atol=tol)


@given(case=rank_cases(), data=st.data())
def test_pinv_and_matrix_rank_match_numpy(case, data):
    batch, m, n, dtype, layout, rng, s = case
    a = with_singular_values(rng, batch, m, n, s, dtype)
    kind = data.draw(st.sampled_from(("none", "float", "tensor")), label="rtol")
    rtol = {"none": None, "float": 1e-3, "tensor": xp.asarray(np.full(batch[-1:], 1e-3))}[kind]
    if kind == "none" and 0.0 in s:
        rtol = 1e-3  # the default cut-off is too tight for float32 round-off at exact zeros
    x = present(a, layout)
    ref_rtol = np.asarray(rtol.numpy() if kind == "tensor" else (rtol or max(m, n) * np.finfo(dtype).eps))
    got = la.pinv(x, rtol=rtol)
    assert got.shape == (*batch, n, m) and got.dtype.name == dtype
    close(got, np.linalg.pinv(wide(a), rtol=ref_rtol), dtype)
    rank = la.matrix_rank(x, rtol=rtol)
    assert rank.shape == batch and rank.dtype.name == "int64"
    np.testing.assert_array_equal(rank.numpy(), np.full(batch, sum(v > 0 for v in s)))


# ---- matrix_power ------------------------------------------------------------------------


@given(case=square_cases(), power=st.integers(-3, 6))
def test_matrix_power_matches_numpy(case, power):
    batch, n, dtype, layout, rng = case
    a = (well_conditioned(rng, (*batch, n, n), dtype) / (3 * math.sqrt(max(n, 1)))).astype(dtype)
    got = la.matrix_power(present(a, layout), power)
    assert got.shape == a.shape and got.dtype.name == dtype
    close(got, np.linalg.matrix_power(wide(a), power), dtype, scale=10.0)


def test_matrix_power_of_integers_and_the_identity():
    a = np.array([[1, 2], [3, 4]], dtype=np.int32)
    got = la.matrix_power(xp.asarray(a), 5)
    assert got.dtype.name == "int32"
    np.testing.assert_array_equal(got.numpy(), np.linalg.matrix_power(a, 5))
    np.testing.assert_array_equal(la.matrix_power(xp.asarray(a), 0).numpy(), np.eye(2, dtype=np.int32))
    x = xp.asarray(np.eye(2))
    assert la.matrix_power(x, 1) is not x


# ---- kernels leave their inputs alone ----------------------------------------------------


def test_kernels_do_not_modify_their_inputs():
    rng = np.random.default_rng(4)
    for n in (4, SCIPY_MIN_N):
        a, b = well_conditioned(rng, (n, n), "float64"), rand(rng, (n, 2), "float64")
        a0, b0 = a.copy(), b.copy()
        ta, tb = xp.asarray(a), xp.asarray(b)
        la.solve(ta, tb), la.inv(ta), la.det(ta)
        if n < SCIPY_MIN_N:
            la.slogdet(ta), la.lstsq(ta, tb), la.pinv(ta), solve_p.bind(ta, tb, singular="nan")
        np.testing.assert_array_equal(ta.numpy(), a0)
        np.testing.assert_array_equal(tb.numpy(), b0)


# ---- bad input ---------------------------------------------------------------------------

SQ = xp.asarray(np.eye(3))


@pytest.mark.parametrize("fn", [la.inv, la.det, la.slogdet, lambda x: la.solve(x, SQ),
                                lambda x: la.matrix_power(x, 2)])
def test_non_square_is_a_shape_error_naming_the_shape(fn):
    with pytest.raises(ShapeError, match=r"\(2, 3\)"):
        fn(xp.asarray(np.ones((2, 3))))


@pytest.mark.parametrize("fn", [la.inv, la.det, la.slogdet, la.pinv, la.matrix_rank, lambda x: la.solve(x, x),
                                lambda x: la.lstsq(x, x)])
def test_integer_and_half_input_is_a_dtype_error(fn):
    with pytest.raises(DTypeError, match="int64"):
        fn(xp.asarray(np.eye(3, dtype=np.int64)))
    with pytest.raises(DTypeError, match="float16"):
        fn(xp.asarray(np.eye(3, dtype=np.float16)))


@pytest.mark.parametrize("fn", [la.inv, la.det, la.slogdet, la.pinv, lambda x: la.solve(x, x),
                                lambda x: la.lstsq(x, x)])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_input_is_a_linalg_error(fn, bad):
    a = np.eye(3)
    a[1, 2] = bad
    with pytest.raises(LinAlgError, match="NaN or inf"):
        fn(xp.asarray(a))


def test_mismatched_solve_and_lstsq_shapes():
    with pytest.raises(ShapeError, match="3 rows"):
        la.solve(SQ, xp.asarray(np.ones((4, 2))))
    with pytest.raises(ShapeError, match="needs 3 entries"):
        la.solve(SQ, xp.asarray(np.ones(4)))
    with pytest.raises(ShapeError, match="0-d"):
        la.solve(SQ, xp.asarray(1.0))
    with pytest.raises(ShapeError, match="batch shapes do not broadcast"):
        la.solve(xp.asarray(np.ones((2, 3, 3))), xp.asarray(np.ones((4, 3, 1))))
    with pytest.raises(ShapeError, match="at least 2 dimensions"):
        la.inv(xp.asarray(np.ones(3)))
    with pytest.raises(ShapeError, match="3 rows"):
        la.lstsq(xp.asarray(np.ones((3, 2))), xp.asarray(np.ones((4, 1))))


def test_ops_check_their_operands_directly():
    a = xp.asarray(np.eye(3))
    with pytest.raises(ShapeError, match="equal batch shapes"):
        solve_p.bind(a, xp.asarray(np.ones((2, 3, 1))))
    with pytest.raises(DTypeError, match="one dtype"):
        solve_p.bind(a, xp.asarray(np.ones((3, 1), np.float32)))
    with pytest.raises(ArgumentError, match="singular"):
        solve_p.bind(a, a, singular="ignore")
    with pytest.raises(ShapeError, match="rtol of x's batch shape"):
        pinv_p.bind(a, xp.asarray(np.ones(3)))
    with pytest.raises(DTypeError, match="rtol of dtype float64"):
        pinv_p.bind(a, xp.asarray(np.float32(1)))
    with pytest.raises(DTypeError, match="a and b of one dtype"):
        lstsq_p.bind(a, xp.asarray(np.ones((3, 1), np.float32)))
    with pytest.raises(ShapeError, match="equal batch shapes"):
        lstsq_p.bind(a, xp.asarray(np.ones((2, 3, 1))))
    with pytest.raises(ArgumentError, match="rcond"):
        lstsq_p.bind(a, a, rcond=float("inf"))


def test_bad_arguments():
    with pytest.raises(ArgumentError, match="Tensor"):
        la.inv(np.eye(2))
    with pytest.raises(ArgumentError, match="rcond"):
        la.lstsq(SQ, SQ, rcond=-1.0)
    with pytest.raises(ArgumentError, match="rtol"):
        la.pinv(SQ, rtol=float("nan"))
    with pytest.raises(ArgumentError, match="rtol"):
        la.matrix_rank(SQ, rtol="big")
    with pytest.raises(DTypeError, match="rtol"):
        la.pinv(SQ, rtol=xp.asarray(1))
    with pytest.raises(ShapeError, match="rtol"):
        la.pinv(xp.asarray(np.ones((2, 3, 3))), rtol=xp.asarray(np.ones(3)))
    with pytest.raises(ArgumentError, match="int n"):
        la.matrix_power(SQ, 1.5)
    with pytest.raises(ArgumentError, match="int n"):
        la.matrix_power(SQ, True)
    with pytest.raises(DTypeError, match="negative power"):
        la.matrix_power(xp.asarray(np.eye(2, dtype=np.int64)), -1)
    with pytest.raises(DTypeError, match="numeric"):
        la.matrix_power(xp.asarray(np.eye(2, dtype=bool)), 2)
