"""DistributedSampler: disjoint shares covering the epoch, the same length on every rank, the
shuffle seeded by the epoch, padding or dropping the tail, and its DataLoader (no processes
needed: rank and world size are given explicitly)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import tenferro_nn as nn
from tenferro_core.errors import ArgumentError, ArgumentValueError
from tenferro_distributed.errors import NotInitializedError
from tenferro_distributed.sampler import DistributedSampler
from tenferro_runtime import random


@given(n=st.integers(0, 40), world=st.integers(1, 5), drop=st.booleans(), shuffle=st.booleans(),
       epoch=st.integers(0, 3))
@example(n=0, world=3, drop=False, shuffle=True, epoch=0)
@example(n=1, world=4, drop=False, shuffle=False, epoch=0)
@example(n=7, world=2, drop=True, shuffle=True, epoch=1)
def test_shares_cover_the_epoch(n, world, drop, shuffle, epoch):
    key = random.key(3)
    ss = [DistributedSampler(n, key=key, shuffle=shuffle, drop_last=drop, rank=r, world_size=world)
          for r in range(world)]
    parts = [s.indices(epoch) for s in ss]
    lens = {len(p) for p in parts}
    assert lens == {n // world if drop else -(-n // world)}
    assert all(len(s) == len(p) for s, p in zip(ss, parts))
    allidx = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    order = ss[0].global_order(epoch)
    if drop:  # disjoint, taken from the epoch's order
        assert len(set(allidx.tolist())) == len(allidx)
        assert set(allidx.tolist()) == set(order[:len(allidx)].tolist())
    else:  # everything covered; only the padding repeats
        assert set(allidx.tolist()) == set(range(n))
        assert len(allidx) - n < world
    if not shuffle:
        np.testing.assert_array_equal(order, np.arange(n))
    else:
        assert sorted(order.tolist()) == list(range(n))


def test_shuffle_depends_on_epoch_and_key_only():
    a = DistributedSampler(100, key=random.key(1), rank=1, world_size=4)
    b = DistributedSampler(100, key=random.key(1), rank=1, world_size=4)
    c = DistributedSampler(100, key=random.key(2), rank=1, world_size=4)
    np.testing.assert_array_equal(a.indices(0), b.indices(0))
    assert not np.array_equal(a.indices(0), a.indices(1))
    assert not np.array_equal(a.indices(0), c.indices(0))
    # the global order is the DataLoader's own shuffle of epoch e
    ref = nn.DataLoader(nn.ArrayDataset(np.arange(100)), shuffle=True, key=random.key(1))
    np.testing.assert_array_equal(a.global_order(2), ref.order(2))


def test_loader_gives_this_ranks_batches_per_epoch():
    x = np.arange(22, dtype=np.float64)[:, None] * np.ones((1, 3))
    y = np.arange(22, dtype=np.int64)
    ds = nn.ArrayDataset(x, y)
    s = DistributedSampler(22, key=random.key(0), rank=2, world_size=3)
    loader = s.loader(ds, batch_size=3)
    assert len(loader) == 3  # 8 samples: batches of 3, 3, 2
    for epoch in range(2):
        got = np.concatenate([np.asarray(yb) for _, yb in loader])
        np.testing.assert_array_equal(got, s.indices(epoch))
    loader.set_epoch(0)
    np.testing.assert_array_equal(np.concatenate([np.asarray(yb) for _, yb in loader]), s.indices(0))
    dl = s.loader(ds, batch_size=3, drop_last=True)
    assert len(dl) == 2 and sum(1 for _ in dl) == 2


def test_bad_input_is_typed():
    with pytest.raises(NotInitializedError):
        DistributedSampler(10, key=random.key(0))  # rank/world from a group that does not exist
    with pytest.raises(ArgumentValueError, match="rank must be in"):
        DistributedSampler(10, key=random.key(0), rank=2, world_size=2)
    with pytest.raises(ArgumentValueError, match="world_size must be >= 1"):
        DistributedSampler(10, key=random.key(0), rank=0, world_size=0)
    with pytest.raises(ArgumentError, match="needs a key"):
        DistributedSampler(10, rank=0, world_size=2)
    with pytest.raises(ArgumentError, match="must be an int"):
        DistributedSampler(10.0, key=random.key(0), rank=0, world_size=2)
    s = DistributedSampler(10, key=random.key(0), rank=0, world_size=2)
    with pytest.raises(ArgumentValueError):
        s.indices(-1)
    with pytest.raises(ArgumentValueError, match="has 3 samples"):
        s.loader(nn.ArrayDataset(np.zeros(3)))
    with pytest.raises(ArgumentError, match="shuffle"):
        s.loader(nn.ArrayDataset(np.zeros(10)), shuffle=True)
    # TypeError / ValueError as a NumPy user would catch them
    assert issubclass(ArgumentError, TypeError) and issubclass(ArgumentValueError, ValueError)
