"""Transformations of random programs (graphgen.graphs) agree with their definitions:

- `vmap` over a program equals the program run on each example and stacked (batch axis
  first or last, some arguments shared);
- `jvp` and `vjp` of a program are each other's transpose: <u, J v> == <J^T u, v> for random
  tangents v and cotangents u, summed over the float inputs and outputs (every JVP rule
  against its transpose rule, composed as programs compose them);
- `vmap(grad(f))` is `grad(f)` per example (per-example gradients), and `jacfwd` equals
  `jacrev` where both are finite (NaN * 0 lands on other entries forward than backward);
- eager `grad` (the tape: its per-record walk, then its replayed graph) is `compile(grad)`
  (the traced vjp), NaNs and infinities in the same places;
- `grad(checkpoint(f, policy))` is `grad(f)`, eager and compiled, for every policy.

A program a transformation cannot take must say so with a typed error (TenferroError).
"""

from __future__ import annotations

import numpy as np
from graphgen import graphs
from hypothesis import given, note, settings
from hypothesis import strategies as st
from test_pass_equivalence import _host

from tenferro_ad import checkpoint, grad, jacfwd, jacrev, jvp, vjp, vmap
from tenferro_core.errors import TenferroError
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, eval_graph

DEVICES = ("numpy:cpu", "torch:cpu")  # read by conftest.py (on_backends): backend_device
BATCH = 3


def _example(host: np.ndarray, b: int) -> np.ndarray:
    """Example `b` of a batched argument: `host` itself, then distinct values of its dtype."""
    if b == 0:
        return host
    if host.dtype.kind == "b":
        return ~host if b == 1 else np.roll(host, 1)
    return host + host.dtype.type(b)


def _close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal integers and booleans; floats to a few ulps of their dtype (a batched product or
    reduction may accumulate in another order), NaNs in the same places."""
    assert got.shape == want.shape and got.dtype == want.dtype, \
        f"{what}: {got.shape} {got.dtype}, expected {want.shape} {want.dtype}"
    if got.dtype.kind in "fc":
        tol = 1e-12 if got.dtype in (np.float64, np.complex128) else 1e-5
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


@settings(deadline=None, max_examples=20)
@given(data=st.data())
def test_vmap_of_a_program_is_the_program_per_example(backend_device, data):
    graph, args = data.draw(graphs(backend_device), label="graph")
    axes = data.draw(st.lists(st.sampled_from((0, -1, None)), min_size=len(args), max_size=len(args)),
                     label="in_axes")
    axes = [0 if a == -1 and not args[i].shape else a for i, a in enumerate(axes)]
    if all(a is None for a in axes):
        axes = [0] * len(args)
    hosts = [_host(a) for a in args]
    examples = [[h if ax is None else _example(h, b) for h, ax in zip(hosts, axes)] for b in range(BATCH)]
    batched = [args[i] if ax is None else xp.asarray(
        np.stack([ex[i] for ex in examples], axis=0 if ax == 0 else h.ndim), device=backend_device)
        for i, (h, ax) in enumerate(zip(hosts, axes))]
    try:
        got = vmap(lambda *xs: eval_graph(graph, *xs), in_axes=tuple(axes), axis_size=BATCH)(*batched)
    except TenferroError as exc:  # refused with a typed error: fine, nothing to compare
        note(f"vmap refused: {type(exc).__name__}: {exc}")
        return
    per_example = [eval_graph(graph, *[args[i] if ax is None else xp.asarray(x, device=backend_device)
                                       for i, (x, ax) in enumerate(zip(ex, axes))]) for ex in examples]
    assert len(got) == len(graph.outputs)
    for k, out in enumerate(got):
        _close(_host(out), np.stack([_host(p[k]) for p in per_example]), f"output {k}")


def _dot(xs: list, ys: list) -> tuple[float, float]:
    """(sum of x * y, sum of |x * y|) over pairs of same-shaped arrays, in float64."""
    terms = [_host(x).astype(np.float64) * _host(y).astype(np.float64) for x, y in zip(xs, ys)]
    return sum(float(t.sum()) for t in terms), sum(float(np.abs(t).sum()) for t in terms)


def _float_parts(graph, args):
    """(float inputs' positions, float outputs' positions) of a drawn program."""
    wrt = [i for i, a in enumerate(args) if a.dtype.kind == "f"]
    outs = [k for k, v in enumerate(graph.outputs) if getattr(v, "aval", None) is not None
            and v.aval.dtype.kind == "f"]
    return wrt, outs


def _float_program(graph, args, wrt, outs):
    """The program as a function of its inputs at `wrt` (the others fixed), returning its
    outputs at `outs`."""
    def f(*xs):
        full = list(args)
        for i, x in zip(wrt, xs):
            full[i] = x
        res = eval_graph(graph, *full)
        return [res[k] for k in outs]

    return f


def _summed(fn):
    """`fn`'s outputs summed (in float64) into one scalar."""
    return lambda *xs: sum(xp.sum(xp.astype(o, xp.float64)) for o in fn(*xs))


@settings(deadline=None, max_examples=40)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_jvp_and_vjp_of_a_program_are_transposes(backend_device, data, seed):
    graph, args = data.draw(graphs(backend_device), label="graph")
    wrt, outs = _float_parts(graph, args)
    if not wrt or not outs:
        return
    f = _float_program(graph, args, wrt, outs)
    rng = np.random.default_rng(seed)

    def like(t):
        h = _host(t)
        return xp.asarray(rng.standard_normal(h.shape).astype(h.dtype), device=backend_device)

    primals = [args[i] for i in wrt]
    tangents = [like(p) for p in primals]
    try:
        values, jv = jvp(f, primals, tangents)
        values_vjp, pullback = vjp(f, *primals)
    except TenferroError as exc:
        note(f"refused: {type(exc).__name__}: {exc}")
        return
    for a, b in zip(values, values_vjp):
        np.testing.assert_array_equal(_host(a), _host(b), err_msg="jvp and vjp disagree on the value")
    cotangents = [like(v) for v in values]
    try:
        jtu = pullback(cotangents)
    except TenferroError as exc:  # a while loop the cotangents reach: refused when pulled back
        note(f"refused: {type(exc).__name__}: {exc}")
        return
    lhs, lscale = _dot(cotangents, jv)
    rhs, rscale = _dot(jtu, tangents)
    note(f"<u, Jv> = {lhs}, <J^T u, v> = {rhs}")
    if not (np.isfinite(lhs) and np.isfinite(rhs) and np.isfinite(lscale + rscale)):
        return  # an overflow or a NaN in the derivatives (a pole): no inner product to compare
    assert abs(lhs - rhs) <= 1e-4 * (lscale + rscale) + 1e-6, (lhs, rhs)


@settings(deadline=None, max_examples=40)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_vmap_of_grad_is_grad_per_example(backend_device, data, seed):
    graph, args = data.draw(graphs(backend_device), label="graph")
    wrt, outs = _float_parts(graph, args)
    if not wrt or not outs:
        return

    loss = _summed(_float_program(graph, args, wrt, outs))
    rng = np.random.default_rng(seed)
    hosts = [_host(args[i]) for i in wrt]
    stacks = [np.stack([h] + [(h + rng.standard_normal(h.shape)).astype(h.dtype) for _ in range(BATCH - 1)])
              for h in hosts]
    g = grad(loss, argnums=tuple(range(len(wrt))))
    try:
        got = vmap(g)(*[xp.asarray(s, device=backend_device) for s in stacks])
    except TenferroError as exc:
        note(f"refused: {type(exc).__name__}: {exc}")
        return
    for b in range(BATCH):
        want = g(*[xp.asarray(s[b], device=backend_device) for s in stacks])
        for j, (gb, w) in enumerate(zip(got, want)):
            _close(_host(gb)[b], _host(w), f"example {b}, argument {j}")


@settings(deadline=None, max_examples=40)
@given(data=st.data())
def test_jacfwd_equals_jacrev(backend_device, data):
    graph, args = data.draw(graphs(backend_device), label="graph")
    wrt, outs = _float_parts(graph, args)
    if not wrt or not outs or args[wrt[0]].size > 64:
        return

    first = _float_program(graph, args, wrt[:1], outs[:1])

    def f(x):
        return xp.astype(first(x)[0], xp.float64)

    try:
        fwd, rev = _host(jacfwd(f)(args[wrt[0]])), _host(jacrev(f)(args[wrt[0]]))
    except TenferroError as exc:
        note(f"refused: {type(exc).__name__}: {exc}")
        return
    # forward, the Jacobian has the output's dtype (float64); backward, the input's
    low = np.float32 if np.float32 in (fwd.dtype, rev.dtype) else np.float64
    both = np.isfinite(fwd) & np.isfinite(rev)
    _close(np.where(both, fwd, 0).astype(low), np.where(both, rev, 0).astype(low), "jacfwd vs jacrev")


@settings(deadline=None, max_examples=40)
@given(data=st.data())
def test_eager_grad_is_the_compiled_grad(backend_device, data):
    graph, args = data.draw(graphs(backend_device), label="graph")
    wrt, outs = _float_parts(graph, args)
    if not wrt or not outs:
        return
    g = grad(_summed(_float_program(graph, args, wrt, outs)), argnums=tuple(range(len(wrt))))
    xs = [args[i] for i in wrt]
    want = _outcome(compile(g), xs)
    for call in range(3):  # the tape's walk, then its backward graph built and replayed
        _same_outcome(_outcome(g, xs), want, f"call {call}")


@settings(deadline=None, max_examples=30)
@given(data=st.data(), policy=st.sampled_from([None, "dots_saveable", "everything_saveable"]),
       compiled=st.booleans())
def test_checkpointed_grad_is_the_grad(backend_device, data, policy, compiled):
    graph, args = data.draw(graphs(backend_device), label="graph")
    wrt, outs = _float_parts(graph, args)
    if not wrt or not outs:
        return

    inner = _float_program(graph, args, wrt, outs)
    argnums = tuple(range(len(wrt)))
    xs = [args[i] for i in wrt]
    want = _outcome(grad(_summed(inner), argnums=argnums), xs)
    g = grad(_summed(checkpoint(inner, policy=policy)), argnums=argnums)
    _same_outcome(_outcome(compile(g) if compiled else g, xs), want, "grad(checkpoint(f))")


def _outcome(fn, xs: list) -> tuple:
    """("ok", fn's results on the host) or ("refused", the TenferroError's type and message)."""
    try:
        return "ok", [_host(r) for r in fn(*xs)]
    except TenferroError as exc:
        return "refused", type(exc), str(exc)


def _same_outcome(got: tuple, want: tuple, what: str) -> None:
    """The same values, or refused with the same typed error: a route that cannot take a
    program (reverse mode through a while loop) says so as every other route does."""
    assert got[0] == want[0], f"{what}: {got[0]} {got[1:]!s:.300}, expected {want[0]} {want[1:]!s:.300}"
    if got[0] == "refused":
        assert got[1:] == want[1:], f"{what}: refused with {got[1:]}, expected {want[1:]}"
        return
    for j, (a, w) in enumerate(zip(got[1], want[1])):
        _close(a, w, f"{what}, argument {j}")
