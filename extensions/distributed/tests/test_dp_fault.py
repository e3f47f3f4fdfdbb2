"""A rank killed with SIGKILL in the middle of data-parallel training: every survivor raises
the typed error naming it (RankFailureError, ranks == (dead,), the collective and its
sequence number) within the collective timeout plus 5 s, never a hang."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

import dp_helpers as H
import tfdist_helpers as h

DIST_TIMEOUT = 6.0


def worker_killed(victim: int, at_step: int) -> dict:
    import tenferro_distributed as dist
    import tenferro_nn as nn
    from tenferro_ad import value_and_grad
    from tenferro_distributed.data_parallel import allreduce_gradients
    from tenferro_runtime import array_api as xp
    from tenferro_runtime import compile

    r, n = dist.rank(), dist.world_size()
    opt = nn.SGD(lr=0.1)
    p = H.make_params()
    st = opt.init(p)
    vg = compile(value_and_grad(H.loss_fn))
    for s in range(50):
        x, y = H.batch(s)
        _, g = vg(p, xp.asarray(H.local(x, r, n)), xp.asarray(H.local(y, r, n)))
        if s == at_step and r == victim:
            stamp = Path(os.environ["TFDIST_DIR"]) / "killed_at"
            stamp.write_text(repr(time.monotonic()))
            os.kill(os.getpid(), signal.SIGKILL)
        g = allreduce_gradients(g)
        p, st = opt.update(p, g, st)
    return {"finished": True}


@pytest.mark.parametrize("world,victim", [(3, 1)])
def test_sigkill_of_a_rank_names_it_on_every_survivor(world, victim, tmp_path):
    res = h.run_workers("test_dp_fault:worker_killed", world, tmp_path,
                        kwargs={"victim": victim, "at_step": 5}, timeout=DIST_TIMEOUT + 60,
                        dist_timeout=DIST_TIMEOUT, allow_fail=(victim,))
    killed_at = float((tmp_path / "killed_at").read_text())
    assert res[victim] is None
    for r, out in enumerate(res):
        if r == victim:
            continue
        status, name, msg, attrs, when = out
        assert status == "error" and name == "RankFailureError", (r, out)
        assert attrs["ranks"] == (victim,), (r, msg)
        assert attrs["collective"] == "all_reduce" and attrs["seq"] > 0, (r, attrs)
        assert f"[{victim}]" in msg and "all_reduce" in msg, msg
        assert when - killed_at < DIST_TIMEOUT + 5, (r, when - killed_at)
