"""torch-backend kernels: ``torch.fft`` (torch imported on the first call).

The ops' payloads map one to one onto torch.fft's n-dimensional transforms (``dim`` for
axes, the same three norm names, ``s`` for irfftn's output lengths); real operands of the
fft op go to ``fftn`` as they are, which returns the complex dtype of their precision.
Operands with a size-0 batch axis are answered here (torch's MKL transforms refuse
them). Inputs are never written to; outputs are new tensors.
"""

from __future__ import annotations

from typing import Any

from ._ops import fft_p, irfft_p, rfft_p


def _empty(x: Any, shape: list[int], complex_out: bool) -> Any:
    """The (size-0) result of shape `shape`: complex of x's precision, or real for irfft."""
    import torch

    dtype = torch.promote_types(x.dtype, torch.complex64) if complex_out else x.real.dtype
    return torch.zeros(shape, dtype=dtype, device=x.device)


def fft_kernel(x: Any, *, axes: tuple[int, ...], inverse: bool = False, norm: str = "backward") -> Any:
    import torch

    if x.numel() == 0:
        return _empty(x, list(x.shape), True)
    return (torch.fft.ifftn if inverse else torch.fft.fftn)(x, dim=axes, norm=norm)


def rfft_kernel(x: Any, *, axes: tuple[int, ...], norm: str = "backward") -> Any:
    import torch

    if x.numel() == 0:
        shape = list(x.shape)
        shape[axes[-1]] = shape[axes[-1]] // 2 + 1
        return _empty(x, shape, True)
    return torch.fft.rfftn(x, dim=axes, norm=norm)


def irfft_kernel(x: Any, *, axes: tuple[int, ...], s: tuple[int, ...], norm: str = "backward") -> Any:
    import torch

    if x.numel() == 0:
        shape = list(x.shape)
        for a, n in zip(axes, s):
            shape[a] = n
        return _empty(x, shape, False)
    return torch.fft.irfftn(x, s=s, dim=axes, norm=norm)


KERNELS = {fft_p: fft_kernel, rfft_p: rfft_kernel, irfft_p: irfft_kernel}
