"""`reductions.dot_kernel` (a dot_general's index work done once per signature) against the
generic `_dot_general` it replaces: the same bits for every arrangement of batch,
contracting and free axes, edge sizes, dtypes and non-contiguous operands."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_core import dtypes as D
from tenferro_core.avals import Aval
from tenferro_runtime.testing.strategies import dot_problems, with_dot_examples
from tenferro_torch.ops import reductions

DTYPES = {"float32": (D.float32, torch.float32), "float64": (D.float64, torch.float64),
          "int64": (D.int64, torch.int64), "complex64": (D.complex64, torch.complex64),
          "float16": (D.float16, torch.float16)}


def _operand(shape, dtype, transposed, rng):
    a = torch.from_numpy(np.asarray(rng.standard_normal(shape[::-1] if transposed else shape) * 3))
    if dtype[1] is torch.int64:
        a = a.round()
    a = a.to(dtype[1])
    return a.permute(tuple(reversed(range(a.ndim)))) if transposed else a


@with_dot_examples
@settings(deadline=None)
@given(dot_problems(DTYPES), st.integers(0, 2**16))
def test_dot_kernel_is_bitwise_the_generic_kernel(problem, seed):
    lshape, rshape, params, name, transposed = problem
    rng = np.random.default_rng(seed)
    dtype = DTYPES[name]
    x = _operand(lshape, dtype, transposed, rng)
    y = _operand(rshape, dtype, not transposed, rng)
    avals = (Aval(tuple(lshape), dtype[0]), Aval(tuple(rshape), dtype[0]))
    want = reductions._dot_general(x, y, **params)
    got = reductions.dot_kernel(avals, params)(x, y, **params)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert torch.equal(_bits(got), _bits(want))


def _bits(t):
    t = t.contiguous().reshape(-1)
    return (torch.view_as_real(t) if t.is_complex() else t).contiguous().view(torch.uint8)
