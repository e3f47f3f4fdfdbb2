"""Each thread and asyncio task has its own interpreter stack; runtime state is thread-safe.

Interleavings are forced with events and barriers (never sleeps), and the stress test runs
under ``sys.setswitchinterval(1e-6)`` so threads switch between nearly every bytecode.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import tenferro_ad as ad
import tenferro_numpy.plugin as numpy_plugin
import tenferro_runtime.runtime as runtime_mod
from tenferro_ad.testing import tape_second_derivative
from tenferro_runtime import Runtime, lax, trace, tracing, use_runtime
from tenferro_runtime import array_api as xp

TIMEOUT = 60


def _run(*targets: Callable[[], Any]) -> list[Any]:
    """Run each target in its own thread; return their results, re-raising the first error."""
    results: list[Any] = [None] * len(targets)
    errors: list[BaseException] = []

    def wrap(i: int, fn: Callable[[], Any]) -> None:
        try:
            results[i] = fn()
            results[i] = (results[i], tracing.interpreters())
        except BaseException as exc:  # reported in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(i, t)) for i, t in enumerate(targets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
        assert not t.is_alive(), "a thread hung: an event was never set"
    if errors:
        raise errors[0]
    for _, stack in results:
        assert stack is tracing.BOTTOM, f"a thread ended with interpreters left: {stack}"
    return [r for r, _ in results]


@pytest.fixture(autouse=True)
def fast_switching():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)
    assert tracing.interpreters() is tracing.BOTTOM


def _f(x):
    return xp.sum(xp.sin(x) * x * x)


def _d2f(x: np.ndarray) -> np.ndarray:
    """Second derivative of sum(sin(x) x^2), elementwise."""
    return -np.sin(x) * x**2 + 4 * x * np.cos(x) + 2 * np.sin(x)


def _df(x: np.ndarray) -> np.ndarray:
    return np.cos(x) * x**2 + 2 * x * np.sin(x)


X = np.array([0.3, -1.2, 2.0])


def test_second_derivative_survives_another_threads_grad_finishing_inside_it():
    """Thread A pauses inside its outer trace of grad(grad(f)) while thread B runs a whole
    grad; A's result is still exact (a trace never pops another thread's entry)."""
    inside, b_done = threading.Event(), threading.Event()

    def paused_f(x):
        inside.set()
        assert b_done.wait(TIMEOUT)
        return _f(x)

    def thread_a():
        g = ad.grad(lambda x: xp.sum(ad.grad(paused_f)(x)))
        return g(xp.asarray(X)).numpy()

    def thread_b():
        assert inside.wait(TIMEOUT)
        try:
            return ad.grad(_f)(xp.asarray(X)).numpy()
        finally:
            b_done.set()

    d2, d1 = _run(thread_a, thread_b)
    np.testing.assert_allclose(d2, _d2f(X), rtol=1e-12)
    np.testing.assert_allclose(d1, _df(X), rtol=1e-12)


def test_leaving_a_tape_after_another_threads_trace_ended():
    """Thread A opens a tape, thread B traces and finishes, A closes its tape: no error and
    nothing left on either stack (so eager ops keep the bare fast path)."""
    opened, traced = threading.Event(), threading.Event()

    def thread_a():
        x = xp.asarray(X)
        with ad.GradientTape() as tape:
            tape.watch(x)
            y = _f(x)
            opened.set()
            assert traced.wait(TIMEOUT)
        return tape.gradient(y, x).numpy()

    def thread_b():
        assert opened.wait(TIMEOUT)
        try:
            return str(trace(_f, xp.asarray(X)))
        finally:
            traced.set()

    g, printed = _run(thread_a, thread_b)
    np.testing.assert_allclose(g, _df(X), rtol=1e-12)
    assert "sin" in printed


def test_a_tape_never_records_another_threads_ops():
    """A tape open in thread A watches x; thread B computes on the same x meanwhile; B's op is
    not on A's tape, so B's result is unconnected to x for A."""
    opened, computed = threading.Event(), threading.Event()
    x = xp.asarray(X)
    box: dict[str, Any] = {}

    def thread_a():
        with ad.GradientTape(persistent=True) as tape:
            tape.watch(x)
            opened.set()
            assert computed.wait(TIMEOUT)
            own = xp.sum(x * x)
        return (tape.gradient(own, x).numpy(), tape.gradient(box["y"], x).numpy(), len(tape._records))

    def thread_b():
        assert opened.wait(TIMEOUT)
        try:
            box["y"] = xp.sum(xp.exp(x))
        finally:
            computed.set()

    (own, other, n_records), _ = _run(thread_a, thread_b)
    np.testing.assert_allclose(own, 2 * X, rtol=1e-12)
    np.testing.assert_array_equal(other, np.zeros(3))
    assert n_records == 2  # mul and reduce_sum of thread A only


def test_full_dispatch_cache_evicting_from_many_threads():
    """A dispatch cache far smaller than the working set, hammered by 8 threads: evictions
    race with lookups and inserts and every result is still right (no KeyError)."""
    rt = Runtime([numpy_plugin], dispatch_cache_size=4)
    start = threading.Barrier(8)

    def worker(k: int) -> list[float]:
        with use_runtime(rt):
            start.wait(TIMEOUT)
            out = []
            for i in range(60):
                n = 1 + (i * 7 + k) % 13  # 13 shapes per thread, cache of 4
                a = xp.asarray(np.full(n, float(k)), device="numpy:cpu")
                out.append(float(xp.sum(a * a + a)))
            return out

    results = _run(*[lambda k=k: worker(k) for k in range(8)])
    for k, res in enumerate(results):
        expected = [(1 + (i * 7 + k) % 13) * (k * k + k) for i in range(60)]
        assert res == pytest.approx(expected)
    stats = rt.caches.stats()["dispatch[numpy:cpu]"]
    assert stats.size <= 4 and stats.evictions > 0


def test_default_runtime_is_built_once_by_eight_threads(monkeypatch):
    builds = []
    real = Runtime.from_entry_points.__func__
    start = threading.Barrier(8)

    def counting(cls, *args, **kwargs):
        builds.append(threading.get_ident())
        return real(cls, *args, **kwargs)

    saved = list(runtime_mod._DEFAULT_RUNTIME)
    monkeypatch.setattr(Runtime, "from_entry_points", classmethod(counting))
    runtime_mod.reset_default_runtime()
    try:
        def first_tensor():
            start.wait(TIMEOUT)
            return xp.asarray([1.0, 2.0]).device.runtime

        runtimes = _run(*[first_tensor] * 8)
    finally:
        with runtime_mod._DEFAULT_LOCK:
            runtime_mod._DEFAULT_RUNTIME[:] = saved
    assert len(builds) == 1
    assert all(r is runtimes[0] for r in runtimes)


def _workloads() -> list[Callable[[], Any]]:
    def eager():
        a = xp.asarray(np.arange(12.0).reshape(3, 4))
        for _ in range(20):
            a = xp.tanh(a * 0.5 + 0.25) + lax.reduce_sum(a, axes=(0,))
        return a.numpy()

    def second_order():
        return ad.grad(lambda x: xp.sum(ad.grad(_f)(x)))(xp.asarray(X)).numpy()

    def tape():
        return tape_second_derivative(_f, xp.asarray(X)).numpy()

    def traced():
        return str(trace(lambda x: xp.exp(x) * 2.0 + x, xp.asarray(X))).splitlines()[1:]

    def jvp():
        return ad.jvp(_f, (xp.asarray(X),), (xp.ones_like(xp.asarray(X)),))[1].numpy()

    return [eager, second_order, tape, traced, jvp, eager, second_order, tape]


def test_eight_threads_mixing_every_interpreter_match_single_threaded():
    """Eager ops, grad(grad), nested tapes, tracing and jvp at once in 8 threads, started
    together by a barrier: exactly the single-threaded results, nothing left on any stack."""
    work = _workloads()
    expected = [w() for w in work]
    start = threading.Barrier(len(work))

    def synced(w):
        def run():
            start.wait(TIMEOUT)
            return [w() for _ in range(3)]
        return run

    got = _run(*[synced(w) for w in work])
    for exp, res in zip(expected, got):
        for r in res:
            if isinstance(exp, np.ndarray):
                np.testing.assert_array_equal(r, exp)
            else:
                assert r == exp
    np.testing.assert_allclose(expected[1], _d2f(X), rtol=1e-12)
    np.testing.assert_allclose(expected[2], _d2f(X), rtol=1e-12)


def test_asyncio_tasks_each_see_only_their_own_tape():
    """Two tasks interleave at awaits: the tape of one never records the other's ops."""

    async def main():
        x = xp.asarray(X)
        opened, computed = asyncio.Event(), asyncio.Event()

        async def with_tape():
            with ad.GradientTape(persistent=True) as tape:
                tape.watch(x)
                opened.set()
                await computed.wait()
                own = xp.sum(x * 3.0)
            return tape, own

        async def other():
            await opened.wait()
            y = xp.sum(xp.exp(x))
            computed.set()
            return y

        (tape, own), y = await asyncio.gather(with_tape(), other())
        return tape.gradient(own, x).numpy(), tape.gradient(y, x).numpy()

    own, other = asyncio.run(main())
    np.testing.assert_allclose(own, np.full(3, 3.0))
    np.testing.assert_array_equal(other, np.zeros(3))


def test_a_tracer_from_another_thread_is_a_clear_error():
    ready, used = threading.Event(), threading.Event()
    box: dict[str, Any] = {}

    def tracing_thread():
        def f(x):
            box["tracer"] = x
            ready.set()
            assert used.wait(TIMEOUT)
            return x * 2.0
        return str(trace(f, xp.asarray(X)))

    def other():
        assert ready.wait(TIMEOUT)
        try:
            with pytest.raises(Exception, match="another thread"):
                xp.exp(box["tracer"])
        finally:
            used.set()

    _run(tracing_thread, other)
