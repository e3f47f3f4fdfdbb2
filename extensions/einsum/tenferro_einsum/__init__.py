"""tenferro-einsum: `einsum` and `einsum_path`.

Contraction paths come from opt_einsum (strategies "auto", "greedy", "optimal", "dp",
..., or an explicit path). A multilinear equation (the common case: contractions,
chains, networks) is one extension op run by the backend's native einsum, with
einsum JVP/transpose rules (`native`); every other equation, and backends without
that kernel, lower each step to dot_general / transpose / reshape / reduce_sum /
gather primitives, so einsum always traces and differentiates. Plans are cached per
(subscripts, shapes, dtypes, strategy) in a bounded cache owned by the Runtime.
"""

from __future__ import annotations

from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, DTypeError, MissingKernelError, TenferroError
from tenferro_runtime.array_api import asarray
from tenferro_runtime.array_api._helpers import promote
from tenferro_runtime.tensor import Tensor

from .lower import execute
from .native import contract_p, native_spec
from .parse import from_interleaved, parse

__version__ = "0.1.0"
STRATEGIES = ("auto", "greedy", "optimal", "dp", "branch-all", "branch-2", "random-greedy", "auto-hq")


def _strategy(optimize: Any, n: int) -> Any:
    if optimize is True:
        return "auto"
    if optimize is False:
        return tuple((0, 1) for _ in range(n - 1)) or ((0,),)
    if isinstance(optimize, str):
        if optimize not in STRATEGIES:
            raise ArgumentError(
                f"einsum: optimize must be one of {STRATEGIES}, a bool or a path, got {optimize!r}"
            )
        return optimize
    try:
        path = tuple(tuple(int(i) for i in step) for step in optimize)
    except TypeError:
        raise ArgumentError(
            f"einsum: optimize must be a strategy name, a bool or a path, got {optimize!r}"
        ) from None
    left = n
    for step in path:
        if not step or len(set(step)) != len(step) or not all(0 <= i < left for i in step):
            raise ArgumentError(f"einsum: invalid contraction step {step} in path {path} for {n} operands")
        left -= len(step) - 1
    if left != 1:
        raise ArgumentError(
            f"einsum: path {path} leaves {left} operands of {n}; a path must contract them all "
            f"into one (append the remaining steps, or pass optimize='auto')"
        )
    return path


def _plan(subscripts: str, tensors: list[Tensor], optimize: Any) -> tuple:
    shapes = [t.shape for t in tensors]
    strategy = _strategy(optimize, len(tensors))
    cache = tensors[0].device.runtime.caches.get("einsum_plans", 1024)
    key = (subscripts, tuple(shapes), tuple(t.dtype for t in tensors), strategy)
    return cache.get_or_build(key, lambda: _build_plan(subscripts, shapes, strategy))


def _build_plan(subscripts: str, shapes: list, strategy: Any) -> tuple:
    terms, output, sizes = parse(subscripts, shapes)
    import opt_einsum

    spec = ",".join(terms) + "->" + output
    full_shapes = [tuple(sizes[c] for c in t) for t in terms]
    if strategy == "dp" and 0 in sizes.values():
        strategy = "greedy"  # opt_einsum's dp finds no path when an index has size 0
    if strategy == "auto":
        path, cost = _cheapest_path(spec, full_shapes)
    else:
        path, info = opt_einsum.contract_path(
            spec, *full_shapes, shapes=True,
            optimize=list(strategy) if isinstance(strategy, tuple) else strategy,
        )
        cost = int(info.opt_cost)
    path = [tuple(s) for s in path]
    native = native_spec(terms, output, sizes, shapes)
    return (terms, output, sizes, path, cost, native)


def _cheapest_path(spec: str, shapes: list) -> tuple[list, int]:
    """The default path: of opt_einsum's "auto" path and its "greedy" path (and "optimal" for
    up to 4 operands, which "auto" already is there), the one opt_einsum prices cheapest, so
    the default never costs more FLOPs than greedy. Ties keep "auto"'s path."""
    import opt_einsum

    candidates = ["auto", "greedy"] if len(shapes) > 2 else ["auto"]
    if len(shapes) <= 4 and len(shapes) > 2:
        candidates.append("optimal")
    best: tuple[list, int] | None = None
    seen = []
    for name in candidates:
        path, info = opt_einsum.contract_path(spec, *shapes, shapes=True, optimize=name)
        if path in seen:
            continue
        seen.append(path)
        cost = int(info.opt_cost)
        if best is None or cost < best[1]:
            best = (path, cost)
    assert best is not None
    return best


def _operand(name: str, i: int, x: Any) -> Tensor:
    """A non-tensor operand as a tensor: NumPy arrays, Python numbers and nested sequences of
    numbers convert; anything else is a typed error naming the operand."""
    import numbers

    import numpy as np

    if not isinstance(x, (np.ndarray, np.generic, numbers.Number, list, tuple)):
        raise ArgumentError(
            f"{name}: operand {i} must be a tenferro Tensor (or a NumPy array, a Python number or a "
            f"nested list of numbers), got {type(x).__name__} {_short(x)}; convert it with asarray"
        )
    try:
        return asarray(x)
    except TenferroError as err:
        raise type(err)(f"{name}: operand {i} could not be converted to a tensor: {err}") from None


def _operands(name: str, args: tuple) -> tuple[str, list[Tensor]]:
    if not args:
        raise ArgumentError(f"{name}: expected subscripts and operands, got nothing")
    if isinstance(args[0], str):
        subscripts, operands = args[0], list(args[1:])
    elif len(args) >= 2 and isinstance(args[1], (list, tuple)):  # operand, sublist, ...
        subscripts, operands = from_interleaved(args)
    else:
        raise ArgumentError(
            f"{name}: the subscripts argument (the first) must be a string such as 'ij,jk->ik', "
            f"got {type(args[0]).__name__} {_short(args[0])}; pass the subscripts first, or use the "
            f"interleaved form {name}(a, [0, 1], b, [1, 2], [0, 2])"
        )
    if not operands:
        raise ArgumentError(f"{name}: expected at least one operand")
    tensors = [x if isinstance(x, Tensor) else _operand(name, i, x) for i, x in enumerate(operands)]
    for t in tensors:
        if t.dtype is D.bool_:
            raise DTypeError(f"{name}: operands must be numeric, got a bool tensor; convert it with astype")
    return subscripts, promote(name, *tensors)


def _short(x: Any) -> str:
    r = repr(x)
    return r if len(r) <= 40 else r[:37] + "..."


def einsum(*args: Any, optimize: Any = "auto") -> Tensor:
    """Einstein summation, NumPy's semantics (implicit/explicit output, ellipsis broadcasting,
    repeated indices, interleaved operand/sublist form)."""
    subscripts, tensors = _operands("einsum", args)
    terms, output, sizes, path, _, native = _plan(subscripts, tensors, optimize)
    runtime = tensors[0].device.runtime
    if contract_p.name not in runtime.ops:
        off = runtime.disabled_plugins("tenferro_einsum")
        if off:  # switched off on purpose: say so rather than lower it silently
            raise MissingKernelError(f"einsum: op {contract_p.name!r} is not registered: {'; '.join(off)}")
    elif native is not None:
        return contract_p.bind(*tensors, spec=native, path=tuple(path))
    return execute(tensors, terms, output, sizes, path)


def einsum_path(*args: Any, optimize: Any = "auto") -> tuple[list[tuple[int, ...]], int]:
    """The contraction path einsum would use and its FLOP count (opt_einsum's estimate)."""
    subscripts, tensors = _operands("einsum_path", args)
    _, _, _, path, flops, _ = _plan(subscripts, tensors, optimize)
    return path, flops


__all__ = ["einsum", "einsum_path"]
