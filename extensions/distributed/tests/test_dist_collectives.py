"""Every collective and algorithm on 2, 3 and 4 gloo processes against NumPy references, on
numpy:cpu and torch:cpu, float32/float64/int32/int64, sizes 0, 1 and not divisible by the world
size; gradients against finite differences; compile, vmap and async. Each spawned job runs
many checks and returns its failures (an empty list when all pass)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import tfdist_helpers as h

DEVICES = ("numpy:cpu", "torch:cpu")
DTYPES = ("float32", "float64", "int32", "int64")


def _input(seed: int, rank: int, shape: tuple, dtype: str) -> np.ndarray:
    rng = np.random.default_rng([seed, rank, len(shape), *shape])
    if dtype.startswith("int"):
        return rng.integers(-50, 50, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _tol(dtype: str) -> dict:
    return {"float32": dict(rtol=1e-5, atol=1e-5), "float64": dict(rtol=1e-12, atol=1e-12)}.get(
        dtype, dict(rtol=0, atol=0))


def worker_values(seed: int) -> dict:
    """All collectives x algorithms x devices x dtypes x shapes against NumPy."""
    import tenferro_distributed as dist
    from tenferro_runtime import array_api as xp

    r, n = dist.rank(), dist.world_size()
    fails, digest, count = [], hashlib.sha256(), 0

    def check(what, got, want, dtype, same=True):
        nonlocal count
        count += 1
        got = got.numpy()
        if got.shape != want.shape or str(got.dtype) != dtype:
            fails.append(f"{what}: got {got.dtype}{got.shape}, want {dtype}{want.shape}")
        elif not (np.allclose(got, want, **_tol(dtype)) if dtype[0] == "f" else np.array_equal(got, want)):
            fails.append(f"{what}: max error {np.max(np.abs(got.astype(float) - want.astype(float)))}")
        if same:  # results every rank holds alike
            digest.update(got.tobytes())

    shapes = [(), (0,), (1,), (7,), (3 * n + 1,), (5, 3), (1000,)]
    for dev in DEVICES:  # torch:cpu shares the kernel: fewer dtypes and shapes there
        for dt in DTYPES if dev == "numpy:cpu" else ("float32", "int64"):
            for shape in shapes if dev == "numpy:cpu" else [(), (0,), (3 * n + 1,), (5, 3)]:
                xs = [_input(seed, k, shape, dt) for k in range(n)]
                x = xp.asarray(xs[r], device=dev)
                stack = np.stack(xs)
                refs = {"sum": stack.sum(0, dtype=dt), "max": stack.max(0), "min": stack.min(0)}
                if dt.startswith("f"):
                    refs["mean"] = (stack.sum(0, dtype=dt) / np.asarray(n, dt)).astype(dt)
                for op, want in refs.items():
                    for alg in dist.ALGORITHMS["all_reduce"]:
                        got = dist.all_reduce(x, op, algorithm=alg)
                        check(f"all_reduce {op} {alg} {dev} {dt}{shape}", got, want, dt)
                for root in range(n) if shape == (3 * n + 1,) else (n - 1,):
                    for alg in dist.ALGORITHMS["broadcast"]:
                        check(f"broadcast root={root} {alg} {dev} {dt}{shape}",
                              dist.broadcast(x, root, algorithm=alg), xs[root], dt)
                if not shape:
                    continue
                for alg in dist.ALGORITHMS["all_gather"]:
                    check(f"all_gather {alg} {dev} {dt}{shape}", dist.all_gather(x, algorithm=alg),
                          np.concatenate(xs), dt)
            for rows in (0, 1, 3):
                shape = (n * rows, 7)
                xs = [_input(seed, k, shape, dt) for k in range(n)]
                x = xp.asarray(xs[r], device=dev)
                total = np.stack(xs).sum(0, dtype=dt)[r * rows:(r + 1) * rows]
                for op in ("sum", "mean") if dt.startswith("f") else ("sum",):
                    want = total if op == "sum" else (total / np.asarray(n, dt)).astype(dt)
                    for alg in dist.ALGORITHMS["reduce_scatter"]:
                        check(f"reduce_scatter {op} {alg} {dev} {dt}{shape}",
                              dist.reduce_scatter(x, op, algorithm=alg), want, dt, False)
    # the narrower dtypes, one shape each, every collective and algorithm (sums kept in range)
    for dt in ("float16", "int8", "uint8"):
        xs = [(np.arange(2 * n + 1) % 5 + k).astype(dt) for k in range(n)]
        x = xp.asarray(xs[r])
        stack = np.stack(xs)
        for op, want in (("sum", stack.sum(0, dtype=dt)), ("max", stack.max(0)), ("min", stack.min(0))):
            for alg in dist.ALGORITHMS["all_reduce"]:
                check(f"all_reduce {op} {alg} {dt}", dist.all_reduce(x, op, algorithm=alg), want, dt)
        for alg in dist.ALGORITHMS["all_gather"]:
            check(f"all_gather {alg} {dt}", dist.all_gather(x, algorithm=alg), np.concatenate(xs), dt)
        for alg in dist.ALGORITHMS["broadcast"]:
            check(f"broadcast {alg} {dt}", dist.broadcast(x, n - 1, algorithm=alg), xs[n - 1], dt)
        rows = [np.resize(v, 2 * n) for v in xs]
        for alg in dist.ALGORITHMS["reduce_scatter"]:
            check(f"reduce_scatter {alg} {dt}", dist.reduce_scatter(xp.asarray(rows[r]), algorithm=alg),
                  np.sum(rows, 0, dtype=dt)[2 * r:2 * r + 2], dt, False)
    # async: started, then a sync collective, then waited (issue order kept on every rank)
    x = xp.asarray(_input(seed, r, (9,), "float64"))
    works = [dist.all_reduce_async(x, algorithm=a) for a in dist.ALGORITHMS["all_reduce"]]
    gathered = dist.all_gather(x)
    works.append(dist.reduce_scatter_async(xp.asarray(_input(seed, r, (2 * n,), "float64"))))
    works.append(dist.broadcast_async(x, n - 1, algorithm="tree"))
    works.append(dist.all_gather_async(x, algorithm="ring"))
    xs = [_input(seed, k, (9,), "float64") for k in range(n)]
    for w in works[:4]:
        check(f"async {w!r}", w.wait(), np.sum(xs, 0), "float64")
    check("sync between async", gathered, np.concatenate(xs), "float64")
    rs = np.sum([_input(seed, k, (2 * n,), "float64") for k in range(n)], 0)[2 * r:2 * r + 2]
    check("reduce_scatter_async", works[4].wait(), rs, "float64", False)
    check("broadcast_async", works[5].wait(), xs[n - 1], "float64")
    check("all_gather_async", works[6].wait(), np.concatenate(xs), "float64")
    return {"fails": fails, "digest": digest.hexdigest(), "count": count, "seq": dist.current().seq}


@pytest.mark.parametrize("world", [2, 3, 4])
def test_collectives_match_numpy_on_every_rank(world, tmp_path):
    res = h.run_workers("test_dist_collectives:worker_values", world, tmp_path, kwargs={"seed": world},
                        timeout=150)
    for r, (status, *rest) in enumerate(res):
        assert status == "ok", (r, rest)
        assert rest[0]["fails"] == [], (r, rest[0]["fails"][:10])
        assert rest[0]["count"] > 400
    # every rank holds bitwise the same results, and ran the same number of collectives
    assert len({out[1]["digest"] for out in res}) == 1
    assert len({out[1]["seq"] for out in res}) == 1
