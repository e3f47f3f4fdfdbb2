"""`DistributedSampler`: each rank's share of a dataset, for tenferro-nn's DataLoader.

Every rank draws the same global order for epoch `e` (`permutation(fold_in(key, e), n)`, the
loader's own shuffle), then takes every `world_size`-th index starting at its rank, so the
ranks' shares are disjoint and together cover the epoch. The tail is padded (the first
indices repeated, as torch's DistributedSampler) or dropped so every rank gets the same
number of samples, hence the same number of steps::

    sampler = DistributedSampler(len(ds), key=key)            # rank and world from init()
    loader = sampler.loader(ds, batch_size=32, drop_last=True)  # a DataLoader over this share
    for epoch in range(epochs):
        for x, y in loader: ...                                 # epoch e: shuffled with e
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tenferro_core.errors import ArgumentError, ArgumentValueError


def _int(name: str, v: Any, low: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ArgumentError(f"DistributedSampler: {name} must be an int, got {type(v).__name__} {v!r:.40}")
    if v < low:
        raise ArgumentValueError(f"DistributedSampler: {name} must be >= {low}, got {v}")
    return int(v)


class DistributedSampler:
    """Indices of one rank's share of `n` samples per epoch (see the module doc).

    `rank`/`world_size` default to the process group's (`init()` first). `shuffle=True`
    needs a `key`; `drop_last=True` drops the tail that does not divide evenly, else it is
    padded by repeating the first indices of the epoch's order."""

    def __init__(self, n: int, *, key: Any = None, shuffle: bool = True, drop_last: bool = False,
                 rank: int | None = None, world_size: int | None = None):
        from tenferro_distributed.group import current

        self.n = _int("n (the dataset's length)", n, 0)
        if rank is None or world_size is None:
            g = current()
            rank = g.rank if rank is None else rank
            world_size = g.world_size if world_size is None else world_size
        self.world_size = _int("world_size", world_size, 1)
        self.rank = _int("rank", rank, 0)
        if self.rank >= self.world_size:
            raise ArgumentValueError(f"DistributedSampler: rank must be in [0, {self.world_size}), got "
                                     f"{self.rank}")
        if not isinstance(shuffle, bool) or not isinstance(drop_last, bool):
            raise ArgumentError(f"DistributedSampler: shuffle and drop_last must be bools, got "
                                f"{shuffle!r}, {drop_last!r}")
        if shuffle and key is None:
            raise ArgumentError("DistributedSampler: shuffle=True needs a key (the same on every rank); "
                                "pass key=tenferro_runtime.random.key(seed)")
        self.key, self.shuffle, self.drop_last = key, shuffle, drop_last
        if drop_last:
            self.num_samples = self.n // self.world_size
        else:
            self.num_samples = math.ceil(self.n / self.world_size)

    def __len__(self) -> int:
        return self.num_samples

    def global_order(self, epoch: int) -> np.ndarray:
        """The epoch's order of all `n` indices, the same on every rank."""
        epoch = _int("epoch", epoch, 0)
        if not self.shuffle:
            return np.arange(self.n, dtype=np.int64)
        from tenferro_runtime import random as tfr

        return np.asarray(tfr.permutation(tfr.fold_in(self.key, epoch), self.n)).astype(np.int64)

    def indices(self, epoch: int) -> np.ndarray:
        """This rank's indices for `epoch` (int64, `num_samples` of them)."""
        order = self.global_order(epoch)
        total = self.num_samples * self.world_size
        if total > len(order):  # pad: repeat the order from its start (as often as needed)
            reps = math.ceil(total / max(len(order), 1))
            order = np.tile(order, reps)[:total] if len(order) else order
        else:
            order = order[:total]
        return order[self.rank:total:self.world_size]

    def loader(self, dataset: Any, batch_size: int = 1, **kwargs: Any) -> Any:
        """A tenferro-nn `DataLoader` over this rank's share of `dataset`: iteration `e` (or
        `set_epoch(e)`) visits `indices(e)` in order. Keyword arguments go to DataLoader
        (`drop_last`, `prefetch`, `device`, `collate_fn`; not `shuffle`/`key`: the sampler
        shuffles)."""
        if len(dataset) != self.n:
            raise ArgumentValueError(f"DistributedSampler.loader: the dataset has {len(dataset)} samples, "
                                     f"the sampler was made for {self.n}")
        for k in ("shuffle", "key"):
            if k in kwargs:
                raise ArgumentError(f"DistributedSampler.loader: {k}= is the sampler's (the sampler "
                                    f"shuffles by epoch); leave it out")
        from tenferro_nn.data import DataLoader

        sampler = self

        class _ShardLoader(DataLoader):
            def __len__(self) -> int:
                n, bs = sampler.num_samples, self.batch_size
                return n // bs if self.drop_last else math.ceil(n / bs)

            def order(self, epoch: int) -> np.ndarray:
                return sampler.indices(epoch)

        return _ShardLoader(dataset, batch_size, **kwargs)

    def __repr__(self) -> str:
        return (f"DistributedSampler(n={self.n}, rank={self.rank}, world_size={self.world_size}, "
                f"shuffle={self.shuffle}, drop_last={self.drop_last})")


__all__ = ["DistributedSampler"]
