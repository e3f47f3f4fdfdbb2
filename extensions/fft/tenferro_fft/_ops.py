"""The three ops of tenferro-fft and their shape rules.

- `fft_p` (``tenferro_fft.fft.v1``): complex-to-complex DFT over `axes`, forward or
  inverse. A real operand is read as complex (the kernel then takes pocketfft's faster
  real-input path); the result has the complex dtype of the operand's precision.
- `rfft_p` (``tenferro_fft.rfft.v1``): real-to-complex DFT over `axes`; the last entry
  of `axes` keeps n//2 + 1 frequencies (NumPy's rfftn).
- `irfft_p` (``tenferro_fft.irfft.v1``): complex-to-real inverse of rfft with output
  lengths `s`; the operand must already hold s[i] entries on axes[i] (s[-1]//2 + 1 on
  the last one).

The ops take exact lengths: the n/s zero-padding and truncation of the public functions
happen around them with core `pad`/`slice`. All three are linear in their operand.
"""

from __future__ import annotations

from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.errors import AxisError, DTypeError, ShapeError
from tenferro_core.extension import define_op
from tenferro_core.params import p_bool, p_choice, p_ints
from tenferro_core.primitive import REQUIRED

FAMILY = "tenferro_fft"
NORMS = ("backward", "ortho", "forward")
SUPPORTED = (D.float32, D.float64, D.complex64, D.complex128)

# the norm of the opposite direction: the scale 1/n moves to the other transform
SWAP_NORM = {"backward": "forward", "ortho": "ortho", "forward": "backward"}


def check_dtype(name: str, dtype: D.DType, kinds: str) -> None:
    """DTypeError unless dtype is float32/float64/complex64/complex128 of one of `kinds`."""
    if dtype in SUPPORTED and dtype.kind in kinds:
        return
    if dtype in SUPPORTED and kinds == "f":
        raise DTypeError(
            f"{name}: expected a real floating-point tensor (float32 or float64), got {dtype}; "
            f"take the real part (real(x)) or use the complex transform (fft/fftn)"
        )
    if dtype in SUPPORTED:
        raise DTypeError(
            f"{name}: expected a complex tensor (complex64 or complex128), got {dtype}; "
            f"convert it first, e.g. astype(x, {D.complex_of(dtype)})"
        )
    fix = "float32" if dtype.kind == "f" else "float64 (or float32)"
    wanted = {"f": "float32 or float64", "c": "complex64 or complex128"}.get(
        kinds, "float32, float64, complex64 or complex128")
    raise DTypeError(
        f"{name}: expected a {wanted} tensor, got {dtype}; convert it first, "
        f"e.g. astype(x, {fix})"
    )


def _check_axes(name: str, shape: tuple[int, ...], axes: tuple[int, ...]) -> None:
    if not axes:
        raise ShapeError(f"{name}: axes must name at least one axis, got ()")
    for ax in axes:
        if not 0 <= ax < len(shape):
            raise AxisError(
                f"{name}: axis {ax} is out of range for an operand of rank {len(shape)}; "
                f"expected 0 <= axis < {len(shape)} (the op takes non-negative axes)"
            )
    if len(set(axes)) != len(axes):
        raise AxisError(f"{name}: axes {axes} has repeated entries; expected distinct axes")


def _check_nonempty(name: str, shape: tuple[int, ...], axes: tuple[int, ...]) -> None:
    for ax in axes:
        if shape[ax] < 1:
            raise ShapeError(
                f"{name}: axis {ax} has length 0; a transform needs at least one point "
                f"(zero-pad it with n/s)"
            )


def _fft_rule(x: Any, *, axes: tuple[int, ...], inverse: bool, norm: str):
    check_dtype(FAMILY + ".fft", x.dtype, "fc")
    _check_axes(FAMILY + ".fft", x.shape, axes)
    _check_nonempty(FAMILY + ".fft", x.shape, axes)
    return x.shape, D.complex_of(x.dtype)


def _rfft_rule(x: Any, *, axes: tuple[int, ...], norm: str):
    check_dtype(FAMILY + ".rfft", x.dtype, "f")
    _check_axes(FAMILY + ".rfft", x.shape, axes)
    _check_nonempty(FAMILY + ".rfft", x.shape, axes)
    shape = list(x.shape)
    shape[axes[-1]] = shape[axes[-1]] // 2 + 1
    return tuple(shape), D.complex_of(x.dtype)


def _irfft_rule(x: Any, *, axes: tuple[int, ...], s: tuple[int, ...], norm: str):
    name = FAMILY + ".irfft"
    check_dtype(name, x.dtype, "c")
    _check_axes(name, x.shape, axes)
    if len(s) != len(axes) or any(n < 1 for n in s):
        raise ShapeError(f"{name}: s must hold one output length >= 1 per axis of {axes}, got {s}")
    want = s[:-1] + (s[-1] // 2 + 1,)
    got = tuple(x.shape[a] for a in axes)
    if got != want:
        raise ShapeError(
            f"{name}: for output lengths s={s} the operand needs lengths {want} on axes {axes} "
            f"(s[-1]//2 + 1 on the last), got {got}; pad or slice it first"
        )
    shape = list(x.shape)
    for a, n in zip(axes, s):
        shape[a] = n
    return tuple(shape), D.real_of(x.dtype)


_NORM = (p_choice(*NORMS), "backward")

fft_p = define_op(
    f"{FAMILY}.fft.v1", _fft_rule,
    payload={"axes": (p_ints, REQUIRED), "inverse": (p_bool, False), "norm": _NORM},
    linear=(0,),
    doc="Complex-to-complex DFT over `axes` (forward or inverse) with NumPy's norm modes.",
)
rfft_p = define_op(
    f"{FAMILY}.rfft.v1", _rfft_rule,
    payload={"axes": (p_ints, REQUIRED), "norm": _NORM},
    linear=(0,),
    doc="Real-to-complex DFT over `axes`; the last axis keeps n//2 + 1 frequencies.",
)
irfft_p = define_op(
    f"{FAMILY}.irfft.v1", _irfft_rule,
    payload={"axes": (p_ints, REQUIRED), "s": (p_ints, REQUIRED), "norm": _NORM},
    linear=(0,),
    doc="Complex-to-real inverse of rfft over `axes`, with output lengths `s`.",
)

OPS = (fft_p, rfft_p, irfft_p)
