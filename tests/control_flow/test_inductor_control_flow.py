"""The Inductor executor lowers `cond` and `switch` to `torch.cond` over the lowered branches
(nested for a switch; an operand returned as it is copied), `while_loop` to torch's
`while_loop`, and `scan` to a `while_loop` over its steps: values equal the plan's (every
index, clamped ones included; zero and several trips; forward and reversed scans) and
gradients too, and none of them falls back: not node by node (logged) nor the whole graph to
the plan (a BackendCompileWarning, an error here; a scan's body with graph breaks did so,
and a scan of no step failed in Inductor's lowering)."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest

from tenferro_runtime import array_api as xp
from tenferro_runtime import lax

pytestmark = pytest.mark.filterwarnings("error::tenferro_runtime.executor.BackendCompileWarning")


def test_cond_and_switch_lower_to_torch_cond(caplog):
    pytest.importorskip("torch")
    import tenferro_runtime as tr

    x = xp.asarray(np.linspace(-1.0, 2.0, 5), device="torch:cpu")

    def f(x, k):
        y = lax.switch(k, [lambda a: a * 2.0, lambda a: xp.sin(a) + 1.0, lambda a: a], x)
        return lax.cond(xp.sum(y) > 3.0, lambda a: a + 1.0, lambda a: xp.exp(a), y) * 3.0

    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="tenferro_torch.inductor"):
        warnings.simplefilter("ignore", DeprecationWarning)
        g = tr.compile(f, backend="inductor")
        for k in (-1, 0, 1, 2, 7):
            kk = xp.asarray(k, dtype=xp.int32, device="torch:cpu")
            np.testing.assert_allclose(g(x, kk).numpy(), f(x, kk).numpy(), rtol=1e-12)
    assert g._cache[next(iter(g._cache))][0].executable().kind == "inductor"  # not declined
    assert not any("cond" in r.getMessage() and ("falls back" in r.getMessage()
                                                 or "declined" in r.getMessage())
                   for r in caplog.records)


def test_gradient_through_an_inductor_compiled_cond():
    pytest.importorskip("torch")
    import tenferro_runtime as tr
    from tenferro_ad import grad

    x = xp.asarray(np.linspace(-1.0, 2.0, 5), device="torch:cpu")

    def f(x):
        return xp.sum(lax.cond(xp.sum(x) > 1.0, lambda a: xp.sin(a) * a, lambda a: a * 3.0, x))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        got = grad(tr.compile(f, backend="inductor"))(x)
    np.testing.assert_allclose(got.numpy(), grad(f)(x).numpy(), rtol=1e-12)


def test_while_loop_lowers_to_torch_while_loop(caplog):
    pytest.importorskip("torch")
    import tenferro_runtime as tr

    x = xp.asarray(np.linspace(0.1, 0.5, 4), device="torch:cpu")
    w = xp.asarray(1.5, device="torch:cpu")

    def f(x, n):
        return lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, xp.tanh(c[1] * w) + 0.5),
                              (xp.asarray(0, dtype=xp.int32, device="torch:cpu"), x))[1] * 2.0

    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="tenferro_torch.inductor"):
        warnings.simplefilter("ignore", DeprecationWarning)
        g = tr.compile(f, backend="inductor")
        for n in (0, 1, 5):
            nn = xp.asarray(n, dtype=xp.int32, device="torch:cpu")
            np.testing.assert_allclose(g(x, nn).numpy(), f(x, nn).numpy(), rtol=1e-12)
    assert g._cache[next(iter(g._cache))][0].executable().kind == "inductor"
    assert not any("while" in r.getMessage() and ("falls back" in r.getMessage()
                                                  or "declined" in r.getMessage())
                   for r in caplog.records)


@pytest.mark.parametrize("length", [0, 1, 4])
def test_scan_lowers_to_a_torch_while_loop(length, caplog):
    pytest.importorskip("torch")
    import tenferro_runtime as tr
    from tenferro_ad import grad

    x = xp.asarray(np.linspace(-1.0, 1.0, 2 * length), device="torch:cpu")
    w = xp.asarray([0.5, -0.3], device="torch:cpu")

    def f(x, w):
        c0 = xp.zeros(2, device="torch:cpu")
        xs = xp.reshape(x, (length, 2))
        c, ys = lax.scan(lambda c, xi: (c * w + xi, xp.tanh(c) * xi), c0, xs)
        c2, ys2 = lax.scan(lambda c, xi: (c * w + xi, c), c0, xs, reverse=True)
        return xp.exp(c) * 2.0 + xp.sum(ys) + xp.sum(ys2 * 3.0) + c2

    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="tenferro_torch.inductor"):
        warnings.simplefilter("ignore", DeprecationWarning)
        g = tr.compile(f, backend="inductor")
        np.testing.assert_allclose(g(x, w).numpy(), f(x, w).numpy(), rtol=1e-12)
        got = grad(lambda v: xp.sum(tr.compile(f, backend="inductor")(x, v)))(w)
    np.testing.assert_allclose(got.numpy(), grad(lambda v: xp.sum(f(x, v)))(w).numpy(), rtol=1e-12)
    assert g._cache[next(iter(g._cache))][0].executable().kind == "inductor"
    assert not any("scan" in r.getMessage() and "falls back" in r.getMessage()
                   for r in caplog.records)
