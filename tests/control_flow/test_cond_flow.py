"""`cond` and `switch` against Python `if` on generated programs (eager and compiled, numpy:cpu
and torch:cpu), their gradients against finite differences (second order), and vmap."""

from __future__ import annotations

import numpy as np
import pytest
from cf_programs import DEVICES, close, programs, run, values
from hypothesis import given, settings
from hypothesis import strategies as st

import tenferro_ad as ad
from tenferro_ad.testing import check_grads
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, lax


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=10, deadline=None)
@given(programs, programs, st.floats(-1.0, 1.0), st.integers(0, 2**16), st.booleans())
def test_cond_equals_python_if(device, p_true, p_false, shift, seed, compiled):
    x0 = values(seed, 3)

    def f(x):
        return lax.cond(xp.sum(x) > shift, lambda a: run(p_true, a), lambda a: run(p_false, a) * 1.0, x)

    fn = compile(f) if compiled else f
    want = run(p_true, x0, True) if x0.sum() > shift else run(p_false, x0, True)
    close(fn(xp.asarray(x0, device=device)), want)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=10, deadline=None)
@given(st.lists(programs, min_size=1, max_size=4), st.integers(-2, 6), st.integers(0, 2**16),
       st.booleans())
def test_switch_equals_python_indexing_clamped(device, progs, index, seed, compiled):
    x0 = values(seed, 2, 2)
    branches = [lambda a, p=p: run(p, a) + 0.0 for p in progs]

    def f(i, x):
        return lax.switch(i, branches, x)

    fn = compile(f) if compiled else f
    want = run(progs[min(max(index, 0), len(progs) - 1)], x0, True)
    close(fn(xp.asarray(index, device=device), xp.asarray(x0, device=device)), want)


def test_pytree_operands_and_python_numbers():
    x, y = xp.asarray([1.0, 2.0]), xp.asarray(3.0)
    out = lax.cond(True, lambda d, s: {"a": d["x"] * s, "b": d["y"]},
                   lambda d, s: {"a": d["x"], "b": d["y"] + s}, {"x": x, "y": y}, 2.0)
    close(out["a"], [2.0, 4.0])
    close(out["b"], 3.0)
    assert lax.cond(xp.asarray(False), lambda: 1.0, lambda: 2.0).item() == 2.0


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=6, deadline=None)
@given(programs, programs, st.integers(0, 2**16))
def test_cond_gradients_match_finite_differences(device, p_true, p_false, seed):
    x0 = xp.asarray(values(seed, 3), device=device)
    w = xp.asarray(values(seed + 1, 3), device=device)

    def f(x):  # w is closed over by a branch: lifted to an operand
        return lax.cond(xp.sum(x) > 0.0, lambda a: run(p_true, a) * w, lambda a: run(p_false, a) + 0.0, x)

    check_grads(f, (x0,), order=2, atol=1e-5, rtol=1e-5)
    g = ad.grad(lambda x: xp.sum(f(x)))
    close(compile(g)(x0), g(x0).numpy())
    close(ad.grad(lambda x: xp.sum(compile(f)(x)))(x0), g(x0).numpy())


def test_gradient_reaches_a_closed_over_tensor():
    w = xp.asarray([0.5, -1.0])
    x = xp.asarray([1.0, 2.0])
    g = ad.grad(lambda w: xp.sum(lax.cond(True, lambda a: a * w * w, lambda a: a, x)))(w)
    close(g, 2 * w.numpy() * x.numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_vmap_of_cond_with_a_batched_predicate_selects_per_example(device):
    xs = xp.asarray(values(3, 5, 3), device=device)

    def f(x):
        return lax.switch(xp.astype(xp.sum(x) > 0, xp.int32) + xp.astype(x[0] > 0, xp.int32),
                          [xp.sin, lambda a: a * 2.0, xp.exp], x)

    want = np.stack([f(xs[i]).numpy() for i in range(5)])
    close(ad.vmap(f)(xs), want)
    close(compile(ad.vmap(f))(xs), want)
    shared = ad.vmap(lambda x, p: lax.cond(p, xp.sin, xp.cos, x), in_axes=(0, None))(
        xs, xp.asarray(True, device=device))
    close(shared, np.sin(xs.numpy()))
    gb = ad.vmap(ad.grad(lambda x: xp.sum(f(x))))(xs)
    close(gb, np.stack([ad.grad(lambda x: xp.sum(f(x)))(xs[i]).numpy() for i in range(5)]))
