"""A paged KV cache: per-layer block pools, a reference-counted block allocator, per-sequence
block tables and prefix caching.

Each layer owns a K pool and a V pool of shape (num_blocks, block_size, n_kv_heads,
head_dim) on one tenferro device, preallocated once. A token's K/V lives in *slot*
``block_id * block_size + offset``; a sequence's `BlockTable` lists its blocks in order.
Blocks are shared by reference count:

- **fork** shares every block of a table (parallel samples, speculative drafts);
- **prefix caching**: a full block whose K/V has been written is registered under the
  exact key (key id of its parent block, its token ids). A new prompt that starts with
  registered blocks reuses them (refcount + 1) and skips computing them. Keys are compared
  exactly (a dict of tuples, not a truncated hash), and a parent is named by a key id that is
  never reused, so a hit is never a collision. Registered blocks are immutable; freed ones
  stay cached (least recently freed evicted first) until their block is needed;
- **copy-on-write**: writing into a block that another table shares, or that is registered,
  first copies it into a fresh block (every layer), so the other owner keeps its data.

Every method checks its input and capacity before it changes anything: a pool that cannot
hold a request raises `CacheFullError` and leaves the allocator as it was.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tenferro_core.errors import ArgumentError, ArgumentValueError
from tenferro_runtime import array_api as xp

from .config import ModelConfig
from .errors import CacheFullError

_ROOT = 0  # the key id a sequence's first block hangs under


@dataclass
class BlockTable:
    """One sequence's view of the cache: its blocks in order and how many token slots of them
    it holds. ``token_ids`` are the tokens of those slots (for prefix keys); ``num_cached``
    is how many leading tokens a prefix hit supplied (their K/V need not be computed)."""

    blocks: list[int] = field(default_factory=list)
    num_tokens: int = 0
    token_ids: list[int] = field(default_factory=list)
    num_cached: int = 0
    keys: list[int] = field(default_factory=list)  # key id of each registered leading block

    def slots(self, start: int, stop: int) -> np.ndarray:
        """The pool slots of positions [start, stop) (int64), for reads and writes."""
        bs = self._block_size
        pos = np.arange(start, stop, dtype=np.int64)
        return np.asarray(self.blocks, dtype=np.int64)[pos // bs] * bs + pos % bs

    _block_size: int = 0


@dataclass(frozen=True)
class CacheStats:
    """Utilization: blocks in use (refcount > 0), free ones (of which ``cached_blocks`` still
    hold a registered prefix), and the same in bytes; prefix-cache hit counts in tokens."""

    num_blocks: int
    block_size: int
    used_blocks: int
    free_blocks: int
    cached_blocks: int
    bytes_per_block: int
    used_bytes: int
    total_bytes: int
    prefix_queried_tokens: int
    prefix_hit_tokens: int


def _positive_int(what: str, v: Any, minimum: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ArgumentError(f"KVCache: {what} must be an int >= {minimum}, got {v!r}")
    if int(v) < minimum:
        raise ArgumentValueError(f"KVCache: {what} must be an int >= {minimum}, got {v!r}")
    return int(v)


def _token_list(what: str, token_ids: Any) -> list[int]:
    try:
        out = [int(t) for t in token_ids]
    except (TypeError, ValueError):
        raise ArgumentError(f"KVCache.{what}: token_ids must be a sequence of ints, got "
                            f"{type(token_ids).__name__}") from None
    return out


class KVCache:
    """Paged K/V pools for one model on one device, and the allocator that hands out their
    blocks. Build with `KVCache(config, num_blocks, block_size, device)` or `from_budget`."""

    def __init__(self, config: ModelConfig, num_blocks: int, block_size: int = 16,
                 device: Any = "numpy:cpu", dtype: Any = None):
        self.config = config
        self.num_blocks = _positive_int("num_blocks", num_blocks)
        self.block_size = _positive_int("block_size", block_size)
        self.dtype = xp.float32 if dtype is None else dtype
        shape = (self.num_blocks, self.block_size, config.n_kv_heads, config.head_dim)
        self.k_pools = [xp.zeros(shape, dtype=self.dtype, device=device) for _ in range(config.n_layers)]
        self.v_pools = [xp.zeros(shape, dtype=self.dtype, device=device) for _ in range(config.n_layers)]
        self.device = self.k_pools[0].device if self.k_pools else device
        self._ref = [0] * self.num_blocks
        self._free_plain: OrderedDict[int, None] = OrderedDict((b, None) for b in range(self.num_blocks))
        self._free_cached: OrderedDict[int, None] = OrderedDict()  # refcount 0, still registered
        self._by_key: dict[tuple[int, tuple[int, ...]], int] = {}  # (parent key id, tokens) -> block
        self._key_of: dict[int, tuple[int, tuple[int, ...]]] = {}  # block -> its key
        self._key_id: dict[int, int] = {}  # block -> its key id (never reused)
        self._next_key_id = _ROOT + 1
        self._queried = 0
        self._hits = 0

    @classmethod
    def from_budget(cls, config: ModelConfig, *, tokens: int | None = None,
                    bytes: int | None = None, block_size: int = 16,  # noqa: A002 (the unit's name)
                    device: Any = "numpy:cpu", dtype: Any = None) -> KVCache:
        """A cache sized by how many tokens it must hold (rounded up to whole blocks) or by a
        memory budget in bytes (rounded down): exactly one of the two."""
        if (tokens is None) == (bytes is None):
            raise ArgumentError(f"KVCache.from_budget: give exactly one of tokens= or bytes=, got "
                                f"tokens={tokens!r}, bytes={bytes!r}")
        block_size = _positive_int("block_size", block_size)
        per_block = cls.block_bytes(config, block_size, dtype)
        if tokens is not None:
            n = math.ceil(_positive_int("tokens", tokens) / block_size)
        else:
            n = _positive_int("bytes", bytes) // per_block
            if n < 1:
                raise ArgumentValueError(f"KVCache.from_budget: bytes={bytes} holds no block; one block of "
                                    f"{block_size} tokens takes {per_block} bytes for {config.name}")
        return cls(config, n, block_size, device, dtype)

    @staticmethod
    def block_bytes(config: ModelConfig, block_size: int, dtype: Any = None) -> int:
        """Bytes one block takes over all layers, K and V."""
        itemsize = np.dtype((xp.float32 if dtype is None else dtype).name).itemsize
        return 2 * config.n_layers * block_size * config.n_kv_heads * config.head_dim * itemsize

    # ---- queries ---------------------------------------------------------------------------
    @property
    def free_blocks(self) -> int:
        """Blocks a new allocation can take (never used, or only holding a cached prefix)."""
        return len(self._free_plain) + len(self._free_cached)

    def blocks_needed(self, n_tokens: int, table: BlockTable | None = None) -> int:
        """New blocks `n_tokens` more tokens need (for `table`, or a new sequence), counting a
        copy-on-write of a shared partial last block."""
        n_tokens = _positive_int("n_tokens", n_tokens, 0)
        have = 0 if table is None else table.num_tokens
        held = 0 if table is None else len(table.blocks)
        need = max(0, math.ceil((have + n_tokens) / self.block_size) - held)
        if table is not None and n_tokens and self._must_copy(table):
            need += 1
        return need

    def can_allocate(self, n_tokens: int, table: BlockTable | None = None) -> bool:
        """Whether `n_tokens` more tokens fit now (for `table`, or a new sequence)."""
        return self.blocks_needed(n_tokens, table) <= self.free_blocks

    def stats(self) -> CacheStats:
        """Utilization figures (see `CacheStats`)."""
        per = self.block_bytes(self.config, self.block_size, self.dtype)
        used = self.num_blocks - self.free_blocks
        return CacheStats(self.num_blocks, self.block_size, used, self.free_blocks,
                          len(self._free_cached), per, used * per, self.num_blocks * per,
                          self._queried, self._hits)

    def refcount(self, block: int) -> int:
        """How many tables hold `block`."""
        return self._ref[block]

    def match_prefix(self, token_ids: Sequence[int]) -> tuple[list[int], int]:
        """(registered blocks holding the longest cached prefix of `token_ids`, how many tokens
        they cover). Changes nothing. At least the last token is always left to compute, so a
        step has a position to take logits from."""
        tokens = _token_list("match_prefix", token_ids)
        blocks, parent, bs = [], _ROOT, self.block_size
        for i in range((len(tokens) - 1) // bs):
            b = self._by_key.get((parent, tuple(tokens[i * bs:(i + 1) * bs])))
            if b is None:
                break
            blocks.append(b)
            parent = self._key_id[b]
        return blocks, len(blocks) * bs

    # ---- allocation ------------------------------------------------------------------------
    def allocate(self, token_ids: Sequence[int], *, use_prefix: bool = True) -> BlockTable:
        """A new sequence's table holding `token_ids` (its prompt, or a first chunk of it):
        cached prefix blocks are shared (``table.num_cached`` tokens need no compute), fresh
        blocks hold the rest. `CacheFullError` when the pool cannot, nothing changed."""
        tokens = _token_list("allocate", token_ids)
        blocks, n_cached = self.match_prefix(tokens) if use_prefix else ([], 0)
        revived = sum(1 for b in blocks if self._ref[b] == 0)  # free now, taken by the match
        need = math.ceil(len(tokens) / self.block_size) - len(blocks)
        if need > self.free_blocks - revived:
            raise self._full(len(tokens) - n_cached, need, self.free_blocks - revived)
        self._queried += len(tokens)
        self._hits += n_cached
        table = BlockTable(_block_size=self.block_size)
        for b in blocks:
            self._take(b)
        table.blocks = list(blocks)
        table.keys = [self._key_id[b] for b in blocks]
        table.token_ids = tokens[:n_cached]
        table.num_tokens = table.num_cached = n_cached
        self._grow(table, tokens[n_cached:])
        return table

    def extend(self, table: BlockTable, token_ids: Sequence[int]) -> None:
        """Reserve slots for `token_ids` after the table's tokens (the next chunk, a decoded
        token, draft tokens), copying a shared last block first. `CacheFullError` when the
        pool cannot, nothing changed."""
        tokens = _token_list("extend", token_ids)
        self._check_table(table, "extend")
        need = self.blocks_needed(len(tokens), table)
        if need > self.free_blocks:
            raise self._full(len(tokens), need, self.free_blocks)
        self._grow(table, tokens)

    def fork(self, table: BlockTable) -> BlockTable:
        """A second table sharing every block of `table` (refcount + 1 each); the first write
        into a shared partial block copies it."""
        self._check_table(table, "fork")
        for b in table.blocks:
            self._ref[b] += 1
        return BlockTable(list(table.blocks), table.num_tokens, list(table.token_ids),
                          table.num_cached, list(table.keys), _block_size=self.block_size)

    def truncate(self, table: BlockTable, n_tokens: int) -> None:
        """Keep only the first `n_tokens` tokens (rejected draft tokens), freeing blocks past
        them."""
        self._check_table(table, "truncate")
        n_tokens = _positive_int("n_tokens", n_tokens, 0)
        if n_tokens > table.num_tokens:
            raise ArgumentValueError(f"KVCache.truncate: the table holds {table.num_tokens} tokens, "
                                f"cannot keep {n_tokens}; pass at most {table.num_tokens}")
        keep = math.ceil(n_tokens / self.block_size)
        for b in table.blocks[keep:]:
            self._release(b)
        del table.blocks[keep:]
        del table.token_ids[n_tokens:]
        del table.keys[n_tokens // self.block_size:]
        table.num_tokens = n_tokens
        table.num_cached = min(table.num_cached, n_tokens)

    def free(self, table: BlockTable) -> None:
        """Give back a finished or preempted sequence's blocks (refcount - 1 each); registered
        ones stay cached for later prompts until their block is needed. Empties the table."""
        self._check_table(table, "free")
        for b in table.blocks:
            self._release(b)
        table.blocks, table.token_ids, table.keys = [], [], []
        table.num_tokens = table.num_cached = 0

    def commit(self, table: BlockTable, upto: int | None = None) -> None:
        """Register the table's full blocks below position `upto` (default: all its tokens)
        as cached prefixes: call once their K/V has been written (the models do, after each
        forward)."""
        self._check_table(table, "commit")
        upto = table.num_tokens if upto is None else min(upto, table.num_tokens)
        bs = self.block_size
        for i in range(len(table.keys), upto // bs):
            parent = table.keys[i - 1] if i else _ROOT
            key = (parent, tuple(table.token_ids[i * bs:(i + 1) * bs]))
            b = table.blocks[i]
            if b in self._key_of:  # shared from the cache, or registered by a fork's twin
                table.keys.append(self._key_id[b])
                continue
            if key in self._by_key:  # computed twice (two prompts in one step): chain on the first
                table.keys.append(self._key_id[self._by_key[key]])
                continue
            self._by_key[key] = b
            self._key_of[b] = key
            self._key_id[b] = self._next_key_id
            self._next_key_id += 1
            table.keys.append(self._key_id[b])

    # ---- internals -------------------------------------------------------------------------
    def _check_table(self, table: Any, what: str) -> None:
        if not isinstance(table, BlockTable):
            raise ArgumentError(f"KVCache.{what}: expected a BlockTable from KVCache.allocate or "
                                f"fork, got {type(table).__name__}")
        if table._block_size != self.block_size or any(self._ref[b] < 1 for b in table.blocks
                                                        if 0 <= b < self.num_blocks):
            raise ArgumentError(f"KVCache.{what}: this table does not belong to this cache (or was "
                                f"freed); use tables made by this cache's allocate or fork")

    def _must_copy(self, table: BlockTable) -> bool:
        """Whether the next write lands in a partial last block that is shared or registered."""
        if not table.blocks or table.num_tokens % self.block_size == 0:
            return False
        last = table.blocks[-1]
        return self._ref[last] > 1 or last in self._key_of

    def _grow(self, table: BlockTable, tokens: list[int]) -> None:
        """Append `tokens` (capacity already checked)."""
        if not tokens:
            return
        if self._must_copy(table):
            old, new = table.blocks[-1], self._pop_free()
            self._copy_block(old, new)
            self._release(old)
            table.blocks[-1] = new
        need = math.ceil((table.num_tokens + len(tokens)) / self.block_size) - len(table.blocks)
        table.blocks.extend(self._pop_free() for _ in range(need))
        table.token_ids.extend(tokens)
        table.num_tokens += len(tokens)

    def _pop_free(self) -> int:
        if self._free_plain:
            b = self._free_plain.popitem(last=False)[0]
        else:  # evict the least recently freed cached block
            b = self._free_cached.popitem(last=False)[0]
            del self._by_key[self._key_of.pop(b)]
            del self._key_id[b]
        self._ref[b] = 1
        return b

    def _take(self, b: int) -> None:
        """One more reference to a registered block (reviving it when it was free)."""
        if self._ref[b] == 0:
            del self._free_cached[b]
        self._ref[b] += 1

    def _release(self, b: int) -> None:
        self._ref[b] -= 1
        if self._ref[b] == 0:
            if b in self._key_of:
                self._free_cached[b] = None
            else:
                self._free_plain[b] = None

    def _copy_block(self, src: int, dst: int) -> None:
        """Copy one block's K/V in every layer (copy-on-write), in place in the pools."""
        from .attention import copy_slots

        bs = self.block_size
        copy_slots(self, np.arange(src * bs, (src + 1) * bs), np.arange(dst * bs, (dst + 1) * bs))

    def _full(self, n_tokens: int, need: int, free: int) -> CacheFullError:
        return CacheFullError(
            f"KV cache full: {n_tokens} token(s) need {need} more block(s) of {self.block_size} but "
            f"{free} of {self.num_blocks} are free; free or preempt a sequence, or build the cache "
            f"with a larger budget (KVCache.from_budget(tokens=... or bytes=...))")


__all__ = ["BlockTable", "CacheStats", "KVCache"]
