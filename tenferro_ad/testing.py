"""Gradient checks for tests of rules and extensions (JAX's `check_grads`, in tenferro).

`check_grads(f, args, order)` compares forward mode with central finite differences
and reverse mode with forward mode through the pairing Re<t, J^T ct> = Re<J t, ct>
(JAX's complex convention), then does the same for the derivative itself up to
`order`. Arguments and outputs may be pytrees of tensors; use float64/complex128.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from tenferro_runtime.array_api import asarray
from tenferro_runtime.array_api import sum as _sum
from tenferro_runtime.pytree import tree_flatten, tree_unflatten

from .api import jvp, vjp


def tape_second_derivative(f: Callable, x: Any) -> Any:
    """d/dx of sum(d f(x) / dx) by two nested GradientTapes: for an elementwise `f`, its
    second derivative at each element (how the tape's nesting is checked)."""
    from .tape import GradientTape

    with GradientTape() as outer:
        outer.watch(x)
        with GradientTape() as inner:
            inner.watch(x)
            y = f(x)
        s = _sum(inner.gradient(y, x))
    return outer.gradient(s, x)


def _np(x: Any) -> np.ndarray:
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x)


def _like(x: Any, values: np.ndarray) -> Any:
    """`values` as a tensor on x's device (the default device for non-tensors)."""
    return asarray(values, device=getattr(x, "device", None))


def _rand_like(rng: np.random.Generator, x: Any) -> Any:
    a = _np(x)
    r = rng.standard_normal(a.shape)
    if a.dtype.kind == "c":
        r = r + 1j * rng.standard_normal(a.shape)
    return _like(x, np.asarray(r, dtype=a.dtype))


def _inner(xs: Sequence[Any], ys: Sequence[Any]) -> float:
    return float(sum(np.real(np.vdot(_np(x).ravel(), _np(y).ravel())) for x, y in zip(xs, ys)))


def _axpy(a: float, t: list, x: list) -> list:
    return [_like(xi, _np(xi) + a * _np(ti).astype(_np(xi).dtype)) for xi, ti in zip(x, t)]


def _leaves(tree: Any) -> list:
    return [leaf for leaf in tree_flatten(tree)[0] if leaf is not None]


def numerical_jvp(f: Callable, args: tuple, tangents: tuple, eps: float) -> list:
    """Central difference (f(x + eps t) - f(x - eps t)) / 2 eps, as flat numpy leaves."""
    x, tree = tree_flatten(args)
    t = tree_flatten(tangents)[0]
    up = _leaves(f(*tree_unflatten(tree, _axpy(eps, t, x))))
    down = _leaves(f(*tree_unflatten(tree, _axpy(-eps, t, x))))
    return [(_np(u) - _np(d)) / (2 * eps) for u, d in zip(up, down)]


def _close(got: Sequence[Any], want: Sequence[Any], atol: float, rtol: float, what: str) -> None:
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(_np(g), _np(w), atol=atol, rtol=rtol, err_msg=f"{what}, output {i}")


def check_jvp(f: Callable, args: tuple, *, eps: float, atol: float, rtol: float, seed: int = 0,
              what: str = "JVP") -> None:
    rng = np.random.default_rng(seed)
    leaves, tree = tree_flatten(args)
    tangents = tree_unflatten(tree, [_rand_like(rng, leaf) for leaf in leaves])
    out, tout = jvp(f, args, tangents)
    _close(_leaves(out), _leaves(f(*args)), atol, rtol, f"{what}: primal output")
    _close(_leaves(tout), numerical_jvp(f, args, tangents, eps), atol, rtol, f"{what} vs finite differences")


def check_vjp(f: Callable, args: tuple, *, eps: float, atol: float, rtol: float, seed: int = 0,
              what: str = "VJP") -> None:
    rng = np.random.default_rng(seed + 1)
    out, f_vjp = vjp(f, *args)
    out_leaves, out_tree = tree_flatten(out)
    flat_args, in_tree = tree_flatten(args)
    t = [_rand_like(rng, a) for a in flat_args]
    ct = [_rand_like(rng, o) for o in out_leaves]
    ct_in = f_vjp(tree_unflatten(out_tree, [_like(c, np.conj(_np(c))) for c in ct]))
    ct_in = [np.conj(_np(c)) for c in tree_flatten(ct_in)[0]]
    t_out = numerical_jvp(f, args, tree_unflatten(in_tree, t), eps)
    lhs, rhs = _inner(t, ct_in), _inner(t_out, ct)
    np.testing.assert_allclose(lhs, rhs, atol=atol * max(1.0, abs(rhs)), rtol=rtol,
                               err_msg=f"{what}: <t, J^T ct> != <J t, ct>")


def check_grads(f: Callable, args: Sequence[Any], order: int = 1, modes: Sequence[str] = ("fwd", "rev"),
                *, eps: float = 1e-6, atol: float = 1e-6, rtol: float = 1e-5, what: str = "") -> None:
    """Check f's derivatives at `args` up to `order` in forward and/or reverse mode."""
    args = tuple(args)
    kw = dict(eps=eps, atol=atol, rtol=rtol)
    if "fwd" in modes:
        msg = f"JVP of {what}" if what else "JVP"
        check_jvp(f, args, what=msg, **kw)
        if order > 1:
            check_grads(partial(jvp, f), (args, args), order - 1, modes, what=msg, **kw)
    if "rev" in modes:
        msg = f"VJP of {what}" if what else "VJP"
        check_vjp(f, args, what=msg, **kw)
        if order > 1:
            def f_vjp(*a):
                out, back = vjp(f, *a)
                return back(out)

            check_grads(f_vjp, args, order - 1, modes, what=msg, **kw)


__all__ = ["check_grads", "check_jvp", "check_vjp", "numerical_jvp"]


def check_vmap(f: Callable, examples: Sequence[Sequence[Any]], in_axes: Sequence[int | None],
               *, atol: float = 1e-10, rtol: float = 1e-10) -> None:
    """`vmap(f, in_axes)` on the examples stacked (each batched argument's examples along its
    axis in `in_axes`; an argument with None is the same in every example and taken from
    example 0) equals stacking `f` applied to each example (every output, a pytree of
    tensors, batched on axis 0), without a PerformanceWarning: the ops of `f` have batch
    rules."""
    import warnings

    from tenferro_runtime import array_api as xp

    from .batching import PerformanceWarning, vmap

    if not examples:
        raise ValueError("check_vmap needs one example at least (the shapes come from it)")
    args = []
    for i, ax in enumerate(in_axes):
        if ax is None:
            args.append(examples[0][i])
        else:
            args.append(xp.stack([ex[i] for ex in examples], axis=ax))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerformanceWarning)
        got = _leaves(vmap(f, in_axes=tuple(in_axes))(*args))
    per = [_leaves(f(*ex)) for ex in examples]
    for k, g in enumerate(got):
        want = np.stack([_np(p[k]) for p in per])
        np.testing.assert_allclose(_np(g), want, atol=atol, rtol=rtol,
                                   err_msg=f"vmap output {k}, in_axes {tuple(in_axes)}")
