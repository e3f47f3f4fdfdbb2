"""Faults: a rank killed with SIGKILL (or hung) mid-loop makes every survivor raise the typed
error naming it, the collective and its sequence number, within the timeout + 5 s; also when
the dead rank hosts the TCP store. The victim writes its monotonic clock (system-wide on Linux)
just before it dies, so the parent measures each survivor's time to the error."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

import tfdist_helpers as h
from tenferro_core.errors import TenferroError
from tenferro_distributed import CollectiveTimeoutError, RankFailureError


def worker_loop(victim: int, mode: str, algorithm: str, hang_s: float = 0.0,
                asynchronous: bool = False) -> str:
    import numpy as np

    import tenferro_distributed as dist
    from tenferro_runtime import array_api as xp

    x = xp.asarray(np.ones(4096, np.float32))
    for i in range(50):
        if dist.rank() == victim and i == 7:
            Path(os.environ["TFDIST_DIR"], "victim_time").write_text(repr(time.monotonic()))
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            # hung: alive (heartbeat on), never reaches the collective, until every survivor has
            # written its result
            others = [Path(os.environ["TFDIST_DIR"], f"result{r}.pkl") for r in range(dist.world_size())
                      if r != victim]
            deadline, idle = time.monotonic() + hang_s, threading.Event()
            while not all(p.exists() for p in others) and time.monotonic() < deadline:
                idle.wait(0.05)
            return "hung"
        try:
            if asynchronous:  # the error surfaces at wait()
                x = dist.all_reduce_async(x, "mean", algorithm=algorithm).wait()
            else:
                x = dist.all_reduce(x, "mean", algorithm=algorithm)
        except dist.CollectiveError:
            with pytest.raises(type(dist.current().broken)):  # the group stays broken, at once
                dist.barrier()
            dist.shutdown()  # returns although peers are gone
            assert not dist.is_initialized()
            raise
    return "finished"


CASES = {
    "kill native async, file store": dict(world=3, victim=1, mode="kill", algorithm="native",
                                          asynchronous=True),
    "kill ring, 4 ranks": dict(world=4, victim=2, mode="kill", algorithm="ring"),
    "kill the TCP store host": dict(world=2, victim=0, mode="kill", algorithm="tree", tcp=True),
    "hang, rhd": dict(world=3, victim=1, mode="hang", algorithm="rhd"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_survivors_raise_naming_the_rank(case, tmp_path):
    c = CASES[case]
    timeout = 3.0
    kwargs = dict(victim=c["victim"], mode=c["mode"], algorithm=c["algorithm"], hang_s=4 * timeout,
                  asynchronous=c.get("asynchronous", False))
    if c.get("tcp"):
        kwargs["tcp_port"] = h.free_port()
    res = h.run_workers("test_dist_faults:worker_loop", c["world"], tmp_path, kwargs=kwargs, timeout=60,
                        dist_timeout=timeout, allow_fail=(c["victim"],))
    t_victim = float((tmp_path / "victim_time").read_text())
    want = RankFailureError if c["mode"] == "kill" else CollectiveTimeoutError
    for r, out in enumerate(res):
        if r == c["victim"]:
            assert out is None if c["mode"] == "kill" else out == ("ok", "hung")
            continue
        status, name, message, attrs, t_err = out
        assert status == "error" and name == want.__name__, (r, out)
        assert attrs["ranks"] == (c["victim"],), (r, message)
        # init's barrier is #1, the loop's collectives #2..#8, the one the victim misses #9
        assert attrs["collective"] == "all_reduce" and attrs["seq"] == 9, (r, attrs)
        assert f"rank(s) [{c['victim']}]" in message or f"rank {c['victim']}" in message, message
        assert "#9" in message
        assert t_err - t_victim < timeout + 5, (r, t_err - t_victim)


def test_error_types_are_catchable_as_builtins():
    assert issubclass(RankFailureError, TenferroError) and issubclass(RankFailureError, RuntimeError)
    assert issubclass(CollectiveTimeoutError, TimeoutError)
    assert issubclass(CollectiveTimeoutError, RuntimeError)
    e = RankFailureError("x", "all_reduce", 3, (1,))
    assert (e.collective, e.seq, e.ranks) == ("all_reduce", 3, (1,))
