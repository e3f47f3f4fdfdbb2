"""A short tour of tenferro: devices, the Array API namespace, primitives, errors.

Run with `make demo` (which first lists the discovered plugins).
"""

from __future__ import annotations

import numpy as np

import tenferro_runtime as tr
from tenferro_core.errors import ShapeError, TenferroError
from tenferro_runtime import array_api as xp
from tenferro_runtime import lax


def section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 60 - len(title)))


def main() -> None:
    rt = tr.default_runtime()
    section("runtime")
    print("backends:", ", ".join(rt.backends), "| default device:", rt.default_device())

    section("Array API namespace")
    x = xp.asarray([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=xp.float32)
    print("x =", x)
    print("x.shape, x.dtype, x.device:", x.shape, x.dtype, x.device)
    b = xp.asarray([10, 20, 30], dtype=xp.int8)
    y = x + b  # broadcasting (3,) against (2, 3); int8 + float32 promotes to float32
    print("x + int8[10, 20, 30] =", y, y.dtype)
    print("mean over axis 0:", xp.mean(x, axis=0))
    print("x @ x.T =", x @ x.T)
    print("softmax rows:", xp.exp(x) / xp.sum(xp.exp(x), axis=1, keepdims=True))
    print("boolean mask x[x > 2.5]:", x[x > 2.5])
    x[0, :] = 0.0
    print("after x[0, :] = 0:", x)
    print("sort descending:", xp.sort(xp.asarray([3, 1, 2]), descending=True))
    print("unique:", xp.unique_values(xp.asarray([3, 1, 3, 2, 1])))

    section("core primitives (no broadcasting, no promotion)")
    w = xp.reshape(xp.arange(6, dtype=xp.float32), (2, 3))
    print("w =", w)
    z = lax.dot_general(w, w, contracting_dims=((1,), (1,)))
    print("dot_general(w, w, contracting axis 1 with axis 1) =", z)
    print("reduce_max(w, axes=(0,)) =", lax.reduce_max(w, axes=(0,)))

    section("interop")
    host = np.asarray(x)
    print("np.asarray(x) shares a NumPy view:", type(host).__name__, host.dtype)
    print("from_dlpack(numpy array):", xp.from_dlpack(np.arange(4)))

    section("errors name what was expected, what was given, what to do")
    for label, thunk in [
        ("reshape", lambda: xp.reshape(x, (4, 2))),
        ("primitive add without broadcasting", lambda: lax.add(x, xp.asarray([1.0, 2.0, 3.0]))),
        ("uint8 + 300", lambda: xp.asarray([1], dtype=xp.uint8) + 300),
        ("unknown device", lambda: xp.asarray([1.0], device="cuda:0")),
    ]:
        try:
            thunk()
        except TenferroError as err:
            kind = "ShapeError" if isinstance(err, ShapeError) else type(err).__name__
            print(f"- {label}: {kind}: {err}")

    section("caches")
    for name, stats in rt.caches.stats().items():
        print(f"{name}: {stats}")


if __name__ == "__main__":
    main()
