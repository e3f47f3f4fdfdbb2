"""A short tour of tenferro: devices, the Array API namespace, primitives, AD, the op
families (einsum, linalg, fft), errors.

Run with `.venv/bin/python examples/tour.py` (after `make demo` or `make test` set up `.venv`).
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

    section("automatic differentiation")
    import tenferro_ad as ad

    def loss(p):
        return xp.sum(xp.tanh(p["w"] @ p["x"]) ** 2)

    params = {"w": xp.asarray([[0.5, -1.0], [2.0, 0.1]]), "x": xp.asarray([1.0, 2.0])}
    value, grads = ad.value_and_grad(loss)(params)
    print("loss =", value, "| d loss / d w =", grads["w"])
    print("hessian of sum(sin(v)):", ad.hessian(lambda v: xp.sum(xp.sin(v)))(xp.asarray([0.0, 1.0])))
    with ad.GradientTape() as tape:
        v = xp.asarray([1.0, 2.0, 3.0])
        tape.watch(v)
        out = xp.sum(v * v)
    print("GradientTape d sum(v*v) / dv =", tape.gradient(out, v))

    section("compile: trace once per signature, optimize, replay a plan")

    @tr.compile
    def sgd_step(p):
        value, g = ad.value_and_grad(loss)(p)
        return {"w": p["w"] - 0.1 * g["w"], "x": p["x"]}, value

    for _ in range(3):
        params, value = sgd_step(params)
    print("loss after 3 compiled SGD steps =", value, "|", sgd_step.cache_info())
    lowered = sgd_step.lower(params)
    print(f"optimized graph: {len(lowered.nodes)} nodes ({lowered.meta['memory']})")

    section("op families: einsum, linalg, fft (each its own plugin package)")
    from tenferro_einsum import einsum, einsum_path

    m = xp.asarray(np.random.default_rng(0).standard_normal((3, 3)))
    print("einsum('ij,jk,kl->il') path and FLOPs:", einsum_path("ij,jk,kl->il", m, m, m))
    print("trace via einsum('ii'):", einsum("ii", m))
    spd = m @ xp.linalg.matrix_transpose(m) + 3 * xp.eye(3, dtype=xp.float64)
    print("eigvalsh(spd):", xp.linalg.eigvalsh(spd))
    print("d logdet / d A equals inv(A)^T:", bool(xp.all(xp.abs(
        ad.grad(lambda a: xp.linalg.slogdet(a).logabsdet)(spd) - xp.linalg.inv(spd).mT) < 1e-12)))
    sig = xp.asarray(np.cos(2 * np.pi * 3 * np.arange(16) / 16))
    print("|rfft| of a 3-cycle cosine:", np.round(xp.abs(xp.fft.rfft(sig)).numpy(), 6))

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
