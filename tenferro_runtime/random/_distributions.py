"""The samplers: random words from `_threefry`, turned into values with exact integer and IEEE
operations (and `_math`'s log/exp/ndtri built from them), so each is the same on every backend."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, DeviceError, DTypeError, ShapeError

from .. import array_api as xp
from .. import lax
from ..array_api._helpers import normalize_axis
from ..tensor import Tensor
from . import _math
from ._threefry import _MASK, _srl, blocks, check_key, words

# float dtype: (mantissa bits, int dtype of its bits, the bits of 1.0)
_UNIT = {D.float16: (10, D.int16, 0x3C00), D.bfloat16: (7, D.int16, 0x3F80),
         D.float32: (23, D.int32, 0x3F800000), D.float64: (52, D.int64, 0x3FF0000000000000)}
Shape = tuple[int, ...]


# ---------------------------------------------------------------- argument checks


def _shape(name: str, shape: Any) -> Shape:
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or any(
            isinstance(s, bool) or not isinstance(s, (int, np.integer)) for s in shape):
        raise ArgumentError(f"{name}: shape must be a tuple of non-negative ints, got {shape!r}; "
                            f"write e.g. shape=(3, 4) (or () for one number)")
    if any(s < 0 for s in shape):
        raise ShapeError(f"{name}: shape entries must be non-negative, got {tuple(shape)}")
    return tuple(int(s) for s in shape)


def _broadcast(*shapes: Shape) -> Shape | None:
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        return None


def _fits(name: str, shape: Shape, *params: Tensor) -> None:
    """Parameters must broadcast to the sample shape without enlarging it."""
    if _broadcast(shape, *(p.shape for p in params)) != shape:
        raise ShapeError(f"{name}: parameters of shapes {[p.shape for p in params]} do not broadcast "
                         f"to shape {shape}; pass a shape they broadcast to, or shape=None")


def _dtype(name: str, dtype: Any, device: Any, kinds: str) -> D.DType:
    """`dtype` checked against `kinds` and the device; None: the runtime's default float."""
    dt = device.runtime.default_float_dtype if dtype is None else D.as_dtype(dtype)
    if dt.kind not in kinds:
        want = "a real floating dtype (float16, bfloat16, float32, float64)" if kinds == "f" else \
            "an integer dtype (int8..int64, uint8..uint64)"
        hint = "; use randint for integers" if kinds == "f" else "; use uniform for floats"
        raise DTypeError(f"{name}: dtype must be {want}, got {dt}{hint}")
    if not device.supports(dt):
        raise DTypeError(f"{name}: device {device} does not support {dt}; it supports "
                         f"{sorted(d.name for d in device.dtypes)}")
    return dt


def _working(dt: D.DType) -> D.DType:
    """The dtype a float sampler computes in: float64 for float64, else float32."""
    return D.float64 if dt is D.float64 else D.float32


def _wide(device: Any) -> D.DType:
    return D.float64 if device.supports(D.float64) else D.float32


def _param(name: str, what: str, value: Any, dtype: D.DType, device: Any, kinds: str = "iuf") -> Tensor:
    """A real parameter (Python number or tensor) as a tensor of `dtype` on the key's device."""
    if isinstance(value, Tensor):
        if value.dtype.kind not in kinds:
            raise DTypeError(f"{name}: {what} must be a real {'floating ' if kinds == 'f' else ''}"
                             f"tensor, got {value.dtype}")
        if value.device != device:
            raise DeviceError(f"{name}: {what} is on {value.device} but the key on {device}; move one "
                              f"with .to_device")
        return xp.astype(value, dtype)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentError(f"{name}: {what} must be a real number or a Tensor, got "
                            f"{type(value).__name__} {value!r}")
    return xp.asarray(float(value), dtype=dtype, device=device)


def _host(x: Any) -> np.ndarray | None:
    """x's values when it is a Python number or a concrete tensor, else None (traced)."""
    if type(x) is Tensor:
        return np.asarray(x).astype(np.float64)
    return None if isinstance(x, Tensor) else np.asarray(float(x))


def _ordered(name: str, lo: Any, hi: Any, names: tuple[str, str]) -> None:
    """Concrete bounds must satisfy lo < hi."""
    a, b = _host(lo), _host(hi)
    if a is not None and b is not None and not np.all(np.less(a, b)):
        raise ArgumentError(f"{name}: {names[0]} must be less than {names[1]}, got {names[0]}={lo!r}, "
                            f"{names[1]}={hi!r}; swap them or widen the interval")


# ---------------------------------------------------------------- bits to numbers


def _unit(key: Tensor, n: int, dt: D.DType, *, open: bool = False) -> Tensor:
    """n floats of `dt` from its mantissa width of random bits: k / 2^p in [0, 1), or the
    midpoints (k + 1/2) / 2^p in (0, 1) when `open`. Exact."""
    p, idt, one = _UNIT[dt]
    if dt is D.float64:
        hi, lo = blocks(key, n)
        b = (xp.astype(hi, D.int64) << 32) | (xp.astype(lo, D.int64) & _MASK)
        m = (b >> 12) & ((1 << 52) - 1)
    else:
        m = xp.astype(_srl(words(key, n), 32 - p), idt)
    f = lax.bitcast_convert(m | one, new_dtype=dt)  # 1 + k / 2^p
    return f - (1.0 - 2.0 ** -(p + 1) if open else 1.0)


def _uint32(key: Tensor, n: int) -> Tensor:
    """n random words as int64 values in [0, 2^32)."""
    return xp.astype(words(key, n), D.int64) & _MASK


def _gumbel(key: Tensor, n: int, dt: D.DType) -> Tensor:
    return -_math.log(-_math.log(_unit(key, n, dt, open=True)))


def _log_p(p: Tensor) -> Tensor:
    """log p, -inf where p == 0."""
    pos = p > 0.0
    return xp.where(pos, _math.log(xp.maximum(p, _math.TINY[p.dtype])), -math.inf)


# ---------------------------------------------------------------- distributions


def uniform(key: Tensor, shape: Any = (), dtype: Any = None, minval: Any = 0.0,
            maxval: Any = 1.0) -> Tensor:
    """Floats uniform on [minval, maxval): random mantissa bits (23 for float32, 52 for float64,
    10 / 7 for float16 / bfloat16) scaled as ``minval + u * (maxval - minval)``, kept below
    maxval. Bounds may be tensors (broadcast to `shape`; differentiable)."""
    check_key("uniform", key)
    shape = _shape("uniform", shape)
    dt = _dtype("uniform", dtype, key.device, "f")
    u = xp.reshape(_unit(key, math.prod(shape), dt), shape)
    if not isinstance(minval, Tensor) and not isinstance(maxval, Tensor) and (minval, maxval) == (0, 1):
        return u
    for v, what in ((minval, "minval"), (maxval, "maxval")):
        if not isinstance(v, Tensor) and isinstance(v, numbers.Real) and not math.isfinite(v):
            raise ArgumentError(f"uniform: {what} must be finite, got {v!r}")
    lo = _param("uniform", "minval", minval, dt, key.device)
    hi = _param("uniform", "maxval", maxval, dt, key.device)
    _fits("uniform", shape, lo, hi)
    _ordered("uniform", minval, maxval, ("minval", "maxval"))
    return xp.minimum(u * (hi - lo) + lo, xp.nextafter(hi, lo))


def normal(key: Tensor, shape: Any = (), dtype: Any = None) -> Tensor:
    """Standard normal floats: the inverse normal CDF (AS241) of uniform midpoints, computed in
    float32 (float64 for float64) with exact arithmetic; |x| < 5.3 (float32) / 8.3 (float64)."""
    check_key("normal", key)
    shape = _shape("normal", shape)
    dt = _dtype("normal", dtype, key.device, "f")
    z = _math.ndtri(_unit(key, math.prod(shape), _working(dt), open=True))
    return xp.reshape(xp.astype(z, dt), shape)


def truncated_normal(key: Tensor, lower: Any, upper: Any, shape: Any = None,
                     dtype: Any = None) -> Tensor:
    """Standard normal floats conditioned on [lower, upper] (inverse CDF; bounds may be tensors,
    +-inf, and are differentiable). `shape` defaults to the bounds' broadcast shape."""
    check_key("truncated_normal", key)
    dev = key.device
    dt = _dtype("truncated_normal", dtype, dev, "f")
    wt, ft = _wide(dev), _working(dt)
    lo = _param("truncated_normal", "lower", lower, wt, dev)
    hi = _param("truncated_normal", "upper", upper, wt, dev)
    shape = _broadcast(lo.shape, hi.shape) if shape is None else _shape("truncated_normal", shape)
    if shape is None:
        raise ShapeError(f"truncated_normal: lower {lo.shape} and upper {hi.shape} do not broadcast together")
    _fits("truncated_normal", shape, lo, hi)
    _ordered("truncated_normal", lower, upper, ("lower", "upper"))
    flip = (lo + hi) > 0.0  # sample the mirrored interval, where the CDF keeps its precision
    a, b = xp.where(flip, -hi, lo), xp.where(flip, -lo, hi)
    pa, pb = xp.astype(_math.ndtr(a), ft), xp.astype(_math.ndtr(b), ft)
    u = xp.reshape(_unit(key, math.prod(shape), ft, open=True), shape)
    x = xp.clip(_math.ndtri(pa + u * (pb - pa)), xp.astype(a, ft), xp.astype(b, ft))
    return xp.astype(xp.where(flip, -x, x), dt)


def bernoulli(key: Tensor, p: Any = 0.5, shape: Any = None) -> Tensor:
    """Booleans, True with probability p (p in [0, 1]; a float tensor broadcasts to `shape`, which
    defaults to p's shape): 32 random bits compared with p exactly."""
    check_key("bernoulli", key)
    dev = key.device
    wt = _wide(dev)
    pt = _param("bernoulli", "p", p, wt, dev, kinds="f" if isinstance(p, Tensor) else "iuf")
    vals = _host(p)
    if vals is not None and not np.all((vals >= 0.0) & (vals <= 1.0)):
        raise ArgumentError(f"bernoulli: p must be a probability in [0, 1], got {p!r}; clip it or "
                            f"pass 1 - p for the complement")
    shape = pt.shape if shape is None else _shape("bernoulli", shape)
    _fits("bernoulli", shape, pt)
    n = math.prod(shape)
    u = xp.astype(_uint32(key, n), wt) * 2.0 ** -32 if wt is D.float64 else _unit(key, n, wt)
    return xp.reshape(u, shape) < pt


def randint(key: Tensor, shape: Any, minval: int, maxval: int, dtype: Any = D.int64) -> Tensor:
    """Integers uniform on [minval, maxval) (Python ints): 64 random bits modulo the span, so the
    relative bias is below span / 2^64 (none for spans that are powers of two)."""
    check_key("randint", key)
    shape = _shape("randint", shape)
    dt = _dtype("randint", dtype, key.device, "iu")
    lo, hi = (_int_bound(v, what) for v, what in ((minval, "minval"), (maxval, "maxval")))
    if lo >= hi:
        raise ArgumentError(f"randint: minval must be less than maxval (the range is [minval, maxval)), "
                            f"got minval={lo}, maxval={hi}")
    info = np.iinfo(dt.numpy)
    if lo < info.min or hi - 1 > info.max:
        raise ArgumentError(f"randint: [{lo}, {hi}) does not fit {dt} ({info.min}..{info.max}); narrow "
                            f"the range or pick a wider dtype")
    y0, y1 = (xp.astype(w, D.int64) & _MASK for w in blocks(key, math.prod(shape)))
    off = _mod(y0, y1, hi - lo)
    return xp.reshape(xp.astype(off + _signed64(lo), dt), shape)


def _int_bound(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer, Tensor)):
        raise ArgumentError(f"randint: {what} must be a Python int, got {type(v).__name__} {v!r}")
    if isinstance(v, Tensor) and (v.dtype.kind not in "iu" or v.shape):
        raise DTypeError(f"randint: {what} must be a Python int (or a 0-d concrete int tensor), got "
                         f"{v.dtype}{list(v.shape)}")
    return int(v)


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _rem(a: Tensor, n: int) -> Tensor:
    return lax.rem(a, xp.full_like(a, n))


def _mod(hi: Tensor, lo: Tensor, n: int) -> Tensor:
    """(hi * 2^32 + lo) mod n for words hi, lo in [0, 2^32) and 1 <= n <= 2^64, in int64 without
    overflow (results >= 2^63 as two's complement patterns)."""
    r = (hi << 32) | lo
    if n & (n - 1) == 0:
        return r & _signed64(n - 1)
    if n <= 1 << 32:  # (a c + lo) mod n with a = hi mod n, c = 2^32 mod n; a c in 16-bit halves
        a, c = _rem(hi, n), (1 << 32) % n
        t = _rem((a >> 16) * c, n) * 65536 + (a & 0xFFFF) * c
        return _rem(t + lo, n)
    if n < 1 << 63:  # r = t + top * 2^63 with t the low 63 bits: add the two residues mod n
        a = _rem(r & ((1 << 63) - 1), n)
        b = xp.astype(r < 0, D.int64) * ((1 << 63) % n)
        gap = n - b
        return xp.where(a >= gap, a - gap, a + b)
    # n >= 2^63: r mod n is r or r - n, compared as unsigned (flip the top bits)
    return xp.where((r ^ -(1 << 63)) < n - (1 << 63), r, r - _signed64(n))


def _sort_keys(key: Tensor, n: int) -> Tensor:
    """n random int64 sort keys (ties have probability ~n^2 / 2^65)."""
    hi, lo = blocks(key, n)
    return (xp.astype(hi, D.int64) << 32) | (xp.astype(lo, D.int64) & _MASK)


def _axis_len(name: str, key: Tensor, x: Any, axis: Any, what: str) -> tuple[int, int | None]:
    """(n, axis) of a tensor argument, or (n, None) of an int one."""
    if isinstance(x, Tensor):
        if x.ndim == 0:
            raise ShapeError(f"{name}: {what} must be an int or a tensor with at least one axis, got a "
                             f"0-d tensor")
        if x.device != key.device:
            raise DeviceError(f"{name}: {what} is on {x.device} but the key on {key.device}; move one "
                              f"with .to_device")
        ax = normalize_axis(name, axis, x.ndim)
        return x.shape[ax], ax
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise ArgumentError(f"{name}: {what} must be an int or a Tensor, got {type(x).__name__}")
    if x < 0:
        raise ShapeError(f"{name}: {what} must be a non-negative int, got {x}")
    return int(x), None


def permutation(key: Tensor, x: Any, axis: int = 0) -> Tensor:
    """A random permutation of range(x) (int x, int64) or of tensor x along `axis`: an argsort
    of random 64-bit keys, so arrays of one length are permuted alike by one key."""
    check_key("permutation", key)
    n, ax = _axis_len("permutation", key, x, axis, "x")
    perm = xp.argsort(_sort_keys(key, n), stable=True)
    return perm if ax is None else xp.take(x, perm, axis=ax)


def categorical(key: Tensor, logits: Tensor, axis: int = -1, shape: Any = None) -> Tensor:
    """Class indices (int64) drawn with probabilities softmax(logits) along `axis` (Gumbel-max).
    `shape` defaults to logits' shape without `axis`; it may add leading sample axes."""
    check_key("categorical", key)
    if not isinstance(logits, Tensor) or logits.dtype.kind != "f":
        got = logits.dtype if isinstance(logits, Tensor) else type(logits).__name__
        raise DTypeError(f"categorical: logits must be a real floating tensor, got {got}")
    if logits.ndim == 0 or logits.device != key.device:
        raise (ShapeError if logits.ndim == 0 else DeviceError)(
            f"categorical: logits must have a class axis and be on the key's device {key.device}; "
            f"got shape {logits.shape} on {logits.device}")
    ax = normalize_axis("categorical", axis, logits.ndim)
    k = logits.shape[ax]
    if k == 0:
        raise ShapeError(f"categorical: axis {axis} of logits has no classes (shape {logits.shape})")
    batch = logits.shape[:ax] + logits.shape[ax + 1:]
    shape = batch if shape is None else _shape("categorical", shape)
    if len(shape) < len(batch) or _broadcast(shape, batch) != shape:
        raise ShapeError(f"categorical: shape {shape} must end with a shape that logits' batch shape "
                         f"{batch} broadcasts to")
    lead = len(shape) - len(batch)
    noise = shape[:lead + ax] + (k,) + shape[lead + ax:]
    ft = _working(logits.dtype)
    g = xp.reshape(_gumbel(key, math.prod(noise), ft), noise)
    return xp.argmax(g + xp.reshape(xp.astype(logits, ft), (1,) * lead + logits.shape), axis=lead + ax)


def choice(key: Tensor, a: Any, shape: Any = (), replace: bool = True, p: Tensor | None = None,
           axis: int = 0) -> Tensor:
    """Samples of range(a) (int a) or of tensor a along `axis`, with or without replacement,
    uniformly or with (unnormalized) probabilities `p`: inverse CDF with replacement,
    Gumbel-top-k without."""
    check_key("choice", key)
    n, ax = _axis_len("choice", key, a, axis, "a")
    shape = _shape("choice", shape)
    k = math.prod(shape)
    if not isinstance(replace, bool):
        raise ArgumentError(f"choice: replace must be True or False, got {replace!r}")
    if k > 0 and n == 0:
        raise ShapeError(f"choice: cannot draw {k} samples from an empty population")
    if not replace and k > n:
        raise ArgumentError(f"choice: cannot take {k} samples without replacement from {n}; pass "
                            f"replace=True or a shape with at most {n} elements")
    if p is not None:
        p = _probabilities(p, n, key.device)
        ft = _working(p.dtype)
        p = xp.astype(p, ft)
    if k == 0:
        idx = xp.zeros(shape, dtype=D.int64, device=key.device)
    elif replace and p is None:
        idx = randint(key, (k,), 0, n)
    elif replace:
        cdf = _prefix_sum(p)
        r = cdf[-1] * (1.0 - _unit(key, k, ft))  # in (0, total]
        idx = xp.searchsorted(cdf, r)
    elif p is None:
        idx = permutation(key, n)[:k]
    else:
        idx = xp.argsort(_gumbel(key, n, ft) + _log_p(p), descending=True, stable=True)[:k]
    if ax is None:
        return xp.reshape(idx, shape)
    out = xp.take(a, xp.reshape(idx, (k,)), axis=ax)
    return xp.reshape(out, a.shape[:ax] + shape + a.shape[ax + 1:])


def _probabilities(p: Any, n: int, device: Any) -> Tensor:
    if not isinstance(p, Tensor) or p.dtype.kind != "f":
        got = p.dtype if isinstance(p, Tensor) else type(p).__name__
        raise DTypeError(f"choice: p must be a real floating tensor, got {got}")
    if p.shape != (n,):
        raise ShapeError(f"choice: p must have shape ({n},), one probability per element, got {p.shape}")
    if p.device != device:
        raise DeviceError(f"choice: p is on {p.device} but the key on {device}; move one with .to_device")
    vals = _host(p)
    if vals is not None and not (np.all(vals >= 0.0) and np.all(np.isfinite(vals)) and vals.sum() > 0):
        raise ArgumentError("choice: p must hold finite, non-negative weights with a positive sum, got "
                            f"{vals.tolist() if vals.size <= 8 else 'other values'}")
    return p


def _prefix_sum(x: Tensor) -> Tensor:
    """Inclusive prefix sums of a 1-d tensor in log2(n) passes of additions (one fixed order on
    every backend, unlike cumsum kernels)."""
    n, s = x.shape[0], 1
    while s < n:
        x = x + xp.concat([xp.zeros((s,), dtype=x.dtype, device=x.device), x[:n - s]])
        s *= 2
    return x
