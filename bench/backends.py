"""Backends side by side, one run: tenferro on numpy:cpu, tenferro on torch:cpu, plain PyTorch.

Workloads: the MLP loss gradient (784-512-512-10, batch 128, float32; tenferro's traced
grad and GradientTape, PyTorch eager autograd) and the op-family workloads of
opfamilies.py (einsum, linalg, fft). Goal: tenferro on torch:cpu within 1.15x of plain
PyTorch eager.
"""

from __future__ import annotations

import os
import platform

import numpy as np
from ad_overhead import bench, ce_tf, mlp_data, mlp_loss  # noqa: I001  (same folder)
from eager_overhead import cpu_name, threads_setting

import tenferro_ad as ad
from tenferro_einsum import einsum
from tenferro_runtime import array_api as xp


def mlp_rows(rng, torch) -> list[tuple]:
    p_np, x_np, y_np = mlp_data(rng)

    def tenferro(device):
        p = {k: xp.asarray(v, device=device) for k, v in p_np.items()}
        x, y = xp.asarray(x_np, device=device), xp.asarray(y_np, device=device)
        grad = ad.grad(lambda q: mlp_loss(q, x, y, xp, ce_tf))

        def tape():
            with ad.GradientTape() as t:
                t.watch(p)
                loss = mlp_loss(p, x, y, xp, ce_tf)
            return t.gradient(loss, p)

        return (lambda: grad(p)), tape

    def ce_torch(logits, y):
        return -(y * torch.log_softmax(logits, dim=1)).sum(1).mean()

    def plain():
        p = {k: torch.from_numpy(v).requires_grad_() for k, v in p_np.items()}
        mlp_loss(p, torch.from_numpy(x_np), torch.from_numpy(y_np), torch, ce_torch).backward()
        return p["w1"].grad

    np_grad, np_tape = tenferro("numpy:cpu")
    to_grad, to_tape = tenferro("torch:cpu")
    t_plain = bench(plain, repeat=25)
    return [("MLP grad (traced grad)", bench(np_grad, repeat=25), bench(to_grad, repeat=25), t_plain),
            ("MLP grad (GradientTape)", bench(np_tape, repeat=25), bench(to_tape, repeat=25), t_plain)]


def family_rows(rng, torch) -> list[tuple]:
    a = rng.standard_normal((512, 512))
    b = rng.standard_normal((512, 512))
    s = a @ a.T + 512 * np.eye(512)
    z = rng.standard_normal(2**20) + 1j * rng.standard_normal(2**20)
    bm = [rng.standard_normal((32, 64, 64)).astype(np.float32) for _ in range(2)]
    ch = [rng.standard_normal(sh).astype(np.float32) for sh in [(64, 8), (8, 256), (256, 8), (8, 64)]]
    workloads = [
        ("einsum batched matmul f32", "bij,bjk->bik", bm, None),
        ("einsum 4-operand chain f32", "ab,bc,cd,de->ae", ch, None),
        ("solve 512x512 f64", xp.linalg.solve, (a, b), torch.linalg.solve),
        ("qr 512x512 f64", xp.linalg.qr, (a,), torch.linalg.qr),
        ("svd 512x512 f64", lambda x: xp.linalg.svd(x, full_matrices=False), (a,),
         lambda x: torch.linalg.svd(x, full_matrices=False)),
        ("eigh 512x512 f64", xp.linalg.eigh, (s,), torch.linalg.eigh),
        ("fft 2^20 c128", xp.fft.fft, (z,), torch.fft.fft),
    ]
    rows = []
    for name, f_tf, arrs, f_to in workloads:
        if isinstance(f_tf, str):
            spec = f_tf
            f_tf = lambda *xs, s=spec: einsum(s, *xs)  # noqa: E731
            f_to = lambda *xs, s=spec: torch.einsum(s, *xs)  # noqa: E731
        number = 20 if "einsum" in name else 2
        times = []
        for device in ("numpy:cpu", "torch:cpu"):
            ts = [xp.asarray(x, device=device) for x in arrs]
            times.append(bench(lambda f=f_tf, t=ts: f(*t), number=number))
        tts = [torch.from_numpy(x) for x in arrs]
        times.append(bench(lambda f=f_to, t=tts: f(*t), number=number))
        rows.append((name, *times))
    return rows


def main() -> None:
    import torch

    threads = threads_setting()
    print(f"machine: {cpu_name()} ({os.cpu_count()} cores), python {platform.python_version()}, "
          f"numpy {np.__version__}, torch {torch.__version__}, {threads}")
    rng = np.random.default_rng(0)
    rows = mlp_rows(rng, torch) + family_rows(rng, torch)
    print(f"{'workload':<30}{'numpy:cpu':>12}{'torch:cpu':>12}{'PyTorch':>12}{'torch:cpu/PyTorch':>19}")
    for name, t_np, t_to, t_plain in rows:
        print(f"{name:<30}{t_np * 1e3:>10.2f}ms{t_to * 1e3:>10.2f}ms{t_plain * 1e3:>10.2f}ms"
              f"{t_to / t_plain:>19.2f}")


if __name__ == "__main__":
    main()
