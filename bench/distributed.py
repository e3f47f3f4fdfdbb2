"""Distributed training (issue 23) (2 local processes on gloo, one thread each).

1. Step time of a data-parallel train step (forward, backward, gradient all_reduce, Adam) for
   the digits CNN and the MLP 784-512-512-10: tenferro (compiled step, buckets inside the
   graph; and with overlap=True, the start/wait pass) vs PyTorch DDP on the same model, and
   each vs its compute-only step (no communication): the overlap figure.
2. all_reduce time per algorithm (native, ring, tree, rhd) over 1 KB - 64 MB, with the
   prediction beside it of the alpha-beta cost model fitted on a second series of timings
   taken in the same rounds (every 4x).

Timings are medians of interleaved rounds (every variant timed in each round, side by side),
so a machine loaded by other work shifts all of them alike; read the ratios, not the times.

    python bench/distributed.py [--rounds 7] [--steps 10] [--quick] [--device torch:cpu]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def _tf_models():
    import tenferro_nn as nn
    from tenferro_runtime import random

    k = random.split(random.key(0), 7)
    cnn = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, key=k[0]), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, key=k[1]), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(256, 128, key=k[2]), nn.ReLU(), nn.Linear(128, 10, key=k[3]))
    mlp = nn.Sequential(nn.Linear(784, 512, key=k[4]), nn.ReLU(), nn.Linear(512, 512, key=k[5]), nn.ReLU(),
                        nn.Linear(512, 10, key=k[6]))
    return {"digits CNN": (cnn, (1, 8, 8), 32), "MLP 784-512-512-10": (mlp, (784,), 64)}


def _torch_model(name: str):
    import torch.nn as tnn

    if name.startswith("digits"):
        return tnn.Sequential(tnn.Conv2d(1, 32, 3, padding=1), tnn.ReLU(), tnn.MaxPool2d(2),
                              tnn.Conv2d(32, 64, 3, padding=1), tnn.ReLU(), tnn.MaxPool2d(2), tnn.Flatten(),
                              tnn.Linear(256, 128), tnn.ReLU(), tnn.Linear(128, 10))
    return tnn.Sequential(tnn.Linear(784, 512), tnn.ReLU(), tnn.Linear(512, 512), tnn.ReLU(),
                          tnn.Linear(512, 10))


def _timer(fn, steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - t0) / steps


def bench_steps(args) -> list[str]:
    import torch
    from torch.nn.parallel import DistributedDataParallel

    import tenferro_distributed as dist

    torch.set_num_threads(1)
    r = dist.rank()
    lines = []
    for name, (model, shape, bs) in _tf_models().items():
        rng = np.random.default_rng(r)
        x_np = rng.standard_normal((bs, *shape)).astype(np.float32)
        y_np = rng.integers(0, 10, bs).astype(np.int64)
        variants = {}
        for key, sync, ov in (("tf dp", True, False), ("tf dp overlap", True, True),
                              ("tf compute", False, False)):
            variants[key] = _tf_variant(model, x_np, y_np, sync, ov, args.device)
        if args.tape:
            for mode in ("on_ready", "after", "compute"):
                variants[f"tape {mode}"] = _tape_variant(model, x_np, y_np, mode, args.device)
        variants["torch ddp"] = _torch_variant(DistributedDataParallel(_torch_model(name)), x_np, y_np)
        variants["torch compute"] = _torch_variant(_torch_model(name), x_np, y_np)
        for fn in variants.values():  # warm-up: traces, connections, allocations
            for _ in range(3):
                fn()
        times: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(args.rounds):
            for k, fn in variants.items():
                times[k].append(_timer(fn, args.steps))
        med = {k: statistics.median(v) for k, v in times.items()}
        lines.append(f"{name} (batch {bs} per rank, 2 ranks, tenferro on {args.device}): " + ", ".join(
            f"{k} {1e3 * v:.2f} ms" for k, v in med.items()))
        lines.append(f"  tenferro DP / PyTorch DDP: {med['tf dp'] / med['torch ddp']:.2f}x "
                     f"(overlap=True: {med['tf dp overlap'] / med['torch ddp']:.2f}x); step / compute-only: "
                     f"tenferro {med['tf dp'] / med['tf compute']:.2f}x, "
                     f"tenferro overlap {med['tf dp overlap'] / med['tf compute']:.2f}x, "
                     f"DDP {med['torch ddp'] / med['torch compute']:.2f}x")
        if args.tape:
            lines.append(f"  eager tape: buckets started during backward (on_ready) "
                         f"{med['tape on_ready'] / med['tape compute']:.2f}x of compute-only, "
                         f"all_reduce after backward {med['tape after'] / med['tape compute']:.2f}x")
    return lines


def _tf_variant(model, x_np, y_np, sync: bool, overlap: bool, device: str):
    """A step function of its own model copy and data, on `device`."""
    import tenferro_nn as nn
    from tenferro_ad import value_and_grad
    from tenferro_distributed.data_parallel import allreduce_gradients
    from tenferro_runtime import array_api as xp
    from tenferro_runtime import compile

    opt = nn.Adam(lr=1e-3)
    x, y = xp.asarray(x_np, device=device), xp.asarray(y_np, device=device)
    m = nn.map_tensors(lambda t: xp.asarray(np.array(t), device=device), model)  # its own (donated)
    state = [m, opt.init(m)]

    def step(m, st, x, y):
        loss, g = value_and_grad(lambda m: nn.cross_entropy(m(x), y))(m)
        if sync:
            g = allreduce_gradients(g, overlap=overlap)
        m, st = opt.update(m, g, st)
        return m, st, loss

    fn = compile(step, donate_argnums=(0, 1))

    def run():
        state[0], state[1], _ = fn(state[0], state[1], x, y)
    return run


def _tape_variant(model, x_np, y_np, mode: str, device: str):
    """An eager GradientTape step: DataParallel.gradient (buckets started by on_ready), the
    gradient then allreduce_gradients, or no communication."""
    import tenferro_nn as nn
    from tenferro_ad import GradientTape
    from tenferro_distributed.data_parallel import DataParallel
    from tenferro_runtime import array_api as xp

    m = nn.map_tensors(lambda t: xp.asarray(np.array(t), device=device), model)
    dp = DataParallel(m)
    params = dp.parameters()
    opt = nn.Adam(params, lr=1e-3)
    x, y = xp.asarray(x_np, device=device), xp.asarray(y_np, device=device)

    def run():
        with GradientTape() as tape:
            tape.watch(params)
            loss = nn.cross_entropy(m(x), y)
        if mode == "compute":
            g = tape.gradient(loss, params)
        else:
            g = dp.gradient(tape, loss, overlap=mode == "on_ready")
        opt.step(g)
    return run


def _torch_variant(mod, x_np, y_np):
    import torch

    opt = torch.optim.Adam(mod.parameters(), lr=1e-3)
    tx, ty = torch.from_numpy(x_np), torch.from_numpy(y_np)

    def run():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(mod(tx), ty).backward()
        opt.step()
    return run


def bench_collectives(args) -> list[str]:
    """Two independent series of all_reduce timings, taken in the same rounds (each round
    times every size once for each series, so a slow stretch of the machine falls on both):
    the model is fitted on the first series at every 4x from 1 KB to 64 MB and its
    predictions are checked against the second at every power of two."""
    import tenferro_distributed as dist

    algs = dist.ALGORITHMS["all_reduce"]
    sizes = [1 << k for k in range(10, 27, 1 if not args.quick else 4)]
    fit_sizes = [s for s in sizes if (s.bit_length() - 11) % 2 == 0]  # 1 KB, 4 KB, ..., 64 MB
    rounds: dict[str, list] = {"fit": [], "check": []}
    for _ in range(args.coll_reps):
        for series in ("fit", "check"):
            rounds[series].append(dist.time_all_reduce(tuple(sizes), reps=1))
    pick = {"min": min, "median": statistics.median,
            "p20": lambda ts: float(np.percentile(list(ts), 20))}[args.estimator]
    best = {series: {a: [pick(r[a][i] for r in rs) for i in range(len(sizes))] for a in algs}
            for series, rs in rounds.items()}
    model = dist.fit(fit_sizes, {a: [t for s, t in zip(sizes, best["fit"][a]) if s in fit_sizes]
                                 for a in algs})
    lines = [f"{'bytes':>10} " + " ".join(f"{a + ' ms':>10} {'pred':>8}" for a in algs)]
    within = {True: [0, 0], False: [0, 0]}  # a fitted size? -> [within 20%, total]
    errors: list[float] = []
    for i, size in enumerate(sizes):
        row = f"{size:>10} "
        for a in algs:
            t, pred = best["check"][a][i], model.predict(a, size)
            tally = within[size in fit_sizes]
            tally[0] += abs(pred - t) <= 0.2 * t
            errors.append(abs(pred - t) / t)
            tally[1] += 1
            row += f"{1e3 * t:>10.3f} {1e3 * pred:>8.3f}"
        lines.append(row)
    lines.append(f"prediction within 20% of the measured time: {within[True][0] + within[False][0]} of "
                 f"{within[True][1] + within[False][1]} ({within[False][0]} of {within[False][1]} at sizes "
                 f"between the fitted ones, {within[True][0]} of {within[True][1]} at the fitted sizes, "
                 f"measured apart); relative error median {100 * statistics.median(errors):.1f}%, "
                 f"largest {100 * max(errors):.1f}%")
    return lines


def worker(args) -> None:
    import tenferro_distributed as dist

    dist.init(init_method=f"file://{os.environ['BENCH_STORE']}", timeout=300)
    out = [] if args.skip_steps else bench_steps(args)
    if not args.skip_collectives:
        out += ["", f"all_reduce per algorithm (ms per call, slowest rank, {args.estimator} over rounds of "
                "back-to-back calls), "
                "cost model prediction beside"]
        out += bench_collectives(args)
    if dist.rank() == 0:
        print("\n".join(out), flush=True)
    dist.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="fewer message sizes")
    ap.add_argument("--coll-reps", type=int, default=15, help="rounds per message size (collectives)")
    ap.add_argument("--estimator", choices=("min", "p20", "median"), default="p20",
                    help="each series' time per size over the rounds")
    ap.add_argument("--skip-collectives", action="store_true")
    ap.add_argument("--skip-steps", action="store_true")
    ap.add_argument("--tape", action="store_true", help="also the eager GradientTape step")
    ap.add_argument("--device", default="numpy:cpu", help="tenferro's device for the steps")
    args = ap.parse_args()
    if "RANK" in os.environ:
        worker(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, WORLD_SIZE="2", GLOO_SOCKET_IFNAME="lo",
                   BENCH_STORE=os.path.join(tmp, "store"), TENFERRO_THREADS="1", OMP_NUM_THREADS="1",
                   OPENBLAS_NUM_THREADS="1")
        procs = [subprocess.Popen([sys.executable, __file__, *sys.argv[1:]], env=dict(env, RANK=str(r)))
                 for r in range(2)]
        try:
            codes = [p.wait(timeout=900) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    sys.exit(max(codes))


if __name__ == "__main__":
    main()
