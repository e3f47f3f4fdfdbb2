"""Every tenferro-fft function against numpy.fft on generated inputs: n/s padding and
truncation, axes (negative too), every norm, float32/float64/complex64/complex128,
size-1 and size-0 axes, 0-d input, non-contiguous views."""

from __future__ import annotations

import numpy as np
import pytest
from fft_cases import COMPLEX, NORMS, REAL, close, complex_of, host, operands, present, real_of, wide
from hypothesis import event, given
from hypothesis import strategies as st

import tenferro_fft as F
from tenferro_core.errors import ShapeError
from tenferro_runtime import array_api as xp
from tenferro_runtime.graph import eval_graph, trace
from tenferro_runtime.testing.strategies import CONTIGUOUS

# name: (input dtypes, output dtype of input dtype, complex-to-real (default n = 2*(m-1)))
ONE_D = {
    "fft": (REAL + COMPLEX, complex_of, False),
    "ifft": (REAL + COMPLEX, complex_of, False),
    "rfft": (REAL, complex_of, False),
    "irfft": (REAL + COMPLEX, real_of, True),
    "hfft": (REAL + COMPLEX, real_of, True),
    "ihfft": (REAL, complex_of, False),
}
N_D = {
    "fftn": ONE_D["fft"],
    "ifftn": ONE_D["ifft"],
    "rfftn": ONE_D["rfft"],
    "irfftn": ONE_D["irfft"],
}


@pytest.mark.parametrize("name", sorted(ONE_D))
@given(data=st.data())
def test_one_d_transforms_match_numpy(name, data):
    kinds, out_dtype, c2r = ONE_D[name]
    a, x = data.draw(operands(kinds))
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
    n = data.draw(st.none() | st.integers(1, 8))
    norm = data.draw(st.sampled_from(NORMS))
    fn, ref = getattr(F, name), getattr(np.fft, name)
    m = a.shape[axis]
    if n is None and (2 * (m - 1) if c2r else m) < 1:  # no default length: NumPy refuses too
        event("no default length")
        with pytest.raises(ShapeError, match="pass n >= 1"):
            fn(x, axis=axis, norm=norm)
        with pytest.raises(ValueError):
            ref(a, axis=axis, norm=norm)
        return
    close(fn(x, n=n, axis=axis, norm=norm), ref(wide(a), n=n, axis=axis, norm=norm), out_dtype(a.dtype.name))


@st.composite
def axes_and_s(draw, ndim: int):
    """(axes, s) as passed, and the axes they resolve to (NumPy: s alone names the last axes)."""
    mode = draw(st.sampled_from(["none", "axes", "s", "both"]))
    k = draw(st.integers(1, ndim))  # no axes at all: test_zero_d_input, test_no_axes
    chosen = tuple(draw(st.permutations(range(ndim)))[:k])
    if mode in ("none", "s"):
        chosen = tuple(range(ndim)) if mode == "none" else tuple(range(ndim - k, ndim))
    sizes = tuple(draw(st.lists(st.integers(1, 6) | st.just(-1), min_size=len(chosen), max_size=len(chosen))))
    given_axes = tuple(a - ndim if draw(st.booleans()) else a for a in chosen)
    return (given_axes if mode in ("axes", "both") else None,
            sizes if mode in ("s", "both") else None,
            chosen)


@pytest.mark.parametrize("name", sorted(N_D))
@given(data=st.data())
def test_n_d_transforms_match_numpy(name, data):
    kinds, out_dtype, c2r = N_D[name]
    a, x = data.draw(operands(kinds))
    axes, s, chosen = data.draw(axes_and_s(a.ndim))
    norm = data.draw(st.sampled_from(NORMS))
    fn = getattr(F, name)
    # -1 (or no s) means the default length: m, or 2*(m-1) on the last axis of irfftn
    sizes = list(s) if s is not None else [-1] * len(chosen)
    for i, ax in enumerate(chosen):
        if sizes[i] == -1:
            m = a.shape[ax]
            sizes[i] = 2 * (m - 1) if c2r and i == len(chosen) - 1 else m
    if min(sizes) < 1:
        event("no default length")
        with pytest.raises(ShapeError, match="pass s with lengths >= 1"):
            fn(x, s=s, axes=axes, norm=norm)
        return
    want = getattr(np.fft, name)(wide(a), s=sizes, axes=chosen, norm=norm)
    close(fn(x, s=s, axes=axes, norm=norm), want, out_dtype(a.dtype.name))


@pytest.mark.parametrize("dtype", REAL + COMPLEX)
def test_round_trips(dtype):
    rng = np.random.default_rng(1)
    a = host(rng, (3, 4, 5), dtype)
    x = xp.asarray(a)
    for norm in NORMS:
        close(F.ifftn(F.fftn(x, norm=norm), norm=norm), a.astype(complex_of(dtype)), complex_of(dtype))
        close(F.ifft(F.fft(x, axis=1, norm=norm), axis=1, norm=norm), a.astype(complex_of(dtype)),
              complex_of(dtype))
        if dtype in REAL:
            close(F.irfftn(F.rfftn(x, norm=norm), s=a.shape, norm=norm), a, dtype)
            close(F.irfft(F.rfft(x, norm=norm), n=5, norm=norm), a, dtype)
            close(F.hfft(F.ihfft(x, norm=norm), n=5, norm=norm), a, dtype)


def test_size_one_and_size_zero_batch_axes():
    rng = np.random.default_rng(2)
    for shape in [(1,), (1, 1), (0, 3), (3, 0, 4), (2, 1, 0)]:
        a = host(rng, shape, "complex128")
        x = xp.asarray(a)
        close(F.fft(x, n=3, axis=0), np.fft.fft(a, n=3, axis=0), "complex128")
        every = tuple(range(a.ndim))
        close(F.fftn(x, s=(2,) * a.ndim), np.fft.fftn(a, s=(2,) * a.ndim, axes=every), "complex128")
        close(F.irfft(x, n=3, axis=0), np.fft.irfft(a, n=3, axis=0), "float64")
        close(F.rfftn(xp.real(x), s=(1,) * a.ndim), np.fft.rfftn(a.real, s=(1,) * a.ndim, axes=every),
              "complex128")


def test_zero_d_input():
    x = xp.asarray(np.float32(2.5))
    close(F.fftn(x), np.asarray(2.5, np.complex64), "complex64")
    close(F.ifftn(x, axes=()), np.asarray(2.5, np.complex64), "complex64")
    close(F.fftshift(x), np.asarray(2.5, np.float32), "float32")
    close(F.ifftshift(x, axes=()), np.asarray(2.5, np.float32), "float32")


@pytest.mark.parametrize("dtype", REAL + COMPLEX)
def test_no_axes(dtype):
    # fftn/ifftn over no axes return the input as complex; rfftn/irfftn need an axis
    a = host(np.random.default_rng(6), (2, 3), dtype)
    x = xp.asarray(a)
    for fn in (F.fftn, F.ifftn):
        close(fn(x, axes=()), a.astype(complex_of(dtype)), complex_of(dtype))
        close(fn(x, s=(), axes=[]), a.astype(complex_of(dtype)), complex_of(dtype))
    for fn in (F.rfftn, F.irfftn) if dtype in REAL else (F.irfftn,):
        with pytest.raises(ShapeError, match="at least one axis"):
            fn(x, axes=())


def test_large_transforms():
    a = host(np.random.default_rng(3), (64, 1024), "complex128")
    close(F.fft(xp.asarray(a)), np.fft.fft(a), "complex128")
    close(F.ifftn(xp.asarray(a)), np.fft.ifftn(a), "complex128")
    close(F.rfft(xp.asarray(a.real), axis=0), np.fft.rfft(a.real, axis=0), "complex128")


def test_kernels_leave_their_input_untouched():
    a = host(np.random.default_rng(4), (4, 6), "complex128")
    x = xp.asarray(a)
    for y in (F.fft(x), F.ifftn(x), F.irfftn(x), F.hfft(x), F.rfftn(xp.real(x))):
        assert y.numpy().size
    np.testing.assert_array_equal(x.numpy(), a)


@given(n=st.integers(1, 40), d=st.floats(0.01, 100) | st.sampled_from([-0.5, 1, 3]),
       dtype=st.sampled_from([None, "float32", "float64"]))
def test_frequencies_match_numpy(n, d, dtype):
    out = dtype or "float64"
    close(F.fftfreq(n, d=d, dtype=dtype), np.fft.fftfreq(n, d), out)
    close(F.rfftfreq(n, d=d, dtype=dtype), np.fft.rfftfreq(n, d), out)


def test_frequencies_on_a_named_device():
    dev = xp.asarray([0.0]).device
    y = F.fftfreq(4, device=dev)
    assert y.device == dev
    np.testing.assert_array_equal(y.numpy(), [0.0, 0.25, -0.5, -0.25])


@given(data=st.data())
def test_shifts_match_numpy(data):
    a, x = data.draw(operands(REAL + COMPLEX + ("int64",), min_rank=0))
    nd = a.ndim
    axes = data.draw(st.none() | st.integers(-nd, nd - 1) if nd else st.none() | st.just(()))
    if isinstance(axes, int) and data.draw(st.booleans()):
        axes = tuple(data.draw(st.permutations(range(nd)))[: data.draw(st.integers(0, nd))])
    for fn, ref in ((F.fftshift, np.fft.fftshift), (F.ifftshift, np.fft.ifftshift)):
        y = fn(x, axes=axes)
        assert y.dtype.name == a.dtype.name
        # numpy.fft's shifts fail on 0-d input, where the shift is the identity
        np.testing.assert_array_equal(y.numpy(), ref(a, axes=axes) if nd else a)


def test_transforms_trace_into_graphs():
    a = host(np.random.default_rng(5), (3, 4), "float64")

    def f(v):
        return F.irfft(F.fft(v, n=6), n=5) + F.hfft(F.ihfft(v, n=5), n=5)

    g = trace(f, xp.asarray(a))
    names = {node.prim.name for node in g.nodes}
    assert {"tenferro_fft.fft.v1", "tenferro_fft.rfft.v1", "tenferro_fft.irfft.v1"} <= names
    want = np.fft.irfft(np.fft.fft(a, n=6), n=5) + np.fft.hfft(np.fft.ihfft(a, n=5), n=5)
    close(eval_graph(g, present(a, CONTIGUOUS))[0], want, "float64")
