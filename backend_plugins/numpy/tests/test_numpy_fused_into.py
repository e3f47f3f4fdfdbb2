"""The numpy `fused` kernel's `into` form (a scan writing its stacked outputs in place): for
groups whose outputs are scratch buffers, inputs, constants, repeated values or fresh kernel
results, on C-ordered and strided operands, every output bitwise the plain kernel's and
written into the given array (or allocated where none is given)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tenferro_numpy.fusion import fused_kernel, into_source, specialized
from tenferro_runtime import array_api as xp
from tenferro_runtime import lax, trace


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.shape, a.dtype, a.view(np.uint8).tobytes()


def _repeated(a, b, c):
    v = a * b + 1.0
    return v, v, a, lax.exp(b)


PROGRAMS = {  # each traced graph is one group's graph (elementwise and broadcast nodes)
    "tanh cell": lambda a, b, c: (lax.tanh(a + b) * 0.5, 1.0 - a * a),
    "an input and a repeated output": _repeated,
    "a select (a fresh result)": lambda a, b, c: (xp.where(a > b, a, b) + 1.0, a - b),
    "a constant output": lambda a, b, c: (a + b, xp.asarray(np.full(a.shape, 2.0, np.float32))),
    "a broadcast output": lambda a, b, c: (a + c, xp.broadcast_to(c, a.shape)),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@settings(max_examples=6, deadline=None)
@given(st.sampled_from([(3, 4), (1, 5), (0, 3), (2, 1)]), st.booleans(), st.booleans(),
       st.integers(0, 2**16))
@example((3, 4), True, True, 0).via("strided operands, every output given")
@example((0, 3), False, False, 1).via("0-size, no output given")
def test_into_matches_the_kernel_and_writes_the_given_arrays(name, shape, strided, given_all, seed):
    r = np.random.default_rng(seed)
    a, b = (r.standard_normal(shape[::-1] if strided else shape).astype(np.float32) for _ in range(2))
    if strided:
        a, b = a.T, b.T  # transposed views: the group's strided path
    c = r.standard_normal(shape[1]).astype(np.float32)
    group = trace(PROGRAMS[name], *(xp.asarray(v) for v in (a, b, c)))
    ins = [x for v, x in zip(group.inputs, (a, b, c))]
    want = fused_kernel(*ins, graph=group)
    outs = [np.empty(w.shape, w.dtype) if given_all or j % 2 == 0 else None for j, w in enumerate(want)]
    got = specialized(group).into()(*ins, *outs)
    assert len(got) == len(want) and "def fused_into" in into_source(group)
    for g, w, o in zip(got, want, outs):
        assert _bits(g) == _bits(w)
        if o is not None:
            assert g is o

