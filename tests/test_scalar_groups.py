"""Fused groups of one-element integer values (a random key's threefry rounds) run as
operators on NumPy scalars (`tenferro_runtime.scalar_groups`): on numpy:cpu and torch:cpu,
bitwise the values and types the kernels give node by node, wrapping on overflow, without
warnings; compiled functions holding such groups give the eager bits."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, lax, trace
from tenferro_runtime.graph import eval_graph
from tenferro_runtime.scalar_groups import scalar_group

DEVICES = ["numpy:cpu", "torch:cpu"]
INT_TYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
BINARY = [lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y, lambda x, y: x & y,
          lambda x, y: x | y, lambda x, y: x ^ y]


def int_program(ops: list, dtype: str):
    """Each op combines the last two values (+, -, *, &, |, ^), shifts the last by a constant
    count in range, converts it to another integer type and back, or broadcasts a 0-d value
    to shape (1,)."""
    bits = np.dtype(dtype).itemsize * 8

    def program(a, b):
        vals = [a, b]
        for op, arg in ops:
            x, y = vals[-1], vals[-2]
            if y.shape != x.shape:
                y = xp.reshape(y, x.shape)
            if op < 6:
                vals.append(BINARY[op](x, y))
            elif op < 8:
                count = xp.asarray(np.full(x.shape, arg % bits, dtype=dtype), device=x.device)
                vals.append(lax.shift_left(x, count) if op == 6 else lax.shift_right(x, count))
            elif op == 8:
                other = INT_TYPES[arg % len(INT_TYPES)]
                vals.append(xp.astype(xp.astype(x, getattr(xp, other)), getattr(xp, dtype)))
            elif x.shape == ():
                vals.append(xp.broadcast_to(x, (1,)))
        return tuple(vals[-2:])
    return program


def _host(device):
    if device == "torch:cpu":
        import torch
        return (lambda t: t.numpy()), torch.from_numpy
    return None, None


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 200)), min_size=1, max_size=12),
       st.sampled_from(INT_TYPES), st.sampled_from([(), (1,), (1, 1)]), st.integers(0, 2**16))
@example([(0, 0), (6, 13), (5, 0), (7, 19), (8, 2)], "uint32", (), 0).via("threefry-like rounds")
@example([(2, 0), (1, 0), (9, 0), (0, 0)], "int8", (), 1).via("wrapping, a broadcast output")
def test_one_element_integer_groups_give_the_kernels_bits(device, ops, dtype, shape, seed):
    r = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    a, b = (xp.asarray(r.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype), device=device)
            for _ in range(2))
    program = int_program(ops, dtype)
    group = trace(program, a, b)
    if not group.nodes:
        return
    want = [t.numpy() for t in eval_graph(group, a, b)]  # node by node, the device's kernels
    to_host, from_host = _host(device)
    built = scalar_group(group, to_host, from_host)
    assert built is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = built[0](a._buf, b._buf)
        compiled = compile(program)(a, b)
    for g, c, w in zip(got, compiled, want):
        g = np.asarray(g.numpy() if hasattr(g, "numpy") else g)
        for x in (g, c.numpy()):
            assert x.shape == w.shape and x.dtype == w.dtype and x.tobytes() == w.tobytes()


def test_other_groups_are_left_to_the_kernels():
    """Floats, more than one element, a shift by a variable or out-of-range count: None."""
    f, i = xp.asarray(1.5), xp.asarray(np.int32(3))
    two = xp.asarray(np.arange(2, dtype=np.int32))
    assert scalar_group(trace(lambda x: x * x + x, f)) is None
    assert scalar_group(trace(lambda x: x * x + x, two)) is None
    assert scalar_group(trace(lambda x, y: lax.shift_left(x, y), i, i)) is None
    assert scalar_group(trace(lambda x: lax.shift_left(x, xp.asarray(np.int32(40))), i)) is None
    assert scalar_group(trace(lambda x: lax.shift_left(x, xp.asarray(np.int32(4))) ^ x, i)) is not None
