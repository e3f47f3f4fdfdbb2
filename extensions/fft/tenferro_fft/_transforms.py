"""The transforms of the Array API fft extension, NumPy's semantics for n/s, axes and norm.

Each function checks its arguments, zero-pads or truncates the input with core pad/slice,
and binds one of the three ops; hfft and ihfft are compositions (conj and the swapped
norm), so everything traces and differentiates through registered rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.errors import ShapeError
from tenferro_runtime import lax
from tenferro_runtime.array_api._helpers import convert, fresh
from tenferro_runtime.tensor import Tensor

from . import _args as A
from ._ops import SWAP_NORM, fft_p, irfft_p, rfft_p

Norm = str


def _last_kept(axes: Sequence[int], values: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """axes (and values) with all but the last axis sorted: one payload per transform."""
    order = sorted(range(len(axes) - 1), key=lambda i: axes[i]) + [len(axes) - 1]
    return tuple(axes[i] for i in order), tuple(values[i] for i in order)


def _c2c(name: str, x: Tensor, ax: tuple[int, ...], sizes: list, norm: Norm, inverse: bool) -> Tensor:
    if not ax:  # fftn over no axes: the input, as complex
        return fresh(convert(x, D.complex_of(x.dtype)))
    ax, lengths = zip(*sorted(zip(ax, A.resolve(name, x, ax, sizes))))
    return fft_p.bind(A.fit(x, ax, lengths), axes=ax, inverse=inverse, norm=norm)


def _r2c(name: str, x: Tensor, ax: tuple[int, ...], sizes: list, norm: Norm) -> Tensor:
    if not ax:
        raise ShapeError(
            f"{name}: needs at least one axis to transform, got axes=() (x has rank {x.ndim})"
            + ("; the input must have at least one dimension" if x.ndim == 0 else "")
        )
    ax, lengths = _last_kept(ax, A.resolve(name, x, ax, sizes))
    return rfft_p.bind(A.fit(x, ax, lengths), axes=ax, norm=norm)


def _c2r(name: str, x: Tensor, ax: tuple[int, ...], sizes: list, norm: Norm) -> Tensor:
    if not ax:
        raise ShapeError(
            f"{name}: needs at least one axis to transform, got axes=() (x has rank {x.ndim})"
            + ("; the input must have at least one dimension" if x.ndim == 0 else "")
        )
    ax, s = _last_kept(ax, A.resolve(name, x, ax, sizes, halved_last=True))
    x = A.fit(convert(x, D.complex_of(x.dtype)), ax, s[:-1] + (s[-1] // 2 + 1,))
    return irfft_p.bind(x, axes=ax, s=s, norm=norm)


def _prep(name: str, x: Any, kinds: str, norm: Any) -> tuple[Tensor, Norm]:
    return A.tensor(name, x, kinds), A.norm_mode(name, norm)


def _one(name: str, x: Tensor, n: Any, axis: Any) -> tuple[tuple[int, ...], list]:
    return (A.axis(name, x, axis),), [A.length(name, n)]


def fft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: Norm = "backward") -> Tensor:
    """1-d discrete Fourier transform along `axis` (input zero-padded or truncated to n)."""
    x, norm = _prep("fft", x, "fc", norm)
    return _c2c("fft", x, *_one("fft", x, n, axis), norm, inverse=False)


def ifft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: Norm = "backward") -> Tensor:
    """1-d inverse discrete Fourier transform along `axis`."""
    x, norm = _prep("ifft", x, "fc", norm)
    return _c2c("ifft", x, *_one("ifft", x, n, axis), norm, inverse=True)


def fftn(x: Tensor, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
         norm: Norm = "backward") -> Tensor:
    """n-d discrete Fourier transform over `axes` (all axes by default) with lengths `s`."""
    x, norm = _prep("fftn", x, "fc", norm)
    return _c2c("fftn", x, *A.axes_and_sizes("fftn", x, s, axes), norm, inverse=False)


def ifftn(x: Tensor, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: Norm = "backward") -> Tensor:
    """n-d inverse discrete Fourier transform over `axes`."""
    x, norm = _prep("ifftn", x, "fc", norm)
    return _c2c("ifftn", x, *A.axes_and_sizes("ifftn", x, s, axes), norm, inverse=True)


def rfft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: Norm = "backward") -> Tensor:
    """1-d DFT of real input: the n//2 + 1 non-negative frequencies."""
    x, norm = _prep("rfft", x, "f", norm)
    return _r2c("rfft", x, *_one("rfft", x, n, axis), norm)


def irfft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: Norm = "backward") -> Tensor:
    """Inverse of rfft: n real outputs (default 2*(m-1)) from n//2 + 1 frequencies."""
    x, norm = _prep("irfft", x, "fc", norm)
    return _c2r("irfft", x, *_one("irfft", x, n, axis), norm)


def rfftn(x: Tensor, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: Norm = "backward") -> Tensor:
    """n-d DFT of real input; the last transformed axis keeps s[-1]//2 + 1 frequencies."""
    x, norm = _prep("rfftn", x, "f", norm)
    return _r2c("rfftn", x, *A.axes_and_sizes("rfftn", x, s, axes), norm)


def irfftn(x: Tensor, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
           norm: Norm = "backward") -> Tensor:
    """Inverse of rfftn; output lengths s (default: the input's, 2*(m-1) on the last axis)."""
    x, norm = _prep("irfftn", x, "fc", norm)
    return _c2r("irfftn", x, *A.axes_and_sizes("irfftn", x, s, axes), norm)


def hfft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: Norm = "backward") -> Tensor:
    """DFT of a Hermitian-symmetric signal given by its first half: irfft(conj(x)), norm swapped."""
    x, norm = _prep("hfft", x, "fc", norm)
    xc = lax.conj(x) if x.dtype.kind == "c" else x
    return _c2r("hfft", xc, *_one("hfft", x, n, axis), SWAP_NORM[norm])


def ihfft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: Norm = "backward") -> Tensor:
    """Inverse of hfft for real input: conj(rfft(x)), norm swapped."""
    x, norm = _prep("ihfft", x, "f", norm)
    return lax.conj(_r2c("ihfft", x, *_one("ihfft", x, n, axis), SWAP_NORM[norm]))


__all__ = ["fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft"]
