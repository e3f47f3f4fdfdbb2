"""Argument checks of the public functions and the n/s padding/truncation around the ops.

Each check raises a typed error naming what was expected, what was given and the fix:
ArgumentError for arguments of the wrong kind (non-int or bool n, axis or s entry, unknown
norm), ShapeError for sizes that do not fit (n < 1, len(s) != len(axes), a 0-length axis
without n, a length or result too large for any device to address: raised before anything
is allocated), AxisError for out-of-range or repeated axes and for a 0-d input (no axis to
transform), DTypeError for dtypes (see `_ops.check_dtype`).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, AxisError, ShapeError
from tenferro_runtime import lax
from tenferro_runtime.array_api._args import MAX_BYTES  # the bytes one buffer can span on any backend
from tenferro_runtime.array_api._helpers import check_tensor, normalize_axis
from tenferro_runtime.tensor import Tensor

from ._ops import NORMS, check_dtype


def tensor(name: str, x: Any, kinds: str) -> Tensor:
    """x, checked to be a Tensor of a supported dtype of `kinds` ("f", "c" or "fc")."""
    check_tensor(name, x)
    check_dtype(name, x.dtype, kinds)
    return x


def norm_mode(name: str, norm: Any) -> str:
    if not isinstance(norm, str) or norm not in NORMS:
        raise ArgumentError(f"{name}: norm must be one of {', '.join(map(repr, NORMS))}, got {norm!r}")
    return norm


def _int(name: str, what: str, v: Any) -> int:
    if isinstance(v, bool):
        raise ArgumentError(f"{name}: {what} must be an int, got bool {v!r}")
    try:
        return operator.index(v)
    except TypeError:
        raise ArgumentError(f"{name}: {what} must be an int, got {type(v).__name__} {v!r}") from None


def length(name: str, n: Any, optional: bool = True) -> int | None:
    """n of the 1-d transforms (None or an int >= 1) or of fftfreq (an int >= 1)."""
    if n is None and optional:
        return None
    n = _int(name, "n", n)
    if n < 1:
        raise ShapeError(
            f"{name}: n must be a positive number of points, got {n}; pass n >= 1"
            + (" or None" if optional else "")
        )
    if n > MAX_BYTES:
        raise ShapeError(f"{name}: n={n} is larger than any device can address (2**63 - 1); pass a smaller n")
    return n


def check_bytes(name: str, what: str, shape: Sequence[int], dtype: D.DType) -> None:
    """ShapeError, before anything is allocated, when a `dtype` buffer of `shape` would span
    more than `MAX_BYTES` (an allocation no backend can even attempt)."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > MAX_BYTES:
        raise ShapeError(
            f"{name}: {what} would have shape {tuple(shape)} ({dtype}, {nbytes} bytes), more than any "
            f"device can address (2**63 - 1 bytes); pass a smaller n or s"
        )


def axis(name: str, x: Tensor, ax: Any) -> int:
    """The non-negative axis of the 1-d transforms; a 0-d input has none to transform."""
    ax = _int(name, "axis", ax)
    if x.ndim == 0:
        raise _no_axis(name, f"axis {ax} is", "(a 0-d tensor has no axis to transform)")
    return normalize_axis(name, ax, x.ndim)


def _no_axis(name: str, which: str, why: str) -> AxisError:
    return AxisError(
        f"{name}: {which} out of range for a tensor of rank 0: the input must have at least one "
        f"dimension {why}; reshape it to 1-d first, e.g. reshape(x, (1,))"
    )


def _sequence(name: str, what: str, v: Any) -> Sequence[Any]:
    if isinstance(v, (str, bytes)) or not isinstance(v, Sequence):
        raise ArgumentError(f"{name}: {what} must be a sequence of ints (a tuple or list), got {v!r}")
    return v


def axes_and_sizes(name: str, x: Tensor, s: Any, axes: Any) -> tuple[tuple[int, ...], list[int | None]]:
    """Normalized axes (non-negative, distinct) and one size per axis (None: the default).

    axes=None means all axes, or the last len(s) axes when s is given (NumPy's rule);
    an s entry of -1 means the default length for that axis.
    """
    sizes: list[int | None] | None = None
    if s is not None:
        sizes = []
        for v in _sequence(name, "s", s):
            v = _int(name, "each entry of s", v)
            if v < 1 and v != -1:
                raise ShapeError(f"{name}: s entries must be >= 1 (or -1 for the input's length), got s={s}")
            if v > MAX_BYTES:
                raise ShapeError(
                    f"{name}: s entry {v} is larger than any device can address (2**63 - 1); "
                    f"pass smaller lengths"
                )
            sizes.append(None if v == -1 else v)
    if axes is None:
        if sizes is not None and len(sizes) > x.ndim:
            raise ShapeError(
                f"{name}: s={s} has {len(sizes)} entries but x has only {x.ndim} axes; "
                f"pass at most one size per axis"
            )
        out = tuple(range(x.ndim - (x.ndim if sizes is None else len(sizes)), x.ndim))
    else:
        ints = [_int(name, "each axis", a) for a in _sequence(name, "axes", axes)]
        if ints and x.ndim == 0:
            raise _no_axis(name, f"axes {tuple(ints)} are", "to transform along")
        out = tuple(normalize_axis(name, a, x.ndim) for a in ints)
        if len(set(out)) != len(out):
            raise AxisError(f"{name}: axes {tuple(axes)} name an axis twice; pass each axis once")
    if sizes is None:
        sizes = [None] * len(out)
    elif len(sizes) != len(out):
        raise ShapeError(
            f"{name}: s and axes must have the same length, got s={tuple(s)} ({len(sizes)} entries) "
            f"and axes={tuple(axes)} ({len(out)}); pass one size per transformed axis"
        )
    return out, sizes


def resolve(name: str, x: Tensor, axes: Sequence[int], sizes: Sequence[int | None],
            halved_last: bool = False) -> list[int]:
    """The transform lengths: a given size, else the input's length (2*(m-1) on the last
    axis of a complex-to-real transform, `halved_last`)."""
    out = []
    for i, (a, n) in enumerate(zip(axes, sizes)):
        if n is None:
            m = x.shape[a]
            n = 2 * (m - 1) if halved_last and i == len(axes) - 1 else m
            if n < 1:
                # fftn, rfftn, ... take s; fft, rfft, ... take n
                fix = "s with lengths >= 1" if name.endswith("n") else "n >= 1"
                why = f"x has length {m} along axis {a}"
                if halved_last and i == len(axes) - 1:
                    why += f", so the default output length 2*(m-1) = {n} is invalid"
                raise ShapeError(f"{name}: {why}; pass {fix} (the input is zero-padded to it)")
        out.append(n)
    shape = list(x.shape)
    for a, n in zip(axes, out):
        shape[a] = n
    check_bytes(name, "the transform", shape, D.complex_of(x.dtype) if x.dtype.kind in "fc" else x.dtype)
    return out


def fit(x: Tensor, axes: Sequence[int], lengths: Sequence[int]) -> Tensor:
    """Zero-pad or truncate x along `axes` to `lengths` (core slice and pad, so AD flows)."""
    shape = x.shape
    limits, config = list(shape), [(0, 0, 0)] * len(shape)
    for a, n in zip(axes, lengths):
        if n < shape[a]:
            limits[a] = n
        elif n > shape[a]:
            config[a] = (0, n - shape[a], 0)
    if tuple(limits) != shape:
        x = lax.slice(x, start_indices=(0,) * len(shape), limit_indices=tuple(limits), strides=None)
    if any(c != (0, 0, 0) for c in config):
        zero = lax.full(shape=(), fill_value=0, dtype=x.dtype, device=x.device)
        x = lax.pad(x, zero, padding_config=tuple(config))
    return x
