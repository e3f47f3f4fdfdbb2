"""The block allocator: refcounts, free list, prefix caching, copy-on-write, budgets, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_core.errors import ArgumentError, ArgumentValueError
from tenferro_infer.attention import kv_update_p
from tenferro_infer.config import tiny_llama_config
from tenferro_infer.errors import CacheFullError
from tenferro_infer.kv_cache import BlockTable, KVCache
from tenferro_runtime import array_api as xp

CFG = tiny_llama_config()
DEVICES = ["numpy:cpu", "torch:cpu"]


def _check_invariants(cache: KVCache, tables: list[BlockTable]) -> None:
    """Refcounts equal the tables holding each block; free blocks are exactly refcount 0."""
    counts = [0] * cache.num_blocks
    for t in tables:
        assert len(t.blocks) == -(-t.num_tokens // cache.block_size)
        assert len(t.token_ids) == t.num_tokens
        for b in t.blocks:
            counts[b] += 1
    assert counts == [cache.refcount(b) for b in range(cache.num_blocks)]
    free = set(cache._free_plain) | set(cache._free_cached)
    assert free == {b for b in range(cache.num_blocks) if counts[b] == 0}
    s = cache.stats()
    assert s.used_blocks + s.free_blocks == s.num_blocks
    assert s.used_bytes == s.used_blocks * s.bytes_per_block


def _write(cache, table, start, value):
    """Write `value` as the K (and -value as V) of positions [start, num_tokens) in layer 0."""
    slots = table.slots(start, table.num_tokens)
    h, d = cache.config.n_kv_heads, cache.config.head_dim
    k = np.full((len(slots), h, d), value, np.float32)
    dev = cache.device
    none = xp.asarray(np.zeros((0,), np.int64), device=dev)
    kv_update_p.bind(cache.k_pools[0], cache.v_pools[0], xp.asarray(slots, device=dev),
                     xp.asarray(k, device=dev), xp.asarray(-k, device=dev), none)


def _read(cache, table):
    slots = table.slots(0, table.num_tokens)
    return cache.k_pools[0].numpy().reshape(-1, cache.config.n_kv_heads, cache.config.head_dim)[slots, 0, 0]


def test_allocate_extend_free_returns_pool_to_empty():
    cache = KVCache(CFG, 8, 4)
    a = cache.allocate(range(6))
    b = cache.allocate(range(100, 103))
    assert a.blocks and len(a.blocks) == 2 and len(b.blocks) == 1
    cache.extend(a, [1, 2, 3])
    assert a.num_tokens == 9 and len(a.blocks) == 3
    _check_invariants(cache, [a, b])
    assert cache.stats().used_blocks == 4
    cache.free(a)
    cache.free(b)
    _check_invariants(cache, [])
    assert cache.stats().used_blocks == 0 and cache.free_blocks == 8 and cache.stats().used_bytes == 0


def test_slots_and_utilization_figures():
    cache = KVCache(CFG, 5, 4)
    t = cache.allocate(range(6))
    bs = 4
    want = [t.blocks[0] * bs + i for i in range(4)] + [t.blocks[1] * bs + i for i in range(2)]
    assert list(t.slots(0, 6)) == want
    s = cache.stats()
    per = 2 * CFG.n_layers * 4 * CFG.n_kv_heads * CFG.head_dim * 4
    assert (s.bytes_per_block, s.used_blocks, s.free_blocks, s.total_bytes) == (per, 2, 3, 5 * per)
    assert cache.can_allocate(12) and not cache.can_allocate(13)
    assert cache.blocks_needed(3, t) == 1 and cache.blocks_needed(2, t) == 0


def test_from_budget_tokens_and_bytes():
    per = KVCache.block_bytes(CFG, 16)
    assert KVCache.from_budget(CFG, tokens=33, block_size=16).num_blocks == 3
    assert KVCache.from_budget(CFG, bytes=3 * per + 5, block_size=16).num_blocks == 3
    with pytest.raises(ArgumentError, match="exactly one"):
        KVCache.from_budget(CFG, tokens=10, bytes=10)
    with pytest.raises(ArgumentValueError, match="holds no block"):
        KVCache.from_budget(CFG, bytes=per - 1, block_size=16)
    with pytest.raises(ArgumentValueError):
        KVCache(CFG, 0, 16)


def test_cache_full_changes_nothing():
    cache = KVCache(CFG, 3, 4)
    a = cache.allocate(range(8))
    with pytest.raises(CacheFullError, match="free or preempt"):
        cache.allocate(range(50, 59))
    with pytest.raises(CacheFullError):
        cache.extend(a, range(5))
    assert a.num_tokens == 8 and len(a.blocks) == 2
    _check_invariants(cache, [a])
    cache.extend(a, range(4))
    with pytest.raises(CacheFullError):
        cache.extend(a, [1])
    _check_invariants(cache, [a])


def test_prefix_caching_reuses_committed_blocks():
    cache = KVCache(CFG, 10, 4)
    prompt = list(range(10))
    a = cache.allocate(prompt)
    assert cache.match_prefix(prompt) == ([], 0)  # nothing committed yet
    cache.commit(a)
    blocks, n = cache.match_prefix(prompt + [99])
    assert blocks == a.blocks[:2] and n == 8
    assert cache.match_prefix(prompt[:8]) == (a.blocks[:1], 4)  # the last token is always computed
    assert cache.match_prefix([1] + prompt[1:]) == ([], 0)
    b = cache.allocate(prompt[:8] + [50, 51, 52])
    assert b.num_cached == 8 and b.blocks[:2] == a.blocks[:2] and b.blocks[2] != a.blocks[2]
    assert cache.refcount(a.blocks[0]) == 2
    _check_invariants(cache, [a, b])
    cache.free(a)
    cache.free(b)
    _check_invariants(cache, [])
    assert cache.stats().cached_blocks == 2  # freed but still cached
    c = cache.allocate(prompt + [7])
    assert c.num_cached == 8 and cache.stats().prefix_hit_tokens == 16
    _check_invariants(cache, [c])


def test_cached_blocks_are_evicted_last_and_keys_stay_exact():
    cache = KVCache(CFG, 4, 4)
    a = cache.allocate(range(9))
    cache.commit(a)
    cache.free(a)  # 2 cached blocks (the third is partial) + 2 never used
    x = cache.allocate(range(100, 108))  # takes the 2 plain blocks first
    assert cache.match_prefix(list(range(9)))[1] == 8
    y = cache.allocate(range(200, 204))  # evicts the least recently freed cached block
    assert cache.match_prefix(list(range(9)))[1] == 0
    _check_invariants(cache, [x, y])


def test_fork_and_copy_on_write_keep_the_other_sequence_intact():
    cache = KVCache(CFG, 8, 4)
    a = cache.allocate(range(6))
    _write(cache, a, 0, 1.0)
    b = cache.fork(a)
    assert b.blocks == a.blocks and cache.refcount(a.blocks[1]) == 2
    _check_invariants(cache, [a, b])
    cache.extend(b, [10])  # lands in the shared partial block: b gets a copy
    assert b.blocks[0] == a.blocks[0] and b.blocks[1] != a.blocks[1]
    _write(cache, b, 6, 2.0)
    cache.extend(a, [11])  # a's partial block is its own again: written in place
    _write(cache, a, 6, 3.0)
    np.testing.assert_array_equal(_read(cache, a), [1] * 6 + [3])
    np.testing.assert_array_equal(_read(cache, b), [1] * 6 + [2])
    _check_invariants(cache, [a, b])
    cache.free(a)
    cache.free(b)
    assert cache.stats().used_blocks == 0


def test_truncate_then_write_into_committed_block_copies():
    cache = KVCache(CFG, 8, 4)
    a = cache.allocate(range(8))
    _write(cache, a, 0, 5.0)
    cache.commit(a)
    cache.truncate(a, 6)
    assert a.num_tokens == 6 and len(a.blocks) == 2
    shared = a.blocks[1]
    cache.extend(a, [42])
    assert a.blocks[1] != shared  # the registered block is immutable
    _write(cache, a, 6, 9.0)
    np.testing.assert_array_equal(_read(cache, a), [5] * 6 + [9])
    assert cache.match_prefix(list(range(8)) + [0])[1] == 8
    _check_invariants(cache, [a])


def test_bad_input_is_typed():
    cache = KVCache(CFG, 4, 4)
    with pytest.raises(ArgumentError, match="BlockTable"):
        cache.extend("seq", [1])
    with pytest.raises(ArgumentError, match="ints"):
        cache.allocate("abc")
    other = KVCache(CFG, 4, 8).allocate([1])
    with pytest.raises(ArgumentError, match="does not belong"):
        cache.free(other)
    t = cache.allocate([1, 2])
    with pytest.raises(ArgumentValueError, match="cannot keep"):
        cache.truncate(t, 3)


@settings(max_examples=40)
@given(st.lists(st.tuples(st.sampled_from(["alloc", "extend", "fork", "free", "commit", "truncate"]),
                          st.integers(0, 7), st.integers(0, 9)), max_size=40))
def test_random_operations_keep_invariants(ops):
    cache = KVCache(CFG, 12, 4)
    tables: list[BlockTable] = []
    for op, i, n in ops:
        t = tables[i % len(tables)] if tables else None
        try:
            if op == "alloc":
                tables.append(cache.allocate([j % 3 for j in range(n + 1)]))
            elif t is None:
                continue
            elif op == "extend":
                cache.extend(t, [n % 3] * n)
            elif op == "fork":
                tables.append(cache.fork(t))
            elif op == "free":
                cache.free(t)
                tables.remove(t)
            elif op == "commit":
                cache.commit(t)
            elif op == "truncate":
                cache.truncate(t, min(n, t.num_tokens))
        except CacheFullError:
            pass
        _check_invariants(cache, tables)
    for t in tables:
        cache.free(t)
    assert cache.stats().used_blocks == 0


@pytest.mark.parametrize("device", DEVICES)
def test_pools_live_on_the_device(device):
    cache = KVCache.from_budget(CFG, tokens=32, block_size=16, device=device)
    assert str(cache.k_pools[0].device) == device
    assert cache.k_pools[0].shape == (2, 16, CFG.n_kv_heads, CFG.head_dim)
    assert len(cache.v_pools) == CFG.n_layers
