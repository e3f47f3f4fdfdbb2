"""Transpose rules of the FFT ops (JAX's convention, see `tenferro_ad.ad_util`).

Every op is declared linear in its operand, so tenferro_ad derives its JVP (the op applied
to the tangent, `tenferro_ad.jvp.linear_jvp`). Transposes are plain transposes (not
adjoints), written with the ops and core primitives so they differentiate again:

- fft: the DFT matrix is symmetric, so the transpose is the same transform with the
  same norm; for a real operand it keeps the real part (the operand was read as complex).
- rfft = the first n//2 + 1 rows of the full DFT: its transpose zero-pads the cotangent
  back to n on the last axis, applies the forward complex DFT (same norm, same total
  length, so the same scale) and keeps the real part.
- irfft(x) = Re(G x) with G[j, k] = w[k] e^{+2 pi i jk/n} c, where w = [1, 2, ..., 2, (1
  if n even)] counts each stored frequency with its Hermitian partner and c is the norm's
  scale. Its transpose is G^T ct = conj(w * rfft(ct)) * c, and rfft with the swapped norm
  carries exactly the scale c. (The other axes are an inverse complex DFT, whose transpose
  folds into the same conj(rfftn) by symmetry.)
"""

from __future__ import annotations

from typing import Any

from tenferro_ad.ad_util import Zero, is_zero
from tenferro_runtime import lax

from ._ops import SWAP_NORM, fft_p, irfft_p, rfft_p


def _full(shape: tuple[int, ...], value: Any, aval: Any) -> Any:
    return lax.full(shape=shape, fill_value=value, dtype=aval.dtype, device=aval.device)


def fft_transpose(ct, x, *, axes, inverse, norm):
    if is_zero(ct):
        return (Zero(x.aval),)
    y = fft_p.bind(ct, axes=axes, inverse=inverse, norm=norm)
    return (lax.real(y) if x.aval.dtype.kind == "f" else y,)


def rfft_transpose(ct, x, *, axes, norm):
    if is_zero(ct):
        return (Zero(x.aval),)
    ax, av = axes[-1], ct.aval
    extra = x.aval.shape[ax] - av.shape[ax]
    if extra:
        config = tuple((0, extra if i == ax else 0, 0) for i in range(len(av.shape)))
        ct = lax.pad(ct, _full((), 0, av), padding_config=config)
    return (lax.real(fft_p.bind(ct, axes=axes, inverse=False, norm=norm)),)


def _hermitian_weights(aval: Any, ax: int, n: int) -> Any:
    """[1, 2, ..., 2, (1 if n is even)] along axis `ax`, broadcast to `aval`'s shape."""
    m = aval.shape[ax]
    inner, last = (m - 2, 1) if n % 2 == 0 else (m - 1, 0)
    parts = [_full((1,), 1, aval), _full((inner,), 2, aval), _full((last,), 1, aval)]
    w = lax.concatenate(*(p for p in parts if p.aval.shape != (0,)), dimension=0)
    return lax.broadcast_in_dim(w, shape=aval.shape, broadcast_dimensions=(ax,))


def irfft_transpose(ct, x, *, axes, s, norm):
    if is_zero(ct):
        return (Zero(x.aval),)
    y = rfft_p.bind(ct, axes=axes, norm=SWAP_NORM[norm])
    return (lax.conj(lax.mul(y, _hermitian_weights(y.aval, axes[-1], s[-1]))),)


RULES = (
    ("transpose", fft_p, fft_transpose),
    ("transpose", rfft_p, rfft_transpose),
    ("transpose", irfft_p, irfft_transpose),
)
