"""Bad input raises a typed error naming what was wrong and what to do, before any kernel."""

from __future__ import annotations

import numpy as np
import pytest

import tenferro_fft as F
from tenferro_core.errors import ArgumentError, AxisError, DTypeError, ShapeError
from tenferro_runtime import array_api as xp

X = xp.asarray(np.ones((3, 4), np.complex128))
R = xp.asarray(np.ones((3, 4)))
V = xp.asarray(np.ones(4))

CASES = [
    # axes out of range, repeated
    (lambda: F.fft(X, axis=2), AxisError, r"axis 2 is out of range .* rank 2"),
    (lambda: F.ifft(X, axis=-3), AxisError, "out of range"),
    (lambda: F.fftn(X, axes=(0, 5)), AxisError, "out of range"),
    (lambda: F.fftn(X, axes=(0, -2)), AxisError, "name an axis twice"),
    (lambda: F.irfftn(X, axes=(1, 1)), AxisError, "pass each axis once"),
    (lambda: F.fftshift(X, axes=(0, 0)), AxisError, "repeated"),
    (lambda: F.ifftshift(X, axes=3), AxisError, "out of range"),
    (lambda: F.fft(xp.asarray(1.0)), AxisError, "axis -1 is out of range for a tensor of rank 0"),
    (lambda: F.fftshift(xp.asarray(1.0), axes=0), AxisError, "rank 0"),
    (lambda: F.fft(X, axis=1.0), ArgumentError, "axis must be an int"),
    (lambda: F.fftn(X, axes=1), ArgumentError, "axes must be a sequence"),
    (lambda: F.fftn(X, axes=(0, "1")), ArgumentError, "each axis must be an int"),
    # n
    (lambda: F.fft(X, n=0), ShapeError, "n must be a positive number of points, got 0; pass n >= 1"),
    (lambda: F.irfft(X, n=-2), ShapeError, "got -2"),
    (lambda: F.rfft(R, n=2.5), ArgumentError, "n must be an int, got float"),
    (lambda: F.hfft(X, n=True), ArgumentError, "n must be an int, got bool"),
    (lambda: F.ihfft(R, n="4"), ArgumentError, "n must be an int, got str"),
    # s / axes
    (lambda: F.fftn(X, s=(2, 3), axes=(0,)), ShapeError, "s and axes must have the same length"),
    (lambda: F.rfftn(R, s=(2,), axes=(0, 1)), ShapeError, "one size per transformed axis"),
    (lambda: F.fftn(X, s=(0, 3)), ShapeError, r"s entries must be >= 1 \(or -1"),
    (lambda: F.ifftn(V, s=(2, 3)), ShapeError, "s=.* has 2 entries but x has only 1 axes"),
    (lambda: F.fftn(X, s=3), ArgumentError, "s must be a sequence of ints"),
    (lambda: F.irfftn(X, s=(2, 2.0)), ArgumentError, "each entry of s must be an int"),
    # norm
    (lambda: F.fft(X, norm="bogus"), ArgumentError, "norm must be one of 'backward', 'ortho', 'forward'"),
    (lambda: F.irfftn(X, norm=None), ArgumentError, "got None"),
    # no default length
    (lambda: F.fft(xp.zeros((3, 0)), axis=1), ShapeError, "length 0 along axis 1; pass n >= 1"),
    (lambda: F.fftn(xp.zeros((0, 3))), ShapeError, "length 0 along axis 0; pass s with lengths >= 1"),
    (lambda: F.irfft(xp.zeros((3, 1))), ShapeError,
     r"length 1 along axis 1, so the default output length 2\*\(m-1\) = 0 is invalid; pass n >= 1"),
    (lambda: F.rfftn(R, axes=()), ShapeError, "at least one axis"),
    (lambda: F.irfftn(xp.asarray(1.0 + 0j)), ShapeError, "at least one axis"),
    # dtypes
    (lambda: F.fft(xp.asarray([1, 2, 3])), DTypeError,
     r"got int64; convert it first, e.g. astype\(x, float64"),
    (lambda: F.fftn(xp.asarray([True, False])), DTypeError, "got bool"),
    (lambda: F.irfft(xp.asarray(np.ones(4, np.float16))), DTypeError, r"float16.*astype\(x, float32\)"),
    (lambda: F.rfft(X), DTypeError, r"real floating-point tensor .* got complex128; take the real part"),
    (lambda: F.ihfft(X), DTypeError, "real floating-point"),
    (lambda: F.rfftn(xp.asarray(np.ones(3, np.int32))), DTypeError, "expected a float32 or float64 tensor"),
    (lambda: F.fft(np.ones(3)), ArgumentError, "must be a tenferro Tensor"),
    # frequencies
    (lambda: F.fftfreq(0), ShapeError, "n must be a positive number of points, got 0; pass n >= 1$"),
    (lambda: F.rfftfreq(None), ArgumentError, "n must be an int, got NoneType"),
    (lambda: F.fftfreq(4.0), ArgumentError, "n must be an int"),
    (lambda: F.fftfreq(4, d=0), ArgumentError, "nonzero real number"),
    (lambda: F.rfftfreq(4, d="1"), ArgumentError, "nonzero real number"),
    (lambda: F.fftfreq(4, dtype=xp.int64), DTypeError, "real floating-point dtype, got int64"),
    (lambda: F.rfftfreq(4, dtype=xp.complex128), DTypeError, "got complex128"),
]


@pytest.mark.parametrize("call,error,match", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_bad_input_is_a_typed_error(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_ops_check_their_payload_and_operands():
    # the ops themselves (used directly, or by other frontends) validate too
    with pytest.raises(ArgumentError, match="parameter 'norm' expects one of"):
        F.fft_p.bind(X, axes=(0,), norm="bad")
    with pytest.raises(ArgumentError, match="missing required parameter 'axes'"):
        F.rfft_p.bind(R)
    with pytest.raises(ShapeError, match="at least one axis"):
        F.fft_p.bind(X, axes=())
    with pytest.raises(AxisError, match="repeated"):
        F.fft_p.bind(X, axes=(1, 1))
    with pytest.raises(AxisError, match="non-negative axes"):
        F.fft_p.bind(X, axes=(-1,))
    with pytest.raises(ShapeError, match="length 0"):
        F.rfft_p.bind(xp.zeros((2, 0)), axes=(1,))
    with pytest.raises(DTypeError, match="real floating-point"):
        F.rfft_p.bind(X, axes=(1,))
    with pytest.raises(DTypeError, match="complex64 or complex128"):
        F.irfft_p.bind(xp.asarray(np.ones((2, 3), np.int64)), axes=(1,), s=(4,))
    with pytest.raises(DTypeError, match="got float64"):
        F.irfft_p.bind(R, axes=(1,), s=(6,))
    with pytest.raises(ShapeError, match=r"needs lengths \(3,\) on axes \(1,\).*got \(4,\)"):
        F.irfft_p.bind(X, axes=(1,), s=(5,))
    with pytest.raises(ShapeError, match="one output length >= 1 per axis"):
        F.irfft_p.bind(X, axes=(1,), s=(6, 2))
