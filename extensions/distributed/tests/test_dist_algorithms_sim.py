"""The ring, tree and halving-doubling schedules for world sizes 1-8 (non-powers of two with
several folded ranks included) and any length, on an in-process network: one thread per rank,
`algorithms._exchange` replaced by FIFO mailboxes per (sender, receiver) pair, the order gloo
keeps between two ranks. Integers are compared exactly with NumPy; float results must be
bitwise equal on every rank. The spawned-process tests run the same code over gloo."""

from __future__ import annotations

import queue
import threading

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tenferro_distributed import algorithms as A

torch = pytest.importorskip("torch")


def _simulate(n: int, body) -> list:
    """Run body(rank) in n threads over mailboxes; returns the results by rank."""
    boxes = {(s, d): queue.Queue() for s in range(n) for d in range(n)}
    me = threading.local()

    def exchange(send, dst, recv, src, deadline):
        if send is not None and send.numel():
            boxes[me.rank, dst].put(send.clone())
        if recv is not None and recv.numel():
            got = boxes[src, me.rank].get(timeout=20)
            assert got.shape == recv.shape, (got.shape, recv.shape)
            recv.copy_(got)

    out, errors = [None] * n, []

    def run(r):
        me.rank = r
        try:
            out[r] = body(r)
        except Exception as e:  # reported below with its rank
            errors.append((r, e))

    threads = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(A, "_exchange", exchange)
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert not errors, errors
    assert all(not t.is_alive() for t in threads)
    for boxq in boxes.values():  # every message sent was received
        assert boxq.empty()
    return out


@settings(deadline=None)
@given(n=st.integers(1, 8), length=st.integers(0, 40), op=st.sampled_from(["sum", "max", "min"]),
       alg=st.sampled_from(["ring", "tree", "rhd"]), seed=st.integers(0, 2**16))
@example(n=6, length=5, op="sum", alg="rhd", seed=0)   # 2 folded pairs, fewer elements than ranks
@example(n=7, length=0, op="max", alg="ring", seed=1)
def test_all_reduce_schedules_exact_on_integers(n, length, op, alg, seed):
    xs = [np.random.default_rng([seed, r]).integers(-1000, 1000, length) for r in range(n)]
    want = {"sum": np.sum, "max": np.max, "min": np.min}[op](np.stack(xs), axis=0)

    def body(r):
        buf = torch.from_numpy(xs[r].copy())
        A.ALL_REDUCE[alg](buf, op, r, n, 0.0)
        return buf.numpy()

    for got in _simulate(n, body):
        np.testing.assert_array_equal(got, want)


@settings(deadline=None)
@given(n=st.integers(2, 8), length=st.integers(1, 30), alg=st.sampled_from(["ring", "tree", "rhd"]),
       seed=st.integers(0, 2**16))
def test_float_sums_are_bitwise_equal_on_every_rank(n, length, alg, seed):
    rngs = [np.random.default_rng([seed, r]) for r in range(n)]  # magnitudes 1e-3..1e3: rounding matters
    xs = [g.standard_normal(length) * 10.0 ** g.integers(-3, 4, length) for g in rngs]

    def body(r):
        buf = torch.from_numpy(xs[r].copy())
        A.ALL_REDUCE[alg](buf, "sum", r, n, 0.0)
        return buf.numpy()

    res = _simulate(n, body)
    assert all(np.array_equal(res[0], g) for g in res)
    np.testing.assert_allclose(res[0], np.sum(xs, 0), rtol=1e-12, atol=1e-9)


@settings(deadline=None)
@given(n=st.integers(1, 8), rows=st.integers(0, 4), cols=st.integers(1, 3), root=st.integers(0, 7),
       seed=st.integers(0, 2**16))
def test_gather_scatter_broadcast_schedules(n, rows, cols, root, seed):
    root %= n
    xs = [np.random.default_rng([seed, r]).integers(-99, 99, (n * rows, cols)) for r in range(n)]
    total = np.sum(xs, 0)

    def body(r):
        x = torch.from_numpy(xs[r].copy())
        gathered = torch.empty(n * x.numel(), dtype=x.dtype)
        A.all_gather_ring(gathered, x.reshape(-1), r, n, 0.0)
        block = torch.empty(rows * cols, dtype=x.dtype)
        A.reduce_scatter_ring(block, x.clone().reshape(-1), "sum", r, n, 0.0)
        b = x.clone().reshape(-1)
        A.broadcast_tree(b, root, r, n, 0.0)
        return gathered.numpy(), block.numpy(), b.numpy()

    for r, (gathered, block, b) in enumerate(_simulate(n, body)):
        np.testing.assert_array_equal(gathered, np.concatenate([x.ravel() for x in xs]))
        np.testing.assert_array_equal(block, total[r * rows:(r + 1) * rows].ravel())
        np.testing.assert_array_equal(b, xs[root].ravel())


@pytest.mark.parametrize("length, parts", [(0, 3), (1, 4), (10, 3), (12, 4), (5, 8)])
def test_chunk_bounds_split_like_numpy(length, parts):
    b = A._bounds(length, parts)
    want = [0] + list(np.cumsum([len(c) for c in np.array_split(np.arange(length), parts)]))
    assert b == want
