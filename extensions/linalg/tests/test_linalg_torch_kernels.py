"""The torch kernels: registered for every linalg op without importing torch, every output
buffer a plain tensor of the declared dtype and shape, and the error paths only they have.
Their values, edge shapes, errors and gradients on torch:cpu are checked by the whole suite,
which runs on both backends (conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sl
from linalg_cases import rand

import tenferro_linalg as la
from tenferro_core.errors import LinAlgError
from tenferro_linalg import _decomp_ops as D
from tenferro_linalg import _solve_ops as S
from tenferro_runtime import array_api as xp
from tenferro_runtime.testing.subprocess_check import imports_module

pytest.importorskip("tenferro_torch")

DEVICES = ("torch:cpu",)
DTYPES = ("float32", "float64", "complex64", "complex128")


def test_every_op_has_a_torch_kernel_registered_without_importing_torch():
    names = sorted(op.name for op in (*D.OPS, *S.OPS))
    code = ("from tenferro_runtime import Runtime\n"
            "rt = Runtime.from_entry_points(allow=['numpy', 'torch', 'linalg'])\n"
            f"missing = [n for n in {names!r} if ('torch', n) not in rt.kernels]\n"
            "assert not missing, missing")
    assert not imports_module(code, "torch")


def _op_calls(rng, batch, m, n, dtype):
    """(name, outputs) of every op on (batch, m, n) input; square ops get (batch, n, n)."""
    sq = rand(rng, (*batch, n, n), dtype) + 3 * n * np.eye(n, dtype=dtype)
    a, x = xp.asarray(sq), xp.asarray(rand(rng, (*batch, m, n), dtype))
    b = xp.asarray(rand(rng, (*batch, n, 2), dtype))
    hpd = xp.asarray(sq @ np.conj(np.swapaxes(sq, -1, -2)))
    lu, piv = D.lu_factor_p.bind(a)
    rtol = xp.asarray(np.full(batch, 1e-3, np.finfo(dtype).dtype))
    yield "cholesky", D.cholesky_p.bind(hpd)
    yield "eigh", D.eigh_p.bind(hpd)
    yield "eigvalsh", D.eigvalsh_p.bind(hpd)
    yield "eig", D.eig_p.bind(a)
    yield "eigvals", D.eigvals_p.bind(a)
    yield "svd", D.svd_p.bind(x, full_matrices=True) + D.svd_p.bind(x, full_matrices=False)
    yield "svdvals", D.svdvals_p.bind(x)
    yield "qr", D.qr_p.bind(x, mode="reduced") + D.qr_p.bind(x, mode="complete")
    yield "lu_factor", D.lu_factor_p.bind(x)
    yield "lu_pivots_to_permutation", D.lu_pivots_to_permutation_p.bind(piv, size=n)
    yield "lu_solve", tuple(D.lu_solve_p.bind(lu, piv, b, trans=t) for t in (0, 1, 2))
    yield "solve_triangular", tuple(D.solve_triangular_p.bind(a, b, lower=lo, trans=t)
                                    for lo in (True, False) for t in (0, 1, 2))
    yield "expm", D.expm_p.bind(a)
    yield "expm_frechet", D.expm_frechet_p.bind(a, a)
    yield "solve", (S.solve_p.bind(a, b), S.solve_p.bind(a, b, singular="nan"))
    yield "inv", S.inv_p.bind(a)
    yield "det", S.det_p.bind(a)
    yield "adjugate", S.adjugate_p.bind(a)
    yield "slogdet", S.slogdet_p.bind(a)
    yield "pinv", S.pinv_p.bind(x, rtol)
    yield "lstsq", S.lstsq_p.bind(x, xp.asarray(rand(rng, (*batch, m, 2), dtype)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch,m,n", [((), 3, 2), ((2,), 2, 3), ((0,), 3, 3), ((2,), 0, 0), ((), 1, 1),
                                       ((1, 2), 0, 2)])
def test_every_output_buffer_is_a_plain_tensor_of_the_declared_dtype_and_shape(dtype, batch, m, n):
    """The runtime trusts the kernels: a buffer of another dtype or shape than the shape rule
    declared, or one carrying torch's lazy conjugate bit (numpy() refuses it), would leak."""
    for name, outs in _op_calls(np.random.default_rng(0), batch, m, n, dtype):
        for out in outs if isinstance(outs, tuple) else (outs,):
            buf = out.numpy()
            assert out.device.name == "torch:cpu", name
            assert buf.dtype.name == out.dtype.name and buf.shape == out.shape, (name, buf.dtype, out)


@pytest.mark.parametrize("dtype", ["float64", "complex64"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_large_input_is_a_linalg_error(dtype, bad):
    """Inputs above 4096 entries are checked with one min/max reduction instead of a mask."""
    a = np.eye(65, dtype=dtype)
    a[40, 3] = bad * (1j if dtype == "complex64" else 1)
    for fn, name in ((la.inv, "inv"), (la.svdvals, "svdvals"), (lambda x: la.solve(x, x), "solve")):
        with pytest.raises(LinAlgError, match=f"linalg.{name}: the input holds NaN or inf"):
            fn(xp.asarray(a))


def test_torch_failures_become_linalg_errors(monkeypatch):
    import torch

    def fail(*args, **kwargs):
        raise torch.linalg.LinAlgError("did not converge (info = 7)")

    monkeypatch.setattr(torch.linalg, "svdvals", fail)
    with pytest.raises(LinAlgError, match=r"linalg.svdvals failed: did not converge \(info = 7\); the SVD"):
        la.svdvals(xp.asarray(np.eye(3)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("e_scale", [0.0, 1e-8, 1.0, 1e8])
def test_expm_frechet_matches_scipy_whatever_the_size_of_e(dtype, e_scale):
    """E is scaled to unit entries inside the kernel: a large E would otherwise set the
    scaling of the 2n x 2n matrix exponential and cost accuracy."""
    rng = np.random.default_rng(5)
    a, e = rand(rng, (2, 4, 4), dtype) * 3, (rand(rng, (2, 4, 4), dtype) * e_scale).astype(dtype)
    got = D.expm_frechet_p.bind(xp.asarray(a), xp.asarray(e)).numpy()
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    pairs = zip(a.astype(wide), e.astype(wide))
    want = np.stack([sl.expm_frechet(ai, ei, compute_expm=False) for ai, ei in pairs])
    tol = (1e-5 if dtype in ("float32", "complex64") else 1e-12) * max(np.abs(want).max(), 1e-300)
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
