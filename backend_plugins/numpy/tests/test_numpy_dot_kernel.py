"""`kernels.dot_kernel` (a dot_general's index work done once per signature) against the
generic `_dot_general` it replaces on numpy:cpu: the same bits for every arrangement of
batch, contracting and free axes, edge sizes, dtypes and transposed (non-contiguous)
operands."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tenferro_core import dtypes as D
from tenferro_core.avals import Aval
from tenferro_numpy import kernels

DTYPES = {"float32": D.float32, "float64": D.float64, "int64": D.int64, "complex64": D.complex64,
          "float16": D.float16}


@st.composite
def problems(draw):
    nb, nc = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    nl, nr = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    size = st.integers(0, 4)
    sizes = {"b": [draw(size) for _ in range(nb)], "c": [draw(size) for _ in range(nc)],
             "l": [draw(size) for _ in range(nl)], "r": [draw(size) for _ in range(nr)]}
    l_axes = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + [("l", i) for i in range(nl)]
    r_axes = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + [("r", i) for i in range(nr)]
    l_axes = [l_axes[i] for i in draw(st.permutations(range(len(l_axes))))]
    r_axes = [r_axes[i] for i in draw(st.permutations(range(len(r_axes))))]
    params = {"contracting_dims": (tuple(l_axes.index(("c", i)) for i in range(nc)),
                                   tuple(r_axes.index(("c", i)) for i in range(nc))),
              "batch_dims": (tuple(l_axes.index(("b", i)) for i in range(nb)),
                             tuple(r_axes.index(("b", i)) for i in range(nb)))}
    lshape = [sizes[t][i] for t, i in l_axes]
    rshape = [sizes[t][i] for t, i in r_axes]
    return lshape, rshape, params, draw(st.sampled_from(sorted(DTYPES))), draw(st.booleans())


def _operand(shape, dtype, transposed, rng):
    a = np.asarray(rng.standard_normal(shape[::-1] if transposed else shape) * 3)
    a = (a.round() if dtype.kind == "i" else a).astype(dtype.numpy)
    return a.T if transposed else a


@settings(deadline=None)
@given(problems(), st.integers(0, 2**16))
@example(([7, 5], [3, 5], {"contracting_dims": ((1,), (1,)), "batch_dims": ((), ())}, "float32", False), 0)
@example(([5, 2, 3], [3, 5, 4], {"contracting_dims": ((0, 2), (1, 0)), "batch_dims": ((), ())}, "float64",
          True), 1)
@example(([0, 3], [3, 0], {"contracting_dims": ((1,), (0,)), "batch_dims": ((), ())}, "float32", False), 2)
def test_dot_kernel_is_bitwise_the_generic_kernel(problem, seed):
    lshape, rshape, params, name, transposed = problem
    rng = np.random.default_rng(seed)
    dtype = DTYPES[name]
    x = _operand(lshape, dtype, transposed, rng)
    y = _operand(rshape, dtype, not transposed, rng)
    avals = (Aval(tuple(lshape), dtype), Aval(tuple(rshape), dtype))
    want = np.asarray(kernels._dot_general(x, y, **params))
    got = np.asarray(kernels.dot_kernel(avals, params)(x, y, **params))
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()
