"""Training with tenferro-nn vs PyTorch eager, `torch.compile` and JAX `jit`, one run.

Workloads (ratios printed; record them in docs/performance.md with the machine):
- MLP 784-512-512-10, batch 128, float32, Adam train step (forward, cross-entropy, backward,
  update): tenferro eager (GradientTape + `opt.step`) and compiled (`compile` of the
  functional step, optimizer state inside the graph) on numpy:cpu and torch:cpu, against
  PyTorch eager (torch.optim.Adam), `torch.compile` (model and optimizer step) and JAX `jit`
  with a hand-written Adam.
- the module wrapper's per-call overhead: a compiled call taking a `Module` vs the same
  compiled computation taking its parameters as a flat list (goal <= 10 us + 1 us per
  parameter tensor).
- the digits demo's wall time (`examples/demo.py`, goal < 60 s on 2 cores).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from ad_overhead import bench  # noqa: I001  (same folder)
from compile import interleaved
from eager_overhead import cpu_name, threads_setting

import tenferro_nn as nn
from tenferro_ad import GradientTape, value_and_grad
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, default_device, random

WIDTHS = (784, 512, 512, 10)
BATCH = 128
LR = 1e-3


def data(rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """PyTorch-layout weights (out, in) and biases, inputs and integer labels."""
    params = []
    for m, n in zip(WIDTHS[:-1], WIDTHS[1:]):
        params += [(rng.standard_normal((n, m)) / np.sqrt(m)).astype(np.float32), np.zeros(n, np.float32)]
    x = rng.standard_normal((BATCH, WIDTHS[0])).astype(np.float32)
    y = rng.integers(0, WIDTHS[-1], BATCH).astype(np.int64)
    return params, x, y


def tf_model(params: list[np.ndarray]) -> nn.Module:
    layers = []
    for i, (m, n) in enumerate(zip(WIDTHS[:-1], WIDTHS[1:])):
        layers += [nn.Linear(m, n, key=random.key(i))] + ([nn.ReLU()] if i < len(WIDTHS) - 2 else [])
    model = nn.Sequential(*layers)
    model.load_state_dict(dict(zip(model.state_dict(), params)))
    return model


def tf_eager(params, x_np, y_np, device):
    with default_device(device):
        model = tf_model(params)
        x, y = xp.asarray(x_np), xp.asarray(y_np)
    opt = nn.Adam(model.parameters(), lr=LR)

    def step():
        ps = model.parameters()
        with GradientTape() as tape:
            tape.watch(ps)
            loss = nn.cross_entropy(model(x), y)
        opt.step(tape.gradient(loss, ps))
        return loss

    return step


def tf_compiled(params, x_np, y_np, device, backend=None, opt=None):
    """The compiled functional step of optimizer `opt` (default Adam) on `device`, run by
    executor `backend` (None: the device's default); `run.step` is the compiled function."""
    with default_device(device):
        model = tf_model(params)
        x, y = xp.asarray(x_np), xp.asarray(y_np)
    opt = opt or nn.Adam(lr=LR)
    state = [model, opt.init(model)]

    def train_step(model, state, x, y):
        loss, grads = value_and_grad(lambda m: nn.cross_entropy(m(x), y))(model)
        model, state = opt.update(model, grads, state)
        return model, state, loss

    step = compile(train_step, donate_argnums=(0, 1), backend=backend)

    def run():
        state[0], state[1], loss = step(state[0], state[1], x, y)
        return loss

    run.step = step
    return run


def torch_model(torch, params, device="cpu"):
    layers = []
    for i, (m, n) in enumerate(zip(WIDTHS[:-1], WIDTHS[1:])):
        layers += [torch.nn.Linear(m, n)] + ([torch.nn.ReLU()] if i < len(WIDTHS) - 2 else [])
    model = torch.nn.Sequential(*layers)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in zip(model.state_dict(), params)})
    return model.to(device)


def torch_eager(torch, params, x_np, y_np, device="cpu", make_opt=None):
    """PyTorch's eager train step; `make_opt(parameters)` the optimizer (default Adam)."""
    return torch_train_step(torch, torch_model(torch, params, device), x_np, y_np, device, make_opt)


def torch_compiled(torch, params, x_np, y_np, device="cpu", make_opt=None):
    """The model under torch.compile (forward and AOT-compiled backward) and the optimizer's
    step under torch.compile, as PyTorch's tutorials compile a training loop."""
    return torch_train_step(torch, torch_model(torch, params, device), x_np, y_np, device, make_opt,
                            compiled=True)


def torch_train_step(torch, model, x_np, y_np, device, make_opt=None, compiled=False):
    """`model`'s cross-entropy train step, eager or with the model and the optimizer's step
    under torch.compile; `make_opt(parameters)` the optimizer (default Adam)."""
    opt = (make_opt or (lambda ps: torch.optim.Adam(ps, lr=LR)))(model.parameters())
    forward = torch.compile(model) if compiled else model
    opt_step = torch.compile(opt.step) if compiled else opt.step
    x, y = torch.from_numpy(x_np).to(device), torch.from_numpy(y_np).to(device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(forward(x), y)
        loss.backward()
        opt_step()
        return loss

    return step


def jax_jit(jax, jnp, params, x_np, y_np):
    """A hand-written Adam (PyTorch's formulas) in one jitted train step."""
    b1, b2, eps = 0.9, 0.999, 1e-8

    def loss_fn(p, x, y):
        h = x
        for i in range(0, len(p), 2):
            h = h @ p[i].T + p[i + 1]
            if i + 2 < len(p):
                h = jax.nn.relu(h)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(h, axis=1), y[:, None], axis=1))

    @jax.jit
    def step(p, m, v, t, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        t = t + 1
        m = [b1 * mi + (1 - b1) * gi for mi, gi in zip(m, g)]
        v = [b2 * vi + (1 - b2) * gi * gi for vi, gi in zip(v, g)]
        c1, c2 = 1 - b1**t, 1 - b2**t
        p = [pi - LR / c1 * mi / (jnp.sqrt(vi / c2) + eps) for pi, mi, vi in zip(p, m, v)]
        return p, m, v, t, loss

    p = [jnp.asarray(a) for a in params]
    st = [p, [jnp.zeros_like(a) for a in p], [jnp.zeros_like(a) for a in p], jnp.asarray(0.0)]
    x, y = jnp.asarray(x_np), jnp.asarray(y_np)

    def run():
        *new, loss = step(*st, x, y)
        st[:] = new
        return loss.block_until_ready()

    return run


def module_overhead() -> tuple[float, float, float, int]:
    """A compiled call taking a Module: (its time, its plan's time alone, the same overhead for
    the call taking the parameters as a flat list, parameter tensors)."""
    rng = np.random.default_rng(1)
    widths = (64, 128, 128, 10)
    layers = []
    for i, (m, n) in enumerate(zip(widths[:-1], widths[1:])):
        layers += [nn.Linear(m, n, key=random.key(i)), nn.ReLU()]
    model = nn.Sequential(*layers)
    x = xp.asarray(rng.standard_normal((4, widths[0])).astype(np.float32))
    with_module = compile(lambda m, x: m(x))
    with_list = compile(lambda ps, x: model_of(model, ps)(x))
    ps = model.parameters()
    np.testing.assert_array_equal(np.asarray(with_module(model, x)), np.asarray(with_list(ps, x)))

    def plan_alone(c, leaves):
        exe = c._cache[next(iter(c._cache))][0].executable()
        return lambda: exe.run(leaves)

    call, plan = interleaved(lambda: with_module(model, x), plan_alone(with_module, [*ps, x]))
    call_list, plan_list = interleaved(lambda: with_list(ps, x), plan_alone(with_list, [*ps, x]))
    return call, plan, call_list - plan_list, len(ps)


def model_of(model: nn.Module, params: list) -> nn.Module:
    """`model` holding `params` (in `parameters()` order) instead of its own tensors."""
    it = iter(params)
    return nn.map_tensors(lambda t: next(it), model)


def main() -> None:
    import jax
    import jax.numpy as jnp
    import torch

    threads = threads_setting()
    print(f"machine: {cpu_name()} ({os.cpu_count()} cores), python {platform.python_version()}, "
          f"numpy {np.__version__}, torch {torch.__version__}, jax {jax.__version__}, {threads}")
    params, x, y = data(np.random.default_rng(0))

    rows = [
        ("tenferro eager numpy:cpu", tf_eager(params, x, y, "numpy:cpu")),
        ("tenferro eager torch:cpu", tf_eager(params, x, y, "torch:cpu")),
        ("tenferro compiled numpy:cpu", tf_compiled(params, x, y, "numpy:cpu")),
        ("tenferro compiled torch:cpu", tf_compiled(params, x, y, "torch:cpu")),
        ("PyTorch eager", torch_eager(torch, params, x, y)),
        ("JAX jit", jax_jit(jax, jnp, params, x, y)),
    ]
    try:
        rows.append(("torch.compile", torch_compiled(torch, params, x, y)))
        rows[-1][1]()
    except Exception as exc:  # torch.compile needs a C compiler; report rather than fail
        print(f"torch.compile unavailable: {type(exc).__name__}: {exc}")
        rows.pop()
    times = {name: bench(fn, repeat=15) for name, fn in rows}
    ref_torch, ref_jax = times["PyTorch eager"], times["JAX jit"]
    print(f"\nMLP {'-'.join(map(str, WIDTHS))} b{BATCH} float32 Adam train step")
    for name, t in times.items():
        print(f"  {name:<30}{t * 1e3:>8.2f} ms  {t / ref_torch:>5.2f}x PyTorch eager  "
              f"{t / ref_jax:>5.2f}x JAX jit")

    call, plan, list_overhead, n = module_overhead()
    print(f"\nmodule wrapper (MLP 64-128-128-10, {n} parameter tensors): compiled call with the Module "
          f"{call * 1e6:.1f} us, its plan alone {plan * 1e6:.1f} us: overhead {(call - plan) * 1e6:.1f} us "
          f"(goal <= {10 + n} us; the same call taking a flat list of the tensors: "
          f"{list_overhead * 1e6:.1f} us)")

    demo = Path(__file__).resolve().parents[1] / "examples" / "demo.py"
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, str(demo), "--out", "/tmp/tenferro_bench_digits.safetensors"],
                         capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    last = [ln for ln in out.stdout.splitlines() if "reloaded" in ln]
    print(f"\ndigits demo: {wall:.1f} s wall (goal < 60 s); {last[0] if last else ''}")


if __name__ == "__main__":
    main()
