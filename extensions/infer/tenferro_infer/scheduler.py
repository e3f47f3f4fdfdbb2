"""The continuous-batching scheduler: which requests run in the next step, and how many of
their tokens.

Requests wait in arrival order and run until they finish. Every step first serves the
running requests (each decoding request one token, or one token plus its draft; a request
still in its prompt the next chunk of it), then admits waiting ones while the step's token
budget, the batch limit and the KV pool allow. Admission reserves the whole prompt's blocks
(shared ones from the prefix cache are reused, and their tokens need no compute); a prompt
longer than the budget is computed in chunks over several steps (chunked prefill). When the
pool cannot hold a running request's next token, the most recently admitted request is
preempted (never one already served in this step; the request itself when it is the
latest): its blocks are freed and it goes back to the front of the queue, to be recomputed
from its prompt and the tokens it had generated (preemption by recomputation; its sampling
continues where it stopped, since a request's random draws depend only on its seed and
step). A request that alone fills the whole pool and needs another slot ends with finish
reason "length".
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .errors import CacheFullError
from .kv_cache import BlockTable, KVCache
from .sampling import LogprobInfo, RequestRNG, SamplingParams


@dataclass(eq=False)
class Request:
    """One request's state in the engine."""

    id: str
    prompt_ids: list[int]
    params: SamplingParams
    rng: RequestRNG
    detok: Any  # the tokenizer's IncrementalDetokenizer
    arrival: float = field(default_factory=time.perf_counter)
    output_ids: list[int] = field(default_factory=list)
    table: BlockTable | None = None
    computed: int = 0  # leading tokens whose K/V the cache holds
    status: str = "waiting"  # "waiting", "running", "finished"
    finish_reason: str | None = None
    joules: float = 0.0
    logprobs: list[LogprobInfo] | None = None
    text: str = ""
    sent_ids: int = 0  # output ids already reported
    sent_text: int = 0  # characters of text already reported
    last_token_at: float | None = None  # when its latest token came (the energy policy's clock)
    preemptions: int = 0
    draft: list[int] = field(default_factory=list)  # this step's draft tokens
    draft_probs: Any = None
    proposed: int = 0  # draft tokens proposed / accepted so far
    accepted: int = 0

    @property
    def tokens(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)


@dataclass
class Scheduler:
    """Waiting and running queues over one KV cache (see the module docstring)."""

    cache: KVCache
    max_batch: int = 16
    token_budget: int = 256
    prefix_caching: bool = True
    waiting: deque = field(default_factory=deque)
    running: list = field(default_factory=list)
    batch_limit: int = 0  # the batch size allowed now (max_watts shrinks it); 0: max_batch
    ended: list = field(default_factory=list)  # finished by `schedule` itself, for the engine to report

    def limit(self) -> int:
        return self.batch_limit or self.max_batch

    def schedule(self, spec_tokens: Any = None) -> list[tuple[Request, int]]:
        """(request, number of its tokens to compute) for the next step, with each one's slots
        reserved in the cache. `spec_tokens(request) -> list[int]` proposes a decoding
        request's draft (stored on it; its slots are reserved too)."""
        budget, plan = self.token_budget, []
        for r in list(self.running):
            if r.status != "running" or budget <= 0:
                continue
            need = r.num_tokens - r.computed
            r.draft, r.draft_probs = [], None
            if need == 1 and spec_tokens is not None and budget > 1:
                spec_tokens(r, budget - 1)
            n = self._reserve(r, need, budget)
            if n == 0:
                continue  # preempted itself: nothing else could give way
            plan.append((r, n))
            budget -= n
        while self.waiting and budget > 0 and len(self.running) < self.limit():
            r = self.waiting[0]
            try:
                r.table = self.cache.allocate(r.tokens, use_prefix=self.prefix_caching)
            except CacheFullError:
                if self.running:
                    break  # admitted when running requests finish and free their blocks
                self._outgrown(r)  # a preempted request's tokens no longer fit the whole pool
                continue
            self.waiting.popleft()
            r.status, r.computed = "running", r.table.num_cached
            r.draft, r.draft_probs = [], None
            self.running.append(r)
            n = min(r.num_tokens - r.computed, budget)
            plan.append((r, n))
            budget -= n
        return plan

    def _reserve(self, r: Request, need: int, budget: int) -> int:
        """Reserve slots for r's next `need` tokens and its draft (within `budget`), preempting
        the latest admitted of the requests after r while the pool is short; a draft is
        dropped before r itself gives way. The number of tokens reserved, 0 when r was
        preempted."""
        while True:
            n = min(need + len(r.draft), budget)
            new = (r.tokens + r.draft)[r.table.num_tokens:r.computed + n]
            try:
                if new:
                    self.cache.extend(r.table, new)
                return n
            except CacheFullError:
                # only a request after r: those before it are in this step's plan already
                later = self.running[self.running.index(r) + 1:]
                victim = later[-1] if later else None
                if victim is not None:
                    self.preempt(victim)
                elif r.draft:
                    r.draft, r.draft_probs = [], None
                elif len(self.running) > 1:
                    self.preempt(r)
                    return 0
                else:
                    self._outgrown(r)
                    return 0

    def _outgrown(self, r: Request) -> None:
        """r alone fills the whole pool and needs more: it can never go on, so it ends with
        finish reason "length" (as at the context window) instead of waiting forever."""
        self.finish(r, "length")
        self.ended.append(r)

    def preempt(self, r: Request) -> None:
        """Free r's blocks and queue it first, to be recomputed."""
        self.cache.free(r.table)
        r.table, r.computed, r.status = None, 0, "waiting"
        r.draft, r.draft_probs = [], None
        r.preemptions += 1
        self.running.remove(r)
        self.waiting.appendleft(r)

    def finish(self, r: Request, reason: str) -> None:
        """Take r out of the queues with `reason`, freeing its blocks at once."""
        if r.table is not None:
            self.cache.free(r.table)
            r.table = None
        if r in self.running:
            self.running.remove(r)
        elif r in self.waiting:
            self.waiting.remove(r)
        r.status, r.finish_reason = "finished", reason


__all__ = ["Request", "Scheduler"]
