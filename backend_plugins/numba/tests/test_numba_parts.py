"""A generated loop's parts on several threads: drawn groups split into many small parts give
the one-thread loop's bits (part bounds at every 16 elements, empty parts, 0-size and 1-size
shapes, 0-d results, loop nests that only part 0 runs); groups whose loops read each other's
values run whole; pieces go to whichever thread is free, a worker that starts late is not
waited for, and an exception in any part reaches the caller."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from test_numba_codegen import DEV, programs, run_both

from tenferro_numba import codegen, executor, parts
from tenferro_runtime import lax


@pytest.fixture
def many_parts(monkeypatch):
    """Every splittable loop cut into as many parts as it has elements, on three threads."""
    monkeypatch.setattr(parts, "MIN_PART_ELEMENTS", 1)
    monkeypatch.setattr(executor, "threads_for", lambda device: 3)
    calls = []
    real = parts.run_parts

    def counted(fn, args, pieces, threads):
        calls.append((pieces, threads))
        return real(fn, args, pieces, threads)

    monkeypatch.setattr(executor, "run_parts", counted)
    return calls


@settings(deadline=None, max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(programs())
def test_drawn_groups_in_parts_give_the_one_thread_bits(many_parts, program):
    many_parts.clear()  # the patches hold for every example; the calls are this one's
    fn, inputs = program
    try:
        graph, _, _ = run_both(fn, inputs)
    except codegen.Unsupported as why:
        assert any(w in str(why) for w in ("has no generated code", "none of its outputs"))
        return
    src = codegen.generate(graph, {})
    if src.splittable and src.split_elements > 1:
        assert many_parts and many_parts[-1] == (min(src.split_elements, 12), 3)


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 1000])
def test_part_bounds_cover_every_element_once(many_parts, n):
    rng = np.random.default_rng(n)
    hosts = [rng.standard_normal((n, 3)).astype(np.float32), rng.standard_normal((n, 3)).astype(np.float32),
             np.asarray(2.5, np.float32)]

    def fn(x, y, s):
        # a flat loop (split), a 0-d result and a broadcast scalar result (part 0's)
        z = lax.add(lax.mul(x, y), lax.broadcast_in_dim(s, shape=x.shape, broadcast_dimensions=()))
        return z, lax.mul(s, s), lax.broadcast_in_dim(lax.neg(s), shape=x.shape, broadcast_dimensions=())

    graph, _, got = run_both(fn, hosts)
    assert codegen.generate(graph, {}).splittable
    assert got[1].shape == ()
    if 3 * n > 1:
        assert many_parts


def test_a_group_whose_loops_read_each_others_values_runs_whole(many_parts):
    rng = np.random.default_rng(1)
    hosts = [rng.standard_normal((37,)), rng.standard_normal((4, 37))]

    def fn(v, m):
        h = lax.mul(v, v)
        return lax.add(m, lax.broadcast_in_dim(h, shape=(4, 37), broadcast_dimensions=(1,))), h

    graph, _, _ = run_both(fn, hosts)
    assert not codegen.generate(graph, {}).splittable
    assert not many_parts


def test_loop_nests_run_in_part_zero_alongside_split_loops(many_parts):
    """A row broadcast (a nest, part 0 only) next to a flat loop of another shape (split)."""
    rng = np.random.default_rng(2)
    hosts = [rng.standard_normal((5, 40)).astype(np.float32), rng.standard_normal((40,)).astype(np.float32),
             rng.standard_normal((300,)).astype(np.float32)]

    def fn(m, b, w):
        return lax.add(m, lax.broadcast_in_dim(b, shape=(5, 40), broadcast_dimensions=(1,))), lax.mul(w, w)

    graph, _, _ = run_both(fn, hosts)
    src = codegen.generate(graph, {})
    assert src.splittable and src.split_elements == 300
    assert "if part == 0:" in src.text and many_parts


def test_a_late_worker_is_not_waited_for_and_takes_no_piece():
    """The only worker is held by another task: the caller runs every piece and returns."""
    release, started = threading.Event(), threading.Event()
    pool = parts._pool(1)

    def hold():
        started.set()
        release.wait(30)

    held = pool.submit(hold)
    assert started.wait(30)
    ran = []

    def fn(p, n):
        ran.append((p, threading.get_ident()))
        return p

    try:
        assert parts.run_parts(fn, [], 4, 2) == 0
        assert sorted(p for p, _ in ran) == [0, 1, 2, 3]
        assert {t for _, t in ran} == {threading.get_ident()}
    finally:
        release.set()
        held.result(30)


def test_pieces_go_to_every_free_thread():
    """Each thread's first piece waits until the other has started one, so both take part
    whichever claims first."""
    started = {True: threading.Event(), False: threading.Event()}
    main = threading.get_ident()
    ran = []

    def fn(p, n):
        mine = threading.get_ident() == main
        ran.append((p, threading.get_ident()))
        started[mine].set()
        assert started[not mine].wait(30)
        return "zero" if p == 0 else p

    assert parts.run_parts(fn, [], 4, 2) == "zero"
    assert sorted(p for p, _ in ran) == [0, 1, 2, 3]
    assert len({t for _, t in ran}) == 2


def test_an_exception_in_any_part_reaches_the_caller():
    def fn(p, n):
        if p == 2:
            raise ValueError("part 2 failed")
        return p

    with pytest.raises(ValueError, match="part 2 failed"):
        parts.run_parts(fn, [], 5, 2)


def test_threads_follow_the_device_setting():
    import torch

    from tenferro_runtime.runtime import default_runtime

    assert parts.threads_for(DEV) == 1  # OpenBLAS's spinning workers hold the other cores
    assert parts.threads_for(default_runtime().device("torch:cpu")) == torch.get_num_threads()
    assert parts.max_parts(0) == 1 and parts.max_parts(5 * parts.MIN_PART_ELEMENTS) == 5
