"""Bad input: typed errors (tenferro's hierarchy and the builtin a NumPy user catches) raised
before anything runs; debug mode naming the rank that disagrees; a world-size-1 group in this
process; the cost model's fit and choice."""

from __future__ import annotations

import numpy as np
import pytest

import tenferro_distributed as dist
import tfdist_helpers as h
from tenferro_core.errors import ArgumentError, ArgumentValueError, DTypeError, ShapeError, TenferroError
from tenferro_runtime import array_api as xp


def test_before_init_every_entry_raises_not_initialized():
    assert not dist.is_initialized()
    x = xp.ones(3)
    for call in (lambda: dist.all_reduce(x), lambda: dist.all_gather(x), lambda: dist.reduce_scatter(x),
                 lambda: dist.broadcast(x), lambda: dist.all_reduce_async(x), dist.rank, dist.world_size,
                 dist.barrier, lambda: dist.set_policy("ring")):
        with pytest.raises(dist.NotInitializedError, match="init"):
            call()
    assert issubclass(dist.NotInitializedError, RuntimeError)


@pytest.mark.parametrize("call, error, match", [
    (lambda x: dist.all_reduce(x, algorithm="butterfly"), dist.UnknownAlgorithmError, "butterfly"),
    (lambda x: dist.all_gather(x, algorithm="tree"), dist.UnknownAlgorithmError, "ring"),
    (lambda x: dist.reduce_scatter(x, algorithm="rhd"), dist.UnknownAlgorithmError, "native"),
    (lambda x: dist.all_reduce(x, "prod"), ArgumentValueError, "mean"),
    (lambda x: dist.reduce_scatter(x, "max"), ArgumentValueError, "sum"),
    (lambda x: dist.all_reduce(x, timeout=0), ArgumentValueError, "positive"),
    (lambda x: dist.all_reduce(x, timeout=-2.5), ArgumentValueError, "positive"),
    (lambda x: dist.all_reduce(x, timeout=float("inf")), ArgumentValueError, "finite"),
    (lambda x: dist.all_reduce(x, timeout="5"), ArgumentError, "seconds"),
    (lambda x: dist.broadcast(x, root=1.0), ArgumentError, "root"),
])
def test_bad_arguments_are_typed_before_init(call, error, match):
    with pytest.raises(error, match=match):
        call(xp.ones(4))


def test_bad_init_arguments(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ArgumentError, match="RANK"):
        dist.init()
    for kw, error in ((dict(rank=0, world_size=1, timeout=0), ArgumentValueError),
                      (dict(rank=0, world_size=1, timeout=-1.0), ArgumentValueError),
                      (dict(rank=0, world_size=1, heartbeat=0), ArgumentValueError),
                      (dict(rank=2, world_size=2), ArgumentValueError),
                      (dict(rank=0, world_size=1, backend="carrier-pigeon"), ArgumentValueError),
                      (dict(rank="zero", world_size=1), ArgumentError)):
        with pytest.raises(error):
            dist.init(**kw)
        assert not dist.is_initialized()


def test_cost_model_fit_recovers_alpha_beta_and_chooses_per_size():
    sizes = [1 << 10, 1 << 16, 1 << 20]
    truth = {"native": (1e-4, 1e-9), "ring": (5e-4, 2e-10), "tree": (5e-5, 4e-9), "rhd": (2e-4, 5e-10)}
    m = dist.fit(sizes, {a: [al + be * s for s in sizes] for a, (al, be) in truth.items()})
    for a, (al, be) in truth.items():
        assert m.alpha[a] == pytest.approx(al, rel=1e-6) and m.beta[a] == pytest.approx(be, rel=1e-6)
    assert m.choose("all_reduce", 16) == "tree"          # latency-bound: smallest alpha
    assert m.choose("all_reduce", 1 << 30) == "ring"     # bandwidth-bound: smallest beta
    assert m.choose("broadcast", 1 << 30) == "native"
    assert m.predict("rhd", 1000) == pytest.approx(2e-4 + 5e-7)


def test_cost_model_fits_a_second_line_past_the_split():
    """Messages past the caches get their own alpha and beta (bandwidth drops there)."""
    split = 1 << 20
    small = (1e-4, 1e-9)
    big_beta = 3e-9
    big = (small[0] + (small[1] - big_beta) * split, big_beta)  # continuous at the split

    def t(s):
        a, b = small if s <= split else big
        return a + b * s

    sizes = [1 << 10, 1 << 16, split, 1 << 22, 1 << 24]
    m = dist.fit(sizes, {"native": [t(s) for s in sizes]})
    assert m.predict("native", 1 << 12) == pytest.approx(t(1 << 12), rel=1e-6)
    assert m.predict("native", 1 << 26) == pytest.approx(t(1 << 26), rel=1e-6)
    only_small = dist.fit(sizes[:3], {"native": [t(s) for s in sizes[:3]]})
    assert only_small.large == {}
    assert only_small.predict("native", 1 << 26) == pytest.approx(small[0] + small[1] * (1 << 26))


def test_cost_model_uses_the_line_of_each_calibrated_interval():
    """Bandwidth that changes regime twice (cache, memory): the calibrated times are predicted
    as measured, a size between two of them on their line, sizes outside on the fitted lines."""
    sizes = [1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22, 1 << 24]
    times = [3e-4, 4e-4, 7e-4, 2.1e-3, 3.7e-3, 2.0e-2]
    m = dist.fit(sizes, {"native": times})
    for s, t in zip(sizes, times):
        assert m.predict("native", s) == pytest.approx(t, rel=1e-12)
    mid = ((1 << 20) + (1 << 22)) // 2  # halfway between 1 MiB and 4 MiB
    assert m.predict("native", mid) == pytest.approx((2.1e-3 + 3.7e-3) / 2, rel=1e-12)
    big = m.large["native"]
    assert m.predict("native", 1 << 26) == pytest.approx(big[0] + big[1] * (1 << 26))
    assert m.predict("native", 16) == pytest.approx(m.alpha["native"] + m.beta["native"] * 16)


def test_world_of_one_in_process(tmp_path):
    """A gloo group of one: collectives are the identity, shape/dtype errors are typed."""
    dist.init(rank=0, world_size=1, init_method=f"file://{tmp_path / 'store'}", timeout=20.0)
    try:
        with pytest.raises(dist.DistributedError, match="already"):
            dist.init(rank=0, world_size=1, init_method=f"file://{tmp_path / 'store2'}")
        assert (dist.rank(), dist.world_size(), dist.local_rank()) == (0, 1, 0)
        for dev in ("numpy:cpu", "torch:cpu"):
            for a in (np.float32(2.5), np.arange(6, dtype=np.int64).reshape(2, 3), np.zeros((0, 2))):
                x = xp.asarray(a, device=dev)
                for got in (dist.all_reduce(x, "max"), dist.broadcast(x), dist.all_reduce_async(x).wait()):
                    np.testing.assert_array_equal(got.numpy(), a)
                    assert str(got.device) == dev
                if np.ndim(a):
                    np.testing.assert_array_equal(dist.all_gather(x).numpy(), a)
                    np.testing.assert_array_equal(dist.reduce_scatter(x, algorithm="ring").numpy(), a)
        for bad, error, match in (
                (lambda: dist.all_reduce(xp.asarray([True, False])), DTypeError, "bool"),
                (lambda: dist.all_reduce(xp.asarray([1 + 2j])), DTypeError, "complex"),
                (lambda: dist.all_gather(xp.asarray(np.ones(2, np.int16))), DTypeError, "int16"),
                (lambda: dist.all_reduce(xp.arange(3), "mean"), DTypeError, "floating"),
                (lambda: dist.all_gather(xp.asarray(1.0)), ShapeError, "reshape"),
                (lambda: dist.broadcast(xp.ones(2), root=1), ArgumentValueError, r"\[0, 1\)"),
                (lambda: dist.set_policy("auto"), ArgumentValueError, "calibrate"),
                (lambda: dist.calibrate(reps=0), ArgumentValueError, "reps >= 1"),
                (lambda: dist.time_all_reduce((2,)), ArgumentValueError, "sizes >= 4"),
                (lambda: dist.set_policy("bogus"), dist.UnknownAlgorithmError, "bogus")):
            with pytest.raises(error, match=match):
                bad()
        assert issubclass(DTypeError, TypeError) and issubclass(ShapeError, ValueError)
        with pytest.raises(ArgumentError, match="eagerly"):
            from tenferro_runtime import compile
            compile(lambda v: dist.all_reduce_async(v).wait())(xp.ones(2))
        model = dist.calibrate(sizes=(64, 4096), reps=1)
        assert set(model.alpha) == set(dist.ALGORITHMS["all_reduce"]) and dist.current().policy == "auto"
        np.testing.assert_array_equal(dist.all_reduce(xp.ones(5)).numpy(), np.ones(5))
        from tenferro_ad import vmap
        from tenferro_distributed.overlap import all_reduce_start_p, all_reduce_wait_p

        def started(v):  # the overlap pass's pair, batched: one all_reduce of the whole batch
            kw = {"op": "mean", "algorithm": None, "timeout": None}
            return all_reduce_wait_p.bind(all_reduce_start_p.bind(v, **kw), v, **kw)

        xs = np.arange(12, dtype=np.float64).reshape(3, 4)
        np.testing.assert_array_equal(vmap(started)(xp.asarray(xs)).numpy(), xs)
        np.testing.assert_array_equal(vmap(started, in_axes=1)(xp.asarray(xs)).numpy(), xs.T)
        dist.set_policy("ring")
        dist.barrier(timeout=5)
        with pytest.raises(ArgumentValueError):
            dist.barrier(timeout=0)
    finally:
        dist.shutdown()
    assert not dist.is_initialized()
    with pytest.raises(dist.NotInitializedError):
        dist.rank()
    g = dist.init(rank=0, world_size=1, init_method=f"file://{tmp_path / 'again'}", timeout=20.0)
    try:  # a fresh group after shutdown (a restart in the same process): sequence numbers anew
        assert dist.current() is g and g.seq == 1 and g.policy == "native"
        np.testing.assert_array_equal(dist.all_gather(xp.ones(2)).numpy(), np.ones(2))
    finally:
        dist.shutdown()


def worker_debug() -> list:
    """Each case on every rank: (case, error type, ranks named in the message); then the group
    still works."""
    import re

    r, n = dist.rank(), dist.world_size()
    out = []
    cases = {
        "shape": lambda: dist.all_reduce(xp.ones(4 if r == n - 1 else 3)),
        "dtype": lambda: dist.all_gather(xp.ones(3, dtype="float64" if r == 1 else "float32")),
        "algorithm": lambda: dist.all_reduce(xp.ones(3), algorithm="ring" if r == 0 else "native"),
        "root": lambda: dist.broadcast(xp.ones(2), root=r),
        "rows": lambda: dist.reduce_scatter(xp.ones((n + 1, 2))),
    }
    for name, call in cases.items():
        try:
            call()
            out.append((name, None, ()))
        except TenferroError as e:
            named = tuple(int(k) for k in re.findall(r"rank (\d+):", str(e)))
            out.append((name, type(e).__name__, named))
    # the group is intact after checked errors: a real collective, and a calibration
    got = dist.all_reduce(xp.asarray(np.full(3, float(r)))).numpy().tolist()
    model = dist.calibrate(sizes=(256, 8192), reps=1)
    auto = dist.all_reduce(xp.asarray(np.arange(10.0) * (r + 1))).numpy().tolist()
    return [out, got, sorted(model.alpha.items()), sorted(model.beta.items()), auto]


def test_debug_mode_names_the_disagreeing_rank(tmp_path):
    n = 3
    res = h.run_workers("test_dist_errors:worker_debug", n, tmp_path, kwargs={"init": {"debug": True}},
                        timeout=90)
    for out in res:
        assert out[0] == "ok", out
        cases, got, alpha, beta, auto = out[1]
        assert cases == [("shape", "CollectiveMismatchError", (n - 1,)),
                         ("dtype", "CollectiveMismatchError", (1,)),
                         ("algorithm", "CollectiveMismatchError", (1, 2)),
                         ("root", "CollectiveMismatchError", (1, 2)),
                         ("rows", "ShapeError", ())]
        assert got == [3.0] * 3
        assert auto == (np.arange(10.0) * 6).tolist()
    assert len({(tuple(out[1][2]), tuple(out[1][3])) for out in res}) == 1  # one model on every rank


def _listeners(port: int) -> set[str]:
    """Local addresses listening on `port` (/proc/net/tcp and tcp6, state 0A = LISTEN)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                addr, p = local.rsplit(":", 1)
                if state == "0A" and int(p, 16) == port:
                    found.add(addr)
    return found


@pytest.mark.parametrize("how", ["tcp", "env"])
def test_tcp_rendezvous_listens_on_loopback_only(how, monkeypatch):
    port = h.free_port()
    if how == "env":  # torchrun's variables, without torchrun
        for k, v in dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1",
                         LOCAL_RANK="0").items():
            monkeypatch.setenv(k, v)
        monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
        dist.init(timeout=20.0)
    else:
        dist.init(rank=0, world_size=1, init_method=f"tcp://127.0.0.1:{port}", timeout=20.0)
    try:
        assert _listeners(port) == {"0100007F"}  # 127.0.0.1, not 0.0.0.0 or ::
        assert dist.current().store_host == 0
        np.testing.assert_array_equal(dist.all_reduce(xp.arange(3)).numpy(), np.arange(3))
    finally:
        dist.shutdown()


def test_rendezvous_without_peers_is_a_typed_timeout_naming_them(tmp_path):
    with pytest.raises(dist.CollectiveTimeoutError, match=r"rank\(s\) \[1, 2\] never arrived") as info:
        dist.init(rank=0, world_size=3, init_method=f"file://{tmp_path / 'store'}", timeout=1.0)
    assert info.value.ranks == (1, 2) and info.value.collective == "init"
    assert isinstance(info.value, TimeoutError) and not dist.is_initialized()
