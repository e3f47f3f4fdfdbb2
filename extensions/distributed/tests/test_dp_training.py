"""Data parallel on 1-4 gloo processes: 50 steps equal to one process on the concatenated
batch at every step (eager buckets, compiled step, GradientTape with buckets started during
backward, no_sync accumulation), ZeRO-1 equal to plain data parallel with 1/world of the
optimizer memory, the deterministic mode bitwise equal for every world size and to a
single-process run, and typed errors for bad input. One spawned job per world size runs all
checks and returns its failures."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import dp_helpers as H
import tfdist_helpers as h

STEPS = 50


def _adam():
    import tenferro_nn as nn

    return nn.Adam(lr=0.05)


def _compare(fails: list, what: str, got: dict, want: dict, tol: float) -> float:
    err = max(float(np.max(np.abs(np.asarray(got[k]) - want[k]))) for k in want)
    if not err <= tol:
        fails.append(f"{what}: max error {err:.3g} > {tol}")
    return err


def worker_dp(steps: int) -> dict:
    import tenferro_distributed as dist
    from tenferro_ad import GradientTape, value_and_grad
    from tenferro_distributed.data_parallel import (
        DataParallel,
        allreduce_gradients,
        deterministic_value_and_grad,
    )
    from tenferro_distributed.zero import ZeroOptimizer, state_bytes
    from tenferro_runtime import array_api as xp
    from tenferro_runtime import compile

    r, n = dist.rank(), dist.world_size()
    fails: list[str] = []
    ref = H.reference_run(steps, _adam)
    vg = compile(value_and_grad(H.loss_fn))

    def local_batch(s):
        x, y = H.batch(s)
        return xp.asarray(H.local(x, r, n)), xp.asarray(H.local(y, r, n))

    # 1. eager: local gradients, buckets (small: several per step) averaged asynchronously
    opt = _adam()
    p = H.make_params()
    st = opt.init(p)
    errs = []
    dp_params = []
    for s in range(steps):
        _, g = vg(p, *local_batch(s))
        g = allreduce_gradients(g, bucket_bytes=200)
        p, st = opt.update(p, g, st)
        dp_params.append(H.as_numpy(p))
        errs.append(_compare(fails, f"eager step {s}", p, ref[s], 1e-6))

    # 2. compiled train step with the collectives inside (donated model and state)
    def train_step(p, st, x, y):
        loss, g = value_and_grad(H.loss_fn)(p, x, y)
        p, st = opt.update(p, allreduce_gradients(g, bucket_bytes=200), st)
        return p, st, loss

    step = compile(train_step, donate_argnums=(0, 1))
    p = H.make_params()
    st = opt.init(p)
    for s in range(steps):
        p, st, _ = step(p, st, *local_batch(s))
        errs.append(_compare(fails, f"compiled step {s}", p, ref[s], 1e-6))
    if step.cache_info().misses != 1:
        fails.append(f"compiled step traced {step.cache_info()}")

    # 3. ZeRO-1: same parameters as plain data parallel, 1/world of the optimizer memory
    zopt = ZeroOptimizer(_adam())
    p = H.make_params()
    zst = zopt.init(p)
    for s in range(steps):
        _, g = vg(p, *local_batch(s))
        p, zst = zopt.update(p, g, zst)
        _compare(fails, f"zero step {s}", p, dp_params[s], 1e-12)
    # ... and inside a compiled step (reduce_scatter / all_gather primitives in the graph)
    zstep = compile(lambda p, zst, x, y: zopt.update(p, vg(p, x, y)[1], zst), donate_argnums=(0, 1))
    pz = H.make_params()
    zs = zopt.init(pz)
    for s in range(5):
        pz, zs = zstep(pz, zs, *local_batch(s))
        _compare(fails, f"compiled zero step {s}", pz, dp_params[s], 1e-12)
    full, mine = state_bytes(_adam().init(H.make_params())), state_bytes(zst)
    elems = sum(int(np.prod(v.shape)) for v in H.make_params().values())
    pad_bytes = 2 * 8 * (-elems % n)  # two Adam slots, float64, the padding
    if not mine - 8 <= (full - 8 + pad_bytes) / n:  # minus the step counter
        fails.append(f"zero state {mine} bytes vs unsharded {full} on {n} ranks")

    # ZeRO-1 checkpoint: the shards saved per rank, loaded back equal (and refused when stale)
    import os
    from pathlib import Path

    from tenferro_distributed.checkpoint import load_checkpoint, save_checkpoint

    ck = Path(os.environ["TFDIST_DIR"]) / "zero.safetensors"
    save_checkpoint(ck, {"params": p}, step=steps, sharded=zst)
    like = zopt.init(H.make_params())
    tree, at, shard = load_checkpoint(ck, {"params": H.make_params()}, sharded_like=like)
    _compare(fails, "zero checkpoint params", tree["params"], H.as_numpy(p), 0.0)
    if at != steps or H.digest(dict(enumerate(_leaves(shard)))) != H.digest(dict(enumerate(_leaves(zst)))):
        fails.append(f"zero checkpoint: step {at}, shard equal: False")

    # 4. GradientTape: DataParallel broadcasts rank 0's parameters, buckets start in backward
    p = H.make_params(seed=100 + r)  # different on every rank until the broadcast
    plist = [p[k] for k in sorted(p)]
    dp = DataParallel(plist, bucket_bytes=100)
    _compare(fails, "broadcast from rank 0", dict(zip(sorted(p), plist)),
             {k: np.asarray(v) for k, v in H.make_params(seed=100).items()}, 0.0)
    p = H.make_params()
    plist = [p[k] for k in sorted(p)]
    dp = DataParallel(plist, bucket_bytes=100)
    import tenferro_nn as nn

    topt = nn.Adam(plist, lr=0.05)
    for s in range(10):
        x, y = local_batch(s)
        half = x.shape[0] // 2
        if s % 2:  # gradient accumulation: two halves, the first without communication
            with dp.no_sync():
                with GradientTape() as tape:
                    tape.watch(plist)
                    loss = H.loss_fn(dict(zip(sorted(p), plist)), x[:half], y[:half]) / 2
                dp.gradient(tape, loss)
            x, y = x[half:], y[half:]
        with GradientTape() as tape:
            tape.watch(plist)
            loss = H.loss_fn(dict(zip(sorted(p), plist)), x, y)
            if s % 2:
                loss = loss / 2
        topt.step(dp.gradient(tape, loss, overlap=s % 3 != 1))  # both paths, with and without no_sync
        _compare(fails, f"tape step {s}", dict(zip(sorted(p), plist)), ref[s], 1e-6)

    # 5. deterministic mode: digests of every step (compared across world sizes by the parent)
    p = H.make_params()
    st = opt.init(p)
    digests = []
    for s in range(steps):
        _, g = deterministic_value_and_grad(H.loss_fn, p, *local_batch(s), microbatch=H.MICROBATCH,
                                            value_and_grad_fn=vg)
        p, st = opt.update(p, g, st)
        digests.append(H.digest(p))
        _compare(fails, f"deterministic step {s}", p, ref[s], 1e-6)

    # ... and inside one compiled step (the microbatch loop and the all_gather traced): the same bits
    def det_step(p, st, x, y):
        _, g = deterministic_value_and_grad(H.loss_fn, p, x, y, microbatch=H.MICROBATCH)
        return opt.update(p, g, st)

    cdet = compile(det_step)
    p = H.make_params()
    st = opt.init(p)
    for s in range(10):
        p, st = cdet(p, st, *local_batch(s))
        if H.digest(p) != digests[s]:
            fails.append(f"compiled deterministic step {s}: not bitwise equal to the eager one")

    # 6. bad input: typed errors before anything runs
    bad = _bad_input(n, plist)
    return {"fails": fails + bad, "max_err": max(errs), "digests": digests, "seq": dist.current().seq}


def _leaves(tree) -> list:
    from tenferro_runtime.pytree import tree_flatten

    return [np.asarray(t) for t in tree_flatten(tree)[0]]


def _bad_input(n: int, plist: list) -> list[str]:
    from tenferro_core.errors import ArgumentError, ArgumentValueError, ShapeError
    from tenferro_distributed.data_parallel import (
        DataParallel,
        allreduce_gradients,
        deterministic_value_and_grad,
    )
    from tenferro_distributed.errors import UnknownAlgorithmError
    from tenferro_distributed.zero import ZeroOptimizer
    from tenferro_runtime import array_api as xp

    out = []

    def expect(exc, fn, what):
        try:
            fn()
        except exc:
            return
        except Exception as e:  # noqa: BLE001 - reported as a failure
            out.append(f"{what}: raised {type(e).__name__}: {e}")
            return
        out.append(f"{what}: no {exc.__name__}")

    expect(UnknownAlgorithmError, lambda: DataParallel(plist, algorithm="butterfly"), "unknown algorithm")
    expect(ArgumentValueError, lambda: DataParallel(plist, timeout=0), "zero timeout")
    expect(ArgumentValueError, lambda: DataParallel(plist, timeout=-1.0), "negative timeout")
    expect(ArgumentValueError, lambda: DataParallel(plist, bucket_bytes=0), "zero bucket")
    expect(ArgumentError, lambda: allreduce_gradients([1.0]), "non-tensor gradient")
    expect(ArgumentValueError, lambda: allreduce_gradients([xp.ones(2)], op="max"), "op max")
    x = xp.ones((n * 2 + 1, H.DIMS[0]), dtype=xp.float64)
    y = xp.ones((n * 2 + 1, H.DIMS[2]), dtype=xp.float64)
    expect(ShapeError, lambda: deterministic_value_and_grad(H.loss_fn, H.make_params(), x, y, microbatch=2),
           "local batch not a multiple of the microbatch")
    if n > 1:  # 5*7+7+7*3+3 = 66 elements: 4 does not divide them
        odd = {"w": xp.ones((n * 3 + 1,), dtype=xp.float64)}
        expect(ShapeError, lambda: ZeroOptimizer(_adam(), pad=False).init(odd), "world size not dividing")
    import tenferro_nn as nn

    expect(ArgumentError, lambda: ZeroOptimizer(nn.Adam(lr=0.1, clip_norm=1.0)), "zero with clip_norm")
    return out


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_data_parallel_matches_single_process(world, tmp_path):
    res = h.run_workers("test_dp_training:worker_dp", world, tmp_path, kwargs={"steps": STEPS},
                        timeout=150, dist_timeout=60)
    for r, (status, *rest) in enumerate(res):
        assert status == "ok", (r, rest)
        assert rest[0]["fails"] == [], (r, rest[0]["fails"][:10])
    digests = [out[1]["digests"] for out in res]
    assert all(d == digests[0] for d in digests)  # every rank holds the same parameters
    # bitwise equal to one process summing the same microbatch gradients in the same order,
    # hence across world sizes (1, 2, 3 and 4 all give these digests)
    want = H.deterministic_reference(STEPS, _adam)
    assert digests[0] == want
    assert len({out[1]["seq"] for out in res}) == 1


def test_data_parallel_before_init_is_a_typed_error():
    from tenferro_distributed.data_parallel import DataParallel, allreduce_gradients
    from tenferro_distributed.errors import NotInitializedError
    from tenferro_distributed.zero import ZeroOptimizer
    from tenferro_runtime import array_api as xp

    with pytest.raises(NotInitializedError, match="init"):
        DataParallel([xp.ones(3)])
    with pytest.raises(NotInitializedError):
        allreduce_gradients({"w": xp.ones(3)})
    with pytest.raises(NotInitializedError):
        ZeroOptimizer(_adam()).init({"w": xp.ones(4)})


@given(sizes=st.lists(st.tuples(st.integers(0, 300), st.sampled_from(["float32", "float64"])), max_size=12),
       cap=st.integers(1, 2000))
@example(sizes=[], cap=1)
@example(sizes=[(0, "float32")], cap=1)
@example(sizes=[(300, "float64"), (1, "float64")], cap=8)
def test_buckets_partition_the_leaves(sizes, cap):
    from tenferro_distributed.data_parallel import FIRST_BUCKET_BYTES, make_buckets
    from tenferro_runtime import array_api as xp

    leaves = [xp.zeros((n,), dtype=getattr(xp, dt)) for n, dt in sizes]
    buckets = make_buckets(leaves, cap)
    flat = sorted(i for b in buckets for i in b)
    assert flat == list(range(len(leaves)))  # every leaf once
    for k, b in enumerate(buckets):
        assert len({str(leaves[i].dtype) for i in b}) == 1
        assert b == sorted(b, reverse=True)  # backward order: the last parameters first
        total = sum(leaves[i].size * leaves[i].dtype.itemsize for i in b)
        assert len(b) == 1 or total <= (cap if k else min(cap, FIRST_BUCKET_BYTES))


def test_bucket_size_must_be_a_positive_int():
    from tenferro_core.errors import ArgumentError, ArgumentValueError
    from tenferro_distributed.data_parallel import make_buckets

    for bad, err in ((0, ArgumentValueError), (-5, ArgumentValueError), (1.5, ArgumentError),
                     (True, ArgumentError)):
        with pytest.raises(err, match="bucket_bytes"):
            make_buckets([], bad)
