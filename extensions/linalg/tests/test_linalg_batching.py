"""Every linalg op under vmap (and vmap of vmap) equals stacking it over the examples: batch
sizes 1 to 3 (and 0), batch axes in every position, shared operands mixed in, on each CPU
backend (conftest)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_ad import vmap
from tenferro_ad.testing import check_vmap
from tenferro_runtime import array_api as xp
from tenferro_runtime import default_runtime


def op(name):
    return default_runtime().ops[f"tenferro_linalg.{name}.v1"]


def _mat(rng, n, m=None, kind="general"):
    a = rng.standard_normal((n, m or n))
    if kind == "spd":
        a = a @ a.T + n * np.eye(n)
    elif kind == "sym":
        a = a + a.T
    elif kind == "tri":
        a = np.triu(a) + n * np.eye(n)
    elif kind == "wellcond":
        a = a + 2 * n * np.eye(n)
    return a


def _lu(rng, n):
    a = xp.asarray(_mat(rng, n, kind="wellcond"))
    lu, piv = op("lu_factor").bind(a)
    return lu, piv


# name -> (function of the operands, how to make one example's operands from rng and n)
CASES = {
    "cholesky": (lambda a: op("cholesky").bind(a), lambda r, n: (_mat(r, n, kind="spd"),)),
    "eigh": (lambda a: op("eigh").bind(a)[0], lambda r, n: (_mat(r, n, kind="sym"),)),
    "eigvalsh": (lambda a: op("eigvalsh").bind(a), lambda r, n: (_mat(r, n, kind="sym"),)),
    "eigvals": (lambda a: op("eigvals").bind(a), lambda r, n: (_mat(r, n, kind="sym"),)),
    "eig": (lambda a: op("eig").bind(a)[0], lambda r, n: (_mat(r, n, kind="sym"),)),
    "svd": (lambda a: op("svd").bind(a, full_matrices=False)[1], lambda r, n: (_mat(r, n, n + 1),)),
    "svdvals": (lambda a: op("svdvals").bind(a), lambda r, n: (_mat(r, n + 1, n),)),
    "qr": (lambda a: op("qr").bind(a), lambda r, n: (_mat(r, n + 1, n),)),
    "lu_factor": (lambda a: op("lu_factor").bind(a), lambda r, n: (_mat(r, n, kind="wellcond"),)),
    "solve_triangular": (lambda a, b: op("solve_triangular").bind(a, b, lower=False),
                         lambda r, n: (_mat(r, n, kind="tri"), _mat(r, n, 2))),
    "expm": (lambda a: op("expm").bind(a), lambda r, n: (_mat(r, n) / 4,)),
    "expm_frechet": (lambda a, e: op("expm_frechet").bind(a, e),
                     lambda r, n: (_mat(r, n) / 4, _mat(r, n))),
    "solve": (lambda a, b: op("solve").bind(a, b), lambda r, n: (_mat(r, n, kind="wellcond"),
                                                                  _mat(r, n, 3))),
    "inv": (lambda a: op("inv").bind(a), lambda r, n: (_mat(r, n, kind="wellcond"),)),
    "det": (lambda a: op("det").bind(a), lambda r, n: (_mat(r, n),)),
    "adjugate": (lambda a: op("adjugate").bind(a), lambda r, n: (_mat(r, n),)),
    "slogdet": (lambda a: op("slogdet").bind(a), lambda r, n: (_mat(r, n),)),
    "pinv": (lambda a, t: op("pinv").bind(a, t), lambda r, n: (_mat(r, n + 1, n), np.array(1e-10))),
    "lstsq": (lambda a, b: op("lstsq").bind(a, b)[0], lambda r, n: (_mat(r, n + 2, n), _mat(r, n + 2, 2))),
}


def _examples(name, rng, n, size):
    make = CASES[name][1]
    return [[xp.asarray(v) for v in make(rng, n)] for _ in range(size)]


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_op_under_vmap_equals_stacking(name, data):
    f = CASES[name][0]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    n = data.draw(st.integers(1, 3), label="n")
    size = data.draw(st.integers(1, 3), label="batch")
    examples = _examples(name, rng, n, size)
    nargs = len(examples[0])
    axes = [data.draw(st.one_of(st.none(), st.integers(0, x.ndim)), label=f"axis {i}")
            for i, x in enumerate(examples[0])]
    if all(a is None for a in axes):
        axes[0] = 0
    if any(a is None for a in axes):  # shared operands: one value for every example
        examples = [[ex[i] if a is not None else examples[0][i] for i, a in enumerate(axes)]
                    for ex in examples]
    check_vmap(f, examples, axes, atol=1e-8, rtol=1e-8)
    assert nargs == len(axes)


@pytest.mark.parametrize("name", ["lu_solve", "lu_pivots_to_permutation"])
def test_pivot_ops_under_vmap(name):
    rng = np.random.default_rng(1)
    lus = [_lu(rng, 3) for _ in range(3)]
    bs = [xp.asarray(rng.standard_normal((3, 2))) for _ in range(3)]
    if name == "lu_solve":
        for trans in (0, 1):
            def f(lu, piv, b, trans=trans):
                return op("lu_solve").bind(lu, piv, b, trans=trans)

            check_vmap(f, [[lu, piv, b] for (lu, piv), b in zip(lus, bs)], [0, 0, 1], atol=1e-9)
            check_vmap(f, [[lus[0][0], lus[0][1], b] for b in bs], [None, None, 0], atol=1e-9)
    else:
        check_vmap(lambda piv: op("lu_pivots_to_permutation").bind(piv, size=3),
                   [[piv] for _, piv in lus], [0])


def test_nested_vmap_and_an_empty_batch():
    rng = np.random.default_rng(2)
    a = xp.asarray(np.stack([[_mat(rng, 3, kind="spd") for _ in range(2)] for _ in range(4)]))
    got = vmap(vmap(op("cholesky").bind), in_axes=1)(a)  # (2, 4, 3, 3)
    want = np.linalg.cholesky(np.swapaxes(a.numpy(), 0, 1))
    np.testing.assert_allclose(got.numpy(), want, atol=1e-10)
    empty = vmap(op("inv").bind)(xp.zeros((0, 3, 3), dtype=xp.float64))
    assert empty.shape == (0, 3, 3)
    sign, logdet = vmap(op("slogdet").bind)(xp.asarray(np.stack([_mat(rng, 3) for _ in range(2)])))
    assert sign.shape == logdet.shape == (2,)


@pytest.mark.parametrize("name", ["solve", "solve_triangular"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_a_shared_matrix_solves_the_whole_batch_at_once(name, axis):
    """A shared matrix and batched right-hand sides: the examples fold into the columns (one
    bind of the op for the batch), equal to solving each example."""
    from tenferro_runtime import trace

    rng = np.random.default_rng(3)
    f = CASES[name][0]
    a = xp.asarray(_mat(rng, 3, kind="tri"))
    examples = [[a, xp.asarray(rng.standard_normal((3, 2)))] for _ in range(4)]
    check_vmap(f, examples, [None, axis], atol=1e-10)
    bs = xp.stack([ex[1] for ex in examples], axis=axis)
    graph = trace(vmap(f, in_axes=(None, axis)), a, bs)
    assert sum(n.prim.name == f"tenferro_linalg.{name}.v1" for n in graph.nodes) == 1
    assert vmap(f, in_axes=(None, 0))(a, xp.zeros((0, 3, 2), dtype=xp.float64)).shape == (0, 3, 2)
