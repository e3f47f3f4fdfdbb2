"""Threads that don't fight: the `threads` setting with both CPU backends in one process, and
the digits demo on a busy machine. Three interleaved runs; ratios printed (record them in
docs/performance.md, "Threads", with the machine and the thread setting).

Workloads:
- MLP 784-512-512-10, batch 128, float32, the compiled Adam train step (bench/train.py's
  `tf_compiled`): numpy:cpu alone, torch:cpu alone (each in its own process), and both in
  one process taking steps in turn (numpy, torch, numpy, ...; each step timed on its own).
  Each device runs alone before and after the shared process, and the shared step is
  compared with the mean of the two. Goal: each device's step in the shared process within
  10% of that device alone.
- the digits demo (`examples/demo.py`, default settings) quiet and with another CPU-bound
  process running (`python -c "while True: pass"`, started and killed here). Goal: loaded
  within 2x of quiet.

`--baseline` runs the same with OpenBLAS's own behaviour (its 2**28-cycle idle spin and its
threading of every product above 262,144 multiply-adds), which is what this issue fixed.
Each measurement runs in a fresh process: thread pools are process-wide.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEMO = HERE.parent / "examples" / "demo.py"


def baseline_env(env: dict) -> dict:
    """The libraries as they behave unconfigured: explicit OPENBLAS_THREAD_TIMEOUT and
    GOMP_SPINCOUNT (their defaults) keep tenferro from shortening the spins;
    TENFERRO_BENCH_BASELINE turns the numpy backend's per-product thread choice off (read by
    `baseline_products` in the child processes)."""
    return {**env, "OPENBLAS_THREAD_TIMEOUT": "28", "GOMP_SPINCOUNT": "300000",
            "TENFERRO_BENCH_BASELINE": "1"}


def baseline_products() -> None:
    """Under --baseline: every product threaded as OpenBLAS decides, whatever the load."""
    if os.environ.get("TENFERRO_BENCH_BASELINE"):
        import tenferro_numpy.threads as nt

        nt.SMALL_PRODUCT = 0
        nt.idle_cpus = lambda: None


def child_mlp(devices: list[str], steps: int) -> dict:
    """Per-step times (median, seconds) of the compiled MLP step on each device, the devices
    taking steps in turn."""
    sys.path.insert(0, str(HERE))
    import numpy as np
    from train import data, tf_compiled

    from tenferro_runtime import default_runtime

    baseline_products()
    rt = default_runtime()
    rt.apply_threads()
    params, x, y = data(np.random.default_rng(0))
    runs = {d: tf_compiled(params, x, y, d) for d in devices}
    for _ in range(10):
        for fn in runs.values():
            fn()
    times: dict[str, list[float]] = {d: [] for d in devices}
    for _ in range(steps):
        for d, fn in runs.items():
            t0 = time.perf_counter()
            fn()
            times[d].append(time.perf_counter() - t0)
    return {"threads": rt.threads, **{d: statistics.median(t) for d, t in times.items()}}


def run_child(devices: list[str], steps: int, env: dict) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", ",".join(devices), "--steps", str(steps)],
                         capture_output=True, text=True, env=env)
    if out.returncode:
        sys.exit(f"the child for {devices} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def demo_wall(env: dict, loaded: bool) -> tuple[float, float]:
    """(wall, CPU) seconds of one demo run; CPU (user + system) is the work it did, so a wall
    time that grows at equal CPU is the scheduler sharing cores, not threads waiting."""
    import resource

    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if loaded else None
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--demo", "--out", "/tmp/tenferro_threads.safetensors"],
                       capture_output=True, text=True, env=env, check=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    if sys.argv[1:2] == ["--demo"]:  # the demo itself, in this process (--baseline's switches)
        import runpy

        baseline_products()
        sys.argv = [str(DEMO), *sys.argv[2:]]
        runpy.run_path(str(DEMO), run_name="__main__")
        return
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", action="store_true", help="OpenBLAS's own spin and threading")
    ap.add_argument("--skip-demo", action="store_true")
    ap.add_argument("--skip-mlp", action="store_true")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child_mlp(args.child.split(","), args.steps)))
        return

    import numpy as np
    import torch
    from eager_overhead import cpu_name

    from tenferro_runtime import default_runtime

    rt = default_runtime()
    env = dict(os.environ)
    if args.baseline:
        env = baseline_env(env)
    print(f"machine: {cpu_name()} ({os.cpu_count()} cores), python {platform.python_version()}, "
          f"numpy {np.__version__}, torch {torch.__version__}, threads {rt.threads} "
          f"({rt.threads_source}){', baseline (OpenBLAS unconfigured)' if args.baseline else ''}; "
          f"load average {os.getloadavg()[0]:.2f}")

    if not args.skip_mlp:
        print("\nMLP 784-512-512-10 b128 float32 compiled Adam step, median per step "
              "(shared: both devices in one process, steps in turn)")
        devices = ("numpy:cpu", "torch:cpu")
        ratios: dict[str, list[float]] = {d: [] for d in devices}
        for r in range(args.runs):
            # each device alone before and after the shared process, in mirrored order, so
            # that a drift of the machine's speed over the run falls on both sides evenly
            before = {d: run_child([d], args.steps, env)[d] for d in devices}
            shared = run_child(list(devices), args.steps, env)
            after = {d: run_child([d], args.steps, env)[d] for d in reversed(devices)}
            parts = []
            for d in devices:
                alone = (before[d] + after[d]) / 2
                ratio = shared[d] / alone
                ratios[d].append(ratio)
                parts.append(f"{d} alone {before[d] * 1e3:.2f}/{after[d] * 1e3:.2f} ms, shared "
                             f"{shared[d] * 1e3:.2f} ms ({ratio:.2f}x)")
            print(f"  run {r + 1}: " + "; ".join(parts))
        for d, rs in ratios.items():
            print(f"  {d}: shared/alone {', '.join(f'{x:.2f}' for x in rs)} (goal <= 1.10)")

    if not args.skip_demo:
        print("\ndigits demo (examples/demo.py, default settings) wall time, quiet vs another "
              "CPU-bound process running")
        rs = []
        for r in range(args.runs):
            load = os.getloadavg()[0]
            (quiet, cpu_q), (loaded, cpu_l) = demo_wall(env, loaded=False), demo_wall(env, loaded=True)
            rs.append(loaded / quiet)
            print(f"  run {r + 1}: quiet {quiet:5.1f} s (CPU {cpu_q:4.1f} s), loaded {loaded:5.1f} s "
                  f"(CPU {cpu_l:4.1f} s): {loaded / quiet:.2f}x; load average before {load:.2f}")
        print(f"  loaded/quiet {', '.join(f'{x:.2f}' for x in rs)} (goal <= 2.0)")


if __name__ == "__main__":
    main()
