"""Train the digits CNN of `demo.py` data-parallel on 2 local processes (tenferro-distributed
on gloo): each rank reads its share of every epoch (DistributedSampler), a compiled train
step averages the gradients over ranks in buckets inside the graph, rank 0's parameters are
broadcast at the start, and the job's energy (every rank's joules, with sources) is
gathered per step and epoch.

    python examples/ddp_digits.py                  # spawns 2 processes itself
    torchrun --nproc-per-node=2 examples/ddp_digits.py   # or under torchrun (any number)

Options: `--world N` (self-spawned processes), `--epochs N`, `--batch-size N` (per rank).
Self-spawned, the ranks meet through a file store in a temporary folder and gloo talks over
the loopback interface only.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def cnn(key):
    import tenferro_nn as nn
    from tenferro_runtime import random

    k = random.split(key, 4)
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, key=k[0]), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, key=k[1]), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(256, 128, key=k[2]), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(128, 10, key=k[3]),
    )


def digits():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x = (data.images / 16.0).astype(np.float32)[:, None]
    return train_test_split(x, data.target.astype(np.int64), test_size=0.2, random_state=0,
                            stratify=data.target)


def train(args: argparse.Namespace) -> None:
    import tenferro_distributed as dist
    import tenferro_nn as nn
    from tenferro_ad import value_and_grad
    from tenferro_distributed.data_parallel import allreduce_gradients, broadcast_parameters
    from tenferro_distributed.job_energy import JobEnergy
    from tenferro_distributed.sampler import DistributedSampler
    from tenferro_runtime import array_api as xp
    from tenferro_runtime import compile, random

    store = os.environ.get("DDP_DIGITS_STORE")
    dist.init(init_method=f"file://{store}" if store else None, timeout=120)
    r, n = dist.rank(), dist.world_size()
    x_train, x_test, y_train, y_test = digits()
    k_init, k_data, k_drop = random.split(random.key(0), 3)
    model = broadcast_parameters(cnn(random.fold_in(k_init, r)))  # rank 0's initialization everywhere
    sampler = DistributedSampler(len(x_train), key=k_data, drop_last=True)
    loader = sampler.loader(nn.ArrayDataset(x_train, y_train), batch_size=args.batch_size, drop_last=True)
    opt = nn.Adam(lr=nn.cosine_annealing(3e-3, t_max=args.epochs * len(loader)))
    state = opt.init(model)

    def train_step(model, state, x, y, key):
        loss, grads = value_and_grad(lambda m: nn.cross_entropy(m(x, key=key), y))(model)
        model, state = opt.update(model, allreduce_gradients(grads), state)   # one graph, buckets inside
        return model, state, dist.all_reduce(loss, "mean")

    step = compile(train_step, donate_argnums=(0, 1))
    predict = compile(lambda m, x: xp.argmax(m(x), axis=1))
    job = JobEnergy()
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        model.train()
        losses = []
        with job.epoch(f"epoch {epoch + 1}"):
            for i, (x, y) in enumerate(loader):
                with job.step():
                    key = random.fold_in(random.fold_in(k_drop, r), epoch * 1000 + i)
                    model, state, loss = step(model, state, x, y, key)
                losses.append(float(loss))
        model.eval()
        acc = float(np.mean(np.asarray(predict(model, xp.asarray(x_test))) == y_test))
        if r == 0:
            print(f"epoch {epoch + 1:>2}: loss {np.mean(losses):.4f}  test accuracy {acc:.3f}  "
                  f"job energy {job.epochs[-1].total:.3g} J", flush=True)
    if r == 0:
        print(f"\n{n} ranks, {len(loader)} steps/epoch of {args.batch_size} x {n} images, "
              f"{time.perf_counter() - t0:.1f} s; compiled step {step.cache_info()}")
        print(f"final test accuracy: {acc:.4f}")
        print(f"\njob energy per epoch (every rank's joules and sources)\n{job.table()}")
    dist.shutdown()


def spawn(args: argparse.Namespace) -> int:
    """Run this script on `args.world` local processes (ranks meet through a file store)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, WORLD_SIZE=str(args.world), GLOO_SOCKET_IFNAME="lo",
                   DDP_DIGITS_STORE=os.path.join(tmp, "store"))
        procs = [subprocess.Popen([sys.executable, __file__, *sys.argv[1:]], env=dict(env, RANK=str(r),
                                                                                      LOCAL_RANK=str(r)))
                 for r in range(args.world)]
        try:
            codes = [p.wait(timeout=args.timeout) for p in procs]
        except subprocess.TimeoutExpired:
            codes = [1]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    return max(codes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args()
    if "RANK" in os.environ:
        train(args)
    else:
        sys.exit(spawn(args))


if __name__ == "__main__":
    main()
