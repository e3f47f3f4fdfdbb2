"""The ``numba`` executor: compiled functions on numpy:cpu and torch:cpu with a large fused
group run it as a generated loop (the same bits as the plan executor), gradients included;
small graphs keep the plain plan; concurrent calls from two threads; torch's thread count
left alone; a generated source is loaded once per process and kept in the cache folder;
results written into donated and dying operands (drawn groups and an optimizer update)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from test_numba_codegen import programs, same

import tenferro_ad as ad
from tenferro_numba import executor
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile

N = (256, 160)  # 40,960 elements: above MIN_ELEMENTS


def adam(p, g, m, v, t):
    m2 = 0.9 * m + 0.1 * g
    v2 = 0.999 * v + 0.001 * g * g
    c1, c2 = 1 - 0.9 ** t, 1 - 0.999 ** t
    return p - 1e-3 * (m2 / c1) / (xp.sqrt(v2 / c2) + 1e-8), m2, v2


def _args(seed=0, shape=N):
    rng = np.random.default_rng(seed)
    p, g, m, v = (xp.asarray(rng.standard_normal(shape).astype(np.float32)) for _ in range(4))
    return p, g, m, xp.abs(v), xp.asarray(3.0, dtype=xp.float32)


def _kind(fn, *args):
    fn(*args)
    return fn._cache[next(iter(fn._cache))][0].executable().kind


def test_a_large_group_runs_generated_with_the_plan_executors_bits():
    args = _args()
    fast, plain = compile(adam), compile(adam, backend="plan")
    assert _kind(fast, *args) == "numba" and _kind(plain, *args) == "plan"
    for a, b in zip(fast(*args), plain(*args)):
        assert a.numpy().tobytes() == b.numpy().tobytes()


def test_gradients_through_a_generated_group():
    rng = np.random.default_rng(1)
    x = xp.asarray(rng.standard_normal(N).astype(np.float64))
    w = xp.asarray(rng.standard_normal(N).astype(np.float64))

    def loss(x):
        y = xp.maximum(x * w - 0.5, 0.0) + xp.minimum(x, w) * 0.25
        return xp.sum(y * y)

    g = compile(ad.grad(loss))
    want = ad.grad(loss)(x).numpy()
    np.testing.assert_allclose(g(x).numpy(), want, rtol=1e-12, atol=1e-12)
    assert _kind(g, x) == "numba"


def _fresh(args):
    return [xp.asarray(np.array(a.numpy(), copy=True)) for a in args]


@pytest.mark.parametrize("device", ["numpy:cpu", "torch:cpu"])
def test_a_donated_update_is_written_into_its_state_with_the_plan_executors_bits(device):
    """With p, m and v donated, the update's loop writes its results into their buffers (no
    new arrays a step), step after step with the plan executor's bits."""
    if device == "torch:cpu":
        pytest.importorskip("torch")
    step = compile(adam, donate_argnums=(0, 2, 3))
    plain = compile(adam, backend="plan")
    shape = (512, 512) if device == "torch:cpu" else N  # torch:cpu loops from 2**18 elements
    want = _fresh(_args(6, shape))
    # memory of their own (a torch tensor once seen by NumPy is never donatable: its
    # storage is no longer resizable, so results are read through copies)
    args = [xp.asarray(a, device=device) + 0 for a in want]
    for _ in range(4):
        p, g, m, v, t = args
        before = {id(b._buf) for b in (p, m, v)}
        p, m, v = step(p, g, m, v, t)
        assert {id(b._buf) for b in (p, m, v)} == before  # the donated buffers, rewritten
        want[0], want[2], want[3] = plain(*want)
        for a, b in zip((p, m, v), (want[0], want[2], want[3])):
            assert xp.asarray(a, copy=True).numpy().tobytes() == b.numpy().tobytes()
        args = [p, g, m, v, t]
    entries = [e for e in step._cache[next(iter(step._cache))][0].executable().fn.__self__.reuse.values()
               if type(e[0]) is tuple]
    assert len(entries) == 1 and len(entries[0][0]) == 3 and entries[0][2]


@settings(deadline=None, max_examples=10)
@given(programs())
def test_drawn_groups_with_every_input_donated_give_the_plans_bits(program):
    """Drawn groups compiled with every input donated, loops generated whatever their size:
    results written into the inputs they may overwrite, the plan executor's bits."""
    fn, inputs = program
    want = compile(fn, backend="plan")(*[xp.asarray(h) for h in inputs])
    saved = executor.MIN_ELEMENTS, executor.MIN_WORK
    executor.MIN_ELEMENTS = executor.MIN_WORK = 1
    try:
        step = compile(fn, donate_argnums=tuple(range(len(inputs))))
        got = step(*[xp.asarray(np.array(h, copy=True)) for h in inputs])
    finally:
        executor.MIN_ELEMENTS, executor.MIN_WORK = saved
    for g, w in zip(got, want):
        same(g.numpy(), w.numpy())


def test_a_step_whose_in_place_variant_cannot_be_built_runs_its_plain_loop(monkeypatch):
    def refuse(*args):
        raise executor.Unsupported("no in-place variant")

    monkeypatch.setattr(executor, "_in_place_form", refuse)
    args = _args(10)
    want = compile(adam, backend="plan")(*_fresh(args))
    step = compile(adam, donate_argnums=(0, 2, 3))
    got = step(*_fresh(args))
    for a, b in zip(got, want):
        assert a.numpy().tobytes() == b.numpy().tobytes()
    plan = step._cache[next(iter(step._cache))][0].executable().fn.__self__
    assert _kind(step, *_fresh(args)) == "numba" and not any(type(e[0]) is tuple for e in plan.reuse.values())


def test_a_donated_input_the_caller_still_holds_is_not_written():
    """p wraps the caller's own array (zero-copy asarray): the donation is refused at run
    time, the plain loop runs, and the caller's array keeps its values."""
    step = compile(adam, donate_argnums=(0, 2, 3))
    step(*_args(7))  # compiled and checked
    host = np.random.default_rng(8).standard_normal(N).astype(np.float32)
    keep = host.copy()
    p, g, m, v, t = _args(9)
    p = xp.asarray(host)
    want = compile(adam, backend="plan")(*_fresh([p, g, m, v, t]))
    got = step(p, g, m, v, t)
    np.testing.assert_array_equal(host, keep)
    for a, b in zip(got, want):
        assert a.numpy().tobytes() == b.numpy().tobytes()


def test_small_graphs_keep_the_plan_executor():
    args = _args(shape=(8, 40))
    assert _kind(compile(adam), *args) == "plan"


def test_two_threads_call_one_compiled_function_at_once():
    fn = compile(adam)
    inputs = [_args(seed) for seed in (2, 3)]
    want = [[t.numpy() for t in compile(adam, backend="plan")(*a)] for a in inputs]
    fn(*inputs[0])  # compiled before the race
    start, results = threading.Barrier(2, timeout=60), [None, None]

    def work(k):
        start.wait()
        results[k] = [[t.numpy() for t in fn(*inputs[k])] for _ in range(20)]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for k in range(2):
        for run in results[k]:
            for a, b in zip(run, want[k]):
                assert a.tobytes() == b.tobytes()


def test_loops_leave_torchs_threads_alone():
    """Generated loops run on the calling thread: no OpenMP pool (numba's would share torch's
    libgomp and reset its thread count)."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    compile(adam)(*_args())
    assert torch.get_num_threads() == before


def test_generated_sources_load_once_and_stay_in_the_cache_folder():
    text = "def f(a0):\n    r0 = np.empty((3,), np.float32)\n    for j in range(3):\n" \
           "        r0[j] = a0[j] * np.float32(2.0)\n    return (r0,)\n"
    first = executor.load(text, "f")
    assert executor.load(text, "f") is first
    np.testing.assert_array_equal(first(np.arange(3, dtype=np.float32))[0], [0.0, 2.0, 4.0])
    folder = Path(os.environ["TENFERRO_NUMBA_CACHE"])
    assert any(p.read_text().endswith(text) for p in folder.glob("g_*.py"))


def test_torch_cpu_runs_large_groups_generated_on_its_tensors():
    """torch:cpu tensors passed by address (no copies): a large group generated on contiguous
    tensors, views into a larger buffer (a storage offset) and non-contiguous views (copied
    first), with the NumPy plan's bits (exactly rounded sqrt) and within an ulp of the torch
    plan's (torch.sqrt is not exactly rounded on every CPU); a small group and a short
    SGD-like update keep torch's own kernels."""
    torch = pytest.importorskip("torch")
    host = _args(shape=(512, 512))
    args = [xp.asarray(a.numpy(), device="torch:cpu") for a in host]
    fast, plain = compile(adam), compile(adam, backend="plan")
    want = [w.numpy() for w in plain(*host)]
    assert _kind(fast, *args) == "numba"

    def check(got, on_torch):
        for a, b, w in zip(got, on_torch, want):
            assert isinstance(a._buf, torch.Tensor)
            assert a.numpy().tobytes() == w.tobytes()
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=2.5e-7, atol=1e-9)  # an ulp of a step

    check(fast(*args), plain(*args))
    strided = [xp.asarray(a.numpy().T.copy(), device="torch:cpu") for a in args[:4]]
    strided = [xp.permute_dims(a, (1, 0)) for a in strided] + [args[4]]  # non-contiguous views
    check(fast(*strided), plain(*strided))
    offset = [xp.asarray(np.concatenate([a.numpy()[:3], a.numpy()]), device="torch:cpu")[3:]
              for a in args[:4]] + [args[4]]
    assert all(a._buf.storage_offset() == 3 * 512 and a._buf.is_contiguous() for a in offset[:4])
    check(fast(*offset), plain(*offset))
    small = [xp.asarray(a.numpy(), device="torch:cpu") for a in _args()]
    assert _kind(compile(adam), *small) == "plan"
    assert _kind(compile(lambda p, g: p - 1e-3 * g), *args[:2]) == "plan"


def rounds(x, k):
    """Threefry-like integer rounds: 72 nodes of adds, shifts and xors."""
    for r in range(24):
        x = (x + k) ^ ((x << (r % 7 + 1)) | (x >> (31 - r % 7)))
    return x


def test_torch_cpu_generates_long_groups_over_a_few_thousand_elements():
    """On torch:cpu each node is a torch call of ~10 us: a group of TORCH_MANY_NODES nodes or
    more over TORCH_MANY_MIN_ELEMENTS elements is generated, with the plan's bits; a smaller
    one keeps torch's kernels."""
    pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    k = xp.asarray(np.int32(0x1BD11BDA), device="torch:cpu")
    big = xp.asarray(rng.integers(-2**31, 2**31, (64, 128), dtype=np.int32), device="torch:cpu")
    assert _kind(compile(rounds), big, k) == "numba"
    got, want = compile(rounds)(big, k), compile(rounds, backend="plan")(big, k)
    assert got.numpy().tobytes() == want.numpy().tobytes()
    small = xp.asarray(rng.integers(-2**31, 2**31, (16, 16), dtype=np.int32), device="torch:cpu")
    assert _kind(compile(rounds), small, k) == "plan"


def test_the_executor_declines_other_devices_and_missing_numba(monkeypatch):
    from tenferro_runtime.runtime import default_runtime

    monkeypatch.setitem(executor._STATE, "numba", None)  # as if numba were not installed
    graph = compile(adam).lower(*_args())
    assert executor.compile_graph(graph, default_runtime().device("numpy:cpu")) is None


def window_grad(x, g):
    """A 2x2 max pool's gradient on its (N, C, Ho, 2, Wo, 2) view: the window test, the tie
    weights and the routed cotangent (rows of 2 elements)."""
    m = xp.max(x, axis=(3, 5), keepdims=True)
    hit = xp.astype(x == m, x.dtype)
    return hit * g / xp.sum(hit, axis=(3, 5), keepdims=True)


def test_torch_cpu_generates_groups_with_short_rows():
    """torch's elementwise loops run rows of a few elements one short loop at a time: a group
    computing in 3+ axes whose last has at most TORCH_SHORT_ROW elements is generated on
    torch:cpu from TORCH_MANY_MIN_ELEMENTS, with the plan's bits; long rows keep torch's."""
    pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    relu = np.maximum(rng.standard_normal((16, 8, 4, 2, 4, 2)), 0)  # ties at 0
    x = xp.asarray(relu.astype(np.float32), device="torch:cpu")
    g = xp.asarray(rng.standard_normal((16, 8, 4, 1, 4, 1)).astype(np.float32), device="torch:cpu")
    assert x.size >= executor.TORCH_MANY_MIN_ELEMENTS
    assert _kind(compile(window_grad), x, g) == "numba"
    got, want = compile(window_grad)(x, g), compile(window_grad, backend="plan")(x, g)
    assert got.numpy().tobytes() == want.numpy().tobytes()
    long_x = xp.asarray(rng.standard_normal((16, 8, 4, 2, 4, 64)).astype(np.float32), device="torch:cpu")
    long_g = xp.asarray(rng.standard_normal((16, 8, 4, 1, 4, 1)).astype(np.float32), device="torch:cpu")
    assert _kind(compile(window_grad), long_x, long_g) == "plan"


def test_products_count_as_new_arrays_only_for_the_numpy_backends_own_kernels():
    """A plan may write into a product's dead result only when the numpy backend made it:
    its own kernels say so (`fresh_results`), another plugin's kernel for the same primitive
    does not."""
    from tenferro_runtime.runtime import default_runtime

    dev = default_runtime().device("numpy:cpu")
    backend = dev.backend
    kernel = next(fn for prim, fn in dev.kernels.items() if prim.name == "dot_general")
    assert backend.fresh_results("dot_general", kernel)
    assert not backend.fresh_results("dot_general", lambda lhs, rhs, **params: lhs)
    assert not backend.fresh_results("reshape", kernel)
