"""Data loading: datasets, and a `DataLoader` giving batches of tenferro tensors.

Shuffling is functional, as every random number in tenferro: a loader is given an explicit
key (`tenferro_runtime.random.key(seed)`) and epoch `e` draws its order from
`permutation(fold_in(key, e), len(dataset))`. The loader counts the epochs it has been
iterated (`epoch`, changed with `set_epoch`), so a run, or a run resumed with
`set_epoch`, visits the data in the same order every time and on every backend.

`prefetch=n` prepares up to `n` batches ahead on worker threads; batches still come in order,
an exception raised by the dataset reaches the consumer (with a note naming the batch), and
the threads stop when the iteration ends, the consumer stops early (`break`) or the iterator
is garbage-collected.
"""

from __future__ import annotations

import contextvars
import itertools
import math
import os
import queue
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any, Protocol, runtime_checkable

import numpy as np

from tenferro_core.errors import ArgumentError, ShapeError
from tenferro_runtime import array_api as xp
from tenferro_runtime.pytree import tree_flatten, tree_map
from tenferro_runtime.runtime import Device, default_device, default_runtime, use_runtime
from tenferro_runtime.tensor import Tensor

from .checks import flag, integer

Batch = tuple[Tensor, ...]
_MAX_THREADS = 4
_THREAD_IDS = itertools.count()


@runtime_checkable
class Dataset(Protocol):
    """What a `DataLoader` reads: a length and items by index.

    A dataset may also define `batch(indices) -> tuple of arrays` (indices: a 1-d int64 NumPy
    array): the loader then gathers each batch with that one call instead of one
    `__getitem__` per item (the fast path `ArrayDataset` takes). It must return NumPy arrays
    or tenferro tensors: a tuple of them (one per field), one alone, or any pytree of them;
    anything else (None, a list of numbers) is an `ArgumentError` naming the dataset."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> Any: ...


class ArrayDataset:
    """Rows of equally long NumPy arrays or tenferro tensors: item `i` is `(a[i], b[i], ...)`.

    `batch(indices)` gathers rows with one fancy index per array (NumPy indexing or `take`)."""

    def __init__(self, *arrays: np.ndarray | Tensor):
        if not arrays:
            raise ArgumentError("ArrayDataset: expected at least one array, got none")
        for k, a in enumerate(arrays):
            if not isinstance(a, (np.ndarray, Tensor)):
                raise ArgumentError(
                    f"ArrayDataset: array {k} is a {type(a).__name__}; expected a NumPy array or a "
                    f"tenferro Tensor (convert it with numpy.asarray or array_api.asarray)")
            if a.ndim == 0:
                raise ShapeError(f"ArrayDataset: array {k} is 0-d; each array needs a first axis "
                                 f"of samples")
        lengths = [a.shape[0] for a in arrays]
        if len(set(lengths)) != 1:
            raise ShapeError(
                f"ArrayDataset: the arrays have different first-axis lengths {lengths}; every array "
                f"needs one row per sample")
        self.arrays = arrays

    def __len__(self) -> int:
        return self.arrays[0].shape[0]

    def __getitem__(self, i: int) -> tuple[Any, ...]:
        return tuple(a[i] for a in self.arrays)

    def batch(self, indices: np.ndarray) -> tuple[Any, ...]:
        """The rows `indices` of every array, one gather each."""
        out = []
        for a in self.arrays:
            if isinstance(a, Tensor):
                out.append(xp.take(a, xp.asarray(indices, device=a.device), axis=0))
            else:
                out.append(a[indices])
        return tuple(out)

    def __repr__(self) -> str:
        return f"ArrayDataset({', '.join(f'{type(a).__name__}{list(a.shape)}' for a in self.arrays)})"


def default_collate(items: Sequence[Any], device: Device | None = None) -> Batch:
    """Stack a list of items (tuples of arrays, tensors or Python scalars, or single values)
    field by field into a tuple of tensors on `device` (the default device when None)."""
    if not items:
        raise ArgumentError("default_collate: expected at least one item, got none")
    multi = isinstance(items[0], (tuple, list))
    rows = [tuple(it) if multi else (it,) for it in items]
    width = len(rows[0])
    for j, r in enumerate(rows):
        if len(r) != width or isinstance(items[j], (tuple, list)) != multi:
            raise ShapeError(
                f"default_collate: item {j} has {len(r) if multi else 'a single'} field(s) but item 0 "
                f"has {width if multi else 'a single value'}; every item needs the same structure")
    out = []
    for f in range(width):
        col = [r[f] for r in rows]
        if any(isinstance(v, Tensor) for v in col):
            out.append(xp.stack([xp.asarray(v, device=device) for v in col]))
            continue
        try:
            host = np.stack([np.asarray(v) for v in col])
        except ValueError as exc:
            raise ShapeError(f"default_collate: field {f} of the items cannot be stacked ({exc}); "
                             f"every item needs the same shape in each field") from None
        out.append(xp.asarray(host, device=device))
    return tuple(out)


def _to_device(batch: Any, device: Device) -> Any:
    """Every NumPy array or tensor leaf of `batch` as a tensor on `device`."""
    if isinstance(batch, (np.ndarray, Tensor)):
        return xp.asarray(batch, device=device)
    return tree_map(lambda v: xp.asarray(v, device=device) if isinstance(v, (np.ndarray, Tensor)) else v,
                    batch)


class DataLoader:
    """Batches of a dataset as tuples of tenferro tensors on `device`.

    - `shuffle=True` needs `key` (a `tenferro_runtime.random` key); epoch `e` is ordered by
      `permutation(fold_in(key, e), len(dataset))`. Each `iter(loader)` is one epoch and
      advances `epoch`; `set_epoch(e)` makes the next iteration epoch `e` (to resume a run).
    - `drop_last` drops a last batch smaller than `batch_size`.
    - Datasets with a `batch(indices)` method (see `Dataset`) are gathered with one call per
      batch; otherwise items are read one by one and combined by `collate_fn` (default:
      `default_collate`, stacking fields). A custom `collate_fn(items)` is always used when
      given, and the NumPy arrays and tensors in what it returns are moved to `device`.
    - `prefetch=n` prepares up to `n` batches ahead on min(n, 4) worker threads (see the
      module docstring), so the dataset is read from several threads at once (reading NumPy
      arrays and tensors is safe). The workers see the consumer's runtime and default
      device, never its tracing state or tapes.
    - `device=None` is the default device when iteration starts.
    """

    def __init__(self, dataset: Dataset, batch_size: int = 1, *, shuffle: bool = False, key: Any = None,
                 drop_last: bool = False, collate_fn: Callable[[list[Any]], Any] | None = None,
                 prefetch: int = 0, device: Any = None):
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise ArgumentError(
                f"DataLoader: the dataset ({type(dataset).__name__}) needs __len__ and __getitem__; "
                f"wrap arrays in ArrayDataset(x, y)")
        batch_size = integer("DataLoader", "batch_size", batch_size, 1)
        prefetch = integer("DataLoader", "prefetch", prefetch, 0)
        shuffle = flag("DataLoader", "shuffle", shuffle)
        drop_last = flag("DataLoader", "drop_last", drop_last)
        if shuffle and key is None:
            raise ArgumentError(
                "DataLoader: shuffle=True needs an explicit key, so that runs are reproducible; pass "
                "key=tenferro_runtime.random.key(seed)")
        if shuffle:
            from tenferro_runtime import random as tfr

            tfr.fold_in(key, 0)  # a bad key fails here (typed, from the random module), not mid-run
        if collate_fn is not None and not callable(collate_fn):
            raise ArgumentError(f"DataLoader: collate_fn must be callable, got {collate_fn!r}")
        if device is not None:
            default_runtime().device(device)  # an unknown device fails here, not at iteration
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.key = key
        self.drop_last = drop_last
        self.collate_fn = collate_fn
        self.prefetch = int(prefetch)
        self.device = device
        self._epoch = 0
        self._lock = threading.Lock()

    @property
    def epoch(self) -> int:
        """The epoch the next iteration will be (0 at first; +1 per iteration)."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration epoch `epoch` (its shuffle order is fold_in(key, epoch))."""
        epoch = integer("DataLoader.set_epoch", "epoch", epoch, 0)
        with self._lock:
            self._epoch = int(epoch)

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def order(self, epoch: int) -> np.ndarray:
        """The indices epoch `epoch` visits, in order (int64)."""
        epoch = integer("DataLoader.order", "epoch", epoch, 0)
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n, dtype=np.int64)
        from tenferro_runtime import random as tfr

        perm = np.asarray(tfr.permutation(tfr.fold_in(self.key, epoch), n)).astype(np.int64)
        if perm.shape != (n,):
            raise ShapeError(f"DataLoader: permutation gave shape {perm.shape}, expected ({n},)")
        return perm

    def __iter__(self) -> Iterator[Batch]:
        with self._lock:
            epoch = self._epoch
            self._epoch += 1
        return _LoaderIterator(self, epoch)

    def __repr__(self) -> str:
        return (f"DataLoader({self.dataset!r}, batch_size={self.batch_size}, shuffle={self.shuffle}, "
                f"drop_last={self.drop_last}, prefetch={self.prefetch})")


def _describe(v: Any) -> str:
    return "None" if v is None else f"a {type(v).__name__} ({v!r:.60})"


def _check_batch(dataset: Any, got: Any, i: int) -> None:
    """What `dataset.batch(indices)` returned must be arrays or tensors (a tuple of them, one,
    or a pytree of them)."""
    leaves = tree_flatten(got)[0]
    bad = next((v for v in leaves if not isinstance(v, (np.ndarray, Tensor))), None)
    empty = next((k for k, f in enumerate(got) if not tree_flatten(f)[0]), None) \
        if isinstance(got, (tuple, list)) else None
    if not leaves or bad is not None or empty is not None:
        what = _describe(got) if not leaves or bad is got else \
            f"{_describe(got)}, holding {_describe(bad)}" if bad is not None else \
            f"{_describe(got)}, whose field {empty} is {_describe(got[empty])}"
        raise ArgumentError(
            f"DataLoader: {type(dataset).__name__}.batch(indices) returned {what} for batch {i}; it must "
            f"return the batch's NumPy arrays or tenferro tensors, a tuple of them with one per field "
            f"(e.g. `return self.x[indices], self.y[indices]`)")


def _check_collated(collate: Any, got: Any, i: int) -> None:
    """What a custom collate_fn returned must hold at least one array or tensor."""
    if not any(isinstance(v, (np.ndarray, Tensor)) for v in tree_flatten(got)[0]):
        name = getattr(collate, "__qualname__", type(collate).__name__)
        raise ArgumentError(f"DataLoader: collate_fn {name} returned {_describe(got)} for batch {i}; it "
                            f"must return the batch: NumPy arrays or tenferro tensors (a tuple, or any "
                            f"pytree of them)")


def _batch_maker(loader: DataLoader, order: np.ndarray, device: Device) -> Callable[[int], Any]:
    """A function of a batch number giving that batch (it holds no reference to an iterator,
    so worker threads never keep one alive)."""
    dataset, bs, collate = loader.dataset, loader.batch_size, loader.collate_fn
    fast = collate is None and callable(getattr(dataset, "batch", None))

    def make(i: int) -> Any:
        idx = order[i * bs:(i + 1) * bs]
        try:
            if fast:
                got = dataset.batch(idx)
                _check_batch(dataset, got, i)
                return tuple(_to_device(a, device) for a in got) if isinstance(got, (tuple, list)) \
                    else (_to_device(got, device),)
            items = [dataset[int(j)] for j in idx]
            for j, item in zip(idx, items):
                if item is None:
                    raise ArgumentError(
                        f"DataLoader: {type(dataset).__name__}[{int(j)}] returned None; __getitem__ must "
                        f"return the item: a tuple of arrays, tensors or numbers (one per field), or one")
            if collate is None:
                return default_collate(items, device)
            got = collate(items)
            _check_collated(collate, got, i)
            return _to_device(got, device)
        except Exception as exc:
            exc.add_note(f"DataLoader: raised while loading batch {i} (dataset indices "
                         f"{idx[:8].tolist()}{' ...' if len(idx) > 8 else ''})")
            raise

    return make


class _LoaderIterator:
    """One epoch of a DataLoader."""

    def __init__(self, loader: DataLoader, epoch: int):
        self.epoch = epoch
        device = default_runtime().device(loader.device)
        order = loader.order(epoch)
        n = len(order)
        self._count = n // loader.batch_size if loader.drop_last else math.ceil(n / loader.batch_size)
        self._make = _batch_maker(loader, order, device)
        self._next = 0  # the next batch to hand out
        self._pool: _Pool | None = None
        if loader.prefetch and self._count:
            self._ahead = loader.prefetch
            self._submitted = 0
            self._pool = _Pool(min(loader.prefetch, _MAX_THREADS, os.cpu_count() or 1, self._count),
                               default_runtime(), device)
            weakref.finalize(self, self._pool.shutdown)
            self._fill()

    def __iter__(self) -> _LoaderIterator:
        return self

    def __len__(self) -> int:
        return self._count - self._next

    def _fill(self) -> None:
        pool = self._pool
        while len(pool.pending) < self._ahead and self._submitted < self._count:
            pool.submit(self._make, self._submitted)
            self._submitted += 1

    def __next__(self) -> Any:
        i = self._next
        if i >= self._count:
            self.close()
            raise StopIteration
        self._next += 1
        try:
            if self._pool is None:
                return self._make(i)
            fut = self._pool.pending.popleft()
            self._fill()
            return fut.result()
        except BaseException:
            self._next = self._count
            self.close()
            raise

    def close(self) -> None:
        """Stop the worker threads (they finish the batch they are preparing, then exit)."""
        if self._pool is not None:
            self._pool.shutdown()


class _Pool:
    """Worker threads running batch tasks in a fresh context holding only the consumer's
    runtime and default device (never its tracing or tape state)."""

    def __init__(self, n: int, runtime: Any, device: Device):
        self.tasks: queue.SimpleQueue = queue.SimpleQueue()
        self.pending: deque[Future] = deque()  # submitted, not yet handed out, in batch order
        self.closed = False
        uid = next(_THREAD_IDS)
        self.threads = [
            threading.Thread(target=contextvars.Context().run, args=(_work, self.tasks, runtime, device),
                             name=f"tenferro-dataloader-{uid}-{k}", daemon=True)
            for k in range(n)]
        for t in self.threads:
            t.start()

    def submit(self, fn: Callable[[int], Any], i: int) -> Future:
        fut: Future = Future()
        self.pending.append(fut)
        self.tasks.put((fut, fn, i))
        return fut

    def shutdown(self) -> None:
        """Cancel the batches not started and tell every thread to exit once its current task
        is done (idempotent, never blocks: a dataset call cannot be interrupted)."""
        if not self.closed:
            self.closed = True
            while self.pending:
                self.pending.popleft().cancel()
            for _ in self.threads:
                self.tasks.put(None)


def _work(tasks: queue.SimpleQueue, runtime: Any, device: Device) -> None:
    with use_runtime(runtime), default_device(device):
        while True:
            task = tasks.get()
            if task is None:
                return
            fut, fn, i = task
            if not fut.set_running_or_notify_cancel():
                continue  # cancelled: the consumer stopped
            try:
                fut.set_result(fn(i))
            except BaseException as exc:  # handed to the consumer
                fut.set_exception(exc)


__all__ = ["ArrayDataset", "DataLoader", "Dataset", "default_collate"]
