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


INT_TYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
BINARY = [lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y, lambda x, y: x & y,
          lambda x, y: x | y, lambda x, y: x ^ y]


def _int_program(ops: list, dtype: str, shape: tuple):
    """A group of one-element integer values: each op combines the last two values (+, -,
    *, &, |, ^), shifts the last by a constant count in range, converts it to another integer
    type (and back, so the ops keep one dtype), or broadcasts a 0-d value to shape (1,)."""
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
                count = xp.asarray(np.full(x.shape, arg % bits, dtype=dtype))
                vals.append(lax.shift_left(x, count) if op == 6 else lax.shift_right(x, count))
            elif op == 8:
                other = INT_TYPES[arg % len(INT_TYPES)]
                vals.append(xp.astype(xp.astype(x, getattr(xp, other)), getattr(xp, dtype)))
            elif x.shape == ():
                vals.append(xp.broadcast_to(x, (1,)))
        return tuple(vals[-2:])
    return program


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 200)), min_size=1, max_size=12),
       st.sampled_from(INT_TYPES), st.sampled_from([(), (1,), (1, 1)]), st.integers(0, 2**16))
@example([(0, 0), (6, 13), (5, 0), (7, 19), (8, 2)], "uint32", (), 0).via("threefry-like rounds")
@example([(2, 0), (1, 0), (9, 0), (0, 0)], "int8", (), 1).via("wrapping, a broadcast output")
def test_one_element_integer_groups_run_as_scalar_operators_with_the_same_bits(ops, dtype, shape, seed):
    """A group whose values all hold one integer element (a random key's threefry rounds)
    runs as operators on NumPy scalars: the same values and types as the group's kernels
    node by node, wrapping on overflow, without warnings."""
    import warnings

    from tenferro_numpy.fusion import _via_eval, generated_source

    r = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    a, b = (r.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype) for _ in range(2))
    group = trace(_int_program(ops, dtype, shape), xp.asarray(a), xp.asarray(b))
    if not group.nodes:
        return
    want = _via_eval(group, a, b)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = fused_kernel(a, b, graph=group)
    assert "reshape(-1)[0]" in generated_source(group)  # the scalar path ran
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert _bits(g) == _bits(w)
