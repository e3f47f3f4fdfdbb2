"""Gradient overhead: tenferro tape and traced grad vs PyTorch autograd and JAX grad, one run.

Workloads: the gradient of a chain of 100 small elementwise ops (per-op overhead),
and the gradient of an MLP loss (784-512-512-10, batch 128, float32).
Goals: tape per-op overhead no worse than PyTorch autograd; MLP gradient within
1.3x of PyTorch eager.
"""

from __future__ import annotations

import os
import platform
import statistics
import time

import numpy as np
from eager_overhead import cpu_name, threads_setting  # noqa: I001  (same folder)

import tenferro_ad as ad
from tenferro_runtime import array_api as xp


def bench(fn, repeat: int = 7, number: int = 1) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return statistics.median(times)


def _interleaved(*fns, number: int) -> list[float]:
    """Best per-call times of `fns`, warmed up, then measured in alternating rounds (these
    machines are noisy: all see the same conditions)."""
    from compile import interleaved_all  # compile.py imports this module

    for fn in fns:
        fn()
        fn()  # a tape's second sighting of its structure builds its backward graph
    best = interleaved_all(dict(enumerate(fns)), rounds=15, number=number)
    return [best[i] for i in range(len(fns))]


def chain(x, mod):
    """100 elementwise ops."""
    for _ in range(25):
        x = mod.tanh(x * 0.9 + 0.1)
        x = mod.sin(x)
    return x


def mlp_data(rng, widths=(784, 512, 512, 10), batch=128):
    """Parameters, inputs and one-hot labels of an MLP (default 784-512-512-10, batch 128),
    float32."""
    p = {}
    for i, (m, n) in enumerate(zip(widths[:-1], widths[1:]), 1):
        p[f"w{i}"] = (rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32)
        p[f"b{i}"] = np.zeros(n, np.float32)
    x = rng.standard_normal((batch, widths[0])).astype(np.float32)
    y = np.eye(widths[-1], dtype=np.float32)[rng.integers(0, widths[-1], batch)]
    return p, x, y


def ce_tf(logits, y):
    """Softmax cross-entropy with the Array API namespace (stable log-sum-exp)."""
    m = xp.max(logits, axis=1, keepdims=True)
    lse = xp.log(xp.sum(xp.exp(logits - m), axis=1, keepdims=True)) + m
    return -xp.mean(xp.sum(y * (logits - lse), axis=1))


def mlp_loss(params, x, y, mod, softmax_ce):
    h = mod.tanh(x @ params["w1"] + params["b1"])
    h = mod.tanh(h @ params["w2"] + params["b2"])
    return softmax_ce(h @ params["w3"] + params["b3"], y)


def main() -> None:
    import jax
    import jax.numpy as jnp
    import torch

    threads = threads_setting()
    print(f"machine: {cpu_name()} ({os.cpu_count()} cores), python {platform.python_version()}, "
          f"torch {torch.__version__}, jax {jax.__version__}, {threads}")
    rng = np.random.default_rng(0)

    # ---- chain of 100 small ops -------------------------------------------------
    x0 = rng.standard_normal(16).astype(np.float32)
    xt = xp.asarray(x0)

    def tape_chain():
        with ad.GradientTape() as tape:
            tape.watch(xt)
            y = xp.sum(chain(xt, xp))
        return tape.gradient(y, xt)

    grad_chain = ad.grad(lambda v: xp.sum(chain(v, xp)))

    def torch_chain():
        v = torch.from_numpy(x0).requires_grad_()
        chain(v, torch).sum().backward()
        return v.grad

    jax_grad_chain = jax.grad(lambda v: jnp.sum(chain(v, jnp)))
    xj = jnp.asarray(x0)
    rows = [("grad of 100-op chain (16 f32)", *_interleaved(
        tape_chain, lambda: grad_chain(xt), torch_chain,
        lambda: jax_grad_chain(xj).block_until_ready(), number=20))]

    # ---- MLP ---------------------------------------------------------------------
    p_np, x_np, y_np = mlp_data(rng)

    p_tf = {k: xp.asarray(v) for k, v in p_np.items()}
    x_tf, y_tf = xp.asarray(x_np), xp.asarray(y_np)
    grad_mlp = ad.grad(lambda p: mlp_loss(p, x_tf, y_tf, xp, ce_tf))

    def tape_mlp():
        with ad.GradientTape() as tape:
            tape.watch(p_tf)
            loss = mlp_loss(p_tf, x_tf, y_tf, xp, ce_tf)
        return tape.gradient(loss, p_tf)

    def ce_torch(logits, y):
        return -(y * torch.log_softmax(logits, dim=1)).sum(1).mean()

    def torch_mlp():
        p = {k: torch.from_numpy(v).requires_grad_() for k, v in p_np.items()}
        mlp_loss(p, torch.from_numpy(x_np), torch.from_numpy(y_np), torch, ce_torch).backward()
        return p["w1"].grad

    def ce_jax(logits, y):
        return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(logits, axis=1), axis=1))

    p_j = {k: jnp.asarray(v) for k, v in p_np.items()}
    x_j, y_j = jnp.asarray(x_np), jnp.asarray(y_np)
    jax_grad_mlp = jax.grad(lambda p: mlp_loss(p, x_j, y_j, jnp, ce_jax))
    # not interleaved: switching between libraries' BLAS thread pools every few calls slows
    # each one's first calls (their idle threads spin), which would measure the switching
    tape_mlp()
    rows.append(("grad of MLP loss 784-512-512-10 b128", bench(tape_mlp), bench(lambda: grad_mlp(p_tf)),
                 bench(torch_mlp),
                 bench(lambda: jax.tree_util.tree_map(lambda a: a.block_until_ready(), jax_grad_mlp(p_j)))))

    print(f"{'workload':<38}{'tf tape':>11}{'tf grad':>11}{'torch':>11}{'jax':>11}"
          f"{'tape/torch':>12}{'grad/torch':>12}")
    for name, tape_t, grad_t, torch_t, jax_t in rows:
        print(f"{name:<38}{tape_t * 1e3:>9.2f}ms{grad_t * 1e3:>9.2f}ms{torch_t * 1e3:>9.2f}ms"
              f"{jax_t * 1e3:>9.2f}ms{tape_t / torch_t:>12.2f}{grad_t / torch_t:>12.2f}")
    tape_t, grad_t, torch_t, jax_t = rows[0][1:]
    print(f"per-op overhead of the 100-op chain: tape {tape_t / 100 * 1e6:.1f} us, grad "
          f"{grad_t / 100 * 1e6:.1f} us, torch {torch_t / 100 * 1e6:.1f} us, jax {jax_t / 100 * 1e6:.1f} us")


if __name__ == "__main__":
    main()
