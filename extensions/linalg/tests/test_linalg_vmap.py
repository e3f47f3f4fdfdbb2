"""Every linalg op under vmap of vmap, with empty batches: each result of the op (all of a
multiple-result op's) equals applying it to each example, for nested batch sizes 0 to 3,
batch axes anywhere and shared operands, on each CPU backend (conftest). Complements
test_linalg_batching.py (one level, non-empty batches)."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_ad import PerformanceWarning, vmap
from tenferro_runtime import array_api as xp
from tenferro_runtime import default_runtime


def _op(name: str):
    return default_runtime().ops[f"tenferro_linalg.{name}.v1"]


def _mat(rng: np.random.Generator, m: int, n: int, kind: str = "") -> np.ndarray:
    a = rng.standard_normal((m, n))
    if kind == "spd":
        return a @ a.T + n * np.eye(n)
    if kind == "sym":
        return a + a.T
    return a + 2 * n * np.eye(n) if kind == "wc" else a


def _lu(rng: np.random.Generator) -> list:
    lu, piv = _op("lu_factor").bind(xp.asarray(_mat(rng, 3, 3, "wc")))
    return [lu.numpy(), piv.numpy()]


def _bind(name: str, **params) -> Callable:
    return lambda *xs: _op(name).bind(*xs, **params)


CASES: dict[str, tuple[Callable, Callable]] = {  # name: (f, one example's operands from rng)
    "cholesky": (_bind("cholesky"), lambda r: [_mat(r, 3, 3, "spd")]),
    "eigh": (_bind("eigh"), lambda r: [_mat(r, 3, 3, "sym")]),
    "eigvalsh": (_bind("eigvalsh"), lambda r: [_mat(r, 3, 3, "sym")]),
    "eig": (_bind("eig"), lambda r: [_mat(r, 3, 3)]),
    "eigvals": (_bind("eigvals"), lambda r: [_mat(r, 3, 3)]),
    "svd": (_bind("svd", full_matrices=True), lambda r: [_mat(r, 3, 2)]),
    "svdvals": (_bind("svdvals"), lambda r: [_mat(r, 2, 3)]),
    "qr": (_bind("qr", mode="complete"), lambda r: [_mat(r, 3, 2)]),
    "lu_factor": (_bind("lu_factor"), lambda r: [_mat(r, 2, 3)]),
    "lu_pivots_to_permutation": (_bind("lu_pivots_to_permutation", size=3),
                                 lambda r: _lu(r)[1:]),
    "lu_solve": (_bind("lu_solve", trans=2), lambda r: [*_lu(r), _mat(r, 3, 2)]),
    "solve_triangular": (_bind("solve_triangular", lower=True, trans=1),
                         lambda r: [_mat(r, 3, 3, "wc"), _mat(r, 3, 2)]),
    "expm": (_bind("expm"), lambda r: [_mat(r, 3, 3) / 4]),
    "expm_frechet": (_bind("expm_frechet"), lambda r: [_mat(r, 3, 3) / 4, _mat(r, 3, 3)]),
    "solve": (_bind("solve"), lambda r: [_mat(r, 3, 3, "wc"), _mat(r, 3, 2)]),
    "inv": (_bind("inv"), lambda r: [_mat(r, 3, 3, "wc")]),
    "det": (_bind("det"), lambda r: [_mat(r, 3, 3)]),
    "adjugate": (_bind("adjugate"), lambda r: [_mat(r, 3, 3)]),
    "slogdet": (_bind("slogdet"), lambda r: [_mat(r, 3, 3)]),
    "pinv": (_bind("pinv"), lambda r: [_mat(r, 3, 2), np.array(1e-10)]),
    "lstsq": (_bind("lstsq"), lambda r: [_mat(r, 4, 2), _mat(r, 4, 2)]),
}


def _leaves(out) -> list[np.ndarray]:
    return [o.numpy() for o in (out if isinstance(out, (tuple, list)) else (out,))]


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_op_under_nested_vmap_equals_each_example(name, data):
    f, make = CASES[name]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    sizes = data.draw(st.tuples(st.sampled_from([0, 1, 3]), st.sampled_from([0, 1, 2])),
                      label="sizes (outer, inner)")
    count = sizes[0] * sizes[1]
    examples = [make(rng) for _ in range(max(count, 1))]  # example 0: the shared operands
    n = len(examples[0])
    batched = data.draw(st.lists(st.booleans(), min_size=n, max_size=n).filter(any), label="batched")
    args, outer, inner = [], [], []
    for i, (x, b) in enumerate(zip(examples[0], batched)):
        if not b:
            args.append(x)
            outer.append(None)
            inner.append(None)
            continue
        stack = np.stack([e[i] for e in examples[:count]]) if count else \
            np.zeros((0,) + x.shape, x.dtype)
        ai = data.draw(st.integers(0, x.ndim), label=f"inner axis {i}")
        ao = data.draw(st.integers(0, x.ndim + 1), label=f"outer axis {i}")
        stack = np.moveaxis(stack.reshape(sizes + x.shape), 1, 1 + ai)
        args.append(np.ascontiguousarray(np.moveaxis(stack, 0, ao)))
        outer.append(ao)
        inner.append(ai)
    g = vmap(vmap(f, in_axes=tuple(inner), axis_size=sizes[1]), in_axes=tuple(outer),
             axis_size=sizes[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerformanceWarning)
        got = _leaves(g(*[xp.asarray(a) for a in args]))
    one = _leaves(f(*[xp.asarray(a) for a in examples[0]]))
    per = [_leaves(f(*[xp.asarray(x if b else s) for x, s, b in zip(e, examples[0], batched)]))
           for e in examples[:count]]
    assert len(got) == len(one)
    for k, (g_k, o_k) in enumerate(zip(got, one)):
        want = np.stack([p[k] for p in per]) if count else np.zeros((0,) + o_k.shape, o_k.dtype)
        want = want.reshape(sizes + o_k.shape)
        assert g_k.shape == want.shape and g_k.dtype == want.dtype, (k, g_k.shape, want.shape)
        np.testing.assert_allclose(g_k, want, rtol=1e-9, atol=1e-9, err_msg=f"result {k}")


def test_expm_of_a_permuted_batch():
    """Regression: torch's matrix_exp failed on a non-contiguous stack (two batch axes moved
    in front by vmap of vmap); the kernel now passes it a contiguous copy."""
    a = np.random.default_rng(3).standard_normal((3, 2, 3, 3)) / 4
    got = vmap(vmap(_op("expm").bind), in_axes=1)(xp.asarray(a)).numpy()
    want = np.stack([[_op("expm").bind(xp.asarray(m)).numpy() for m in row]
                     for row in np.swapaxes(a, 0, 1)])
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
