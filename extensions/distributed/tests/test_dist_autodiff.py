"""Collectives under jvp/vjp/grad (finite differences, the global dot-product test), vmap and
compile, on gloo processes. The function differentiated is the job's: every rank perturbs its
own input at once, so finite differences see the whole job's derivative, and the transpose
identity <t, J^T ct> = <J t, ct> holds for the inner products summed over ranks."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tfdist_helpers as h


def worker_autodiff() -> dict:
    import tenferro_distributed as dist
    from tenferro_ad import PerformanceWarning, grad, jvp, vjp, vmap
    from tenferro_ad.testing import check_jvp, numerical_jvp
    from tenferro_runtime import array_api as xp
    from tenferro_runtime import compile

    r, n = dist.rank(), dist.world_size()
    fails, count = [], 0
    rng = np.random.default_rng(100 + r)

    def fns():
        yield "all_reduce sum", lambda x: dist.all_reduce(x) * x
        yield "all_reduce mean", lambda x: xp.sin(dist.all_reduce(x, "mean"))
        yield "all_reduce max", lambda x: dist.all_reduce(x * x, "max")
        yield "all_reduce min ring", lambda x: dist.all_reduce(xp.exp(x), "min", algorithm="ring")
        yield "all_reduce sum rhd", lambda x: dist.all_reduce(x, algorithm="rhd") ** 2
        yield "all_gather", lambda x: xp.cos(dist.all_gather(x))
        yield "all_gather ring", lambda x: dist.all_gather(x * x, algorithm="ring")
        yield "reduce_scatter", lambda x: dist.reduce_scatter(xp.concat([x] * n) * x[0])
        yield "reduce_scatter mean", lambda x: dist.reduce_scatter(xp.concat([x] * n), "mean") ** 3
        yield "broadcast", lambda x: dist.broadcast(x, n - 1) * x
        yield "broadcast tree", lambda x: xp.tanh(dist.broadcast(x, 0, algorithm="tree"))

    for dev in ("numpy:cpu", "torch:cpu"):
        for name, f in fns():
            x = xp.asarray(rng.standard_normal(4) + 3 * r, device=dev)  # distinct values: no max ties
            what = f"{name} on {dev}"
            try:
                check_jvp(f, (x,), eps=1e-6, atol=1e-6, rtol=1e-5, seed=r, what=what)
                out, back = vjp(f, x)
                ct = rng.standard_normal(out.shape)
                (ctx,) = back(xp.asarray(ct, device=dev))
                t = rng.standard_normal(4)
                (tout,) = numerical_jvp(f, (x,), (xp.asarray(t, device=dev),), 1e-6)
                _, tj = jvp(f, (x,), (xp.asarray(t, device=dev),))
                np.testing.assert_allclose(tj.numpy(), tout, rtol=1e-5, atol=1e-6)
                sums = dist.all_reduce(np.array([np.dot(t, ctx.numpy()), np.dot(tout, ct)])).numpy()
                np.testing.assert_allclose(sums[0], sums[1], rtol=1e-6, err_msg=f"{what}: transpose")
                count += 1
            except AssertionError as e:
                fails.append(f"{what}: {e}")

    # grad of a replicated loss, and the same inside compile
    def loss(w):
        return xp.sum(dist.all_reduce(w * w, "mean"))

    # each rank's loss is the job's (replicated) loss; the mean's transpose averages the ones
    # of every rank's cotangent, so rank r's gradient is 2 w_r
    w = xp.asarray(np.arange(3.0) + r)
    g = grad(loss)(w).numpy()
    if not np.allclose(g, 2 * (np.arange(3.0) + r), rtol=1e-12):
        fails.append(f"grad of all_reduce mean: {g}")
    cg = compile(grad(loss))
    for _ in range(2):
        if not np.allclose(cg(w).numpy(), g, rtol=1e-12):
            fails.append("compile(grad) differs from grad")
    count += 3

    # compile: results, and a collective whose result is unused still runs (not DCE'd)
    cf = compile(lambda x: dist.all_reduce(x) * 2)
    for _ in range(2):
        got = cf(xp.asarray(np.full(5, float(r)))).numpy()
        if not np.array_equal(got, np.full(5, 2.0 * sum(range(n)))):
            fails.append(f"compile all_reduce: {got}")

    def side(x):
        dist.all_gather(x)
        return x + 1

    cs = compile(side)
    for _ in range(3):
        before = dist.current().seq
        cs(xp.ones(2))
        if dist.current().seq != before + 1:
            fails.append(f"compile dropped an unused collective: seq {before} -> {dist.current().seq}")
    count += 5

    # vmap: batch rules against a stack of per-example calls
    xb = xp.asarray(rng.standard_normal((3, 4, 2)))
    batched = (("all_reduce", lambda v: dist.all_reduce(v, "max")),
               ("broadcast", lambda v: dist.broadcast(v, 0)), ("all_gather", dist.all_gather),
               ("reduce_scatter", lambda v: dist.reduce_scatter(xp.concat([v] * n))))
    for name, f in batched:
        for axis in (0, 1):
            xa = xp.moveaxis(xb, 0, axis) if axis else xb
            with warnings.catch_warnings():
                warnings.simplefilter("error", PerformanceWarning)  # no batch rule used
                got = vmap(f, in_axes=axis)(xa).numpy()
            want = np.stack([f(xb[i]).numpy() for i in range(3)])
            if got.shape != want.shape or not np.allclose(got, want, rtol=1e-12):
                fails.append(f"vmap {name} in_axes={axis}: {got.shape} vs {want.shape}")
            count += 1
    return {"fails": fails, "count": count}


@pytest.mark.parametrize("world", [2, 3])
def test_collective_derivatives_compile_vmap(world, tmp_path):
    res = h.run_workers("test_dist_autodiff:worker_autodiff", world, tmp_path, timeout=120)
    for r, (status, *rest) in enumerate(res):
        assert status == "ok", (r, rest)
        assert rest[0]["fails"] == [], (r, rest[0]["fails"][:6])
        assert rest[0]["count"] == 22 + 8 + 8
