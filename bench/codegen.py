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
- GPU: `gpu_benchmarks()` (where CUDA is available; `--gpu-only --json PATH` runs only it and
  saves its results, as `make gpu-check` does through bench/gpu_check.py).
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import numpy as np
from compile import interleaved_all
from eager_overhead import cpu_name, threads_setting  # noqa: I001  (same folder)
from train import BATCH, LR, WIDTHS, data, tf_compiled, torch_compiled, torch_eager, torch_train_step

import tenferro_nn as nn
from tenferro_ad import value_and_grad
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, default_device, random


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


CNN_BATCH = 64


def _demo():
    """examples/demo.py as a module (its `cnn` is the digits CNN)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "examples" / "demo.py"
    spec = importlib.util.spec_from_file_location("tenferro_demo", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cnn_data(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A batch of CNN_BATCH 8x8 one-channel images in [0, 1) and integer labels."""
    return (rng.random((CNN_BATCH, 1, 8, 8)).astype(np.float32),
            rng.integers(0, 10, CNN_BATCH).astype(np.int64))


def tf_cnn(x_np, y_np, device, backend=None):
    """The demo's CNN train step (dropout on, Adam, state in the graph) compiled on `device`
    by executor `backend`; `run.state_dict` holds the initial weights (for PyTorch's copy)."""
    with default_device(device):
        model = _demo().cnn(random.key(0))
        x, y, key = xp.asarray(x_np), xp.asarray(y_np), random.key(1)
    opt = nn.Adam(lr=LR)
    state = [model, opt.init(model)]

    def train_step(model, state, x, y, key):
        loss, grads = value_and_grad(lambda m: nn.cross_entropy(m(x, key=key), y))(model)
        model, state = opt.update(model, grads, state)
        return model, state, loss

    step = compile(train_step, donate_argnums=(0, 1), backend=backend)

    def run():
        state[0], state[1], loss = step(state[0], state[1], x, y, key)
        return loss

    run.step = step
    run.state_dict = {k: np.asarray(v.numpy()) for k, v in model.state_dict().items()}
    return run


def torch_cnn(torch, state_dict, x_np, y_np, device="cuda", compiled=False):
    """The same CNN in PyTorch (same weights), its Adam step eager or under torch.compile."""
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Dropout(0.2),
        torch.nn.Linear(128, 10))
    model.load_state_dict({k: torch.tensor(v) for k, v in state_dict.items()})
    return torch_train_step(torch, model.to(device), x_np, y_np, device, compiled=compiled)


def train_rows(torch, kind: str) -> dict:
    """{row name: step builder} of the MLP ("mlp") or CNN ("cnn") train step on torch:cuda:0:
    tenferro through the triton, inductor and plan executors, PyTorch eager, torch.compile."""
    dev = "torch:cuda:0"
    if kind == "mlp":
        params, x, y = data(np.random.default_rng(0))
        rows = {f"tenferro {b}": (lambda b=b: tf_compiled(params, x, y, dev, b))
                for b in ("triton", "inductor", "plan")}
        rows["PyTorch eager"] = lambda: torch_eager(torch, params, x, y, "cuda")
        rows["torch.compile"] = lambda: torch_compiled(torch, params, x, y, "cuda")
        return rows
    x, y = cnn_data(np.random.default_rng(0))
    weights = tf_cnn(x, y, "numpy:cpu").state_dict  # the same initial weights everywhere
    rows = {f"tenferro {b}": (lambda b=b: tf_cnn(x, y, dev, b)) for b in ("triton", "inductor", "plan")}
    rows["PyTorch eager"] = lambda: torch_cnn(torch, weights, x, y)
    rows["torch.compile"] = lambda: torch_cnn(torch, weights, x, y, compiled=True)
    return rows


def gpu_train(torch, kind: str) -> dict:
    """One train step (MLP or CNN) per row on torch:cuda:0, timed interleaved with a
    synchronize after each call: {"ms": {row: ms}, "first_call_s": {row: s}, "first_loss":
    {row: loss}, "errors": {row: message}} (a row that fails to build or run is an error)."""
    out: dict = {"ms": {}, "first_call_s": {}, "first_loss": {}, "errors": {}}
    fns = {}
    for name, build in train_rows(torch, kind).items():
        try:
            fn = build()
            out["first_call_s"][name], out["first_loss"][name] = first_call(fn)
            torch.cuda.synchronize()
            fns[name] = fn
        except Exception as exc:  # reported as the row's error, the other rows still run
            out["errors"][name] = f"{type(exc).__name__}: {exc}"[:500]

    def synced(fn):
        def run():
            fn()
            torch.cuda.synchronize()
        return run

    times = interleaved_all({k: synced(f) for k, f in fns.items()}, rounds=10)
    out["ms"] = {k: t * 1e3 for k, t in times.items()}
    return out


def gpu_benchmarks(torch, on_part=None) -> dict:
    """On torch:cuda:0 (the issue's GPU goals): a fused chain of 10 elementwise ops against
    the copy bandwidth (goal >= 0.85), generated softmax / layer norm against torch's at row
    lengths 256..16384 (goal: generated time / torch's <= 1 everywhere), fp16/bf16 matmul at
    4096^3 against cuBLAS (goal >= 0.9x its TFLOP/s), and the MLP and CNN train steps through
    the triton, inductor and plan executors vs PyTorch eager and torch.compile (MLP goal:
    <= 1.0x torch.compile). Prints each part and returns {"gpu", "chain", "rows", "matmul",
    "mlp", "cnn", "errors"}; a part that raises is recorded under "errors" and the others run.
    `on_part(results)` is called after each part (bench/gpu_check.py saves them as they come).
    Without CUDA: {"gpu": None}."""
    if not torch.cuda.is_available():
        print("\nGPU: no CUDA device; GPU benchmarks skipped")
        return {"gpu": None}
    from tenferro_core import dtypes as D
    from tenferro_triton.elementwise import bench_chain
    from tenferro_triton.matmul import bench_matmul
    from tenferro_triton.rows import bench_rows

    res: dict = {"gpu": torch.cuda.get_device_name(0), "errors": {}}
    print(f"\nGPU: {res['gpu']}")

    def chain() -> None:
        c = res["chain"] = bench_chain(n_ops=10)
        print(f"  10-op fused elementwise chain: {c['fused_gbps']:.0f} GB/s, copy "
              f"{c['copy_gbps']:.0f} GB/s: {c['ratio']:.2f} of copy bandwidth (goal >= 0.85)")

    def rows() -> None:
        res["rows"] = {}
        for kind in ("softmax", "layer_norm"):
            print(f"  {kind} (4096 rows; generated / torch, goal <= 1.00 at every length):")
            res["rows"][kind] = bench_rows(kind)

    def matmuls() -> None:
        res["matmul"] = {}
        for dtype in (D.float16, D.bfloat16):
            r = res["matmul"][dtype.name] = bench_matmul(dtype, 4096, 4096, 4096)
            print(f"  matmul {dtype} 4096^3: {r['triton_tflops']:.0f} TFLOP/s, cuBLAS "
                  f"{r['torch_tflops']:.0f}: {r['triton_tflops'] / r['torch_tflops']:.2f}x (goal >= 0.9)")

    def train(kind: str) -> None:
        r = res[kind] = gpu_train(torch, kind)
        what = f"MLP {'-'.join(map(str, WIDTHS))} b{BATCH}" if kind == "mlp" else f"digits CNN b{CNN_BATCH}"
        tc = r["ms"].get("torch.compile", float("nan"))
        print(f"  {what} float32 Adam train step:")
        for name, t in r["ms"].items():
            print(f"    {name:<20}{t:>8.3f} ms  {t / tc:>5.2f}x torch.compile  "
                  f"(first call {r['first_call_s'][name]:.1f} s)")
        for name, err in r["errors"].items():
            print(f"    {name:<20}failed: {err}")

    parts = [("chain", chain), ("rows", rows), ("matmul", matmuls),
             ("mlp", lambda: train("mlp")), ("cnn", lambda: train("cnn"))]
    for name, part in parts:
        try:
            part()
        except Exception as exc:  # one broken part must not hide the others' figures
            res["errors"][name] = f"{type(exc).__name__}: {exc}"[:500]
            print(f"  {name} failed: {res['errors'][name]}")
        if on_part is not None:
            on_part(res)
    return res


def main() -> None:
    import argparse
    import json

    import torch

    ap = argparse.ArgumentParser(description="code-generating executors vs PyTorch (CPU and GPU)")
    ap.add_argument("--gpu-only", action="store_true", help="only the GPU part (gpu_benchmarks)")
    ap.add_argument("--json", help="write the GPU results here as JSON (after each part)")
    args = ap.parse_args()
    threads = threads_setting()
    print(f"machine: {cpu_name()} ({os.cpu_count()} cores), python {platform.python_version()}, "
          f"numpy {np.__version__}, torch {torch.__version__}, {threads}")
    if not args.gpu_only:
        cpu_benchmarks(torch)

    def save(res: dict) -> None:
        if args.json:
            Path(args.json).write_text(json.dumps(res, indent=1, default=str))

    save(gpu_benchmarks(torch, on_part=save))


if __name__ == "__main__":
    main()
