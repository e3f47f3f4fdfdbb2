"""Bounded caches owned by a Runtime, with hit/miss statistics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    size: int = 0
    maxsize: int = 0


class BoundedCache(dict):
    """A dict that evicts its oldest entries past `maxsize` (FIFO: cheap on the hot path)."""

    __slots__ = ("name", "maxsize", "hits", "misses", "evictions")

    def __init__(self, name: str, maxsize: int):
        super().__init__()
        self.name = name
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def put(self, key: Any, value: Any) -> None:
        if len(self) >= self.maxsize:
            del self[next(iter(self))]
            self.evictions += 1
        self[key] = value

    def stats(self) -> CacheStats:
        return CacheStats(self.hits, self.misses, self.evictions, len(self), self.maxsize)

    def clear(self) -> None:
        super().clear()
        self.hits = self.misses = self.evictions = 0


class Caches:
    """The caches of one Runtime by name (abstract eval, einsum plans, fft plans, ...)."""

    def __init__(self) -> None:
        self._caches: dict[str, BoundedCache] = {}

    def get(self, name: str, maxsize: int = 4096) -> BoundedCache:
        cache = self._caches.get(name)
        if cache is None:
            cache = self._caches[name] = BoundedCache(name, maxsize)
        return cache

    def stats(self) -> dict[str, CacheStats]:
        return {n: c.stats() for n, c in self._caches.items()}

    def clear(self) -> None:
        for c in self._caches.values():
            c.clear()
