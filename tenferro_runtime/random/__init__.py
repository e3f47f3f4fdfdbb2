"""Functional, JAX-style random numbers: explicit keys and a counter-based generator.

A **key** is an ordinary int64 Tensor of shape (2,) holding two 32-bit words as values in
[0, 2^32) (int64, whose arithmetic every backend has natively, where torch's uint32 is
emulated; inside the generator they are int32 bit patterns). Being a plain tensor, a key
passes through `compile`, `trace`, `tenferro_ad.grad` and pytrees like any other argument,
and lives on a device like any other tensor: every result is on the key's device.

Make one with ``key(seed)``; derive new ones with ``split(key, num)`` (``k1, k2 = split(k)``)
or ``fold_in(key, data)``. A sampler is a pure function of its key and arguments: reusing a
key gives the same numbers again, so split a key for each independent draw (and do not draw
from a key you have split). Bits come from Threefry-2x32 (20 rounds), written with the
namespace's integer ops, and become numbers through exact integer and IEEE arithmetic, so one
key gives the same bits on numpy:cpu and torch:cpu, eagerly, traced and compiled.
"""

from __future__ import annotations

from ._distributions import (
    bernoulli,
    categorical,
    choice,
    normal,
    permutation,
    randint,
    truncated_normal,
    uniform,
)
from ._threefry import fold_in, key, split, threefry2x32

__all__ = [
    "bernoulli", "categorical", "choice", "fold_in", "key", "normal", "permutation", "randint",
    "split", "threefry2x32", "truncated_normal", "uniform",
]
