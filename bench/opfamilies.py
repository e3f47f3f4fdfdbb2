"""Op families vs their anchors in one run.

- einsum vs numpy.einsum(optimize=True), opt_einsum.contract and torch.einsum on a
  matmul-like, a batched matmul, a 4-operand chain and an 8-operand tensor network, with
  the path FLOPs. Goal: within 1.1x of the faster of numpy.einsum and opt_einsum.
- linalg (solve, qr, svd, eigh on 512x512 float64) and fft (2^20 complex128) vs NumPy,
  SciPy and PyTorch. Goal: within 1.1x of the faster of NumPy and SciPy.
"""

from __future__ import annotations

import os
import platform
import statistics
import timeit

import numpy as np
from eager_overhead import cpu_name, threads_setting  # noqa: I001  (same folder)

from tenferro_einsum import einsum, einsum_path
from tenferro_runtime import array_api as xp

WORKLOADS = [
    ("matmul-like 256x256", "ij,jk->ik", [(256, 256), (256, 256)]),
    ("batched matmul 32x64x64", "bij,bjk->bik", [(32, 64, 64), (32, 64, 64)]),
    ("4-operand chain", "ab,bc,cd,de->ae", [(64, 8), (8, 256), (256, 8), (8, 64)]),
    ("8-operand network", "ab,bc,cd,de,ef,fg,gh,ha->", [(16, 16)] * 8),
]


def bench(fn, number: int) -> float:
    fn()
    return statistics.median(timeit.repeat(fn, number=number, repeat=5)) / number


def einsum_rows() -> None:
    import opt_einsum
    import torch

    print(f"{'einsum workload':<26}{'flops':>10}{'tenferro':>11}{'np.einsum':>11}{'opt_einsum':>11}"
          f"{'torch':>11}{'tf/best(np,oe)':>16}")
    rng = np.random.default_rng(0)
    for name, spec, shapes in WORKLOADS:
        arrs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        tfs = [xp.asarray(a) for a in arrs]
        tts = [torch.from_numpy(a) for a in arrs]
        _, flops = einsum_path(spec, *tfs)
        number = 20 if "matmul" in name else 200
        t_tf = bench(lambda s=spec, a=tfs: einsum(s, *a), number)
        t_np = bench(lambda s=spec, a=arrs: np.einsum(s, *a, optimize=True), number)
        t_oe = bench(lambda s=spec, a=arrs: opt_einsum.contract(s, *a), number)
        t_to = bench(lambda s=spec, a=tts: torch.einsum(s, *a), number)
        print(f"{name:<26}{flops:>10.2e}{t_tf * 1e6:>9.1f}us{t_np * 1e6:>9.1f}us{t_oe * 1e6:>9.1f}us"
              f"{t_to * 1e6:>9.1f}us{t_tf / min(t_np, t_oe):>16.2f}")


def _spd(rng, n: int) -> np.ndarray:
    a = rng.standard_normal((n, n))
    return a @ a.T + n * np.eye(n)


def dense_rows() -> None:
    """linalg and fft: tenferro vs NumPy, SciPy and PyTorch, ratio to the faster of NumPy/SciPy."""
    import scipy.fft
    import scipy.linalg
    import torch

    rng = np.random.default_rng(0)
    a = rng.standard_normal((512, 512))
    b = rng.standard_normal((512, 512))
    s = _spd(rng, 512)
    z = rng.standard_normal(2**20) + 1j * rng.standard_normal(2**20)
    rows = [
        ("solve 512x512 f64", (a, b), xp.linalg.solve, np.linalg.solve,
         lambda x, y: scipy.linalg.solve(x, y, check_finite=False), torch.linalg.solve),
        ("qr 512x512 f64", (a,), xp.linalg.qr, np.linalg.qr,
         lambda x: scipy.linalg.qr(x, mode="economic", check_finite=False), torch.linalg.qr),
        ("svd 512x512 f64", (a,), lambda x: xp.linalg.svd(x, full_matrices=False),
         lambda x: np.linalg.svd(x, full_matrices=False),
         lambda x: scipy.linalg.svd(x, full_matrices=False, check_finite=False),
         lambda x: torch.linalg.svd(x, full_matrices=False)),
        ("eigh 512x512 f64", (s,), xp.linalg.eigh, np.linalg.eigh,
         lambda x: scipy.linalg.eigh(x, check_finite=False), torch.linalg.eigh),
        ("fft 2^20 c128", (z,), xp.fft.fft, np.fft.fft, scipy.fft.fft, torch.fft.fft),
    ]
    print(f"\n{'linalg / fft workload':<26}{'tenferro':>11}{'numpy':>11}{'scipy':>11}{'torch':>11}"
          f"{'tf/best(np,sp)':>16}")
    for name, arrs, f_tf, f_np, f_sp, f_to in rows:
        tfs = [xp.asarray(x) for x in arrs]
        tts = [torch.from_numpy(x) for x in arrs]
        number = 3 if "fft" in name else 2
        t_tf = bench(lambda f=f_tf, a=tfs: f(*a), number)
        t_np = bench(lambda f=f_np, a=arrs: f(*a), number)
        t_sp = bench(lambda f=f_sp, a=arrs: f(*a), number)
        t_to = bench(lambda f=f_to, a=tts: f(*a), number)
        print(f"{name:<26}{t_tf * 1e3:>9.2f}ms{t_np * 1e3:>9.2f}ms{t_sp * 1e3:>9.2f}ms{t_to * 1e3:>9.2f}ms"
              f"{t_tf / min(t_np, t_sp):>16.2f}")


def main() -> None:
    import opt_einsum
    import scipy
    import torch

    threads = threads_setting()
    print(f"machine: {cpu_name()} ({os.cpu_count()} cores), python {platform.python_version()}, "
          f"numpy {np.__version__}, scipy {scipy.__version__}, opt_einsum {opt_einsum.__version__}, "
          f"torch {torch.__version__}, {threads}")
    einsum_rows()
    dense_rows()


if __name__ == "__main__":
    main()
