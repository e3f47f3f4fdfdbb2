"""Batched outer products (a dot_general contracting only size-1 axes, per batch entry) as
one numba loop: NumPy's kernel's bits, signed zeros included, for float32 and float64, axes
in any order, 0-size batches and rows; per-example gradients by compile(vmap(grad)) run it."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tenferro_ad import grad, vmap
from tenferro_numba import executor
from tenferro_numba.outer import is_outer, outer_kernel
from tenferro_numpy import kernels
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile
from tenferro_runtime.graph import Node, Var
from tenferro_runtime.runtime import default_runtime

DEV = default_runtime().device("numpy:cpu")


def _node(ls, rs, params, dtype):
    from tenferro_core import catalog
    from tenferro_core.avals import Aval

    out = catalog.dot_general.abstract_eval((Aval(ls, dtype, DEV), Aval(rs, dtype, DEV)), params)
    ins = [Var(Aval(ls, dtype, DEV)), Var(Aval(rs, dtype, DEV))]
    return Node(catalog.dot_general, ins, params, [Var(out[0] if isinstance(out, tuple) else out)])


@example(0, 3, 4, "float32", False, 0)
@example(3, 0, 5, "float64", True, 1)
@settings(deadline=None, max_examples=25)
@given(st.integers(0, 7), st.integers(0, 7), st.integers(0, 7), st.sampled_from(["float32", "float64"]),
       st.booleans(), st.integers(0, 2**16))
def test_outer_products_match_the_numpy_kernel_bitwise(b, m, n, name, swapped, seed):
    from tenferro_core import dtypes as D

    rng = np.random.default_rng(seed)
    dtype = {"float32": D.float32, "float64": D.float64}[name]
    x = rng.choice([-1.5, -0.0, 0.0, 2.0, np.inf, np.nan], size=(b, m, 1)).astype(name)
    y = rng.choice([-1.0, 0.0, -0.0, 3.0], size=(1, b, n)).astype(name)
    if swapped:  # contracting axis first on the lhs, batch last on the rhs
        x = np.ascontiguousarray(np.transpose(x, (2, 0, 1)))
        params = {"contracting_dims": ((0,), (0,)), "batch_dims": ((1,), (1,))}
    else:
        params = {"contracting_dims": ((2,), (0,)), "batch_dims": ((0,), (1,))}
    node = _node(x.shape, y.shape, params, dtype)
    assert is_outer(node)
    want = np.asarray(kernels._dot_general(x, y, **params))
    got = outer_kernel(node, DEV)(x, y)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.tobytes() == want.tobytes()


def test_a_product_that_contracts_a_longer_axis_is_not_an_outer_product():
    from tenferro_core import dtypes as D

    params = {"contracting_dims": ((2,), (1,)), "batch_dims": ((0,), (0,))}
    assert not is_outer(_node((4, 3, 2), (4, 2, 5), params, D.float32))
    assert not is_outer(_node((4, 3, 1), (4, 1, 5), params, D.int32))


def test_per_example_gradients_run_the_generated_loop_with_the_plans_bits():
    rng = np.random.default_rng(0)
    w1, w2 = (xp.asarray(rng.standard_normal(s).astype(np.float32)) for s in ((32, 256), (256, 10)))
    xs, ys = xp.asarray(rng.standard_normal((64, 32)).astype(np.float32)), xp.asarray(
        rng.standard_normal((64, 10)).astype(np.float32))

    def loss(p, x, y):
        return xp.sum((xp.tanh(x @ p[0]) @ p[1] - y) ** 2)

    per_example = vmap(grad(loss), in_axes=(None, 0, 0))
    fast, plain = compile(per_example), compile(per_example, backend="plan")
    got, want = fast((w1, w2), xs, ys), plain((w1, w2), xs, ys)
    for a, b in zip(got, want):
        assert a.shape[0] == 64 and a.numpy().tobytes() == b.numpy().tobytes()
    assert fast._cache[next(iter(fast._cache))][0].executable().kind == "numba"
    assert executor.worth_generating(
        next(n for n in fast.lower((w1, w2), xs, ys).nodes if n.prim.name == "dot_general"
             and n.params["batch_dims"] != ((), ()) and is_outer(n)), DEV)
