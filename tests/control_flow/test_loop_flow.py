"""`while_loop` and `fori_loop` against Python loops on generated programs (eager and compiled,
numpy:cpu and torch:cpu), forward-mode derivatives of while loops and both modes of fori_loop
with static bounds against finite differences (second order), reverse mode of while_loop as a
typed error (raised only where a cotangent reaches the loop), and vmap with a predicate that
differs between examples."""

from __future__ import annotations

import numpy as np
import pytest
from cf_programs import DEVICES, close, programs, run, values
from hypothesis import given, settings
from hypothesis import strategies as st

import tenferro_ad as ad
from tenferro_ad.testing import check_grads
from tenferro_core.errors import MissingRuleError
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, lax


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=10, deadline=None)
@given(programs, st.integers(0, 5), st.floats(0.5, 4.0), st.integers(0, 2**16), st.booleans())
def test_while_loop_equals_python_while(device, prog, limit, bound, seed, compiled):
    x0 = values(seed, 3)

    def f(x):
        return lax.while_loop(lambda c: (c[0] < limit) & (xp.sum(xp.abs(c[1])) < bound),
                              lambda c: (c[0] + 1, run(prog, c[1]) * 1.5 + 0.1), (0, x))

    fn = compile(f) if compiled else f
    i, x = 0, x0
    while i < limit and np.abs(x).sum() < bound:
        i, x = i + 1, run(prog, x, True) * 1.5 + 0.1
    n, got = fn(xp.asarray(x0, device=device))
    assert n.item() == i
    close(got, x)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=10, deadline=None)
@given(programs, st.integers(-2, 4), st.integers(-1, 6), st.integers(0, 2**16), st.booleans(),
       st.booleans())
def test_fori_loop_equals_python_range(device, prog, lower, upper, seed, traced_bounds, compiled):
    x0 = values(seed, 2)

    def f(x, lo, hi):
        return lax.fori_loop(lo, hi, lambda i, c: run(prog, c) + i * 0.25, x)

    def body(x):
        for i in range(lower, upper):
            x = run(prog, x, True) + i * 0.25
        return x

    lo, hi = ((xp.asarray(lower, device=device), xp.asarray(upper, device=device)) if traced_bounds
              else (lower, upper))
    fn = compile(f, static_argnums=() if traced_bounds else (1, 2)) if compiled else f
    close(fn(xp.asarray(x0, device=device), lo, hi), body(x0))


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=5, deadline=None)
@given(programs, st.integers(0, 2**16))
def test_while_jvp_and_fori_gradients_match_finite_differences(device, prog, seed):
    x0 = xp.asarray(values(seed, 3), device=device)
    w = xp.asarray(values(seed + 1, 3), device=device)

    def f_while(x):
        return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, run(prog, c[1]) * w + 0.1), (0, x))[1]

    def f_fori(x):
        return lax.fori_loop(0, 3, lambda i, c: run(prog, c) * w + xp.sin(c) * i, x)

    check_grads(f_while, (x0,), order=2, modes=("fwd",), atol=1e-5, rtol=1e-5)
    check_grads(f_fori, (x0,), order=2, atol=1e-5, rtol=1e-5)
    close(compile(ad.jacfwd(f_while))(x0), ad.jacfwd(f_while)(x0).numpy())


def test_reverse_mode_of_while_loop_names_scan_and_fori_loop():
    x = xp.asarray([0.5, 1.0])

    def f(x):
        return xp.sum(lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, xp.sin(c[1])), (0, x))[1])

    for route in (ad.grad(f), compile(ad.grad(f)), lambda x: ad.vjp(f, x)[1](xp.asarray(1.0)),
                  ad.grad(lambda x: xp.sum(lax.scan(lambda c, _: (f(c) * c, None), x, None, length=2)[0]))):
        with pytest.raises(MissingRuleError, match=r"while_loop.*scan.*fori_loop with Python int bounds"):
            route(x)
    with pytest.raises(MissingRuleError, match="fori_loop"):
        ad.grad(lambda x: xp.sum(lax.fori_loop(0, xp.asarray(2), lambda i, c: c * c, x)))(x)

    def g(x):  # ops without derivatives recorded first: eager grad named floor, then `ne`
        _ = xp.floor(x)
        n = xp.astype(xp.sum(xp.astype(x != 0, xp.int32)), xp.int32)
        return xp.sum(lax.fori_loop(xp.asarray(0, dtype=xp.int32), n, lambda i, c: -c, x))

    for route in (ad.grad(g), compile(ad.grad(g))):
        with pytest.raises(MissingRuleError, match=r"^reverse-mode differentiation .* of a while_loop"):
            route(x)


def _loop(x):
    return lax.while_loop(lambda c: xp.sum(c[1] * c[1]) < 4.0, lambda c: (c[0] + 1, c[1] * 1.5), (0, x))


@pytest.mark.parametrize("device", DEVICES)
def test_grad_through_a_while_loop_that_no_cotangent_reaches(device):
    """The loop's float results reach the loss only through its trip count or a comparison:
    every route gives the gradient (before, the traced routes refused and eager `grad` said
    `ne` had no jvp rule); forward mode through the same loops agrees."""
    x = xp.asarray([0.5, 0.25], device=device)
    n = 4  # 0.3125 * 2.25 ** k < 4 until k = 4

    def by_count(x):
        k, _ = _loop(x)
        return xp.sum(x * x) * xp.astype(k, x.dtype)

    def by_comparison(x):
        _, y = _loop(x)
        return xp.sum(xp.where(y > 1.0, x, 2.0 * x))

    for f, want in ((by_count, 2 * n * x.numpy()), (by_comparison, [1.0, 1.0])):
        for route in (ad.grad(f), compile(ad.grad(f)), ad.grad(ad.checkpoint(f))):
            close(route(x), want)
        value, pullback = ad.vjp(f, x)
        close(value, f(x).numpy())
        close(pullback(xp.asarray(1.0, device=device))[0], want)
        close(ad.linearize(f, x)[1](xp.ones_like(x)), float(np.sum(want)))


@pytest.mark.parametrize("device", DEVICES)
def test_grad_where_a_loop_reads_only_results_without_tangents(device):
    """A loop behind a switch reads a scan's (or compiled call's) output computed by floor:
    that output carries no tangent on the traced routes, and the tape holds it fixed too (it
    gave the loop a zero cotangent and refused)."""
    x = xp.asarray([0.5, 0.25], device=device)
    step = compile(lambda x: (x * 1.5, xp.floor(x * 4.0)))

    def loop_on(y):
        n = xp.asarray(2, device=device)
        return lax.switch(xp.asarray(0, device=device),
                          [lambda y: lax.fori_loop(0, n, lambda i, v: -v * 1.5, y), lambda y: y * 2.0], y)

    def by_scan(x):
        c, ys = lax.scan(lambda c, a: (c * a, xp.floor(c)), x, xp.asarray([1.5, 0.5, 2.0], device=device))
        return xp.sum(c) + xp.sum(loop_on(ys) ** 2)

    def by_call(x):
        c, y = step(x)
        return xp.sum(c) + xp.sum(loop_on(y) ** 2)

    for f in (by_scan, by_call):
        routes = (ad.grad(f), compile(ad.grad(f)), lambda x, f=f: ad.vmap(ad.grad(f))(x[None])[0],
                  lambda x, f=f: ad.vjp(f, x)[1](xp.asarray(1.0, device=device))[0])
        for route in routes:
            close(route(x), [1.5, 1.5])


@pytest.mark.parametrize("device", DEVICES)
def test_grad_of_a_cond_or_call_holding_a_while_loop_through_its_loop_free_results(device):
    """A branch, compiled or checkpointed function or scan body returns a loop's result and a
    result without it: reverse mode through the second gives the gradient on every route
    (the loop's primal results are recomputed on the primal side, as JAX's partial
    evaluation does), through the first it is the while-loop error, and forward mode runs
    the loop once."""
    x = xp.asarray([0.5, 0.25], device=device)

    def body(x):
        return x * 2.0, lax.while_loop(lambda c: xp.sum(c * c) < 4.0, lambda c: c * 1.5, x)

    step = compile(body)

    def by_cond(x, k):
        return xp.sum(lax.cond(xp.sum(x) > 0, body, lambda x: (x * 3.0, x), x)[k])

    def by_call(x, k):
        return xp.sum(step(x)[k])

    remat = ad.checkpoint(body)

    def by_checkpoint(x, k):
        return xp.sum(remat(x)[k])

    def by_scan(x, k):
        out = lax.scan(lambda c, a: body(c * a), x, xp.asarray([1.0, 0.5, 1.0], device=device))
        return xp.sum(out[k])

    for f, want in ((by_cond, 2.0), (by_call, 2.0), (by_checkpoint, 2.0), (by_scan, 4.0)):
        routes = (ad.grad(f), compile(ad.grad(f), static_argnums=1),
                  lambda x, k, f=f: ad.vmap(ad.grad(f), in_axes=(0, None))(x[None], k)[0],
                  lambda x, k, f=f: ad.vjp(lambda x: f(x, k), x)[1](xp.asarray(1.0, device=device))[0])
        for route in routes:
            close(route(x, 0), [want, want])
            with pytest.raises(MissingRuleError, match=r"while_loop.*scan"):
                route(x, 1)
        check_grads(lambda x, f=f: f(xp.sin(x), 0) ** 2, (x,), order=2, atol=1e-5, rtol=1e-5)
    # the loop runs 4 times (0.3125 * 2.25 ** k < 4 until k = 4): a tangent scaled by 1.5 ** 4
    for f in (by_cond, by_call):
        close(ad.jvp(lambda x, f=f: f(x, 1), (x,), (xp.ones_like(x),))[1], 2 * 1.5 ** 4)


@pytest.mark.parametrize("device", DEVICES)
def test_linearize_runs_a_while_loop_forward_and_its_transpose_names_scan(device):
    """linearize of a loop whose tangent is live: its linear function runs forward (the joint
    loop, as jvp), vjp gives the values and raises only when pulled back; a compiled function
    with a loop inside likewise (its vjp gave a leaked tracer as the value)."""
    x = xp.asarray([0.5, 1.0], device=device)
    step = compile(lambda x: lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, xp.sin(c[1])),
                                            (0, x))[1])
    for f in (lambda x: xp.sum(_loop(x)[1]), lambda x: xp.sum(step(x))):
        value, lin = ad.linearize(f, x)
        close(value, f(x).numpy())
        close(lin(xp.ones_like(x)), ad.jvp(f, (x,), (xp.ones_like(x),))[1].numpy())
        value, pullback = ad.vjp(f, x)
        close(value, f(x).numpy())
        with pytest.raises(MissingRuleError, match=r"while_loop.*scan.*fori_loop with Python int bounds"):
            pullback(xp.asarray(1.0, device=device))
        with pytest.raises(MissingRuleError, match=r"while_loop.*scan"):
            ad.transpose_graph(lin.graph)


@pytest.mark.parametrize("device", DEVICES)
def test_vmap_of_while_with_a_batched_predicate_runs_until_all_are_done(device):
    xs = xp.asarray(values(4, 5, 2) * 3.0, device=device)

    def f(x):  # a different trip count per example
        return lax.while_loop(lambda c: xp.sum(c[1] * c[1]) < 50.0, lambda c: (c[0] + 1, c[1] * 1.7 + 0.2),
                              (0, x))

    got = ad.vmap(f)(xs)
    per = [f(xs[i]) for i in range(5)]
    assert len({p[0].item() for p in per}) > 1
    close(got[0], [p[0].item() for p in per])
    close(got[1], np.stack([p[1].numpy() for p in per]))
    close(compile(ad.vmap(f))(xs)[1], np.stack([p[1].numpy() for p in per]))
    shared = ad.vmap(lambda x, n: lax.fori_loop(0, n, lambda i, c: c * 2.0, x), in_axes=(0, None))(
        xs, xp.asarray(3, device=device))
    close(shared, xs.numpy() * 8.0)
