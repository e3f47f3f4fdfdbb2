"""Compiled train steps with overlapped gradient buckets (all_reduce start/wait pairs moved
apart by the `distributed_overlap` pass): the starts land inside backward, the waits before
the update, and the parameters equal one process on the concatenated batch."""

from __future__ import annotations

import numpy as np

import dp_helpers as H
import tfdist_helpers as h


def worker_overlap(steps: int) -> dict:
    import tenferro_distributed as dist
    import tenferro_nn as nn
    from tenferro_ad import value_and_grad
    from tenferro_distributed.data_parallel import allreduce_gradients
    from tenferro_distributed.overlap import all_reduce_start_p, all_reduce_wait_p
    from tenferro_runtime import array_api as xp
    from tenferro_runtime import compile

    r, n = dist.rank(), dist.world_size()
    fails = []
    ref = H.reference_run(steps, lambda: nn.Adam(lr=0.05))
    opt = nn.Adam(lr=0.05)

    def train_step(p, st, x, y):
        loss, g = value_and_grad(H.loss_fn)(p, x, y)
        # overlap=None: start/wait pairs, since this runtime has the pass
        p, st = opt.update(p, allreduce_gradients(g, bucket_bytes=100), st)
        return p, st, loss

    step = compile(train_step, donate_argnums=(0, 1))
    p = H.make_params()
    st = opt.init(p)
    for s in range(steps):
        x, y = H.batch(s)
        xl, yl = xp.asarray(H.local(x, r, n)), xp.asarray(H.local(y, r, n))
        if s == 0:
            graph = step.lower(p, st, xl, yl)
        p, st, _ = step(p, st, xl, yl)
        err = max(float(np.max(np.abs(np.asarray(p[k]) - ref[s][k]))) for k in ref[s])
        if not err <= 1e-6:
            fails.append(f"step {s}: max error {err:.3g}")
    # DataParallel on a Module: rank 0's parameters assigned in place on every rank
    from tenferro_distributed.data_parallel import DataParallel
    from tenferro_runtime import random

    lin = nn.Linear(4, 3, key=random.key(10 + r))
    want = [np.asarray(t) for t in nn.Linear(4, 3, key=random.key(10)).parameters()]
    DataParallel(lin)
    if not all(np.array_equal(np.asarray(a), b) for a, b in zip(lin.parameters(), want)):
        fails.append("DataParallel(Module) did not broadcast rank 0's parameters")
    names = [nd.prim.name for nd in graph.nodes]
    starts = [i for i, nd in enumerate(graph.nodes) if nd.prim is all_reduce_start_p]
    waits = [i for i, nd in enumerate(graph.nodes) if nd.prim is all_reduce_wait_p]
    dots = [i for i, nm in enumerate(names) if "dot_general" in nm]
    return {"fails": fails, "starts": starts, "waits": waits, "last_dot": max(dots) if dots else -1,
            "moved": graph.meta.get("overlap", 0), "n": len(names), "graph": str(graph)}


def test_compiled_overlap_starts_inside_backward(tmp_path):
    res = h.run_workers("test_dp_overlap:worker_overlap", 2, tmp_path, kwargs={"steps": 10}, timeout=90)
    for r, (status, *rest) in enumerate(res):
        assert status == "ok", (r, rest)
        out = rest[0]
        assert out["fails"] == [], out["fails"]
        assert len(out["starts"]) >= 2 and len(out["waits"]) == len(out["starts"]), out
        assert out["moved"] > 0
        # the first bucket starts before backward ends
        assert out["starts"][0] < out["last_dot"], out["graph"]
        assert all(w > s for s, w in zip(out["starts"], out["waits"]))
