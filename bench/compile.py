"""Compiled execution: tenferro `compile` vs JAX `jit`, PyTorch eager and `torch.compile`, one run.

Workloads (ratios printed; record them in docs/performance.md with the machine):
- MLP 784-512-512-10, batch 128, float32 train step (forward, backward, SGD update),
  compiled on numpy:cpu and torch:cpu. Goal: the best tenferro backend <= 1.0x JAX jit.
- gradient of a 100-op elementwise chain: compiled vs the eager tape. Goal: >= 10x faster.
- small MLP 64-128-128-10, batch 64: first-call compile time (goal <= 100 ms) and the
  per-call overhead of a cached signature beyond its kernels (goal <= 10 us).
- peak memory (tracemalloc) of the MLP train step on numpy:cpu with and without the
  memory-planning pass. Goal: >= 30% lower with it.
"""

from __future__ import annotations

import os
import platform
import time
import tracemalloc

import numpy as np
from ad_overhead import bench, ce_tf, chain, mlp_data, mlp_loss  # noqa: I001  (same folder)
from eager_overhead import cpu_name, threads_setting

import tenferro_ad as ad
import tenferro_runtime as tr
from tenferro_runtime import array_api as xp
from tenferro_runtime.pytree import tree_leaves

LR = 0.01


def tf_step(params, x, y):
    """One SGD step of the MLP: new parameters and the loss."""
    loss, g = ad.value_and_grad(lambda p: mlp_loss(p, x, y, xp, ce_tf))(params)
    return {k: params[k] - LR * g[k] for k in params}, loss


def tf_mlp(p_np, x_np, y_np, device, passes=None):
    put = lambda a: xp.asarray(a, device=device)  # noqa: E731
    params = {k: put(v) for k, v in p_np.items()}
    x, y = put(x_np), put(y_np)
    step = tr.compile(tf_step, passes=passes)
    return lambda: step(params, x, y)[1], step, (params, x, y)


def torch_mlp(torch, p_np, x_np, y_np):
    params = {k: torch.from_numpy(v).clone().requires_grad_() for k, v in p_np.items()}
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)

    def ce(logits, y):
        return -(y * torch.log_softmax(logits, dim=1)).sum(1).mean()

    def step():
        loss = mlp_loss(params, x, y, torch, ce)
        grads = torch.autograd.grad(loss, list(params.values()))
        with torch.no_grad():
            for p, g in zip(params.values(), grads):
                p.sub_(LR * g)
        return loss

    return step


def jax_mlp(jax, jnp, p_np, x_np, y_np):
    def ce(logits, y):
        return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(logits, axis=1), axis=1))

    @jax.jit
    def step(p, x, y):
        loss, g = jax.value_and_grad(lambda p: mlp_loss(p, x, y, jnp, ce))(p)
        return jax.tree_util.tree_map(lambda a, b: a - LR * b, p, g), loss

    p = {k: jnp.asarray(v) for k, v in p_np.items()}
    x, y = jnp.asarray(x_np), jnp.asarray(y_np)
    return lambda: step(p, x, y)[1].block_until_ready()


def torch_compiled_mlp(torch, p_np, x_np, y_np):
    """The same step, functional (torch.func), under torch.compile."""
    from torch.func import grad_and_value

    params = {k: torch.from_numpy(v).clone() for k, v in p_np.items()}
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)

    def ce(logits, y):
        return -(y * torch.log_softmax(logits, dim=1)).sum(1).mean()

    @torch.compile
    def step(p, x, y):
        g, loss = grad_and_value(lambda p: mlp_loss(p, x, y, torch, ce))(p)
        return {k: p[k] - LR * g[k] for k in p}, loss

    return lambda: step(params, x, y)[1]


def peak_bytes(fn) -> int:
    fn()
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def main() -> None:
    import jax
    import jax.numpy as jnp
    import torch

    threads = threads_setting()
    print(f"machine: {cpu_name()} ({os.cpu_count()} cores), python {platform.python_version()}, "
          f"numpy {np.__version__}, torch {torch.__version__}, jax {jax.__version__}, {threads}")
    rng = np.random.default_rng(0)
    p_np, x_np, y_np = mlp_data(rng)

    # ---- MLP train step ----------------------------------------------------------------
    t_np = bench(tf_mlp(p_np, x_np, y_np, "numpy:cpu")[0], repeat=15)
    t_torch_tf = bench(tf_mlp(p_np, x_np, y_np, "torch:cpu")[0], repeat=15)
    t_jax = bench(jax_mlp(jax, jnp, p_np, x_np, y_np), repeat=15)
    t_torch = bench(torch_mlp(torch, p_np, x_np, y_np), repeat=15)
    try:
        t_tc = bench(torch_compiled_mlp(torch, p_np, x_np, y_np), repeat=15)
    except Exception as exc:  # torch.compile needs a C compiler; report rather than fail
        print(f"torch.compile unavailable: {type(exc).__name__}: {exc}")
        t_tc = float("nan")
    best = min(t_np, t_torch_tf)
    print("\nMLP 784-512-512-10 b128 train step (forward, backward, SGD update)")
    for name, t in [("tenferro compile numpy:cpu", t_np), ("tenferro compile torch:cpu", t_torch_tf),
                    ("JAX jit", t_jax), ("PyTorch eager", t_torch), ("torch.compile", t_tc)]:
        print(f"  {name:<28}{t * 1e3:>8.2f} ms   {t / t_jax:>5.2f}x JAX jit")
    print(f"  best tenferro / JAX jit: {best / t_jax:.2f} (goal <= 1.0); / PyTorch eager: "
          f"{best / t_torch:.2f}; / torch.compile: {best / t_tc:.2f}")

    # ---- gradient of the 100-op chain ----------------------------------------------------
    x0 = xp.asarray(rng.standard_normal(16).astype(np.float32))

    def tape_chain():
        with ad.GradientTape() as tape:
            tape.watch(x0)
            y = xp.sum(chain(x0, xp))
        return tape.gradient(y, x0)

    compiled_chain = tr.compile(ad.grad(lambda v: xp.sum(chain(v, xp))))
    t_tape, t_comp = bench(tape_chain), bench(lambda: compiled_chain(x0), number=20)
    print(f"\ngradient of the 100-op chain (16 f32): tape {t_tape * 1e3:.2f} ms, compiled "
          f"{t_comp * 1e3:.3f} ms: {t_tape / t_comp:.1f}x faster (goal >= 10x)")

    # ---- small MLP: compile time and per-call overhead ---------------------------------------
    _, step, args = tf_mlp(*mlp_data(rng, (64, 128, 128, 10), 64), "numpy:cpu")
    t0 = time.perf_counter()
    step(*args)
    first = time.perf_counter() - t0
    callee = step._cache[next(iter(step._cache))][0]
    exe = callee.executable()
    tensors = tree_leaves(args)
    per_call, kernels = interleaved(lambda: step(*args), lambda: exe.run(tensors))
    print(f"\nsmall MLP 64-128-128-10 b64 train step: first call (trace + passes + plan) "
          f"{first * 1e3:.1f} ms (goal <= 100 ms); cached call {per_call * 1e6:.1f} us, its plan alone "
          f"{kernels * 1e6:.1f} us: overhead {(per_call - kernels) * 1e6:.1f} us (goal <= 10 us) "
          f"[{type(exe).__name__}, {len(callee.optimized().nodes)} nodes]")

    # ---- peak memory with and without memory planning -------------------------------------
    all_passes = [n for n, _ in sorted(tr.default_runtime().passes.items(), key=lambda kv: kv[1][1])]
    without = [n for n in all_passes if n != "memory"]
    with_plan = peak_bytes(tf_mlp(p_np, x_np, y_np, "numpy:cpu", passes=all_passes)[0])
    without_plan = peak_bytes(tf_mlp(p_np, x_np, y_np, "numpy:cpu", passes=without)[0])
    print(f"\npeak memory of the MLP train step (numpy:cpu, tracemalloc): {without_plan / 2**20:.1f} MiB "
          f"without memory planning, {with_plan / 2**20:.1f} MiB with it: "
          f"{(1 - with_plan / without_plan) * 100:.0f}% lower (goal >= 30%)")


def interleaved_all(fns: dict, rounds: int = 15, number: int = 10) -> dict:
    """Best per-call time of each function, measured in alternating rounds (so all see the
    same machine)."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / number)
    return best


def interleaved(a, b, rounds: int = 40, number: int = 100) -> tuple[float, float]:
    """Best per-call times of `a` and `b`, measured in alternating rounds: their difference
    is the overhead of `a` over `b`."""
    best = interleaved_all({0: a, 1: b}, rounds, number)
    return best[0], best[1]


if __name__ == "__main__":
    main()
