"""The runtime hook Forge relies on: a kernel with ``choose_kernel`` picks per signature,
once (inside the dispatch memo), falling back to the next kernel by priority; plugin notes."""

from __future__ import annotations

import numpy as np

from tenferro_core.plugins import hookimpl
from tenferro_numpy import plugin as numpy_plugin
from tenferro_runtime import array_api as xp
from tenferro_runtime.runtime import Runtime, use_runtime


def _plugin(name, register):
    class P:
        __name__ = name

        @hookimpl
        def tenferro_register(self, registry):
            register(registry)

    return P()


def test_choose_kernel_picks_once_per_signature_and_falls_back():
    asked, ran = [], []

    def fast(x):
        ran.append(x.shape)
        return np.negative(x)

    class Chooser:
        def __call__(self, x):  # never called: dispatch asks choose_kernel instead
            raise AssertionError("the chooser itself ran as a kernel")

        def choose_kernel(self, device, avals, out_avals, params):
            asked.append(avals[0].shape)
            return fast if avals[0].shape == (3,) else None

    def register(reg):
        reg.add_kernel("numpy", "neg", Chooser(), priority=100)
        reg.add_note("one kernel skipped: recorded for the listing")

    rt = Runtime([_plugin("chooser", register), numpy_plugin], check_kernels=False)
    with use_runtime(rt):
        for _ in range(5):
            np.testing.assert_array_equal(np.asarray(-xp.asarray([1.0, 2.0, 3.0])), [-1, -2, -3])
            np.testing.assert_array_equal(np.asarray(-xp.asarray([1.0, 2.0])), [-1, -2])
    assert asked == [(3,), (2,)]  # one choice per signature, in the dispatch memo
    assert ran == [(3,)] * 5  # the chosen kernel for its signature; the numpy kernel otherwise
    report = next(r for r in rt.reports if r.name == "chooser")
    assert "note: one kernel skipped: recorded for the listing" in report.registered
    assert rt.kernel_below("numpy", "neg", rt.kernels[("numpy", "neg")][0]) is not None
    assert rt.kernel_below("numpy", "no_such_op", None) is None
