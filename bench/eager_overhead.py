"""Eager small-op overhead: tenferro (numpy:cpu) vs raw NumPy vs PyTorch CPU, in one run.

Prints the median time per call and the ratios tenferro/NumPy and tenferro/PyTorch.
Goal: small ops at most 2x raw NumPy and below PyTorch eager.
"""

from __future__ import annotations

import platform
import statistics
import timeit

import numpy as np

from tenferro_runtime import array_api as xp


def bench(fn, number: int, repeat: int = 7) -> float:
    fn()  # warm caches
    times = timeit.repeat(fn, number=number, repeat=repeat)
    return statistics.median(times) / number


def chain(x, mod):
    """20 small elementwise ops, written once for all three libraries."""
    for _ in range(5):
        x = mod.tanh(x * 0.5 + 0.1)
        x = mod.exp(-x)
    return x


def _callables(op, a_np, b_np, torch):
    """The same workload for tenferro, NumPy and PyTorch, on the same data."""
    a_tf, b_tf = xp.asarray(a_np), xp.asarray(b_np)
    a_t, b_t = torch.from_numpy(a_np), torch.from_numpy(b_np)
    if op == "add":
        return (lambda: a_tf + b_tf, lambda: a_np + b_np, lambda: a_t + b_t)
    if op == "matmul":
        return (lambda: a_tf @ b_tf, lambda: a_np @ b_np, lambda: a_t @ b_t)
    return (lambda: chain(a_tf, xp), lambda: chain(a_np, np), lambda: chain(a_t, torch))


def workloads(torch):
    rng = np.random.default_rng(0)
    small = rng.standard_normal((8, 8)).astype(np.float32)
    big = rng.standard_normal((1000, 1000)).astype(np.float32)
    mat = rng.standard_normal((256, 256)).astype(np.float32)
    out = []
    for name, arr, op, number in [
        ("add 8x8 f32", small, "add", 20000),
        ("add 1000x1000 f32", big, "add", 200),
        ("matmul 256x256 f32", mat, "matmul", 500),
        ("chain of 20 ops 8x8", small, "chain", 2000),
    ]:
        fns = _callables(op, arr, arr.copy(), torch)
        out.append((name, *(bench(f, number) for f in fns)))
    return out


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def threads_setting() -> str:
    """Apply the default runtime's `threads` to every backend now, so the NumPy, PyTorch and
    tenferro rows all run with it, and name it for the `machine:` line."""
    from tenferro_runtime import default_runtime

    rt = default_runtime()
    rt.apply_threads()
    return f"threads {rt.threads} ({rt.threads_source}), {omp_spin()}"


def omp_spin() -> str:
    """torch's OpenMP idle spin in this process: a benchmark imports torch itself, before
    tenferro's torch backend would set its short spin (tenferro_torch.backend.OMP_SPIN_COUNT),
    so libgomp's default applies unless GOMP_SPINCOUNT is set; it moves torch:cpu figures."""
    import os

    spin = os.environ.get("GOMP_SPINCOUNT")
    return f"GOMP_SPINCOUNT={spin}" if spin else "libgomp's default spin (GOMP_SPINCOUNT unset)"


def main() -> None:
    import os

    import torch

    threads = threads_setting()
    print(f"machine: {cpu_name()} ({os.cpu_count()} cores), python {platform.python_version()}, "
          f"numpy {np.__version__}, torch {torch.__version__}, {threads}")
    print(f"{'workload':<22}{'tenferro':>12}{'numpy':>12}{'torch':>12}{'tf/np':>8}{'tf/torch':>10}")
    for name, t_tf, t_np, t_torch in workloads(torch):
        print(f"{name:<22}{t_tf * 1e6:>10.2f}us{t_np * 1e6:>10.2f}us{t_torch * 1e6:>10.2f}us"
              f"{t_tf / t_np:>8.2f}{t_tf / t_torch:>10.2f}")


if __name__ == "__main__":
    main()
