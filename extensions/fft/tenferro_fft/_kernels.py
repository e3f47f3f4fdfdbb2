"""NumPy-backend kernels: scipy.fft (pocketfft), imported lazily.

scipy.fft beats numpy.fft on large complex transforms (1.4x at 2^20 points), keeps single
precision (numpy.fft before 2.0 did not) and transforms real input to fft/fftn through its
real-input path, 3x faster than converting to complex first. Kernels run single-threaded:
`workers=` and `overwrite_x` (on a private copy) gained nothing measurable on the 2-core dev
VM (timings in docs/fft.md). Results are cast to the declared dtype; inputs are never
overwritten.
"""

from __future__ import annotations

import numpy as np

from ._ops import fft_p, irfft_p, rfft_p


def _complex(dtype: np.dtype) -> np.dtype:
    return np.result_type(dtype, np.complex64)


def fft_kernel(x: np.ndarray, *, axes: tuple[int, ...], inverse: bool, norm: str) -> np.ndarray:
    import scipy.fft as sf

    fn = sf.ifftn if inverse else sf.fftn
    out = fn(x, axes=axes, norm=norm)
    return np.asarray(out).astype(_complex(x.dtype), copy=False)


def rfft_kernel(x: np.ndarray, *, axes: tuple[int, ...], norm: str) -> np.ndarray:
    import scipy.fft as sf

    out = sf.rfftn(x, axes=axes, norm=norm)
    return np.asarray(out).astype(_complex(x.dtype), copy=False)


def irfft_kernel(x: np.ndarray, *, axes: tuple[int, ...], s: tuple[int, ...], norm: str) -> np.ndarray:
    import scipy.fft as sf

    out = sf.irfftn(x, s=s, axes=axes, norm=norm)
    return np.asarray(out).astype(np.finfo(x.dtype).dtype, copy=False)


KERNELS = {fft_p: fft_kernel, rfft_p: rfft_kernel, irfft_p: irfft_kernel}
