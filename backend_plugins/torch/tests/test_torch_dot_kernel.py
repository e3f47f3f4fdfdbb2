"""`reductions.dot_kernel` (a dot_general's index work done once per signature) against the
generic `_dot_general` it replaces: the same bits for every arrangement of batch,
contracting and free axes, edge sizes, dtypes and non-contiguous operands."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tenferro_core import dtypes as D
from tenferro_core.avals import Aval
from tenferro_torch.ops import reductions

DTYPES = {"float32": (D.float32, torch.float32), "float64": (D.float64, torch.float64),
          "int64": (D.int64, torch.int64), "complex64": (D.complex64, torch.complex64),
          "float16": (D.float16, torch.float16)}


@st.composite
def problems(draw):
    nb, nc = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    nl, nr = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    size = st.integers(0, 4)
    b = [draw(size) for _ in range(nb)]
    c = [draw(size) for _ in range(nc)]
    lf = [draw(size) for _ in range(nl)]
    rf = [draw(size) for _ in range(nr)]
    lperm = draw(st.permutations(range(nb + nc + nl)))
    rperm = draw(st.permutations(range(nb + nc + nr)))
    l_axes = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + [("f", i) for i in range(nl)]
    r_axes = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + [("f", i) for i in range(nr)]
    l_axes = [l_axes[i] for i in lperm]
    r_axes = [r_axes[i] for i in rperm]
    sizes = {"b": b, "c": c}
    lshape = [sizes.get(t, lf)[i] for t, i in l_axes]
    rshape = [sizes.get(t, rf)[i] for t, i in r_axes]
    lc = tuple(l_axes.index(("c", i)) for i in range(nc))
    rc = tuple(r_axes.index(("c", i)) for i in range(nc))
    lb = tuple(l_axes.index(("b", i)) for i in range(nb))
    rb = tuple(r_axes.index(("b", i)) for i in range(nb))
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    transposed = draw(st.booleans())
    return lshape, rshape, {"contracting_dims": (lc, rc), "batch_dims": (lb, rb)}, dtype, transposed


def _operand(shape, dtype, transposed, rng):
    a = torch.from_numpy(np.asarray(rng.standard_normal(shape[::-1] if transposed else shape) * 3))
    if dtype[1] is torch.int64:
        a = a.round()
    a = a.to(dtype[1])
    return a.permute(tuple(reversed(range(a.ndim)))) if transposed else a


@settings(deadline=None)
@given(problems(), st.integers(0, 2**16))
@example(([7, 5], [3, 5], {"contracting_dims": ((1,), (1,)), "batch_dims": ((), ())}, "float32", False), 0)
@example(([2, 4, 3], [2, 3, 5], {"contracting_dims": ((2,), (1,)), "batch_dims": ((0,), (0,))}, "float64",
          True), 1)
@example(([0, 3], [3, 0], {"contracting_dims": ((1,), (0,)), "batch_dims": ((), ())}, "float32", False), 2)
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
