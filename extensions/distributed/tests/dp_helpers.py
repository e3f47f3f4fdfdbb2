"""Shared pieces of the data-parallel tests: a small float64 MLP as a dict of tensors, the
global batch of each step (the same on every rank; rank r trains on its contiguous slice),
and single-process references. Workers import this module by name (the launcher puts the
tests folder on the path)."""

from __future__ import annotations

import hashlib

import numpy as np

GLOBAL_BATCH = 24  # divisible by 1, 2, 3, 4 and by the microbatch count 12
MICROBATCH = 2
DIMS = (5, 7, 3)


def make_params(seed: int = 0, dtype: str = "float64") -> dict:
    from tenferro_runtime import array_api as xp

    rng = np.random.default_rng(seed)
    a, h, c = DIMS
    return {"w1": xp.asarray(rng.standard_normal((a, h)).astype(dtype) * 0.5),
            "b1": xp.asarray(rng.standard_normal((h,)).astype(dtype) * 0.1),
            "w2": xp.asarray(rng.standard_normal((h, c)).astype(dtype) * 0.5),
            "b2": xp.asarray(np.zeros((c,), dtype))}


def batch(step: int, seed: int = 1, dtype: str = "float64") -> tuple[np.ndarray, np.ndarray]:
    """The global batch of `step`: inputs (B, 5) and regression targets (B, 3)."""
    rng = np.random.default_rng([seed, step])
    x = rng.standard_normal((GLOBAL_BATCH, DIMS[0])).astype(dtype)
    y = rng.standard_normal((GLOBAL_BATCH, DIMS[2])).astype(dtype)
    return x, y


def local(arr: np.ndarray, rank: int, world: int) -> np.ndarray:
    n = arr.shape[0] // world
    return arr[rank * n:(rank + 1) * n]


def loss_fn(p: dict, x, y):
    from tenferro_runtime import array_api as xp

    h = xp.tanh(x @ p["w1"] + p["b1"])
    out = h @ p["w2"] + p["b2"]
    return xp.mean((out - y) ** 2)


def as_numpy(params: dict) -> dict:
    return {k: np.array(v) for k, v in params.items()}


def digest(params: dict) -> str:
    h = hashlib.sha256()
    for k in sorted(params):
        h.update(np.ascontiguousarray(np.asarray(params[k])).tobytes())
    return h.hexdigest()


def _single_process(steps: int, make_opt, seed: int, grads, record) -> list:
    """Steps of one process on the global batch: `grads(vg, p, x, y)` gives the gradients,
    `record(p)` what is kept after each step."""
    from tenferro_ad import value_and_grad
    from tenferro_runtime import array_api as xp
    from tenferro_runtime import compile

    opt = make_opt()
    p = make_params(seed)
    st = opt.init(p)
    vg = compile(value_and_grad(loss_fn))
    out = []
    for s in range(steps):
        x, y = batch(s)
        p, st = opt.update(p, grads(vg, p, xp.asarray(x), xp.asarray(y)), st)
        out.append(record(p))
    return out


def reference_run(steps: int, make_opt, seed: int = 0) -> list[dict]:
    """Single process on the concatenated (global) batch: parameters after every step."""
    return _single_process(steps, make_opt, seed, lambda vg, p, x, y: vg(p, x, y)[1], as_numpy)


def deterministic_reference(steps: int, make_opt, seed: int = 0) -> list[str]:
    """Single process, no communication: the same microbatch partials summed in the same fixed
    order as the deterministic mode; the digest of the parameters after every step."""
    from tenferro_distributed.data_parallel import _unflat, microbatch_grads, ordered_sum
    from tenferro_runtime.pytree import tree_flatten, tree_unflatten

    def grads(vg, p, x, y):
        _, flats = microbatch_grads(loss_fn, p, (x, y), MICROBATCH, vg)
        leaves, td = tree_flatten(p)
        return tree_unflatten(td, _unflat(ordered_sum(flats) / flats.shape[0], leaves))

    return _single_process(steps, make_opt, seed, grads, digest)


def _adam():
    import tenferro_nn as nn

    return nn.Adam(lr=0.05)


def ckpt_main(out: str, ckpt: str, steps: int, every: int, fail_at: int) -> None:
    """Run under torchrun: deterministic data-parallel training that checkpoints every `every`
    steps, resumes from the last checkpoint, and (first attempt only) has rank 1 exit at step
    `fail_at`. Rank 0 writes the final digest and where it started to `out` (JSON)."""
    import json
    import os

    import tenferro_distributed as dist
    from tenferro_ad import value_and_grad
    from tenferro_distributed.checkpoint import load_checkpoint, save_checkpoint
    from tenferro_distributed.data_parallel import deterministic_value_and_grad
    from tenferro_runtime import array_api as xp
    from tenferro_runtime import compile

    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    # a fresh store per attempt: torchrun's agent store keeps the keys of the failed attempt
    # (a dead rank's gloo address), which env:// would hand to the restarted ranks
    dist.init(timeout=60, init_method=f"file://{ckpt}.store{attempt}")
    r, n = dist.rank(), dist.world_size()
    opt = _adam()
    p = make_params()
    st = opt.init(p)
    got = load_checkpoint(ckpt, {"params": p, "opt": st})
    start = 0
    if got is not None:
        tree, start, _ = got
        p, st = tree["params"], tree["opt"]
    vg = compile(value_and_grad(loss_fn))
    for s in range(start, steps):
        if attempt == 0 and s == fail_at and r == 1:
            os._exit(3)  # a crash: torchrun restarts every worker
        x, y = batch(s)
        xl, yl = xp.asarray(local(x, r, n)), xp.asarray(local(y, r, n))
        _, g = deterministic_value_and_grad(loss_fn, p, xl, yl, microbatch=MICROBATCH, value_and_grad_fn=vg)
        p, st = opt.update(p, g, st)
        if (s + 1) % every == 0:
            save_checkpoint(ckpt, {"params": p, "opt": st}, step=s + 1)
    if r == 0:
        with open(out, "w") as f:
            json.dump({"digest": digest(p), "start": start, "attempt": attempt, "world": n}, f)
    dist.shutdown()


if __name__ == "__main__":
    import sys

    ckpt_main(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6]))
