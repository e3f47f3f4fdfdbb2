"""A generated loop's parts on several threads.

A large group's loop is bound by one core's memory traffic and divisions (the MLP's Adam
update of 670k parameters: ~0.85 ms on one thread of the 2-core VM, where XLA's takes 0.3 ms
on two). Its flat loops split into parts (codegen.py) that the calling thread and a small
pool of worker threads claim one at a time: the generated functions release the GIL
(``nogil``). The parts write disjoint slices of the results, so the bits are the one-part
loop's.

How many parts: torch's intra-op threads on torch:cpu (the `threads` setting as the torch
backend applies it), one on numpy:cpu (`threads_for`), and no part under
`MIN_PART_ELEMENTS` elements. Python threads,
not numba's OpenMP layer, which shared torch's libgomp and reset its thread count
(executor.py).
"""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

MIN_PART_ELEMENTS = 1 << 16
"""Elements a part has, at least: a hand-off to a worker costs ~20-40 us, the time one
thread takes for ~50k elements of an Adam update."""

PIECES_PER_THREAD = 4
"""Pieces a loop is cut into per thread, so a late thread's share goes to the others (a
call into the generated function costs ~5 us)."""

_LOCK = threading.Lock()
_POOL: list = [None, 0]  # the worker pool and its number of workers


def max_parts(elements: int) -> int:
    """The most parts a loop of `elements` elements is worth splitting into."""
    return max(1, elements // MIN_PART_ELEMENTS)


def threads_for(device: Any) -> int:
    """The threads `device`'s generated loops may use now: torch's intra-op threads on
    torch:cpu; one on numpy:cpu, where OpenBLAS's workers spin ~0.4 ms after each product
    (tenferro_numpy.threads) and hold the core a second part would run on (the transformer
    block's softmax group after its attention products: 0.10 ms on one thread, 0.24 on two)."""
    if device.backend.name == "numpy":
        return 1
    import torch

    return torch.get_num_threads()


def _pool(workers: int) -> ThreadPoolExecutor:
    with _LOCK:
        pool, size = _POOL
        if pool is None or size < workers:
            if pool is not None:
                pool.shutdown(wait=False)
            pool = ThreadPoolExecutor(workers, thread_name_prefix="tenferro-numba")
            _POOL[:] = [pool, workers]
        return pool


class _Run:
    """One call's pieces, claimed one at a time by whichever thread is free: a worker that
    starts late (its core held by another pool's spinning thread, an OpenBLAS worker after a
    product) takes fewer, and the caller never waits for one that has taken none."""

    def __init__(self, fn: Any, args: list, pieces: int):
        self.fn, self.args, self.pieces = fn, args, pieces
        self.claim = itertools.count().__next__  # atomic under the GIL
        self.lock = threading.Lock()
        self.left = pieces
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def work(self) -> None:
        while (p := self.claim()) < self.pieces:
            try:
                out = self.fn(*self.args, p, self.pieces)
                if p == 0:
                    self.result = out
            except BaseException as exc:  # raised in the caller
                self.error = self.error or exc
            with self.lock:
                self.left -= 1
                if not self.left:
                    self.done.set()


def run_parts(fn: Any, args: list, pieces: int, threads: int) -> Any:
    """`fn(*args, part, pieces)` for every part, on the calling thread and `threads` - 1
    workers; part 0's result (every part returns the same 0-d values). An exception of any
    part is raised here."""
    run = _Run(fn, args, pieces)
    pool = _pool(threads - 1)
    for _ in range(threads - 1):
        pool.submit(run.work)
    run.work()
    run.done.wait()
    if run.error is not None:
        raise run.error
    return run.result


__all__ = ["MIN_PART_ELEMENTS", "PIECES_PER_THREAD", "max_parts", "run_parts", "threads_for"]
