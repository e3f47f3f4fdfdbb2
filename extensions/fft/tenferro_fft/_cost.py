"""Cost rules of the FFT ops: the customary 5 N log2 N flops per complex transform.

A transform over `axes` of total length N (the product of their lengths) on an array of
`size` elements does size / N transforms: 5 size log2 N flops. A real-input (rfft, and fft
of a real operand) or real-output (irfft) transform counts half, as pocketfft and cuFFT do
about half the work. The norm's scaling (one multiply per element, if any) is not counted.
Bytes are the operand read and the result written.
"""

from __future__ import annotations

import math
from typing import Any

from tenferro_core.catalog.cost import Cost, io_bytes

from ._ops import fft_p, irfft_p, rfft_p


def _flops(shape: tuple[int, ...], axes: tuple[int, ...], factor: float) -> int:
    n = math.prod(shape[a] for a in axes)
    return round(factor * math.prod(shape) * math.log2(n)) if n > 1 else 0


def fft_cost(in_avals: tuple, out_avals: tuple, *, axes: tuple[int, ...], **params: Any) -> Cost:
    x = in_avals[0]
    factor = 5 if x.dtype.kind == "c" else 2.5
    return Cost(_flops(x.shape, axes, factor), io_bytes(in_avals, out_avals))


def rfft_cost(in_avals: tuple, out_avals: tuple, *, axes: tuple[int, ...], **params: Any) -> Cost:
    return Cost(_flops(in_avals[0].shape, axes, 2.5), io_bytes(in_avals, out_avals))


def irfft_cost(in_avals: tuple, out_avals: tuple, *, axes: tuple[int, ...], **params: Any) -> Cost:
    return Cost(_flops(out_avals[0].shape, axes, 2.5), io_bytes(in_avals, out_avals))


COST_RULES = {fft_p: fft_cost, rfft_p: rfft_cost, irfft_p: irfft_cost}

__all__ = ["COST_RULES", "fft_cost", "irfft_cost", "rfft_cost"]
