"""Paged varlen attention equals plain per-sequence attention, on both CPU backends."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_core.errors import ShapeError
from tenferro_infer.attention import (
    copy_slots,
    dense_attention,
    kv_update_p,
    paged_attention,
    plan_attention,
    reference_attention,
)
from tenferro_infer.config import tiny_llama_config
from tenferro_infer.kv_cache import KVCache
from tenferro_runtime import array_api as xp

DEVICES = ["numpy:cpu", "torch:cpu"]
H, HKV, D = 4, 2, 8


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _reference(q, k, v, device):
    """Per sequence: plain attention over its whole (cached + new) K/V."""
    return reference_attention(*(xp.asarray(a, device=device) for a in (q, k, v))).numpy()


def _run_case(device, block_size, seqs, seed):
    """seqs: (cached, new, shared_prefix) per sequence. Prefills the cached part in one paged
    call, then runs every sequence's new tokens in one varlen paged call, and compares both
    against the reference."""
    rng = np.random.default_rng(seed)
    cfg = tiny_llama_config(n_layers=1, hidden_size=H * D, n_heads=H, n_kv_heads=HKV)
    cache = KVCache.from_budget(cfg, tokens=sum(c + n for c, n, _ in seqs) + 4 * block_size,
                                block_size=block_size, device=device)
    pool = (cache.k_pools[0], cache.v_pools[0])
    prefix_k, prefix_v = _rand(rng, 64, HKV, D), _rand(rng, 64, HKV, D)
    ks, vs, tables = [], [], []
    for i, (cached, new, shared) in enumerate(seqs):
        total = cached + new
        k, v = _rand(rng, total, HKV, D), _rand(rng, total, HKV, D)
        share = min(shared, cached)  # the same K/V at the start: a shared prompt prefix
        k[:share], v[:share] = prefix_k[:share], prefix_v[:share]
        ks.append(k)
        vs.append(v)
        tables.append(cache.allocate([7] * share + list(range(100 * i, 100 * i + total - share))))
    qs = [_rand(rng, c + n, H, D) for c, n, _ in seqs]
    phases = ([(0, c) for c, _, _ in seqs], [(c, c + n) for c, n, _ in seqs])  # prefill, then new
    for phase, spans in enumerate(phases):
        live = [i for i, (a0, a1) in enumerate(spans) if a1 > a0]
        if not live:
            continue
        rng_ = [spans[i] for i in live]
        cat = [np.concatenate([a[i][a0:a1] for i, (a0, a1) in zip(live, rng_)]) for a in (qs, ks, vs)]
        plan = plan_attention([a1 - a0 for a0, a1 in rng_], [a0 for a0, _ in rng_],
                              [tables[i].slots(0, a1) for i, (_, a1) in zip(live, rng_)], device)
        got = paged_attention(*(xp.asarray(a, device=device) for a in cat), *pool, plan).numpy()
        want = np.concatenate([_reference(qs[i][a0:a1], ks[i][:a1], vs[i][:a1], device).reshape(a1 - a0, -1)
                               for i, (a0, a1) in zip(live, rng_)])
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, err_msg=f"phase {phase}")


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=20)
@given(block_size=st.sampled_from([8, 16, 32]),
       seqs=st.lists(st.tuples(st.integers(0, 40), st.integers(1, 12), st.integers(0, 40)),
                     min_size=1, max_size=4),
       seed=st.integers(0, 2**16))
def test_paged_equals_reference(device, block_size, seqs, seed):
    _run_case(device, block_size, seqs, seed)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("block_size", [8, 16, 32])
def test_edge_cases(device, block_size):
    _run_case(device, block_size, [(0, 1, 0)], 0)                      # a single token
    _run_case(device, block_size, [(0, 2 * block_size, 0)], 1)         # exactly two full blocks
    _run_case(device, block_size, [(block_size, block_size, 0), (2 * block_size - 1, 1, 0)], 2)
    _run_case(device, block_size, [(3 * block_size, 1, 40), (3 * block_size, 5, 40), (0, 3, 0)], 3)


@pytest.mark.parametrize("device", DEVICES)
def test_dense_attention_matches_reference(device):
    rng = np.random.default_rng(0)
    lens = [1, 9, 4]
    q, k, v = _rand(rng, 14, H, D), _rand(rng, 14, HKV, D), _rand(rng, 14, HKV, D)
    plan = plan_attention(lens, [0, 0, 0], None, device)
    got = dense_attention(*(xp.asarray(a, device=device) for a in (q, k, v)), plan).numpy()
    off, want = 0, []
    for n in lens:
        want.append(_reference(q[off:off + n], k[off:off + n], v[off:off + n], device).reshape(n, -1))
        off += n
    np.testing.assert_allclose(got, np.concatenate(want), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_kv_update_writes_in_place_and_copy_slots(device):
    cfg = tiny_llama_config(n_layers=2)
    cache = KVCache(cfg, 4, 8, device)
    before = cache.k_pools[0]._buf
    h, d = cfg.n_kv_heads, cfg.head_dim
    new = np.arange(2 * h * d, dtype=np.float32).reshape(2, h, d)
    slots = xp.asarray(np.array([3, 9], np.int64), device=device)
    read = xp.asarray(np.array([[9, 3]], np.int64), device=device)
    k, v = kv_update_p.bind(cache.k_pools[0], cache.v_pools[0], slots, xp.asarray(new, device=device),
                            xp.asarray(-new, device=device), read)
    assert cache.k_pools[0]._buf is before  # the pool's buffer, written in place
    np.testing.assert_array_equal(k.numpy()[0], new[::-1])
    np.testing.assert_array_equal(v.numpy()[0], -new[::-1])
    pool = cache.k_pools[0].numpy().reshape(-1, h, d)
    np.testing.assert_array_equal(pool[[3, 9]], new)
    assert not pool[[0, 1, 2, 4, 8, 10]].any()
    copy_slots(cache, np.array([3, 9]), np.array([30, 31]))
    np.testing.assert_array_equal(cache.k_pools[0].numpy().reshape(-1, h, d)[[30, 31]], new)
    np.testing.assert_array_equal(cache.v_pools[0].numpy().reshape(-1, h, d)[[30, 31]], -new)


def test_kv_update_rejects_bad_shapes():
    cfg = tiny_llama_config(n_layers=1)
    cache = KVCache(cfg, 2, 4)
    slots = xp.asarray(np.array([0], np.int64))
    wrong = xp.zeros((1, cfg.n_kv_heads, cfg.head_dim + 1), dtype=xp.float32)
    with pytest.raises(ShapeError, match="new K must be"):
        kv_update_p.bind(cache.k_pools[0], cache.v_pools[0], slots, wrong, wrong, slots)
    q = xp.zeros((2, 3, 8), dtype=xp.float32)
    with pytest.raises(ShapeError, match="kv_heads"):
        reference_attention(q, xp.zeros((2, 2, 8), dtype=xp.float32), xp.zeros((2, 2, 8), dtype=xp.float32))


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=15, deadline=None)
@given(block_size=st.sampled_from([8, 16]),
       news=st.lists(st.integers(1, 6), min_size=1, max_size=3),
       cached=st.lists(st.integers(0, 20), min_size=3, max_size=3), seed=st.integers(0, 2**16))
def test_the_one_kernel_op_equals_its_tenferro_decomposition(device, block_size, news, cached, seed):
    """`paged_attention_p`'s NumPy/torch kernel against the same step through `kv_update_p`
    and the compiled `_attend_arrays` (its decomposition, what a GPU runs), on two caches
    written alike: varlen batches (padding gathers and masks) and single sequences."""
    from tenferro_infer.attention import _attend

    cfg = tiny_llama_config(n_layers=1, hidden_size=H * D, n_heads=H, n_kv_heads=HKV)
    got = []
    for fast in (True, False):
        cache = KVCache.from_budget(cfg, tokens=200, block_size=block_size, device=device)
        r = np.random.default_rng(seed)
        tables = [cache.allocate(list(range(50 * i, 50 * i + c + n))) for i, (c, n) in
                  enumerate(zip(cached, news))]
        plan = plan_attention(news, cached[:len(news)], [t.slots(0, c + n) for t, c, n in
                                                          zip(tables, cached, news)], device)
        t = sum(news)
        q, k, v = (xp.asarray(_rand(r, t, h, D), device=device) for h in (H, HKV, HKV))
        pool = (cache.k_pools[0], cache.v_pools[0])
        if fast:
            got.append(paged_attention(q, k, v, *pool, plan).numpy())
        else:
            kc, vc = kv_update_p.bind(*pool, plan.write, k, v, plan.read)
            got.append(_attend(q, kc, vc, plan).numpy())
    np.testing.assert_allclose(got[0], got[1], rtol=1e-5, atol=1e-6)


def test_the_op_names_what_it_expected():
    from tenferro_infer.attention import paged_attention_p

    cfg = tiny_llama_config(n_layers=1, hidden_size=H * D, n_heads=H, n_kv_heads=HKV)
    cache = KVCache.from_budget(cfg, tokens=32, block_size=8, device="numpy:cpu")
    slots = xp.asarray(np.arange(2, dtype=np.int64))
    kv = xp.asarray(np.zeros((2, HKV, D), np.float32))
    bad_q = xp.asarray(np.zeros((2, H, D + 1), np.float32))
    with pytest.raises(ShapeError, match=r"q must be float32 \(tokens, n_heads"):
        paged_attention_p.bind(cache.k_pools[0], cache.v_pools[0], slots, kv, kv,
                               xp.reshape(slots, (1, 2)), bad_q, width=2)
    with pytest.raises(ShapeError, match="need 3 query rows, got 2"):
        paged_attention_p.bind(cache.k_pools[0], cache.v_pools[0], slots, kv, kv,
                               xp.reshape(slots, (1, 2)), xp.asarray(np.zeros((2, H, D), np.float32)),
                               width=3)
    with pytest.raises(ShapeError, match="read slots must be"):
        paged_attention_p.bind(cache.k_pools[0], cache.v_pools[0], slots, kv, kv, slots,
                               xp.asarray(np.zeros((2, H, D), np.float32)), width=2)
    with pytest.raises(ShapeError, match="mask must be bool"):
        paged_attention_p.bind(cache.k_pools[0], cache.v_pools[0], slots, kv, kv,
                               xp.reshape(slots, (1, 2)), xp.asarray(np.zeros((2, H, D), np.float32)),
                               xp.asarray(np.ones((1, 2), bool)), width=2, has_mask=True)
    with pytest.raises(ShapeError, match="index/mask operands"):
        paged_attention_p.bind(cache.k_pools[0], cache.v_pools[0], slots, kv, kv,
                               xp.reshape(slots, (1, 2)), xp.asarray(np.zeros((2, H, D), np.float32)),
                               width=2, has_mask=True)


@pytest.mark.parametrize("news", [[1], [3, 1, 2]])
def test_the_ops_cost_rules_count_what_their_decomposition_does(news):
    """The energy estimate reads the ops' cost rules: paged_attention_p's FLOPs are those of
    the tenferro graph it replaces (q k^T, softmax, p v; within 10%: the graph also scales
    q and masks), kv_update_p's are zero, and both move bytes."""
    from tenferro_infer.attention import _attend_arrays, paged_attention_p
    from tenferro_runtime import trace
    from tenferro_runtime.cost import graph_cost, op_cost

    cfg = tiny_llama_config(n_layers=1, hidden_size=H * D, n_heads=H, n_kv_heads=HKV)
    cache = KVCache.from_budget(cfg, tokens=200, block_size=8, device="numpy:cpu")
    tables = [cache.allocate(list(range(50 * i, 50 * i + 5 + n))) for i, n in enumerate(news)]
    plan = plan_attention(news, [5] * len(news), [t.slots(0, 5 + n) for t, n in zip(tables, news)],
                          "numpy:cpu")
    r = np.random.default_rng(0)
    q, k, v = (xp.asarray(_rand(r, sum(news), h, D)) for h in (H, HKV, HKV))
    pool = (cache.k_pools[0], cache.v_pools[0])
    kc, vc = kv_update_p.bind(*pool, plan.write, k, v, plan.read)
    want = graph_cost(trace(lambda q, kc, vc: _attend_arrays(q, kc, vc, plan.q_index, plan.out_index,
                                                             plan.mask, plan.width), q, kc, vc))
    extra = [a for a in (plan.q_index, plan.out_index, plan.mask) if a is not None]
    ins = [*pool, plan.write, k, v, plan.read, q, *extra]
    out = paged_attention(q, k, v, *pool, plan)
    params = {"width": plan.width, "has_q_index": plan.q_index is not None,
              "has_out_index": plan.out_index is not None, "has_mask": plan.mask is not None}
    rt = q.device.runtime
    got = op_cost(rt, paged_attention_p, [a._aval for a in ins], [out._aval], params)
    assert abs(got.flops - want.flops) <= 0.1 * want.flops and got.bytes > 0
    kv = op_cost(rt, kv_update_p, [a._aval for a in ins[:6]], [kc._aval, vc._aval], {})
    assert kv.flops == 0 and kv.bytes > 0
