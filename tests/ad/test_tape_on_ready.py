"""GradientTape.gradient(on_ready=): each source's gradient is handed over once, as soon as no
record left in the backward walk uses it, equal to the returned gradient."""

from __future__ import annotations

import numpy as np
import pytest

from tenferro_ad import GradientTape
from tenferro_core.errors import ArgumentError
from tenferro_runtime import array_api as xp


def _mlp(ws, x):
    h = x
    for w in ws:
        h = xp.tanh(h @ w)
    return xp.sum(h * h)


@pytest.mark.parametrize("repeat", [1, 3])  # repeats: the tape's cached replay must not bypass it
def test_on_ready_gives_each_final_gradient_in_backward_order(repeat):
    rng = np.random.default_rng(0)
    ws = [xp.asarray(rng.standard_normal((4, 4))) for _ in range(3)]
    unused = xp.asarray(rng.standard_normal((2,)))
    x = xp.asarray(rng.standard_normal((5, 4)))
    for _ in range(repeat):
        events: list = []
        with GradientTape() as tape:
            tape.watch(ws + [unused])
            loss = _mlp(ws, x)
        grads = tape.gradient(loss, ws + [unused], on_ready=lambda i, g, ev=events: ev.append((i, g)))
        order = [i for i, _ in events]
        assert order == [3, 2, 1, 0]  # the unused source first (zeros), then last layer first
        for i, g in events:
            np.testing.assert_array_equal(np.asarray(g), np.asarray(grads[i]))
        with GradientTape() as ref:
            ref.watch(ws)
            loss2 = _mlp(ws, x)
        for g, r in zip(grads, ref.gradient(loss2, ws)):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(r))
        assert not np.any(np.asarray(grads[3]))


def test_on_ready_sees_a_source_used_twice_once_its_last_use_is_walked():
    w = xp.asarray([1.0, 2.0])
    seen: dict = {}
    with GradientTape() as tape:
        tape.watch(w)
        y = xp.sum(w * w) + xp.sum(xp.sin(w))
    g = tape.gradient(y, [w], on_ready=lambda i, v: seen.setdefault(i, np.asarray(v)))
    np.testing.assert_allclose(seen[0], 2 * np.asarray([1.0, 2.0]) + np.cos([1.0, 2.0]))
    np.testing.assert_array_equal(seen[0], np.asarray(g[0]))


def test_on_ready_must_be_callable():
    w = xp.asarray([1.0])
    with GradientTape() as tape:
        tape.watch(w)
        y = xp.sum(w)
    with pytest.raises(ArgumentError, match="on_ready must be a callable"):
        tape.gradient(y, w, on_ready=3)
