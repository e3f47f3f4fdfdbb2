"""Transformations (issue 21): vmap, jacrev and a compiled scan, vs their loops and JAX `jit`.

Workloads (float32, numpy:cpu unless named; timed interleaved in one process):
- per-example gradients of a small MLP (32-128-128-10, tanh, squared error), batch 64:
  `compile(vmap(grad(loss)))` vs a Python loop of `grad` over the examples (goal: at least
  10x faster), vs the same uncompiled, and vs JAX `jit(vmap(grad(loss)))` (goal: at most 1.0x);
- `jacrev` of a 64 -> 64 function (tanh(W x) * x): compiled, vs the Python loop of one `vjp`
  per output row that it replaces, and vs JAX `jit(jacrev)`;
- a scan RNN (hidden 128, input 32, 200 steps, batch 16, tanh cell, squared error on every
  step's state), forward + backward: `compile(grad)` of `lax.scan` vs JAX `jit(grad)` of
  `lax.scan` (goal: at most 1.0x) and vs the unrolled compiled version (compile time and
  run time).

    python bench/transformations.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
from compile import interleaved_all  # noqa: I001  (same folder)
from eager_overhead import cpu_name, threads_setting

from tenferro_ad import grad, jacrev, vjp, vmap
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, lax

BATCH, SIZES = 64, (32, 128, 128, 10)
JAC_N = 64
RNN_H, RNN_IN, RNN_T, RNN_B = 128, 32, 200, 16


def _init(rng: np.random.Generator) -> list[np.ndarray]:
    return [p for a, b in zip(SIZES[:-1], SIZES[1:])
            for p in ((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32),
                      np.zeros(b, np.float32))]


def tf_loss(params, x, y):
    h = x
    for i in range(0, len(params) - 2, 2):
        h = xp.tanh(h @ params[i] + params[i + 1])
    out = h @ params[-2] + params[-1]
    return xp.sum((out - y) ** 2)


def jax_loss(params, x, y):
    import jax.numpy as jnp

    h = x
    for i in range(0, len(params) - 2, 2):
        h = jnp.tanh(h @ params[i] + params[i + 1])
    out = h @ params[-2] + params[-1]
    return jnp.sum((out - y) ** 2)


def per_example(rng: np.random.Generator, rounds: int) -> dict:
    import jax

    params = _init(rng)
    xs = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    ys = rng.standard_normal((BATCH, SIZES[-1])).astype(np.float32)
    tp = [xp.asarray(p) for p in params]
    tx, ty = xp.asarray(xs), xp.asarray(ys)
    g = grad(tf_loss)
    batched = vmap(g, in_axes=(None, 0, 0))
    compiled = compile(batched)
    jp = [jax.numpy.asarray(p) for p in params]
    jx, jy = jax.numpy.asarray(xs), jax.numpy.asarray(ys)
    jitted = jax.jit(jax.vmap(jax.grad(jax_loss), in_axes=(None, 0, 0)))

    want = [np.asarray(a) for a in jitted(jp, jx, jy)]
    for got in (compiled(tp, tx, ty), batched(tp, tx, ty)):
        for a, b in zip(got, want):
            np.testing.assert_allclose(a.numpy(), b, rtol=2e-3, atol=2e-4)

    def loop():
        return [g(tp, tx[i], ty[i]) for i in range(BATCH)]

    def jax_run():
        for a in jitted(jp, jx, jy):
            a.block_until_ready()

    best = interleaved_all({
        "compile(vmap(grad))": lambda: compiled(tp, tx, ty),
        "vmap(grad) eager": lambda: batched(tp, tx, ty),
        "JAX jit(vmap(grad))": jax_run,
    }, rounds, 5)
    best.update(interleaved_all({"loop of grad": loop}, max(2, rounds // 5), 1))
    return best


def jacobian(rng: np.random.Generator, rounds: int) -> dict:
    import jax

    w = (rng.standard_normal((JAC_N, JAC_N)) / 8).astype(np.float32)
    x = rng.standard_normal(JAC_N).astype(np.float32)
    tw, tx = xp.asarray(w), xp.asarray(x)

    def f(v):
        return xp.tanh(tw @ v) * v

    jw, jx = jax.numpy.asarray(w), jax.numpy.asarray(x)
    jitted = jax.jit(jax.jacrev(lambda v: jax.numpy.tanh(jw @ v) * v))
    compiled = compile(jacrev(f))
    np.testing.assert_allclose(compiled(tx).numpy(), np.asarray(jitted(jx)), rtol=1e-4, atol=1e-5)

    def loop():
        out, back = vjp(f, tx)
        rows = []
        for j in range(JAC_N):
            e = np.zeros(JAC_N, np.float32)
            e[j] = 1
            rows.append(back(xp.asarray(e))[0])
        return xp.stack(rows)

    np.testing.assert_allclose(loop().numpy(), compiled(tx).numpy(), rtol=1e-5, atol=1e-6)
    return interleaved_all({
        "compile(jacrev)": lambda: compiled(tx),
        "jacrev eager": lambda: jacrev(f)(tx),
        "loop of vjp rows": loop,
        "JAX jit(jacrev)": lambda: jitted(jx).block_until_ready(),
    }, rounds, 5)


def _rnn_data(rng: np.random.Generator) -> tuple:
    wx = (rng.standard_normal((RNN_IN, RNN_H)) / np.sqrt(RNN_IN)).astype(np.float32)
    wh = (rng.standard_normal((RNN_H, RNN_H)) / np.sqrt(RNN_H) * 0.9).astype(np.float32)
    b = np.zeros(RNN_H, np.float32)
    xs = rng.standard_normal((RNN_T, RNN_B, RNN_IN)).astype(np.float32)
    target = rng.standard_normal((RNN_T, RNN_B, RNN_H)).astype(np.float32)
    return (wx, wh, b), xs, target


def tf_rnn_loss(params, xs, target, unrolled=False, unroll=1):
    wx, wh, b = params

    def cell(h, x):
        h = xp.tanh(x @ wx + h @ wh + b)
        return h, h

    h = xp.zeros((RNN_B, RNN_H), dtype=xp.float32, device=xs.device)
    if unrolled:
        hs = []
        for t in range(RNN_T):
            h, y = cell(h, xs[t])
            hs.append(y)
        ys = xp.stack(hs)
    else:
        _, ys = lax.scan(cell, h, xs, unroll=unroll)
    return xp.sum((ys - target) ** 2)


def rnn(rng: np.random.Generator, rounds: int) -> tuple[dict, dict]:
    import jax
    import jax.numpy as jnp

    params, xs, target = _rnn_data(rng)
    tp = tuple(xp.asarray(p) for p in params)
    tx, tt = xp.asarray(xs), xp.asarray(target)

    def jax_loss(p, xs_, tgt):
        wx, wh, b = p

        def cell(h, x):
            h = jnp.tanh(x @ wx + h @ wh + b)
            return h, h

        _, ys = jax.lax.scan(cell, jnp.zeros((RNN_B, RNN_H), jnp.float32), xs_)
        return jnp.sum((ys - tgt) ** 2)

    compile_s = {}
    fns = {}
    for name, unrolled, k in (("compile(grad) of scan", False, 1),
                              ("compile(grad), scan unroll=8", False, 8),
                              ("compile(grad) unrolled", True, 1)):
        fn = compile(grad(lambda p, x, t, u=unrolled, k=k: tf_rnn_loss(p, x, t, u, k)))
        t0 = time.perf_counter()
        fn(tp, tx, tt)
        compile_s[name] = time.perf_counter() - t0
        fns[name] = fn
    jp = tuple(jnp.asarray(p) for p in params)
    jx, jt = jnp.asarray(xs), jnp.asarray(target)
    jitted = jax.jit(jax.grad(jax_loss))
    t0 = time.perf_counter()
    want = [np.asarray(g) for g in jitted(jp, jx, jt)]
    compile_s["JAX jit(grad) of lax.scan"] = time.perf_counter() - t0
    for fn in fns.values():
        for a, b in zip(fn(tp, tx, tt), want):
            np.testing.assert_allclose(a.numpy(), b, rtol=2e-3, atol=2e-3)

    def jax_run():
        for g in jitted(jp, jx, jt):
            g.block_until_ready()

    best = interleaved_all({**{k: (lambda f=f: f(tp, tx, tt)) for k, f in fns.items()},
                            "JAX jit(grad) of lax.scan": jax_run}, rounds, 3)
    return best, compile_s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    threads = threads_setting()
    print(f"machine: {cpu_name()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"{threads}")
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    pe = per_example(rng, args.rounds)
    print(f"\nper-example gradients, MLP {'-'.join(map(str, SIZES))}, batch {BATCH} (float32)")
    for name, t in pe.items():
        print(f"  {name:<24} {t * 1e3:9.3f} ms")
    print(f"  loop of grad / compile(vmap(grad)):   {pe['loop of grad'] / pe['compile(vmap(grad))']:7.1f}x"
          f"   (goal >= 10)")
    print(f"  compile(vmap(grad)) / JAX jit:        "
          f"{pe['compile(vmap(grad))'] / pe['JAX jit(vmap(grad))']:7.2f}x   (goal <= 1.0)")
    jb = jacobian(rng, args.rounds)
    print(f"\njacrev of a {JAC_N} -> {JAC_N} function (float32)")
    for name, t in jb.items():
        print(f"  {name:<24} {t * 1e3:9.3f} ms")
    print(f"  loop of vjp rows / compile(jacrev):   {jb['loop of vjp rows'] / jb['compile(jacrev)']:7.1f}x")
    print(f"  compile(jacrev) / JAX jit:            {jb['compile(jacrev)'] / jb['JAX jit(jacrev)']:7.2f}x")
    rb, rc = rnn(rng, args.rounds)
    print(f"\nscan RNN (hidden {RNN_H}, input {RNN_IN}, {RNN_T} steps, batch {RNN_B}), forward + "
          f"backward (float32)")
    for name, t in rb.items():
        print(f"  {name:<28} {t * 1e3:9.3f} ms   first call (trace + compile) {rc[name]:6.2f} s")
    scan_t = rb["compile(grad) of scan"]
    jax_t = rb["JAX jit(grad) of lax.scan"]
    print(f"  scan / JAX jit:                       {scan_t / jax_t:7.2f}x   (goal <= 1.0)")
    print(f"  scan unroll=8 / JAX jit:              {rb['compile(grad), scan unroll=8'] / jax_t:7.2f}x")
    print(f"  scan / unrolled: run {scan_t / rb['compile(grad) unrolled']:5.2f}x, first call "
          f"{rc['compile(grad) of scan'] / rc['compile(grad) unrolled']:5.2f}x")
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
