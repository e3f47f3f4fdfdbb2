"""scan's `unroll=k` (k steps per loop iteration, the remainder in a second scan) gives the
values and gradients of the plain scan, forward and reversed, with and without xs, eager and
compiled; the compiled loop runs n // k iterations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_ad import grad
from tenferro_core.errors import ArgumentError
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, lax, trace
from tenferro_runtime.control_flow_prims import scan_p


def _step(c, x):
    h = xp.tanh(c["h"] * 0.7 + x["a"] * c["w"])
    return {"h": h, "w": c["w"]}, (h * 2.0, x["b"] + h)


@settings(max_examples=12, deadline=None)
@given(n=st.integers(0, 9), k=st.one_of(st.integers(1, 11), st.booleans()), reverse=st.booleans(),
       seed=st.integers(0, 1000))
def test_unrolled_scan_equals_the_plain_scan(n, k, reverse, seed):
    rng = np.random.default_rng(seed)
    xs = {"a": xp.asarray(rng.standard_normal((n, 3))), "b": xp.asarray(rng.standard_normal((n, 2, 3)))}
    init = {"h": xp.asarray(rng.standard_normal(3)), "w": xp.asarray(0.5)}

    def run(unroll, w):
        c, (y1, y2) = lax.scan(_step, {"h": init["h"], "w": w}, xs, reverse=reverse, unroll=unroll)
        return xp.sum(c["h"]) + xp.sum(y1 * y1) + xp.sum(y2)

    want = run(1, init["w"])
    for fn in (run, compile(run, static_argnums=0)):
        np.testing.assert_allclose(fn(k, init["w"]).numpy(), want.numpy(), rtol=1e-12, atol=1e-12)
    g = grad(lambda w: run(k, w))(init["w"])
    np.testing.assert_allclose(g.numpy(), grad(lambda w: run(1, w))(init["w"]).numpy(), rtol=1e-10)


def test_unroll_runs_fewer_iterations_and_works_without_xs():
    c, ys = lax.scan(lambda c, _: (c + 1, c), xp.asarray(0.0), None, length=7, unroll=3)
    assert float(c) == 7.0 and ys.numpy().tolist() == [0, 1, 2, 3, 4, 5, 6]
    graph = trace(lambda v: lax.scan(lambda c, x: (c + x, c), v, xp.ones((10,)), unroll=4), xp.asarray(0.0))
    lengths = sorted(n.params["length"] for n in graph.nodes if n.prim is scan_p)
    assert lengths == [2, 2]  # two chunks of 4 steps, then the 2 steps left over
    with pytest.raises(ArgumentError, match="unroll must be a positive int or a bool"):
        lax.scan(lambda c, x: (c, x), xp.asarray(0.0), xp.ones((3,)), unroll=0)
