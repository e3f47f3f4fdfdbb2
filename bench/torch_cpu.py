"""tenferro on torch:cpu against PyTorch itself, one run, interleaved (issue "Speed", item 1).

Workloads, the MLP 784-512-512-10 of bench/train.py (ReLU, batch 128, float32, cross-entropy
on integer labels, PyTorch-layout weights):
- the loss gradient by `grad` (uncompiled) vs PyTorch autograd (`loss.backward()`), the same
  loss; goal at most 1.15x;
- the compiled SGD and Adam train steps (`compile` of the functional step, parameters and
  optimizer state donated; by torch:cpu's default executor, and by the Inductor executor,
  `backend="inductor"`) vs PyTorch eager (torch.optim) and `torch.compile` (model and
  optimizer step compiled); goal at most 1.0x of each.
`--profile` prints torch's per-op profile of tenferro's grad and compiled steps (the table
in docs/performance.md).
"""

from __future__ import annotations

import argparse
import os
import platform

import numpy as np
from compile import interleaved_all  # noqa: I001  (same folder)
from eager_overhead import cpu_name, threads_setting
from train import LR, data, tf_compiled, tf_model, torch_compiled, torch_eager, torch_model

import tenferro_nn as nn
from tenferro_ad import grad
from tenferro_runtime import array_api as xp
from tenferro_runtime import default_device

DEVICE = "torch:cpu"


def tf_grad(params, x_np, y_np):
    with default_device(DEVICE):
        model = tf_model(params)
        x, y = xp.asarray(x_np), xp.asarray(y_np)
    g = grad(lambda m: nn.cross_entropy(m(x), y))
    return lambda: g(model)


def torch_grad(torch, params, x_np, y_np):
    model = torch_model(torch, params)
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
    ps = list(model.parameters())

    def run():
        for p in ps:
            p.grad = None
        torch.nn.functional.cross_entropy(model(x), y).backward()
        return ps[0].grad

    return run


def profile(torch, fns: dict) -> None:
    from torch.profiler import profile as torch_profile

    for name, fn in fns.items():
        for _ in range(3):
            fn()
        with torch_profile() as prof:
            for _ in range(10):
                fn()
        print(f"\n{name}: torch ops over 10 calls")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))


def main() -> None:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    threads = threads_setting()
    print(f"machine: {cpu_name()} ({os.cpu_count()} cores), python {platform.python_version()}, "
          f"numpy {np.__version__}, torch {torch.__version__}, {threads}")
    params, x, y = data(np.random.default_rng(0))
    sgd = (nn.SGD(lr=LR), lambda ps: torch.optim.SGD(ps, lr=LR))
    adam = (nn.Adam(lr=LR), lambda ps: torch.optim.Adam(ps, lr=LR))
    groups = {
        "MLP gradient (uncompiled grad vs autograd)": {
            "tenferro grad": tf_grad(params, x, y), "PyTorch autograd": torch_grad(torch, params, x, y)},
    }
    for name, (tf_opt, torch_opt) in (("SGD", sgd), ("Adam", adam)):
        group = {"tenferro compiled": tf_compiled(params, x, y, DEVICE, opt=tf_opt),
                 "tenferro inductor": tf_compiled(params, x, y, DEVICE, backend="inductor", opt=tf_opt),
                 "PyTorch eager": torch_eager(torch, params, x, y, make_opt=torch_opt)}
        try:
            group["torch.compile"] = torch_compiled(torch, params, x, y, make_opt=torch_opt)
            group["torch.compile"]()
        except Exception as exc:  # torch.compile needs a C compiler; report rather than fail
            print(f"torch.compile unavailable: {type(exc).__name__}: {exc}")
            group.pop("torch.compile", None)
        groups[f"{name} train step"] = group
    for fn in (f for g in groups.values() for f in g.values()):
        fn()
        fn()
    if args.profile:
        first = next(iter(groups.values()))
        profile(torch, {"tenferro grad": first["tenferro grad"],
                        "tenferro compiled Adam step": groups["Adam train step"]["tenferro compiled"]})
    for title, group in groups.items():
        times = interleaved_all(group, rounds=15, number=5)
        print(f"\nMLP 784-512-512-10 b128 f32, {title}")
        for name, t in times.items():  # each tenferro row against each PyTorch one
            ratios = "  ".join(f"{t / times[o]:5.2f}x {o}" for o in times
                               if name.startswith("tenferro") and not o.startswith("tenferro"))
            print(f"  {name:<22}{t * 1e3:>8.2f} ms  {ratios}")


if __name__ == "__main__":
    main()
