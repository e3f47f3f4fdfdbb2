"""Op families vs their anchors in one run. So far: einsum (linalg and fft come with their packages).

einsum vs numpy.einsum(optimize=True), opt_einsum.contract and torch.einsum on a
matmul-like, a batched matmul, a 4-operand chain and an 8-operand tensor network,
with the path FLOPs. Goal: within 1.1x of the faster of numpy.einsum and opt_einsum.
"""

from __future__ import annotations

import os
import platform
import statistics
import timeit

import numpy as np
from eager_overhead import cpu_name  # noqa: I001  (same folder)

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


def main() -> None:
    import opt_einsum
    import torch

    torch.set_num_threads(2)
    print(f"machine: {cpu_name()} ({os.cpu_count()} cores), python {platform.python_version()}, "
          f"numpy {np.__version__}, opt_einsum {opt_einsum.__version__}, torch {torch.__version__}")
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


if __name__ == "__main__":
    main()
