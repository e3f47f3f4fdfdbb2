"""Code-generating executors: tenferro `compile(..., backend="inductor")` vs the plan replay,
PyTorch eager and `torch.compile`, one run.

Workloads (ratios printed; record them in docs/performance.md with the machine):
- CPU: the MLP 784-512-512-10, batch 128, float32 Adam train step of bench/train.py (forward,
  cross-entropy, backward, update; the optimizer state inside the compiled graph) run four
  ways: tenferro compiled with backend="inductor" on torch:cpu (the graph lowered to torch.fx
  and compiled by Inductor), tenferro compiled with backend="plan" on torch:cpu (the generic
  replay of torch kernels), PyTorch eager (torch.optim.Adam) and torch.compile (model and
  optimizer step). Timed interleaved (the rows alternate, so all see the same machine); the
  first call's compile time of each tenferro executor is printed too.
- GPU: `gpu_benchmarks()` (where CUDA is available).
"""

from __future__ import annotations

import os
import platform
import time

import numpy as np
from compile import interleaved_all
from eager_overhead import cpu_name  # noqa: I001  (same folder)
from train import BATCH, WIDTHS, data, tf_compiled, torch_compiled, torch_eager


def first_call(run) -> tuple[float, float]:
    """(seconds of the first call: trace, passes, executor build and its compile; its loss)."""
    t0 = time.perf_counter()
    loss = run()
    seconds = time.perf_counter() - t0
    return seconds, float(loss.detach() if hasattr(loss, "detach") else loss)  # torch's needs detach


def cpu_benchmarks(torch) -> None:
    params, x, y = data(np.random.default_rng(0))
    ind = tf_compiled(params, x, y, "torch:cpu", "inductor")
    plan = tf_compiled(params, x, y, "torch:cpu", "plan")
    rows = {"tenferro inductor torch:cpu": ind, "tenferro plan torch:cpu": plan,
            "PyTorch eager": torch_eager(torch, params, x, y)}
    try:
        rows["torch.compile"] = torch_compiled(torch, params, x, y)
    except Exception as exc:  # torch.compile needs a C compiler; report rather than fail
        print(f"torch.compile unavailable: {type(exc).__name__}: {exc}")
    first = {}
    for name in list(rows):
        try:
            first[name] = first_call(rows[name])
        except Exception as exc:
            print(f"{name} unavailable: {type(exc).__name__}: {exc}")
            rows.pop(name)
    kinds = [s._cache[next(iter(s._cache))][0].executable().kind for s in (ind.step, plan.step)]
    assert kinds == ["inductor", "plan"], kinds
    times = interleaved_all(rows)
    eager = times["PyTorch eager"]
    tc = times.get("torch.compile", float("nan"))
    plan_t = times["tenferro plan torch:cpu"]
    print(f"\nMLP {'-'.join(map(str, WIDTHS))} b{BATCH} float32 Adam train step, CPU "
          f"(first-step loss of every row: {', '.join(f'{v[1]:.5f}' for v in first.values())})")
    for name, t in times.items():
        print(f"  {name:<28}{t * 1e3:>8.2f} ms  {t / eager:>5.2f}x PyTorch eager  "
              f"{t / tc:>5.2f}x torch.compile  {t / plan_t:>5.2f}x tenferro plan  "
              f"(first call {first[name][0]:.2f} s)")


def gpu_benchmarks(torch) -> None:
    """On torch:cuda:0 (the issue's GPU goals): a fused chain of 10 elementwise ops against
    the copy bandwidth (goal >= 0.85), generated softmax / layer norm against torch's at row
    lengths 256..16384 (goal >= 1x everywhere), fp16/bf16 matmul at 4096^3 against cuBLAS
    (goal >= 0.9), and the MLP train step compiled through Triton vs torch.compile."""
    if not torch.cuda.is_available():
        print("\nGPU: no CUDA device; GPU benchmarks skipped")
        return
    from tenferro_core import dtypes as D
    from tenferro_triton.elementwise import bench_chain
    from tenferro_triton.matmul import bench_matmul
    from tenferro_triton.rows import bench_rows

    print(f"\nGPU: {torch.cuda.get_device_name(0)}")
    chain = bench_chain(n_ops=10)
    print(f"  10-op fused elementwise chain: {chain['fused_gbps']:.0f} GB/s, copy "
          f"{chain['copy_gbps']:.0f} GB/s: {chain['ratio']:.2f} of copy bandwidth (goal >= 0.85)")
    for kind in ("softmax", "layer_norm"):
        print(f"  {kind} (4096 rows; generated / torch, goal <= 1.00 at every length):")
        bench_rows(kind)
    for dtype in (D.float16, D.bfloat16):
        r = bench_matmul(dtype, 4096, 4096, 4096)
        print(f"  matmul {dtype} 4096^3: {r}")
    params, x, y = data(np.random.default_rng(0))
    rows = {"tenferro triton torch:cuda:0": tf_compiled(params, x, y, "torch:cuda:0", "triton"),
            "tenferro inductor torch:cuda:0": tf_compiled(params, x, y, "torch:cuda:0", "inductor"),
            "tenferro plan torch:cuda:0": tf_compiled(params, x, y, "torch:cuda:0", "plan")}
    rows["PyTorch eager"] = torch_eager(torch, params, x, y, "cuda")
    rows["torch.compile"] = torch_compiled(torch, params, x, y, "cuda")
    for fn in rows.values():
        first_call(fn)

    def synced(fn):
        def run():
            fn()
            torch.cuda.synchronize()
        return run

    times = interleaved_all({k: synced(f) for k, f in rows.items()})
    tc = times["torch.compile"]
    print(f"  MLP {'-'.join(map(str, WIDTHS))} b{BATCH} float32 Adam train step:")
    for name, t in times.items():
        print(f"    {name:<32}{t * 1e3:>8.3f} ms  {t / tc:>5.2f}x torch.compile")


def main() -> None:
    import torch

    torch.set_num_threads(2)
    print(f"machine: {cpu_name()} ({os.cpu_count()} cores), python {platform.python_version()}, "
          f"numpy {np.__version__}, torch {torch.__version__}")
    cpu_benchmarks(torch)
    gpu_benchmarks(torch)


if __name__ == "__main__":
    main()
