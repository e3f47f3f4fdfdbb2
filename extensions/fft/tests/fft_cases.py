"""Shared pieces of the tenferro-fft tests: generated operands (any dtype, size-0 batch
axes, non-contiguous layouts) and the comparison with numpy.fft."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from tenferro_runtime import array_api as xp
from tenferro_runtime.testing.strategies import Layout, layouts

REAL = ("float32", "float64")
COMPLEX = ("complex64", "complex128")
NORMS = ("backward", "ortho", "forward")
# relative to the largest |value| of the reference (an FFT mixes all entries)
RTOL = {"float32": 2e-5, "complex64": 2e-5, "float64": 1e-12, "complex128": 1e-12}


def host(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    a = rng.standard_normal(shape)
    if dtype.startswith("complex"):
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def present(a: np.ndarray, layout: Layout):
    """A tenferro tensor equal to `a`, a non-contiguous view for non-contiguous layouts:
    the bigger buffer is uploaded, then viewed with tenferro's transpose/slice/flip."""
    big = xp.asarray(layout.embed(a))
    if layout.kind == "transposed":
        return xp.permute_dims(big, layout.perm)
    if layout.kind == "reversed":
        return xp.flip(big, axis=layout.dims)
    if layout.kind == "strided":
        return big[layout.slices(a.shape)]
    return big


@st.composite
def operands(draw, dtypes: tuple[str, ...], min_rank: int = 1, max_rank: int = 3, max_side: int = 5):
    """(host array, tensor view of it): sides 0..max_side, any layout."""
    dtype = draw(st.sampled_from(dtypes))
    shape = tuple(draw(st.lists(st.integers(0, max_side), min_size=min_rank, max_size=max_rank)))
    a = host(np.random.default_rng(draw(st.integers(0, 2**32 - 1))), shape, dtype)
    return a, present(a, draw(layouts(shape)))


def close(got, want: np.ndarray, dtype: str) -> None:
    """Same shape, exactly the dtype `dtype`, values within the dtype's tolerance."""
    assert got.dtype.name == dtype, f"dtype {got.dtype} != {dtype}"
    g = got.numpy()
    assert g.shape == want.shape, f"shape {g.shape} != {want.shape}"
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    np.testing.assert_allclose(g, want, rtol=0, atol=RTOL[dtype] * scale)


def complex_of(dtype: str) -> str:
    return {"float32": "complex64", "float64": "complex128"}.get(dtype, dtype)


def real_of(dtype: str) -> str:
    return {"complex64": "float32", "complex128": "float64"}.get(dtype, dtype)


def wide(a: np.ndarray) -> np.ndarray:
    """a in double precision: the reference is computed there."""
    return a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
