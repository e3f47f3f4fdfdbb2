"""Kernel choice for tenferro-fft: numpy.fft vs scipy.fft (workers, overwrite_x), timings in ms.

Run from bench/: ../.venv/bin/python fft_kernels.py   (results are recorded in docs/fft.md)
"""

from __future__ import annotations

import statistics
import timeit

import numpy as np
import scipy.fft as sf


def bench(fn, repeat: int = 50) -> str:
    fn()
    runs = timeit.repeat(fn, number=1, repeat=repeat)
    return f"min {min(runs) * 1e3:7.2f}  median {statistics.median(runs) * 1e3:7.2f}"


def main() -> None:
    rng = np.random.default_rng(0)
    n = 2**20
    z = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    r = rng.standard_normal(n)
    b = rng.standard_normal((1024, 1024)) + 1j * rng.standard_normal((1024, 1024))
    lines = rng.standard_normal((64, 4096)) + 1j * rng.standard_normal((64, 4096))
    from tenferro_runtime import array_api as xp

    t = xp.asarray(z)
    cases = {
        "fft 2^20 complex128: numpy.fft": lambda: np.fft.fft(z),
        "fft 2^20 complex128: scipy.fft": lambda: sf.fft(z),
        "fft 2^20 complex128: scipy.fft workers=2": lambda: sf.fft(z, workers=2),
        "fft 2^20 complex128: scipy.fft copy + overwrite_x": lambda: sf.fft(z.copy(), overwrite_x=True),
        "fft 2^20 float64 input: numpy.fft": lambda: np.fft.fft(r),
        "fft 2^20 float64 input: scipy.fft (real path)": lambda: sf.fft(r),
        "fft 2^20 float64 input: convert, then scipy.fft": lambda: sf.fft(r.astype(np.complex128)),
        "rfft 2^20 float64: numpy.fft": lambda: np.fft.rfft(r),
        "rfft 2^20 float64: scipy.fft": lambda: sf.rfft(r),
        "fft 2^20 complex128: tenferro fft (scipy kernel)": lambda: xp.fft.fft(t),
        "fft 64x4096 complex128, axis -1: scipy.fft": lambda: sf.fft(lines),
        "fft 64x4096 complex128, axis -1: scipy.fft workers=2": lambda: sf.fft(lines, workers=2),
        "fft2 1024x1024 complex128: numpy.fft": lambda: np.fft.fft2(b),
        "fft2 1024x1024 complex128: scipy.fft": lambda: sf.fft2(b),
        "fft2 1024x1024 complex128: scipy.fft workers=2": lambda: sf.fft2(b, workers=2),
    }
    for name, fn in cases.items():
        print(f"{name:55s} {bench(fn)}")


if __name__ == "__main__":
    main()
