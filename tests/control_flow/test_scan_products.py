"""Recurrent cells in `scan`: gradients whose per-iteration weight products are hoisted out
of the transposed loop (one product contracting the iteration axis) against finite
differences (second order), the unrolled Python loop and torch.func; the loop runner's
buffer path (fixed outputs, 1-D and 0-size xs) against Python loops."""

from __future__ import annotations

import numpy as np
import pytest
from cf_programs import DEVICES, close, values
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tenferro_ad as ad
from tenferro_ad.testing import check_grads
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, lax


def cell(params, h, x):
    wx, wh, b = params
    return xp.tanh(x @ wx + h @ wh + b)


def rnn_loss(params, xs, target, reverse=False, unrolled=False):
    h0 = xp.zeros((xs.shape[1], params[1].shape[0]), dtype=xs.dtype, device=xs.device)
    if unrolled:
        h, hs = h0, [None] * xs.shape[0]
        for t in (range(xs.shape[0])[::-1] if reverse else range(xs.shape[0])):
            h = cell(params, h, xs[t])
            hs[t] = h
        ys = xp.stack(hs) if hs else xp.zeros((0, *h0.shape), dtype=xs.dtype, device=xs.device)
    else:
        h, ys = lax.scan(lambda c, x: (cell(params, c, x),) * 2, h0, xs, reverse=reverse)
    # every step's state and the last one: products of ys and of the carry both reach the weights
    return xp.sum((ys - target) * (ys - target)) + xp.sum(h * params[1][0])


def data(seed, length, batch=3, n_in=2, hidden=4, dtype=np.float64):
    r = np.random.default_rng(seed)
    params = (r.normal(size=(n_in, hidden)) / 2, r.normal(size=(hidden, hidden)) / 3, r.normal(size=hidden))
    xs = r.normal(size=(length, batch, n_in))
    target = r.normal(size=(length, batch, hidden))
    return [a.astype(dtype) for a in params], xs.astype(dtype), target.astype(dtype)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=5, deadline=None)
@given(st.integers(0, 5), st.booleans(), st.integers(1, 3), st.integers(0, 2**16))
@example(0, False, 1, 0).via("no iterations: the hoisted products contract an empty axis")
@example(1, True, 1, 1).via("one iteration, one row")
def test_rnn_gradients_match_the_unrolled_loop(device, length, reverse, batch, seed):
    params, xs, target = data(seed, length, batch)
    tp = [xp.asarray(p, device=device) for p in params]
    tx, tt = xp.asarray(xs, device=device), xp.asarray(target, device=device)
    want = ad.grad(lambda p: rnn_loss(p, tx, tt, reverse, unrolled=True))(tp)
    g = ad.grad(lambda p: rnn_loss(p, tx, tt, reverse))
    cg = compile(g)
    for got in (g(tp), cg(tp), cg(tp)):  # the second compiled call runs the generated loops
        for a, b in zip(got, want):
            close(a, b.numpy(), 1e-9)


@pytest.mark.parametrize("device", DEVICES)
def test_rnn_gradients_match_finite_differences_second_order(device):
    params, xs, target = data(3, 4)
    tp = [xp.asarray(p, device=device) for p in params]
    tx, tt = xp.asarray(xs, device=device), xp.asarray(target, device=device)
    check_grads(lambda wx, wh, b: rnn_loss((wx, wh, b), tx, tt), tuple(tp), order=2, atol=1e-5, rtol=1e-5)
    check_grads(lambda wx, wh, b: rnn_loss((wx, wh, b), tx, tt, reverse=True), tuple(tp), order=1,
                atol=1e-5, rtol=1e-5)


def test_rnn_gradients_match_torch_func():
    torch = pytest.importorskip("torch")
    params, xs, target = data(7, 6, 5)

    def torch_loss(wx, wh, b):
        h = torch.zeros(xs.shape[1], wh.shape[0], dtype=torch.float64)
        hs = []
        for t in range(xs.shape[0]):
            h = torch.tanh(torch.as_tensor(xs[t]) @ wx + h @ wh + b)
            hs.append(h)
        ys = torch.stack(hs)
        return ((ys - torch.as_tensor(target)) ** 2).sum() + (h * wh[0]).sum()

    want = torch.func.grad(torch_loss, argnums=(0, 1, 2))(*[torch.as_tensor(p) for p in params])
    tp = [xp.asarray(p) for p in params]
    got = compile(ad.grad(lambda p: rnn_loss(p, xp.asarray(xs), xp.asarray(target))))(tp)
    for a, b in zip(got, want):
        close(a, b.numpy(), 1e-9)


def test_weight_products_leave_the_transposed_loop():
    """The backward scan's body multiplies by the recurrent weight once (the carry's
    cotangent, by a transposed copy made before the loop); the weights' cotangents are
    products after the loop, contracting the iteration axis with the batch axis."""
    params, xs, target = data(1, 5)
    tp = [xp.asarray(p) for p in params]
    g = compile(ad.grad(lambda p: rnn_loss(p, xp.asarray(xs), xp.asarray(target))))
    graph = g.lower(tp)
    scans = [n for n in graph.nodes if n.prim.name == "scan"]
    backward = scans[-1].params["body"].graph
    dots = [n for n in backward.nodes if n.prim.name == "dot_general"]
    assert len(dots) == 1  # by W.T, made once before the loop as a row-major copy
    assert dots[0].params["contracting_dims"] == ((1,), (0,))
    assert dots[0].inputs[1] in backward.inputs[:scans[-1].params["num_consts"]]
    hoisted = [n for n in graph.nodes if n.prim.name == "dot_general"
               and n.params["contracting_dims"] == ((0, 1), (0, 1))]
    assert len(hoisted) == 2  # d/dWx and d/dWh
    assert scans[0].params["num_consts"] + scans[0].params["num_carry"] + 1 == len(scans[0].inputs)


def test_a_product_with_a_loop_constant_stays_accumulated():
    """A cotangent that is a product with a loop constant (not per-iteration values on both
    sides) is accumulated in the carry as before."""
    r = np.random.default_rng(2)
    a, w, xs = r.normal(size=(3, 3)), r.normal(size=(3, 3)), r.normal(size=(4, 3, 3))

    def f(w, xs):  # d/dw of sum(a @ (w * x_t)) = a^T-weighted x_t: a product with the constant a
        c, _ = lax.scan(lambda c, x: (c + xp.asarray(a) @ (w * x), None), xp.zeros((3, 3)), xs)
        return xp.sum(c * c)

    check_grads(f, (xp.asarray(w), xp.asarray(xs)), order=2, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=6, deadline=None)
@given(st.integers(0, 4), st.booleans(), st.integers(0, 2**16), st.booleans())
def test_loop_runner_fixed_outputs_and_scalar_xs(device, length, reverse, seed, compiled):
    """A body returning a constant, xs of one number per step, an empty second xs."""
    xs0 = values(seed, length)

    def f(c, xs, empty):
        def body(c, x):
            return c * 0.5 + x[0], (xp.asarray(2.0, device=device), x[0] * c, x[1])
        return lax.scan(body, c, (xs, empty), reverse=reverse)

    fn = compile(f) if compiled else f
    want_c, want_p = 1.0, [0.0] * length
    for i in (range(length)[::-1] if reverse else range(length)):
        want_p[i] = xs0[i] * want_c
        want_c = want_c * 0.5 + xs0[i]
    for _ in range(2 if compiled else 1):  # compiled: the second call runs the generated loop
        c, (twos, prods, e) = fn(xp.asarray(1.0, device=device), xp.asarray(xs0, device=device),
                                 xp.zeros((length, 0), device=device))
        close(c, want_c)
        close(twos, [2.0] * length)
        close(prods, want_p)
        assert e.shape == (length, 0)


def _unread(scan: object) -> list:
    body = scan.params["body"].graph
    read = {v for n in body.nodes for v in n.inputs} | set(body.outputs)
    return [v for v in body.inputs if v not in read]


def test_the_transposed_loop_reads_every_operand_it_gets():
    """Dead code elimination drops the constants and xs a scan body never reads (the
    transposed scan is given every known operand: the forward weight, the inputs xs)."""
    params, xs, target = data(3, 4)
    tp = [xp.asarray(p) for p in params]
    graph = compile(ad.grad(lambda p: rnn_loss(p, xp.asarray(xs), xp.asarray(target)))).lower(tp)
    scans = [n for n in graph.nodes if n.prim.name == "scan"]
    assert len(scans) == 2 and all(_unread(s) == [] for s in scans)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=4, deadline=None)
@given(st.integers(0, 3), st.booleans(), st.integers(0, 2**16))
@example(0, False, 0).via("no iterations")
def test_unread_scan_operands_are_pruned(device, length, reverse, seed):
    """A body that ignores one of its xs: the compiled scan takes only the other, and gives
    the uncompiled results."""
    xs0, xs1 = values(seed, length), values(seed + 1, length)
    w = xp.asarray(1.5, device=device)

    def f(c, xs, ys):
        return lax.scan(lambda c, x: (c * w + x[1], c - x[1]), c, (xs, ys), reverse=reverse)

    args = (xp.asarray(0.5, device=device), xp.asarray(xs0, device=device), xp.asarray(xs1, device=device))
    want = f(*args)
    for a, b in zip(compile(f)(*args), want):
        close(a, b.numpy())
    scan = next(n for n in compile(f).lower(*args).nodes if n.prim.name == "scan")
    p = scan.params
    assert _unread(scan) == [] and len(scan.inputs) - p["num_consts"] - p["num_carry"] == 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reverse", [False, True])
def test_a_scan_body_runs_as_one_generated_loop_from_the_second_call(device, reverse):
    """After the body's plan has run once (its kernels checked), the scan runs its body
    inlined in a generated loop: the same values as the first call and the Python loop,
    carry passed through, a carry input stacked as ys, two carries swapped each step."""
    xs0 = values(7, 5)

    def f(a, b, xs):
        def body(c, x):
            a, b = c
            return (b, a * 0.5 + x), (a, x * b)
        return lax.scan(body, (a, b), xs, reverse=reverse)

    fn = compile(f)
    args = (xp.asarray(1.0, device=device), xp.asarray(2.0, device=device), xp.asarray(xs0, device=device))
    a, b, ys_a, ys_p = 1.0, 2.0, [0.0] * 5, [0.0] * 5
    for i in (range(5)[::-1] if reverse else range(5)):
        ys_a[i], ys_p[i] = a, xs0[i] * b
        a, b = b, a * 0.5 + xs0[i]
    for _ in range(2):
        (ca, cb), (ya, yp) = fn(*args)
        close(ca, a)
        close(cb, b)
        close(ya, ys_a)
        close(yp, ys_p)
    scan = next(n for n in fn.lower(*args).nodes if n.prim.name == "scan")
    exe = scan.params["body"].executable()
    p = scan.params
    assert exe.scan_loop(p["num_consts"], p["num_carry"], reverse) is not None


def test_products_in_a_generated_loop_stay_quiet_and_restore_numpys_error_state():
    """inf * 0 inside a scan body's product: no FloatingPointError under np.seterr(all="raise")
    on either call (the second runs the generated loop with one IEEE scope around it), the
    values NumPy gives, and NumPy's error state as it was afterwards."""
    w = np.array([[np.inf, 1.0], [0.0, 2.0]], np.float32)
    xs = np.array([[[1.0, 0.0]], [[0.0, 1.0]], [[2.0, 3.0]]], np.float32)

    def f(xs):
        return lax.scan(lambda c, x: (c + x @ xp.asarray(w), x @ xp.asarray(w)), xp.zeros((1, 2)), xs)

    fn = compile(f)
    with np.errstate(all="ignore"):
        want = np.stack([np.matmul(x, w) for x in xs])
    with np.errstate(all="raise"):
        before = np.geterr()
        for _ in range(2):
            _, ys = fn(xp.asarray(xs))
            np.testing.assert_array_equal(ys.numpy(), want)
        assert np.geterr() == before


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=6, deadline=None)
@given(st.integers(0, 4), st.booleans(), st.integers(0, 2**16))
@example(0, True, 0).via("no iterations: the shifted ys are empty")
@example(1, True, 1).via("one iteration, reversed: the initial carry is the ys' last row")
def test_a_ys_of_carry_inputs_shares_the_stacked_carry_outputs(device, length, reverse, seed):
    """A body returning its carry input and its new carry as ys (an RNN's residuals): from the
    second compiled call both are views of one array written in place (the initial carry in
    its first row, or last when reversed); values equal to the Python loop's."""
    r = np.random.default_rng(seed)
    xs0, h0 = r.normal(size=(length, 2, 3)), r.normal(size=(2, 3))
    w = xp.asarray(0.7, device=device)

    def f(h, xs):
        return lax.scan(lambda h, x: (lambda n: (n, (h, n, n * 2.0)))(xp.tanh(h * w + x)), h, xs,
                        reverse=reverse)

    fn = compile(f)
    h, prev, new = h0, [None] * length, [None] * length
    for i in (range(length)[::-1] if reverse else range(length)):
        prev[i], h = h, np.tanh(h * 0.7 + xs0[i])
        new[i] = h
    for _ in range(3):
        c, (ys_prev, ys_new, ys_twice) = fn(xp.asarray(h0, device=device), xp.asarray(xs0, device=device))
        close(c, h)
        close(ys_prev, np.asarray(prev).reshape(length, 2, 3))
        close(ys_new, np.asarray(new).reshape(length, 2, 3))
        close(ys_twice, 2.0 * np.asarray(new).reshape(length, 2, 3))


def test_the_generated_loop_reads_a_weight_padded_once_with_the_same_bits():
    """numpy:cpu: a float32 recurrent weight of 128-byte rows is copied once per call into
    rows 16 bytes longer (`loop_operand`) before the generated loop; the gradients equal, bit
    for bit, those of the first call, whose loop reads the weight as it is."""
    params, xs, target = data(5, 40, batch=4, n_in=3, hidden=32, dtype=np.float32)
    tp = [xp.asarray(p) for p in params]
    tx, tt = xp.asarray(xs), xp.asarray(target)
    g = compile(ad.grad(lambda p: rnn_loss(p, tx, tt)))
    first = [a.numpy() for a in g(tp)]
    for a, b in zip(g(tp), first):
        assert a.numpy().tobytes() == b.tobytes()
    fwd = next(n for n in g.lower(tp).nodes if n.prim.name == "scan")
    p = fwd.params
    loop = p["body"].executable().plan.scan_loop(p["num_consts"], p["num_carry"], p["reverse"])
    assert any(name.startswith("_lo") for name in loop.__globals__)
