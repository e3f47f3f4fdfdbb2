"""Data parallel training: gradients averaged over ranks in buckets, parameters broadcast from
rank 0, `no_sync()` for gradient accumulation, and a deterministic mode.

Functional (what a compiled train step uses)::

    grads = allreduce_gradients(grads)                 # eager: async buckets; traced: primitives
    model, state = opt.update(model, grads, state)

PyTorch-style (eager, on a `GradientTape`)::

    dp = DataParallel(model)                           # broadcasts rank 0's parameters
    with GradientTape() as tape:
        tape.watch(dp.parameters())
        loss = loss_fn(dp(x), y)
    opt.step(dp.gradient(tape, loss))                  # buckets start as their gradients are final

**Buckets.** Gradient leaves are grouped in reverse parameter order (the order backward
produces them), per dtype and device, up to `bucket_bytes` (default 25 MiB, as DDP); each
bucket is one flat all_reduce. Eagerly every bucket is started asynchronously (`Work`) and
waited at the end; on the tape a bucket starts as soon as its last gradient is final
(`GradientTape.gradient(on_ready=...)`), so communication overlaps the rest of backward.
Inside `grad`/`compile` the buckets are the effectful `all_reduce` primitive (sync).

**Deterministic mode** (`deterministic_value_and_grad`): the global batch is cut into
microbatches of a fixed size; each rank computes the gradients of its contiguous share of
them, all ranks all-gather every microbatch's gradient and sum them in microbatch order (a
left fold), then divide by their count. The result is bitwise the same for every world size
that divides the number of microbatches, and equal to one process doing the same on the
concatenated batch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from tenferro_core.errors import ArgumentError, ArgumentValueError, ShapeError
from tenferro_distributed.group import current

DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024
"""Bucket capacity in bytes when none is given (DDP's default, 25 MiB)."""
FIRST_BUCKET_BYTES = 1024 * 1024
"""The first bucket's capacity (as DDP: a small first bucket starts communicating early)."""


def _xp():
    from tenferro_runtime import array_api as xp

    return xp


def _concrete(t: Any) -> bool:
    from tenferro_runtime.tensor import Tensor

    return type(t) is Tensor


def check_bucket_bytes(bucket_bytes: Any) -> int:
    """A positive int number of bytes, else a typed error."""
    if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int):
        raise ArgumentError(f"bucket_bytes must be a positive int (bytes), got {bucket_bytes!r}; "
                            f"pass e.g. bucket_bytes=25 * 2**20")
    if bucket_bytes <= 0:
        raise ArgumentValueError(f"bucket_bytes must be positive, got {bucket_bytes}; pass e.g. "
                                 f"bucket_bytes=25 * 2**20")
    return bucket_bytes


def make_buckets(leaves: list, bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> list[list[int]]:
    """Indices of `leaves` grouped into buckets: reverse order, one dtype and device per
    bucket, each at most `bucket_bytes` (a larger leaf is a bucket of its own), the first one
    at most min(`bucket_bytes`, FIRST_BUCKET_BYTES)."""
    check_bucket_bytes(bucket_bytes)
    first = min(bucket_bytes, FIRST_BUCKET_BYTES)
    out: list[list[int]] = []
    open_: dict[tuple, tuple[list[int], int]] = {}
    for i in reversed(range(len(leaves))):
        t = leaves[i]
        key = (str(t.dtype), str(t.device))
        nbytes = t.size * t.dtype.itemsize
        cur = open_.get(key)
        if cur is not None and cur[1] + nbytes > (bucket_bytes if out else first):
            out.append(cur[0])
            cur = None
        cur = ([i], nbytes) if cur is None else (cur[0] + [i], cur[1] + nbytes)
        open_[key] = cur
    out.extend(b for b, _ in open_.values())
    return out


def _flat(tensors: list) -> Any:
    xp = _xp()
    parts = [xp.reshape(t, (-1,)) for t in tensors]
    return parts[0] if len(parts) == 1 else xp.concat(parts)


def _unflat(flat: Any, likes: list) -> list:
    xp = _xp()
    out, k = [], 0
    for t in likes:
        n = t.size
        out.append(xp.reshape(flat[k:k + n], t.shape))
        k += n
    return out


def _check_grads(where: str, leaves: list) -> None:
    from tenferro_runtime.tensor import Tensor

    current()  # NotInitializedError before anything runs
    for i, g in enumerate(leaves):
        if not isinstance(g, Tensor):
            raise ArgumentError(f"{where}: gradient leaf {i} is a {type(g).__name__}; expected tensors "
                                f"(the pytree grad/value_and_grad/GradientTape.gradient return)")


def allreduce_gradients(grads: Any, *, op: str = "mean", bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                        algorithm: str | None = None, timeout: float | None = None,
                        overlap: bool | None = None) -> Any:
    """`grads` (any pytree of tensors) reduced over ranks ("mean" by default, or "sum"), in
    buckets. Eager tensors: every bucket starts asynchronously, then all are waited; traced
    (inside grad/compile): one `all_reduce` primitive per bucket, or with `overlap=True` one
    start/wait pair per bucket, which the `distributed_overlap` pass moves apart so the
    communication runs during backward (overlap.py). `overlap=None`: where the runtime has
    that pass registered."""
    from tenferro_distributed import api
    from tenferro_runtime.pytree import tree_flatten, tree_unflatten

    if op not in ("mean", "sum"):
        raise ArgumentValueError(f"allreduce_gradients: op must be 'mean' or 'sum', got {op!r}")
    leaves, td = tree_flatten(grads)
    _check_grads("allreduce_gradients", leaves)
    buckets = make_buckets(leaves, bucket_bytes)
    out = list(leaves)
    if all(_concrete(g) for g in leaves):
        works = [(b, api.all_reduce_async(_flat([leaves[i] for i in b]), op, algorithm=algorithm,
                                          timeout=timeout)) for b in buckets]
        for b, w in works:
            for i, r in zip(b, _unflat(w.wait(), [leaves[i] for i in b])):
                out[i] = r
    else:
        from tenferro_distributed.overlap import all_reduce_overlapped

        if overlap is None:
            overlap = _has_overlap(leaves)
        reduce = all_reduce_overlapped if overlap else api.all_reduce
        for b in buckets:
            red = reduce(_flat([leaves[i] for i in b]), op, algorithm=algorithm, timeout=timeout)
            for i, r in zip(b, _unflat(red, [leaves[i] for i in b])):
                out[i] = r
    return tree_unflatten(td, out)


def _has_overlap(leaves: list) -> bool:
    """Whether the leaves' runtime registered the overlap pass (and its primitives)."""
    try:
        return "distributed_overlap" in leaves[0].aval.device.runtime.passes
    except (AttributeError, IndexError):
        return False


def broadcast_parameters(params: Any, root: int = 0, *, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                         timeout: float | None = None) -> Any:
    """`params` (a pytree) with every tensor leaf replaced by rank `root`'s value, in buckets
    (non-float leaves too: buffers, step counters). Returns the new pytree."""
    from tenferro_distributed import api
    from tenferro_runtime.pytree import tree_flatten, tree_unflatten
    from tenferro_runtime.tensor import Tensor

    current()
    leaves, td = tree_flatten(params)
    idx = [i for i, t in enumerate(leaves) if isinstance(t, Tensor)]
    tens = [leaves[i] for i in idx]
    out = list(leaves)
    for b in make_buckets(tens, bucket_bytes):
        got = api.broadcast(_flat([tens[k] for k in b]), root, timeout=timeout)
        for k, r in zip(b, _unflat(got, [tens[k] for k in b])):
            out[idx[k]] = r
    return tree_unflatten(td, out)


class _Bucketer:
    """Collects leaf gradients as they become final and starts each bucket's async all_reduce
    when its last leaf arrives (called from `GradientTape.gradient(on_ready=)`)."""

    def __init__(self, likes: list, buckets: list[list[int]], extra: list | None, op: str,
                 algorithm: str | None, timeout: float | None):
        self.likes, self.buckets, self.extra = likes, buckets, extra
        self.op, self.algorithm, self.timeout = op, algorithm, timeout
        self.where = {i: k for k, b in enumerate(buckets) for i in b}
        self.got: dict[int, Any] = {}
        self.missing = [len(b) for b in buckets]
        self.works: list = [None] * len(buckets)
        self.next = 0  # buckets start in index order on every rank (the collectives' order)

    def ready(self, i: int, g: Any) -> None:
        if self.extra is not None and self.extra[i] is not None:
            g = g + self.extra[i]
        self.got[i] = g
        k = self.where.get(i)
        if k is None:
            return
        self.missing[k] -= 1
        while self.next < len(self.buckets) and self.missing[self.next] == 0:
            self._start(self.next)
            self.next += 1

    def _start(self, k: int) -> None:
        from tenferro_distributed import api

        self.works[k] = api.all_reduce_async(_flat([self.got[i] for i in self.buckets[k]]), self.op,
                                             algorithm=self.algorithm, timeout=self.timeout)

    def finish(self) -> list:
        for k in range(self.next, len(self.buckets)):
            self._start(k)
        out = [self.got[i] for i in range(len(self.likes))]
        for b, w in zip(self.buckets, self.works):
            for i, r in zip(b, _unflat(w.wait(), [self.likes[i] for i in b])):
                out[i] = r
        return out


class DataParallel:
    """A model trained data-parallel: rank 0's parameters broadcast at construction (assigned
    in place), `gradient(tape, loss)` returns the gradients averaged over ranks (buckets
    started during backward), `no_sync()` accumulates local gradients until the next synced
    `gradient` (gradient accumulation, as DDP's ``no_sync``). Calling it calls the model."""

    def __init__(self, model: Any, *, bucket_bytes: int = DEFAULT_BUCKET_BYTES, broadcast: bool = True,
                 algorithm: str | None = None, timeout: float | None = None, overlap: bool = False):
        from tenferro_distributed.comm import check_algorithm
        from tenferro_distributed.group import check_timeout

        current()
        self.bucket_bytes = check_bucket_bytes(bucket_bytes)
        self.algorithm = None if algorithm is None else check_algorithm("all_reduce", algorithm)
        self.timeout = None if timeout is None else check_timeout(timeout)
        if not isinstance(overlap, bool):
            raise ArgumentError(f"DataParallel: overlap must be a bool, got {overlap!r}")
        self.overlap = overlap
        self.module = model
        self._sync = True
        self._acc: list | None = None
        if broadcast:
            params = self.parameters()
            new = broadcast_parameters(list(params), bucket_bytes=self.bucket_bytes, timeout=self.timeout)
            for p, v in zip(params, new):
                p._assign(v)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def parameters(self) -> list:
        """The model's trainable tensors (``model.parameters()``, or the pytree's leaves)."""
        if hasattr(self.module, "parameters"):
            return list(self.module.parameters())
        from tenferro_runtime.pytree import tree_flatten

        return list(tree_flatten(self.module)[0])

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """`gradient` inside the block returns local gradients and accumulates them; the first
        `gradient` after it reduces the accumulated sum with its own."""
        self._sync = False
        try:
            yield
        finally:
            self._sync = True

    def gradient(self, tape: Any, loss: Any, params: list | None = None, *, op: str = "mean",
                 overlap: bool | None = None) -> list:
        """Gradients of `loss` for `params` (default: `parameters()`), one per parameter,
        averaged over ranks. With `overlap` (default: the constructor's) each bucket's
        all_reduce starts as the tape's backward walk makes its gradients final; without, the
        tape's backward runs first (the cached one-graph replay, faster on small models) and
        the buckets are then reduced asynchronously."""
        params = self.parameters() if params is None else list(params)
        if not self._sync:
            grads = tape.gradient(loss, params)
            self._acc = grads if self._acc is None else [a + g for a, g in zip(self._acc, grads)]
            return grads
        if not (self.overlap if overlap is None else overlap):
            grads = tape.gradient(loss, params)
            if self._acc is not None:
                grads = [a + g for a, g in zip(self._acc, grads)]
                self._acc = None
            return allreduce_gradients(grads, op=op, bucket_bytes=self.bucket_bytes, algorithm=self.algorithm,
                                       timeout=self.timeout)
        b = _Bucketer(params, make_buckets(params, self.bucket_bytes), self._acc, op, self.algorithm,
                      self.timeout)
        tape.gradient(loss, params, on_ready=b.ready)
        self._acc = None
        return b.finish()

    def reduce(self, grads: Any, *, op: str = "mean") -> Any:
        """Functional: `grads` (a pytree) reduced over ranks, honouring `no_sync` (inside it the
        local gradients are accumulated and returned unreduced)."""
        from tenferro_runtime.pytree import tree_flatten, tree_unflatten

        leaves, td = tree_flatten(grads)
        if not self._sync:
            self._acc = leaves if self._acc is None else [a + g for a, g in zip(self._acc, leaves)]
            return grads
        if self._acc is not None:
            leaves = [a + g for a, g in zip(self._acc, leaves)]
            self._acc = None
        return allreduce_gradients(tree_unflatten(td, leaves), op=op, bucket_bytes=self.bucket_bytes,
                                   algorithm=self.algorithm, timeout=self.timeout)


# ---- deterministic mode ---------------------------------------------------------------------------


def microbatch_grads(loss_fn: Callable, params: Any, batch: tuple, microbatch: int,
                     value_and_grad_fn: Callable | None = None) -> tuple[Any, Any]:
    """Per-microbatch losses (shape (m,)) and flat gradients (shape (m, P), leaves in
    `tree_flatten` order) of `loss_fn(params, *mb)` over `batch` cut into `m` microbatches of
    `microbatch` rows, computed one after another (no communication). `value_and_grad_fn`
    (e.g. a compiled ``value_and_grad(loss_fn)``) replaces the default."""
    from tenferro_ad import value_and_grad
    from tenferro_runtime.pytree import tree_flatten

    xp = _xp()
    if isinstance(microbatch, bool) or not isinstance(microbatch, int) or microbatch <= 0:
        raise ArgumentValueError(f"microbatch must be a positive int (rows), got {microbatch!r}")
    rows = {int(b.shape[0]) for b in batch}
    if len(rows) != 1:
        raise ShapeError(f"deterministic data parallel: the batch's arrays have different first axes "
                         f"{sorted(rows)}; every array needs one row per example")
    n = rows.pop()
    if n % microbatch:
        raise ShapeError(f"deterministic data parallel: the local batch of {n} rows is not a multiple of "
                         f"the microbatch size {microbatch}; use a global batch of world_size * k * "
                         f"{microbatch} rows")
    vg = value_and_grad_fn or value_and_grad(loss_fn)
    losses, flats = [], []
    for j in range(n // microbatch):
        mb = tuple(b[j * microbatch:(j + 1) * microbatch] for b in batch)
        loss, g = vg(params, *mb)
        losses.append(xp.reshape(loss, (1,)))
        flats.append(xp.reshape(_flat(tree_flatten(g)[0]), (1, -1)))
    return xp.concat(losses), xp.concat(flats)


def ordered_sum(rows: Any) -> Any:
    """The rows of `rows` (shape (m, ...)) added one after another, row 0 first: a fixed order."""
    s = rows[0]
    for j in range(1, rows.shape[0]):
        s = s + rows[j]
    return s


def deterministic_value_and_grad(loss_fn: Callable, params: Any, *local_batch: Any, microbatch: int,
                                 value_and_grad_fn: Callable | None = None,
                                 timeout: float | None = None) -> tuple[Any, Any]:
    """(mean loss, mean gradient pytree) of the global batch (the ranks' local batches
    concatenated in rank order), bitwise independent of the world size: see the module doc.
    `loss_fn(params, *microbatch_arrays)` returns the microbatch's mean loss."""
    from tenferro_distributed import api
    from tenferro_runtime.pytree import tree_flatten, tree_unflatten

    current()
    losses, flats = microbatch_grads(loss_fn, params, local_batch, microbatch, value_and_grad_fn)
    all_losses = api.all_gather(losses, timeout=timeout)
    all_flats = api.all_gather(flats, timeout=timeout)
    m = all_flats.shape[0]
    leaves, td = tree_flatten(params)
    mean = ordered_sum(all_flats) / m
    loss = ordered_sum(all_losses) / m
    return loss, tree_unflatten(td, _unflat(mean, leaves))


__all__ = ["DEFAULT_BUCKET_BYTES", "DataParallel", "allreduce_gradients", "broadcast_parameters",
           "deterministic_value_and_grad", "make_buckets", "microbatch_grads", "ordered_sum"]
