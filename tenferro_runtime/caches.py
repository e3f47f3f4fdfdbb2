"""Bounded, thread-safe, least-recently-used caches owned by a Runtime, with statistics.

`Memo` (a C-level `functools.lru_cache` of a build function) holds what the eager hot path
reads: each device's dispatch entries and scalar constants, so a hit is one call.
`LRUCache` (an `OrderedDict`: hits are C calls, atomic under the GIL; inserts and evictions
take its lock) holds the rest (einsum plans, the tape's VJP graphs). `get_or_build` is the
one way to read and fill one: it counts hits and misses and builds outside the lock (two
threads may build the same entry; both results are equal, one is kept).
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    size: int = 0
    maxsize: int = 0


class LRUCache(OrderedDict):
    """A bounded least-recently-used map; read and fill it with `get_or_build`."""

    def __init__(self, name: str, maxsize: int):
        super().__init__()
        if maxsize < 1:
            raise ValueError(f"cache {name!r}: maxsize must be >= 1, got {maxsize}")
        self.name = name
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self._lock = threading.Lock()

    def get_or_build(self, key: Hashable, build: Callable[..., Any], *args: Any) -> Any:
        """The value for `key`, built with `build(*args)` and stored on a miss.

        An unhashable key is built and not stored. `build` may raise: nothing is stored then.
        """
        try:
            value = self.get(key)
        except TypeError:
            self.misses += 1
            return build(*args)
        if value is not None:
            self.hits += 1
            try:
                self.move_to_end(key)
            except KeyError:  # evicted by another thread meanwhile
                pass
            return value
        self.misses += 1
        value = build(*args)
        self.put(key, value)
        return value

    def put(self, key: Hashable, value: Any) -> None:
        """Store `value`, evicting the least recently used entries past `maxsize`."""
        with self._lock:
            self[key] = value
            self.move_to_end(key)
            while len(self) > self.maxsize:
                self.popitem(last=False)
                self.evictions += 1

    def stats(self) -> CacheStats:
        return CacheStats(self.hits, self.misses, self.evictions, len(self), self.maxsize)

    def clear(self) -> None:
        with self._lock:
            super().clear()
            self.hits = self.misses = self.evictions = 0


class Memo:
    """`build(*key)` memoized in a C-level LRU (`functools.lru_cache`): bounded, thread-safe,
    least-recently-used, with its statistics; the eager dispatch cache, whose hit must cost
    one call. Call it as ``memo.get(*key)``; a `build` that raises stores nothing."""

    def __init__(self, name: str, maxsize: int, build: Callable[..., Any],
                 on_clear: Callable[[], None] | None = None):
        self.name = name
        self.maxsize = maxsize
        self._failed = 0
        self._on_clear = on_clear

        def counted(*key: Any) -> Any:
            try:
                return build(*key)
            except BaseException:
                self._failed += 1
                raise

        self.get = functools.lru_cache(maxsize=maxsize)(counted)

    def stats(self) -> CacheStats:
        info = self.get.cache_info()
        evictions = max(0, info.misses - self._failed - info.currsize)
        return CacheStats(info.hits, info.misses, evictions, info.currsize, self.maxsize)

    def clear(self) -> None:
        self.get.cache_clear()
        self._failed = 0
        if self._on_clear is not None:
            self._on_clear()


class GraphData:
    """What the runtime derives from a graph (its plan, a backend's fused code, the callee
    AD makes of it), kept beside the graph rather than in it: graphs are values that passes
    and executors read but never write. Keyed by the graph's identity (a lookup is one dict
    read, so kernels may use it per call); an entry goes when its graph does."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._data: dict[int, tuple[weakref.ref, dict]] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get_or_build(self, graph: Any, key: Hashable, build: Callable[[], Any]) -> Any:
        """The value derived from `graph` under `key`, built once with `build()` (outside the
        lock: two threads may both build, one result is kept)."""
        entry = self._data.get(id(graph))
        if entry is not None and entry[0]() is graph:
            value = entry[1].get(key, _MISSING)
            if value is not _MISSING:
                self.hits += 1
                return value
        self.misses += 1
        value = build()
        with self._lock:
            entry = self._data.get(id(graph))
            if entry is None or entry[0]() is not graph:
                entry = self._data[id(graph)] = (weakref.ref(graph, self._forget(id(graph))), {})
            return entry[1].setdefault(key, value)

    def _forget(self, key: int) -> Callable[[Any], None]:
        def forget(ref: Any) -> None:
            with self._lock:
                entry = self._data.get(key)
                if entry is not None and entry[0] is ref:
                    del self._data[key]

        return forget

    def stats(self) -> CacheStats:
        return CacheStats(self.hits, self.misses, 0, len(self._data), 0)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


_MISSING = object()


class Caches:
    """The caches of one Runtime by name (dispatch, einsum plans, fft plans, tape VJPs, ...)."""

    def __init__(self) -> None:
        self._caches: dict[str, LRUCache] = {}
        self._lock = threading.Lock()
        self.graph_data = GraphData("graph data")
        self._caches["graph data"] = self.graph_data  # type: ignore[assignment]

    def get(self, name: str, maxsize: int = 4096) -> LRUCache:
        """The cache called `name`, created with `maxsize` on first use."""
        cache = self._caches.get(name)
        if cache is None:
            with self._lock:
                cache = self._caches.get(name)
                if cache is None:
                    cache = self._caches[name] = LRUCache(name, maxsize)
        return cache

    def memo(self, name: str, maxsize: int, build: Callable[..., Any],
             on_clear: Callable[[], None] | None = None) -> Memo:
        """A new `Memo` called `name` (replacing one of that name), listed in `stats`;
        `on_clear()` runs after each `clear` (to empty what was filled from it)."""
        memo = Memo(name, maxsize, build, on_clear)
        with self._lock:
            self._caches[name] = memo  # type: ignore[assignment]
        return memo

    def stats(self) -> dict[str, CacheStats]:
        return {n: c.stats() for n, c in list(self._caches.items())}

    def clear(self) -> None:
        for c in list(self._caches.values()):
            c.clear()
