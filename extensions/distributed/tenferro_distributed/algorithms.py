"""Collective algorithms over torch tensors: the backend's native collective, and ring, tree
(binomial) and recursive halving-doubling (Rabenseifner) over torch.distributed point-to-point
``isend``/``irecv``.

Every function works in place on a flat contiguous 1-d torch tensor and takes a deadline
(``time.monotonic()`` seconds) that bounds each wait. Chunks are split as ``numpy.array_split``
does (sizes differ by at most one; any length, 0 included); empty messages are not sent.

**Summation order** (floats; integers are exact whatever the order). Every element is reduced
on one rank and then copied to the others, so all ranks hold bitwise the same result:

- ring: chunk ``c`` is accumulated along the ring starting at rank ``c`` (reduce-scatter
  variant: at rank ``c + 1``): ``((x[c] + x[c+1]) + x[c+2]) + ...`` (indices mod world);
- tree: a binomial tree on rank 0: ``x[r] += x[r + 2^k]`` for k = 0, 1, ... (pairs, then pairs
  of pairs);
- halving-doubling: ranks below ``2 * (world - p)`` (p the largest power of two <= world)
  first fold pairwise (``x[2i+1] + x[2i]``), then each halving step adds the partner's half:
  a butterfly, pairs of pairs as in the tree but over halves of the vector;
- native: gloo's own order (a ring or a halving-doubling depending on size).

So the results agree with the native one to rounding (exactly for integers, max and min).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

ALGORITHMS: dict[str, tuple[str, ...]] = {
    "all_reduce": ("native", "ring", "tree", "rhd"),
    "all_gather": ("native", "ring"),
    "reduce_scatter": ("native", "ring"),
    "broadcast": ("native", "tree"),
}
"""Algorithms per collective ("rhd": recursive halving-doubling)."""


def _left(deadline: float) -> timedelta:
    return timedelta(seconds=max(deadline - time.monotonic(), 1e-3))


def _exchange(send: Any, dst: int, recv: Any, src: int, deadline: float) -> None:
    import torch.distributed as dist

    works = []
    if send is not None and send.numel():
        works.append(dist.isend(send, dst))
    if recv is not None and recv.numel():
        works.append(dist.irecv(recv, src))
    for w in works:
        w.wait(timeout=_left(deadline))


def _reduce_into(a: Any, b: Any, op: str) -> None:
    import torch

    if op == "sum":
        a.add_(b)
    elif op == "max":
        torch.maximum(a, b, out=a)
    else:
        torch.minimum(a, b, out=a)


def _bounds(length: int, parts: int) -> list[int]:
    q, rem = divmod(length, parts)
    out = [0]
    for i in range(parts):
        out.append(out[-1] + q + (1 if i < rem else 0))
    return out


def _gather_fn() -> Any:
    import torch.distributed as dist

    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # torch < 2.12


def _scatter_fn() -> Any:
    import torch.distributed as dist

    return getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _native_op(op: str) -> Any:
    import torch.distributed as dist

    return {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[op]


# ---- all_reduce -------------------------------------------------------------------------------


def all_reduce_native(buf, op, rank, n, deadline):
    import torch.distributed as dist

    if buf.numel():
        dist.all_reduce(buf, _native_op(op), async_op=True).wait(timeout=_left(deadline))


def all_reduce_ring(buf, op, rank, n, deadline):
    if n == 1 or not buf.numel():
        return
    b = _bounds(buf.numel(), n)
    tmp = buf.new_empty(b[1] - b[0])
    right, left = (rank + 1) % n, (rank - 1) % n
    for s in range(n - 1):
        si, ri = (rank - s) % n, (rank - s - 1) % n
        c = buf[b[ri]:b[ri + 1]]
        t = tmp[:c.numel()]
        _exchange(buf[b[si]:b[si + 1]], right, t, left, deadline)
        _reduce_into(c, t, op)
    for s in range(n - 1):
        si, ri = (rank + 1 - s) % n, (rank - s) % n
        _exchange(buf[b[si]:b[si + 1]], right, buf[b[ri]:b[ri + 1]], left, deadline)


def _tree_reduce(buf, op, vrank, n, real, deadline):
    tmp = None
    mask = 1
    while mask < n:
        if vrank & mask:
            _exchange(buf, real(vrank - mask), None, 0, deadline)
            return
        if vrank + mask < n:
            tmp = buf.new_empty(buf.numel()) if tmp is None else tmp
            _exchange(None, 0, tmp, real(vrank + mask), deadline)
            _reduce_into(buf, tmp, op)
        mask <<= 1


def _tree_bcast(buf, vrank, n, real, deadline):
    if vrank:
        low = vrank & -vrank
        _exchange(None, 0, buf, real(vrank - low), deadline)
        mask = low >> 1
    else:
        mask = 1 << ((n - 1).bit_length() - 1) if n > 1 else 0
    while mask >= 1:
        if vrank + mask < n:
            _exchange(buf, real(vrank + mask), None, 0, deadline)
        mask >>= 1


def all_reduce_tree(buf, op, rank, n, deadline):
    if n == 1 or not buf.numel():
        return
    _tree_reduce(buf, op, rank, n, lambda v: v, deadline)
    _tree_bcast(buf, rank, n, lambda v: v, deadline)


def all_reduce_rhd(buf, op, rank, n, deadline):
    if n == 1 or not buf.numel():
        return
    p = 1 << (n.bit_length() - 1)
    rem = n - p
    tmp = buf.new_empty(buf.numel())
    if rank < 2 * rem:
        if rank % 2 == 0:
            _exchange(buf, rank + 1, None, 0, deadline)
            nr = -1
        else:
            _exchange(None, 0, tmp, rank - 1, deadline)
            _reduce_into(buf, tmp, op)
            nr = rank // 2
    else:
        nr = rank - rem

    def real(v):
        return 2 * v + 1 if v < rem else v + rem

    if nr >= 0:
        lo, hi, steps, d = 0, buf.numel(), [], p // 2
        while d >= 1:
            partner = real(nr ^ d)
            mid = lo + (hi - lo) // 2
            keep, give = ((lo, mid), (mid, hi)) if not nr & d else ((mid, hi), (lo, mid))
            t = tmp[:keep[1] - keep[0]]
            _exchange(buf[give[0]:give[1]], partner, t, partner, deadline)
            _reduce_into(buf[keep[0]:keep[1]], t, op)
            steps.append((keep, give, partner))
            lo, hi = keep
            d //= 2
        for keep, give, partner in reversed(steps):
            _exchange(buf[keep[0]:keep[1]], partner, buf[give[0]:give[1]], partner, deadline)
    if rank < 2 * rem:
        if rank % 2 == 0:
            _exchange(None, 0, buf, rank + 1, deadline)
        else:
            _exchange(buf, rank - 1, None, 0, deadline)


# ---- all_gather / reduce_scatter / broadcast ---------------------------------------------------


def all_gather_native(out, x, rank, n, deadline):
    if x.numel():
        _gather_fn()(out, x, async_op=True).wait(timeout=_left(deadline))


def all_gather_ring(out, x, rank, n, deadline):
    m = x.numel()
    out[rank * m:(rank + 1) * m].copy_(x)
    if n == 1 or not m:
        return
    right, left = (rank + 1) % n, (rank - 1) % n
    for s in range(n - 1):
        si, ri = (rank - s) % n, (rank - s - 1) % n
        _exchange(out[si * m:(si + 1) * m], right, out[ri * m:(ri + 1) * m], left, deadline)


def reduce_scatter_native(out, x, op, rank, n, deadline):
    if out.numel():
        _scatter_fn()(out, x, _native_op(op), async_op=True).wait(timeout=_left(deadline))


def reduce_scatter_ring(out, x, op, rank, n, deadline):
    """`x` is a scratch copy (accumulated in place); rank r's block lands in `out`."""
    m = out.numel()
    if n > 1 and m:
        tmp = x.new_empty(m)
        right, left = (rank + 1) % n, (rank - 1) % n
        for s in range(n - 1):
            si, ri = (rank - s - 1) % n, (rank - s - 2) % n
            _exchange(x[si * m:(si + 1) * m], right, tmp, left, deadline)
            _reduce_into(x[ri * m:(ri + 1) * m], tmp, op)
    out.copy_(x[rank * m:(rank + 1) * m])


def broadcast_native(buf, root, rank, n, deadline):
    import torch.distributed as dist

    if buf.numel():
        dist.broadcast(buf, root, async_op=True).wait(timeout=_left(deadline))


def broadcast_tree(buf, root, rank, n, deadline):
    if n > 1 and buf.numel():
        _tree_bcast(buf, (rank - root) % n, n, lambda v: (v + root) % n, deadline)


ALL_REDUCE = {"native": all_reduce_native, "ring": all_reduce_ring, "tree": all_reduce_tree,
              "rhd": all_reduce_rhd}
ALL_GATHER = {"native": all_gather_native, "ring": all_gather_ring}
REDUCE_SCATTER = {"native": reduce_scatter_native, "ring": reduce_scatter_ring}
BROADCAST = {"native": broadcast_native, "tree": broadcast_tree}
