"""A tape's cached backward graph replays with a buffer plan: each backward intermediate is
dropped after its last use, so a repeated eager `grad` peaks no higher than the first call
(the per-record walk). Without the plan the replay held every intermediate to the end."""

from __future__ import annotations

import tracemalloc

import numpy as np

from tenferro_ad import grad
from tenferro_runtime import array_api as xp


def _loss(ws, x):
    h = x
    for w in ws:
        h = xp.tanh(h @ w)
    return xp.sum(h * h)


def test_repeated_eager_grad_peaks_no_higher_than_the_first_call():
    rng = np.random.default_rng(0)
    ws = [xp.asarray(rng.standard_normal((128, 128)) / 11) for _ in range(16)]
    x = xp.asarray(rng.standard_normal((128, 128)))
    g = grad(_loss)
    peaks, grads = [], []
    for _ in range(3):  # walk, build + replay, replay
        tracemalloc.start()
        grads.append(g(ws, x))
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    for a, b in zip(grads[0], grads[2]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-14)
    assert peaks[2] <= 1.2 * peaks[0], [p / 1e6 for p in peaks]
