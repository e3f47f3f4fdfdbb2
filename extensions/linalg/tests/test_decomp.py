"""The decompositions against NumPy/SciPy on generated stacks of matrices.

Results that are unique (eigenvalues, singular values, Cholesky and LU factors, solves,
expm) are compared with the reference; the others are checked by reconstruction and their
defining properties (orthonormal columns, triangles, the eigen-equation), since signs and
phases are not unique. Inputs cover every LAPACK dtype, size-0 batches, 0x0 and 1x1
matrices, and non-contiguous buffers (transposed and strided views, transposed tensors).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sl
from hypothesis import given
from hypothesis import strategies as st
from linalg_cases import rand

import tenferro_linalg as la
from tenferro_linalg import _decomp_kernels as K
from tenferro_runtime import array_api as xp

DTYPES = ("float32", "float64", "complex64", "complex128")
TOL = {"float32": 3e-4, "complex64": 3e-4, "float64": 1e-10, "complex128": 1e-10}
BATCHES = ((), (2,), (1,), (0,), (3,), (2, 1), (1, 3), (0, 2))
SIDES = (3, 1, 0, 2, 4, 5)
LAYOUTS = ("contiguous", "transposed", "strided", "tensor_mT")


@st.composite
def cases(draw, square: bool = False):
    """(batch, m, n, dtype, layout, rng) for a stack of matrices."""
    m = draw(st.sampled_from(SIDES))
    n = m if square else draw(st.sampled_from(SIDES))
    return (draw(st.sampled_from(BATCHES)), m, n, draw(st.sampled_from(DTYPES)),
            draw(st.sampled_from(LAYOUTS)), np.random.default_rng(draw(st.integers(0, 2**32 - 1))))




def hpd(rng, shape, dtype):
    """Hermitian positive-definite stacks, well conditioned."""
    a = rand(rng, shape, dtype)
    n = shape[-1]
    return (a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)).astype(dtype)


def present(a: np.ndarray, layout: str):
    """a as a tenferro tensor whose buffer is laid out as asked (the kernel sees that buffer)."""
    if layout == "transposed":  # a Fortran-ordered view
        return xp.asarray(np.swapaxes(np.ascontiguousarray(np.swapaxes(a, -1, -2)), -1, -2))
    if layout == "strided":
        big = np.zeros((*a.shape[:-1], 2 * a.shape[-1] + 1), a.dtype)
        big[..., 1::2] = a
        return xp.asarray(big[..., 1::2])
    if layout == "tensor_mT":
        return xp.matrix_transpose(xp.asarray(np.ascontiguousarray(np.swapaxes(a, -1, -2))))
    return xp.asarray(a)


def H(a):
    return np.conj(np.swapaxes(a, -1, -2))


def close(got, want, dtype, scale=1.0):
    tol = TOL[dtype] * scale
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol)


def check_out(t, shape, dtype):
    assert t.shape == tuple(shape) and t.dtype.name == np.dtype(dtype).name, (t.shape, t.dtype, shape, dtype)
    return t.numpy()


def orthonormal_cols(q, dtype):
    k = q.shape[-1]
    close(H(q) @ q, np.broadcast_to(np.eye(k), (*q.shape[:-2], k, k)), dtype, 10)


def real_dt(dtype):
    return np.finfo(dtype).dtype.name


def complex_dt(dtype):
    return np.result_type(dtype, np.complex64).name


# ---- Cholesky, eigh ------------------------------------------------------------------------


@given(case=cases(square=True), upper=st.booleans())
def test_cholesky_matches_numpy(case, upper):
    batch, n, _, dtype, layout, rng = case
    a = hpd(rng, (*batch, n, n), dtype)
    keep = a.copy()
    want = np.linalg.cholesky(a) if a.size else np.zeros(a.shape, dtype)
    got = check_out(la.cholesky(present(a, layout), upper=upper), a.shape, dtype)
    close(got, H(want) if upper else want, dtype, 10 * n + 1)
    assert np.array_equal(a, keep)  # the kernel never writes to its input


def test_cholesky_eigh_take_the_hermitian_part_and_the_ops_the_lower_triangle():
    """The public cholesky, eigh and eigvalsh compute on (x + x^H) / 2 (JAX's convention,
    jnp.linalg.*(symmetrize_input=True)); their ops read the lower triangle (NumPy's, LAPACK's).
    On Hermitian x the two are the same."""
    from tenferro_linalg._decomp_ops import cholesky_p, eigvalsh_p

    a = hpd(np.random.default_rng(0), (3, 3), "complex128")
    junk = a + np.triu(np.full((3, 3), 0.7 + 0.5j), 1) + np.diag([0.5j, -1j, 2j])
    sym = (junk + np.conj(junk.T)) / 2
    x = xp.asarray(junk)
    np.testing.assert_allclose(la.cholesky(x).numpy(), np.linalg.cholesky(sym), rtol=1e-12)
    np.testing.assert_allclose(la.eigvalsh(x).numpy(), np.linalg.eigvalsh(sym), rtol=1e-12)
    np.testing.assert_allclose(la.eigh(x).eigenvalues.numpy(), np.linalg.eigvalsh(sym), rtol=1e-12)
    np.testing.assert_allclose(cholesky_p.bind(x).numpy(), np.linalg.cholesky(junk), rtol=1e-12)
    np.testing.assert_allclose(eigvalsh_p.bind(x).numpy(), np.linalg.eigvalsh(junk), rtol=1e-12)
    np.testing.assert_array_equal(la.cholesky(xp.asarray(a)).numpy(), cholesky_p.bind(xp.asarray(a)).numpy())


@given(case=cases(square=True))
def test_eigh_eigvalsh_match_numpy(case):
    batch, n, _, dtype, layout, rng = case
    a = hpd(rng, (*batch, n, n), dtype) - n * np.eye(n, dtype=dtype)  # indefinite too
    x = present(a, layout)
    want = np.linalg.eigvalsh(a) if a.size else np.zeros((*batch, n))
    w, v = la.eigh(x)
    w, v = check_out(w, (*batch, n), real_dt(dtype)), check_out(v, a.shape, dtype)
    scale = 10 * n + 1
    close(w, want, dtype, scale * max(1, np.abs(want).max(initial=0)))
    close(check_out(la.eigvalsh(x), (*batch, n), real_dt(dtype)), want, dtype, scale * max(1, n))
    assert np.all(np.diff(w, axis=-1) >= 0)
    orthonormal_cols(v, dtype)
    close(a @ v, v * w[..., None, :].astype(dtype), dtype, scale * max(1, n))


# ---- eig -----------------------------------------------------------------------------------


def matched_distance(got, want):
    """max over eigenvalues of the distance to the nearest unused reference eigenvalue."""
    worst = 0.0
    if got.size == 0:
        return worst
    for g, w in zip(got.reshape(-1, got.shape[-1]), want.reshape(-1, want.shape[-1])):
        left = list(w)
        for z in g:
            j = int(np.argmin([abs(z - y) for y in left]))
            worst = max(worst, abs(z - left.pop(j)))
    return worst


@given(case=cases(square=True))
def test_eig_eigvals_eigen_equation_and_numpy(case):
    batch, n, _, dtype, layout, rng = case
    a = rand(rng, (*batch, n, n), dtype)
    x = present(a, layout)
    cdt = complex_dt(dtype)
    w, v = la.eig(x)
    w, v = check_out(w, (*batch, n), cdt), check_out(v, a.shape, cdt)
    wv = check_out(la.eigvals(x), (*batch, n), cdt)
    want = np.linalg.eigvals(a) if a.size else np.zeros((*batch, n))
    scale = 100 * (n + 1)
    assert matched_distance(w, want) <= TOL[dtype] * scale * (1 + np.abs(want).max(initial=0))
    assert matched_distance(wv, want) <= TOL[dtype] * scale * (1 + np.abs(want).max(initial=0))
    close(np.linalg.norm(v, axis=-2), np.ones((*batch, n)), dtype, 10)
    close(a @ v, v * w[..., None, :], dtype, scale)


# ---- SVD, QR -------------------------------------------------------------------------------


@given(case=cases(), full=st.booleans())
def test_svd_svdvals(case, full):
    batch, m, n, dtype, layout, rng = case
    a = rand(rng, (*batch, m, n), dtype)
    x = present(a, layout)
    k = min(m, n)
    u, s, vh = la.svd(x, full_matrices=full)
    u = check_out(u, (*batch, m, m if full else k), dtype)
    s = check_out(s, (*batch, k), real_dt(dtype))
    vh = check_out(vh, (*batch, n if full else k, n), dtype)
    want = np.linalg.svd(a, compute_uv=False) if a.size else np.zeros((*batch, k))
    scale = 10 * (max(m, n) + 1)
    close(s, want, dtype, scale)
    close(check_out(la.svdvals(x), (*batch, k), real_dt(dtype)), want, dtype, scale)
    assert np.all(np.diff(s, axis=-1) <= 0)
    orthonormal_cols(u, dtype)
    orthonormal_cols(H(vh), dtype)
    close((u[..., :, :k] * s[..., None, :].astype(dtype)) @ vh[..., :k, :], a, dtype, scale)


@given(case=cases(), mode=st.sampled_from(["reduced", "complete"]))
def test_qr_reconstructs_with_orthonormal_q_and_upper_r(case, mode):
    batch, m, n, dtype, layout, rng = case
    a = rand(rng, (*batch, m, n), dtype)
    k = m if mode == "complete" else min(m, n)
    q, r = la.qr(present(a, layout), mode=mode)
    q, r = check_out(q, (*batch, m, k), dtype), check_out(r, (*batch, k, n), dtype)
    orthonormal_cols(q, dtype)
    assert np.array_equal(r, np.triu(r))
    close(q @ r, a, dtype, 10 * (max(m, n) + 1))
    if a.size:  # |diag R| is unique
        want = np.abs(np.diagonal(np.linalg.qr(a, mode=mode)[1], axis1=-2, axis2=-1))
        close(np.abs(np.diagonal(r, axis1=-2, axis2=-1)), want, dtype, 10 * (max(m, n) + 1))


# ---- LU ------------------------------------------------------------------------------------


def scipy_lu_factor(a):
    k = min(a.shape[-2:])
    lu = np.empty_like(a)
    piv = np.empty((*a.shape[:-2], k), np.int32)
    for idx in np.ndindex(*a.shape[:-2]):
        if a[idx].size:
            lu[idx], piv[idx] = sl.lu_factor(a[idx])
    return lu, piv


@given(case=cases())
def test_lu_and_lu_factor_match_scipy(case):
    batch, m, n, dtype, layout, rng = case
    a = rand(rng, (*batch, m, n), dtype)
    keep = a.copy()
    x = present(a, layout)
    k = min(m, n)
    packed, piv = la.lu_factor(x)
    packed, piv = check_out(packed, a.shape, dtype), check_out(piv, (*batch, k), "int32")
    want_lu, want_piv = scipy_lu_factor(a)
    assert np.array_equal(piv, want_piv)
    close(packed, want_lu, dtype, 10)
    p, low, up = la.lu(x)
    p, low, up = (check_out(p, (*batch, m, m), dtype), check_out(low, (*batch, m, k), dtype),
                  check_out(up, (*batch, k, n), dtype))
    assert set(np.unique(p)) <= {0, 1} and np.all(p.sum(-1) == 1) and np.all(p.sum(-2) == 1)
    assert np.array_equal(low, np.tril(low)) and np.all(np.diagonal(low, axis1=-2, axis2=-1) == 1)
    assert np.array_equal(up, np.triu(up))
    close(p @ low @ up, a, dtype, 10 * (max(m, n) + 1))
    if a.size and not batch:
        wp, wl, wu = sl.lu(a)
        close(p, wp, dtype)
        close(low, wl, dtype, 10)
        close(up, wu, dtype, 10)
    assert np.array_equal(a, keep)


def well_conditioned(rng, shape, dtype):
    n = shape[-1]
    return (rand(rng, shape, dtype) + 3 * n * np.eye(n)).astype(dtype)


@st.composite
def solve_cases(draw):
    """a (..., n, n) and b: a vector (n,) or a stack (..., n, k), batches broadcasting."""
    batch, n, _, dtype, layout, rng = draw(cases(square=True))
    kind = draw(st.sampled_from(["vector", "matrix", "broadcast"]))
    k = draw(st.sampled_from([1, 2, 0, 3]))
    if kind == "vector":
        b_shape = (n,)
    elif kind == "matrix":
        b_shape = (*batch, n, k)
    else:  # b's batch broadcasts against a's
        b_shape = (2, *(1 for _ in batch), n, k)
    return batch, n, dtype, layout, rng, b_shape


def broadcast_solve(a, b, one):
    """Reference: one(a_i, b_i) over the broadcast batch (SciPy's '1|2' convention for b)."""
    vector = b.ndim == 1
    bm = b[:, None] if vector else b
    batch = np.broadcast_shapes(a.shape[:-2], bm.shape[:-2])
    a = np.broadcast_to(a, (*batch, *a.shape[-2:]))
    bm = np.broadcast_to(bm, (*batch, *bm.shape[-2:]))
    out = np.zeros(bm.shape, np.result_type(a, bm))
    for idx in np.ndindex(*batch):
        if bm[idx].size:
            out[idx] = one(a[idx], bm[idx])
    return out[..., 0] if vector else out


@given(case=solve_cases(), trans=st.sampled_from([0, 1, 2, "N", "T", "C"]))
def test_lu_solve_matches_scipy(case, trans):
    batch, n, dtype, layout, rng, b_shape = case
    a = well_conditioned(rng, (*batch, n, n), dtype)
    b = rand(rng, b_shape, dtype)
    packed, piv = la.lu_factor(present(a, layout))
    got = la.lu_solve((packed, piv), present(b, layout) if b.ndim >= 2 else xp.asarray(b), trans=trans)
    code = {"N": 0, "T": 1, "C": 2}.get(trans, trans)  # SciPy's lu_solve takes ints only
    want = broadcast_solve(a, b, lambda ai, bi: sl.lu_solve(sl.lu_factor(ai), bi, trans=code))
    close(check_out(got, want.shape, dtype), want, dtype, 10 * (n + 1))


@pytest.mark.parametrize("trans", [0, 1, 2])
def test_lu_solve_broadcasts_a_single_factorization_over_a_batch_of_right_hand_sides(trans):
    rng = np.random.default_rng(7)  # torch's lu_solve once misread a broadcast LU with trans=1
    a = well_conditioned(rng, (1, 3, 3), "complex64")
    b = rand(rng, (2, 1, 3, 1), "complex64")
    got = la.lu_solve(la.lu_factor(xp.asarray(a)), xp.asarray(b), trans=trans)
    want = broadcast_solve(a, b, lambda ai, bi: sl.lu_solve(sl.lu_factor(ai), bi, trans=trans))
    close(check_out(got, want.shape, "complex64"), want, "complex64", 40)


@given(case=solve_cases(), lower=st.booleans(), unit=st.booleans(), trans=st.sampled_from([0, 1, 2, "C"]))
def test_solve_triangular_matches_scipy(case, lower, unit, trans):
    batch, n, dtype, layout, rng, b_shape = case
    a = well_conditioned(rng, (*batch, n, n), dtype)
    b = rand(rng, b_shape, dtype)
    keep = b.copy()
    got = la.solve_triangular(present(a, layout), present(b, layout) if b.ndim >= 2 else xp.asarray(b),
                              lower=lower, unit_diagonal=unit, trans=trans)
    want = broadcast_solve(a, b, lambda ai, bi: sl.solve_triangular(ai, bi, lower=lower, unit_diagonal=unit,
                                                                    trans=trans))
    close(check_out(got, want.shape, dtype), want, dtype, 10 * (n + 1))
    assert np.array_equal(b, keep)


def test_solves_promote_mixed_dtypes():
    a = well_conditioned(np.random.default_rng(3), (3, 3), "float32")
    b = np.ones(3, np.complex128)
    got = la.solve_triangular(xp.asarray(a), xp.asarray(b), lower=True)
    assert got.dtype.name == "complex128"
    want = sl.solve_triangular(a.astype(np.float64), b, lower=True)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    lu_, piv = la.lu_factor(xp.asarray(a))
    got = la.lu_solve((lu_, xp.astype(piv, xp.int64)), xp.asarray(b))
    assert got.dtype.name == "complex128"
    np.testing.assert_allclose(got.numpy(), np.linalg.solve(a.astype(np.float64), b), rtol=1e-5)


# ---- expm ----------------------------------------------------------------------------------


@given(case=cases(square=True))
def test_expm_matches_scipy(case):
    batch, n, _, dtype, layout, rng = case
    a = rand(rng, (*batch, n, n), dtype)
    want = sl.expm(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)) if a.size else a
    got = check_out(la.expm(present(a, layout)), a.shape, dtype)
    close(got, want, dtype, 100 * (n + 1) * max(1.0, np.abs(want).max(initial=0)))


# ---- large matrices take SciPy's kernels ---------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_the_scipy_path_for_big_matrices(monkeypatch, dtype, layout):
    """Matrices with both sides >= BIG go to SciPy one at a time; BIG is lowered so that small
    stacks take that path here (the 128 x 128 calls would make the suite slow)."""
    monkeypatch.setattr(K, "BIG", 3)
    rng = np.random.default_rng(4)
    a, s = rand(rng, (2, 4, 5), dtype), hpd(rng, (2, 4, 4), dtype)
    assert K._big(a) and K._big(s) and not K._big(a[..., :2, :])
    x, xs = present(a, layout), present(s, layout)
    scale = 100
    close(la.cholesky(xs).numpy(), np.linalg.cholesky(s), dtype, scale)
    w, v = (t.numpy() for t in la.eigh(xs))
    close(w, np.linalg.eigvalsh(s), dtype, scale)
    close(la.eigvalsh(xs).numpy(), np.linalg.eigvalsh(s), dtype, scale)
    close(s @ v, v * w[..., None, :].astype(dtype), dtype, scale)
    for full in (True, False):
        u, sv, vh = (t.numpy() for t in la.svd(x, full_matrices=full))
        assert u.shape == (2, 4, 4) and vh.shape == (2, 5 if full else 4, 5)
        close(sv, np.linalg.svd(a, compute_uv=False), dtype, scale)
        close((u * sv[..., None, :].astype(dtype)) @ vh[..., :4, :], a, dtype, scale)
    close(la.svdvals(x).numpy(), np.linalg.svd(a, compute_uv=False), dtype, scale)
    for mode in ("reduced", "complete"):
        q, r = (t.numpy() for t in la.qr(xp.matrix_transpose(x), mode=mode))
        assert q.shape == (2, 5, 4 if mode == "reduced" else 5)
        orthonormal_cols(q, dtype)
        assert np.array_equal(r, np.triu(r))
        close(q @ r, np.swapaxes(a, -1, -2), dtype, scale)


def test_namespace_and_result_types():
    assert xp.linalg.cholesky is la.cholesky and xp.linalg.svd is la.svd
    x = xp.asarray(np.eye(2))
    assert la.eigh(x)._fields == ("eigenvalues", "eigenvectors")
    assert la.eig(x)._fields == ("eigenvalues", "eigenvectors")
    assert la.svd(x)._fields == ("U", "S", "Vh")
    assert la.qr(x)._fields == ("Q", "R")
    assert la.lu(x)._fields == ("P", "L", "U")
    assert la.lu_factor(x)._fields == ("LU", "piv")
