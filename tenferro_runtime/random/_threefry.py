"""Threefry-2x32 (20 rounds; Salmon et al. 2011, the generator of JAX) and the key functions.

Written with the namespace's integer ops only, so they trace and compile like user code and
give the same bits on every backend. 32-bit words travel in int32 lanes as bit patterns:
addition wraps modulo 2^32 (as every primitive's integer arithmetic does), and a logical right
shift is the arithmetic one with the copied sign bits masked off. A key is an int64 tensor of
shape (2,) holding its two words as values in [0, 2^32).
"""

from __future__ import annotations

import operator
from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, DeviceError, DTypeError, ShapeError

from .. import array_api as xp
from .. import lax
from ..array_api._helpers import resolve_device
from ..tensor import Tensor

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA
_MASK = 0xFFFFFFFF
KEY_SHAPE = (2,)


def _srl(x: Tensor, s: int) -> Tensor:
    """Logical right shift of int32 bit patterns."""
    return (x >> s) & ((1 << (32 - s)) - 1)


def threefry2x32(k0: Tensor, k1: Tensor, x0: Tensor, x1: Tensor) -> tuple[Tensor, Tensor]:
    """The Threefry-2x32-20 block of counter words (x0, x1) under key words (k0, k1): int32 bit
    patterns; the key words broadcast against the counters."""
    ks = (k0, k1, k0 ^ k1 ^ _PARITY)
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x0 = x0 + x1
            x1 = ((x1 << r) | _srl(x1, 32 - r)) ^ x0
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + (ks[(i + 2) % 3] + (i + 1))
    return x0, x1


def check_key(name: str, key: Any) -> Tensor:
    """`key` when it is a key (an int64 tensor of shape (2,)); typed errors otherwise."""
    made = "make one with tenferro_runtime.random.key(seed), or split/fold_in an existing key"
    if not isinstance(key, Tensor):
        raise ArgumentError(f"{name}: key must be a random key (an int64 Tensor of shape (2,)), got "
                            f"{type(key).__name__}; {made}")
    if key.dtype is not D.int64:
        raise DTypeError(f"{name}: key must be an int64 Tensor of shape (2,), got dtype {key.dtype}; "
                         f"{made}")
    if key.shape != KEY_SHAPE:
        hint = "; index a batch of keys (keys[i]) to get one" if key.shape[-1:] == KEY_SHAPE else ""
        raise ShapeError(f"{name}: key must have shape (2,), got {key.shape}{hint}; {made}")
    return key


def key_words(key: Tensor) -> tuple[Tensor, Tensor]:
    """The key's two words as 0-d int32 bit patterns."""
    w = lax.convert(key, new_dtype=D.int32)
    return w[0], w[1]


def _as_key(y0: Tensor, y1: Tensor) -> Tensor:
    """Keys (..., 2) from word patterns y0, y1 of one shape."""
    return xp.astype(xp.stack([y0, y1], axis=-1), D.int64) & _MASK


def counters(n: int, device: Any) -> tuple[Tensor, Tensor]:
    """The counter words (high, low) of 0, 1, ..., n-1 as int32 patterns of shape (n,)."""
    idx = lax.iota(dtype=D.int64, shape=(n,), dimension=0, device=device)
    return lax.convert(idx >> 32, new_dtype=D.int32), lax.convert(idx, new_dtype=D.int32)


def blocks(key: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """The two output words of the Threefry blocks with counters 0..n-1 (int32, shape (n,))."""
    k0, k1 = key_words(key)
    return threefry2x32(k0, k1, *counters(n, key.device))


def words(key: Tensor, n: int) -> Tensor:
    """n random 32-bit words (int32 bit patterns, shape (n,)): both words of ceil(n/2) blocks."""
    m = (n + 1) // 2
    y0, y1 = blocks(key, m)
    w = xp.concat([y0, y1])
    return w if 2 * m == n else w[:n]


def _int(name: str, what: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ArgumentError(f"{name}: {what} must be an int, got bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ArgumentError(f"{name}: {what} must be an int, got {type(value).__name__} {value!r}; "
                            f"pass int(value) if you mean an integer") from None


def _int_tensor(name: str, what: str, value: Tensor) -> Tensor:
    if value.dtype.kind not in "iu" or value.shape != ():
        raise DTypeError(f"{name}: {what} given as a Tensor must be a 0-d integer tensor, got "
                         f"{value.dtype}{list(value.shape)}; pass a Python int or a 0-d int tensor")
    return xp.astype(value, D.int64)


def key(seed: int | Tensor, *, device: Any = None) -> Tensor:
    """A random key from an integer seed: int64 words [seed >> 32, seed & 0xFFFFFFFF] of the seed's
    64-bit two's complement. `seed` is a Python int in [-2^63, 2^64) or a 0-d integer tensor
    (traced seeds work); the key lives on `device` (default: the default device, or the seed's)."""
    if isinstance(seed, Tensor):
        s = _int_tensor("key", "seed", seed)
        if device is not None and resolve_device(device) != s.device:
            raise DeviceError(f"key: the seed tensor is on {s.device}, not {device}; move it with "
                              f"seed.to_device({str(device)!r}) or pass a Python int")
        return _as_key(lax.convert(s >> 32, new_dtype=D.int32), lax.convert(s, new_dtype=D.int32))
    s = _int("key", "seed", seed)
    if not -(1 << 63) <= s < (1 << 64):
        raise ArgumentError(f"key: seed must be in [-2**63, 2**64), got {s}; reduce it modulo 2**64")
    s %= 1 << 64
    return xp.asarray([s >> 32, s & _MASK], dtype=D.int64, device=device)


def split(key: Tensor, num: int = 2) -> Tensor:
    """`num` new keys, shape (num, 2): ``k1, k2 = split(key)``. ``split(key, n)[i]`` equals
    ``fold_in(key, i)``. Do not draw from a key you have split: use the new keys."""
    check_key("split", key)
    num = _int("split", "num", num)
    if num < 0:
        raise ShapeError(f"split: num must be a non-negative int, got {num}")
    return _as_key(*blocks(key, num))


def fold_in(key: Tensor, data: int | Tensor) -> Tensor:
    """A new key from `key` and an integer (a step, a layer index, a process rank): the block of
    counter `data` (its 64 bits, two's complement). `data` may be a 0-d integer tensor (traced)."""
    check_key("fold_in", key)
    k0, k1 = key_words(key)
    if isinstance(data, Tensor):
        d = _int_tensor("fold_in", "data", data)
        if d.device != key.device:
            raise DeviceError(f"fold_in: data is on {d.device} but the key on {key.device}; move one "
                              f"with .to_device")
        hi, lo = lax.convert(d >> 32, new_dtype=D.int32), lax.convert(d, new_dtype=D.int32)
    else:
        d = _int("fold_in", "data", data)
        if not -(1 << 63) <= d < (1 << 64):
            raise ArgumentError(f"fold_in: data must be in [-2**63, 2**64), got {d}")
        d %= 1 << 64
        hi, lo = (xp.asarray(_signed32(w), dtype=D.int32, device=key.device) for w in (d >> 32, d & _MASK))
    return _as_key(*threefry2x32(k0, k1, hi, lo))


def _signed32(w: int) -> int:
    return w - (1 << 32) if w >= 1 << 31 else w
