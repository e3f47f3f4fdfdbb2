"""ArrayDataset and DataLoader: batches, shuffling by key and epoch, collation, prefetching
on worker threads (order, errors, shutdown on break and garbage collection), bad input.

Thread interleavings are forced with events (never sleeps); every test ends with no loader
thread left alive."""

from __future__ import annotations

import gc
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_core.errors import ArgumentError, ShapeError
from tenferro_nn.data import ArrayDataset, DataLoader, Dataset, default_collate
from tenferro_runtime import array_api as xp
from tenferro_runtime import default_device
from tenferro_runtime.tensor import Tensor

TIMEOUT = 60


def _loader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tenferro-dataloader")]


@pytest.fixture(autouse=True)
def no_leaked_threads():
    yield
    if _loader_threads():  # a full collection costs seconds late in a long session: only when needed
        gc.collect()
    for t in _loader_threads():
        t.join(TIMEOUT)
    assert not _loader_threads(), "a DataLoader worker thread outlived its iteration"


def _data(n=10):
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    y = np.arange(n, dtype=np.int64)
    return x, y


def _ids(loader) -> list[list[int]]:
    """The label column of each batch (the labels are the dataset indices)."""
    return [b[1].numpy().tolist() for b in loader]


def _has_random() -> bool:
    try:
        from tenferro_runtime import random as tfr
    except ImportError:
        return False
    return all(hasattr(tfr, f) for f in ("key", "fold_in", "permutation"))


needs_random = pytest.mark.skipif(not _has_random(), reason="tenferro_runtime.random is not there yet")


# ---- datasets -----------------------------------------------------------------------------
def test_array_dataset_items_and_batches_of_arrays_and_tensors():
    x, y = _data()
    ds = ArrayDataset(x, xp.asarray(y))
    assert isinstance(ds, Dataset) and len(ds) == 10
    a, b = ds[4]
    assert a.tolist() == [12, 13, 14] and int(b) == 4
    bx, by = ds.batch(np.array([7, 0, 7], dtype=np.int64))
    assert bx.tolist() == x[[7, 0, 7]].tolist()
    assert isinstance(by, Tensor) and by.numpy().tolist() == [7, 0, 7]


def test_array_dataset_bad_input():
    with pytest.raises(ShapeError, match=r"different first-axis lengths \[10, 9\]"):
        ArrayDataset(np.zeros((10, 2)), np.zeros(9))
    with pytest.raises(ArgumentError, match="array 1 is a list"):
        ArrayDataset(np.zeros(3), [1, 2, 3])
    with pytest.raises(ShapeError, match="0-d"):
        ArrayDataset(np.zeros(()))
    with pytest.raises(ArgumentError, match="at least one"):
        ArrayDataset()


# ---- batches in order -----------------------------------------------------------------------
@pytest.mark.parametrize("drop_last", [False, True])
def test_batches_cover_every_index_once_with_partial_last_batch(backend_device, drop_last):
    x, y = _data(10)
    loader = DataLoader(ArrayDataset(x, y), 4, drop_last=drop_last)
    batches = list(loader)
    want = [[0, 1, 2, 3], [4, 5, 6, 7]] + ([] if drop_last else [[8, 9]])
    assert [b[1].numpy().tolist() for b in batches] == want and len(loader) == len(want)
    for b in batches:
        assert type(b) is tuple and all(isinstance(t, Tensor) for t in b)
        assert str(b[0].device) == backend_device and b[0].dtype.name == "float32"
        np.testing.assert_array_equal(b[0].numpy(), x[b[1].numpy()])


def test_len_and_drop_last_edge_cases():
    x, y = _data(8)
    assert len(DataLoader(ArrayDataset(x, y), 4)) == 2
    assert len(DataLoader(ArrayDataset(x, y), 4, drop_last=True)) == 2
    assert len(DataLoader(ArrayDataset(x, y), 16)) == 1
    assert list(DataLoader(ArrayDataset(x, y), 16, drop_last=True)) == []
    assert _ids(DataLoader(ArrayDataset(x, y))) == [[i] for i in range(8)]


def test_explicit_device_and_default_device_at_iteration():
    x, y = _data(4)
    b = next(iter(DataLoader(ArrayDataset(x, y), 2, device="numpy:cpu")))
    assert all(str(t.device) == "numpy:cpu" for t in b)
    loader = DataLoader(ArrayDataset(x, y), 2, prefetch=2)
    with default_device("numpy:cpu"):  # worker threads take the consumer's default device
        assert all(str(t.device) == "numpy:cpu" for b in loader for t in b)


class Counting:
    """A dataset recording how it is read."""

    def __init__(self, n, fast):
        self.n, self.gets, self.batches = n, 0, 0
        if fast:
            self.batch = self._batch

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.gets += 1
        return np.float64(i), i

    def _batch(self, idx):
        self.batches += 1
        assert idx.dtype == np.int64
        return idx.astype(np.float64), idx


def test_batch_method_gathers_each_batch_with_one_call():
    ds = Counting(10, fast=True)
    assert _ids(DataLoader(ds, 3)) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert (ds.batches, ds.gets) == (4, 0)
    slow = Counting(10, fast=False)
    assert _ids(DataLoader(slow, 3)) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert (slow.batches, slow.gets) == (0, 10)


def test_default_collate_stacks_fields_of_arrays_scalars_and_tensors():
    items = [(np.full(2, i, np.float32), i, xp.asarray(float(i)), True) for i in range(3)]
    a, b, c, d = default_collate(items)
    assert a.shape == (3, 2) and a.dtype.name == "float32"
    assert b.numpy().tolist() == [0, 1, 2] and b.dtype.name == "int64"
    assert c.numpy().tolist() == [0.0, 1.0, 2.0] and d.dtype.name == "bool"
    (single,) = default_collate([1.5, 2.5])
    assert single.numpy().tolist() == [1.5, 2.5]
    with pytest.raises(ShapeError, match="item 1"):
        default_collate([(1, 2), (1,)])
    with pytest.raises(ShapeError, match="field 0"):
        default_collate([(np.zeros(2),), (np.zeros(3),)])


def test_custom_collate_fn_result_moved_to_device(backend_device):
    data = [{"x": np.full(2, i), "n": i} for i in range(5)]

    def collate(items):
        return {"x": np.stack([it["x"] for it in items]), "count": len(items)}

    out = list(DataLoader(data, 2, collate_fn=collate))
    assert [o["count"] for o in out] == [2, 2, 1]
    assert isinstance(out[0]["x"], Tensor) and str(out[0]["x"].device) == backend_device


# ---- shuffling ------------------------------------------------------------------------------
@needs_random
def test_shuffle_is_a_permutation_per_epoch_reproducible_by_key_and_epoch():
    from tenferro_runtime import random as tfr

    x, y = _data(23)
    loader = DataLoader(ArrayDataset(x, y), 5, shuffle=True, key=tfr.key(7))
    epochs = [sum(_ids(loader), []) for _ in range(3)]
    assert loader.epoch == 3
    for order in epochs:
        assert sorted(order) == list(range(23))
    assert epochs[0] != epochs[1] != epochs[2]
    assert epochs[0] == np.asarray(tfr.permutation(tfr.fold_in(tfr.key(7), 0), 23)).tolist()
    again = DataLoader(ArrayDataset(x, y), 5, shuffle=True, key=tfr.key(7))
    assert [sum(_ids(again), []) for _ in range(3)] == epochs  # same key, same orders
    again.set_epoch(1)
    assert sum(_ids(again), []) == epochs[1] and again.epoch == 2
    other = DataLoader(ArrayDataset(x, y), 5, shuffle=True, key=tfr.key(8))
    assert sum(_ids(other), []) != epochs[0]
    dropped = DataLoader(ArrayDataset(x, y), 5, shuffle=True, key=tfr.key(7), drop_last=True)
    assert sum(_ids(dropped), []) == epochs[0][:20]


def test_shuffle_needs_a_key():
    with pytest.raises(ArgumentError, match="shuffle=True needs an explicit key"):
        DataLoader(ArrayDataset(*_data()), 2, shuffle=True)


@needs_random
def test_a_bad_key_fails_at_construction():
    with pytest.raises(ArgumentError, match="key"):
        DataLoader(ArrayDataset(*_data()), 2, shuffle=True, key=7)


@needs_random
def test_shuffle_with_prefetch_and_an_empty_dataset():
    from tenferro_runtime import random as tfr

    x, y = _data(11)
    plain = DataLoader(ArrayDataset(x, y), 3, shuffle=True, key=tfr.key(1))
    ahead = DataLoader(ArrayDataset(x, y), 3, shuffle=True, key=tfr.key(1), prefetch=2)
    assert [_ids(plain) for _ in range(2)] == [_ids(ahead) for _ in range(2)]
    assert list(DataLoader(ArrayDataset(*_data(0)), 3, shuffle=True, key=tfr.key(1))) == []


# ---- bad input ------------------------------------------------------------------------------
@pytest.mark.parametrize("bs", [0, -1, True, 1.5, "2", None])
def test_batch_size_must_be_a_positive_int(bs):
    with pytest.raises(ArgumentError, match="batch_size must be an int >= 1"):
        DataLoader(ArrayDataset(*_data()), bs)


def test_other_bad_arguments():
    ds = ArrayDataset(*_data())
    with pytest.raises(ArgumentError, match="needs __len__ and __getitem__"):
        DataLoader(iter(range(3)))
    with pytest.raises(ArgumentError, match="prefetch"):
        DataLoader(ds, prefetch=-1)
    with pytest.raises(ArgumentError, match="prefetch"):
        DataLoader(ds, prefetch=True)
    with pytest.raises(ArgumentError, match="drop_last"):
        DataLoader(ds, drop_last=1)
    with pytest.raises(ArgumentError, match="collate_fn"):
        DataLoader(ds, collate_fn=3)
    with pytest.raises(ArgumentError, match="epoch"):
        DataLoader(ds).set_epoch(-1)
    with pytest.raises(ValueError):
        DataLoader(ds, device="nonexistent:0")


# ---- prefetching ----------------------------------------------------------------------------
@given(n=st.integers(0, 30), bs=st.integers(1, 7), prefetch=st.integers(1, 5), drop_last=st.booleans())
@settings(max_examples=25)
def test_prefetch_gives_the_same_batches_as_no_prefetch(n, bs, prefetch, drop_last):
    x, y = _data(n)
    plain = DataLoader(ArrayDataset(x, y), bs, drop_last=drop_last)
    ahead = DataLoader(ArrayDataset(x, y), bs, drop_last=drop_last, prefetch=prefetch)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch between nearly every bytecode
    try:
        got = [[t.numpy() for t in b] for b in ahead]
    finally:
        sys.setswitchinterval(old)
    want = [[t.numpy() for t in b] for b in plain]
    assert len(got) == len(want) == len(plain)
    for g, w in zip(got, want):
        assert all(np.array_equal(a, b) for a, b in zip(g, w))


class Failing:
    def __init__(self, n, bad):
        self.n, self.bad = n, bad

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.bad:
            raise KeyError(f"item {i} is broken")
        return (np.float64(i),)


@pytest.mark.parametrize("prefetch", [0, 3])
def test_an_exception_in_the_dataset_reaches_the_consumer_with_the_batch(prefetch):
    loader = DataLoader(Failing(20, bad=7), 3, prefetch=prefetch)
    it = iter(loader)
    assert [next(it)[0].numpy().tolist() for _ in range(2)] == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(KeyError, match="item 7 is broken") as info:
        next(it)
    assert any("batch 2" in note and "7" in note for note in info.value.__notes__)
    with pytest.raises(StopIteration):  # the iteration is over; its threads are stopped
        next(it)


class Gated:
    """Batch 0 at once; every later batch waits for `release` (after saying it started)."""

    def __init__(self, n):
        self.n = n
        self.started = threading.Event()
        self.release = threading.Event()
        self.asked: list[int] = []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        raise AssertionError("the loader gathers through batch()")

    def batch(self, idx):
        self.asked.append(int(idx[0]))
        if idx[0] > 0:
            self.started.set()
            assert self.release.wait(TIMEOUT), "never released"
        return (idx,)


@pytest.mark.parametrize("how", ["break", "del loader and iterator"])
def test_stopping_early_stops_the_worker_threads(how):
    ds = Gated(100)
    before = set(_loader_threads())
    loader = DataLoader(ds, 1, prefetch=3)
    if how == "break":
        for b in loader:
            assert b[0].numpy().tolist() == [0]
            workers = [t for t in _loader_threads() if t not in before]
            assert ds.started.wait(TIMEOUT)  # a worker is inside the dataset, mid-batch
            break
    else:
        it = iter(loader)
        next(it)
        workers = [t for t in _loader_threads() if t not in before]
        assert ds.started.wait(TIMEOUT)
        del loader, it
    assert workers and all(t.is_alive() for t in workers)
    ds.release.set()  # the batches being prepared finish; nothing new is started
    for t in workers:
        t.join(TIMEOUT)
        assert not t.is_alive()
    assert len(ds.asked) <= 1 + 3 and sorted(ds.asked) == list(range(len(ds.asked)))


def test_prefetch_keeps_at_most_n_batches_ahead():
    ds = Gated(50)
    it = iter(DataLoader(ds, 2, prefetch=2))
    next(it)
    assert ds.started.wait(TIMEOUT)
    # batch 0 handed out, batches 1 and 2 requested; batch 3 waits for the consumer
    assert sorted(ds.asked) in ([0, 2], [0, 2, 4])
    ds.release.set()
    assert [next(it)[0].numpy().tolist() for _ in range(2)] == [[2, 3], [4, 5]]
    it.close()
    assert max(ds.asked) <= 8
