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
from tenferro_runtime.testing.strategies import dot_problems, with_dot_examples

DTYPES = {"float32": D.float32, "float64": D.float64, "int64": D.int64, "complex64": D.complex64,
          "float16": D.float16}


def _operand(shape, dtype, transposed, rng):
    a = np.asarray(rng.standard_normal(shape[::-1] if transposed else shape) * 3)
    a = (a.round() if dtype.kind == "i" else a).astype(dtype.numpy)
    return a.T if transposed else a


@with_dot_examples
@settings(deadline=None)
@given(dot_problems(DTYPES), st.integers(0, 2**16))
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


@example(16, 64, 128, "float32", 0)  # swapped
@example(40, 64, 700, "float64", 1)  # too many rows to swap
@settings(deadline=None, max_examples=40)
@given(st.integers(1, 48), st.integers(1, 64), st.integers(1, 700), st.sampled_from(["float32", "float64"]),
       st.integers(0, 2**16))
def test_wide_products_of_a_transposed_weight_match_the_reference(m, k, n, name, seed):
    """x @ W.T through `_matmul2d`'s (W @ x.T).T where few rows make a wide result (n >= 4m,
    m * n >= WIDE_NT) and directly elsewhere: against long-double products, for the generic
    and the per-signature kernel alike (the same bits), row-major either way."""
    rng = np.random.default_rng(seed)
    dtype = DTYPES[name]
    x = rng.standard_normal((m, k)).astype(dtype.numpy)
    w = rng.standard_normal((n, k)).astype(dtype.numpy)
    params = {"contracting_dims": ((1,), (1,)), "batch_dims": ((), ())}
    avals = (Aval((m, k), dtype), Aval((n, k), dtype))
    generic = np.asarray(kernels._dot_general(x, w, **params))
    fast = np.asarray(kernels.dot_kernel(avals, params)(x, w, **params))
    plain = np.asarray(kernels._dot_general(x, np.ascontiguousarray(w.T), contracting_dims=((1,), (0,)),
                                            batch_dims=((), ())))
    ref = x.astype(np.longdouble) @ w.T.astype(np.longdouble)
    tol = (1e-5 if name == "float32" else 1e-13) * k * (np.abs(x) @ np.abs(w.T)).max()
    for got in (generic, fast, plain):
        assert got.shape == (m, n) and got.dtype == dtype.numpy
        assert np.abs(got - ref).max() <= tol
    assert generic.tobytes() == fast.tobytes()
    assert generic.flags.c_contiguous and fast.flags.c_contiguous


@example(0, 3, 4, "float32", 0)  # no examples
@example(5, 0, 4, "float64", 1)  # empty rows
@example(64, 128, 128, "float32", 2)  # per-example weight gradients of a 128-wide layer
@settings(deadline=None, max_examples=30)
@given(st.integers(0, 9), st.integers(0, 9), st.integers(0, 9), st.sampled_from(sorted(DTYPES)),
       st.integers(0, 2**16))
def test_batched_outer_products_are_numpys_products_bitwise(b, m, n, name, seed):
    """A product contracting one axis of size 1 per batch entry (vmap of a weight gradient)
    gives NumPy's broadcast multiply's bits, signed zeros included, for every dtype and
    transposed operands."""
    rng = np.random.default_rng(seed)
    dtype = DTYPES[name]
    x = _operand((b, 1, m), dtype, False, rng)
    y = _operand((b, 1, n), dtype, True, rng)  # a transposed view
    params = {"contracting_dims": ((1,), (1,)), "batch_dims": ((0,), (0,))}
    got = np.asarray(kernels._dot_general(x, y, **params))
    want = np.multiply(x[:, 0, :, None], y[:, 0, None, :])
    assert got.shape == (b, m, n) and got.dtype == want.dtype
    assert got.tobytes() == np.ascontiguousarray(want).tobytes()


@example(16, 128, 128, "float32", 200, 0).via("the scan RNN's recurrent weight: padded")
@example(3, 4, 32, "float64", 9, 1).via("256-byte rows, a loop just long enough")
@example(2, 128, 32, "complex64", 1, 2).via("one iteration: not worth the copy")
@settings(deadline=None, max_examples=30)
@given(st.integers(1, 33), st.integers(0, 130), st.sampled_from([1, 3, 16, 32, 48, 64, 96, 128, 256]),
       st.sampled_from(["float32", "float64", "complex64", "complex128", "int64"]), st.integers(1, 300),
       st.integers(0, 2**16))
def test_a_loop_weight_padded_once_gives_the_same_products(m, k, n, name, length, seed):
    """`loop_operand` (a scan body's product reading a constant weight): rows of a multiple
    of 128 bytes, in a loop long enough to repay the copy, are padded by 16 bytes (the same
    values, a longer row stride); every product through the kernel of that signature is
    bitwise the product of the unpadded weight. Other operands come back as they are."""
    rng = np.random.default_rng(seed)
    dt = {"float32": D.float32, "float64": D.float64, "complex64": D.complex64,
          "complex128": D.complex128, "int64": D.int64}[name]
    dtype = np.dtype(dt.numpy)
    a = _operand((m, k), dt, False, rng)
    w = _operand((k, n), dt, False, rng)
    prepared = kernels.loop_operand(1, w, length)
    pads = dtype.kind in "fc" and w.size > 0 and (n * dtype.itemsize) % 128 == 0 and length * 8192 >= w.nbytes
    assert (prepared is not w) == pads
    np.testing.assert_array_equal(prepared, w)
    if pads:
        assert prepared.strides[0] == (n * dtype.itemsize + 16) and prepared.strides[1] == dtype.itemsize
    wt = w.T
    assert kernels.loop_operand(0, w, length) is w
    assert wt.flags.c_contiguous or kernels.loop_operand(1, wt, length) is wt
    kernel = kernels.matmul2d_kernel(m, n, dt.numpy, dt.numpy)
    want = kernel(a, w)
    for form in (kernel(a, prepared), kernel.in_quiet(a, prepared)):
        assert form.tobytes() == want.tobytes()
