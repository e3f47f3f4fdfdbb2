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
from tenferro_core.errors import ArgumentError, DTypeError
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
    path, info = opt_einsum.contract_path(
        spec, *full_shapes, shapes=True,
        optimize=list(strategy) if isinstance(strategy, tuple) else strategy,
    )
    path = [tuple(s) for s in path]
    native = native_spec(terms, output, sizes, shapes)
    return (terms, output, sizes, path, int(info.opt_cost), native)


def _operands(name: str, args: tuple) -> tuple[str, list[Tensor]]:
    if not args:
        raise ArgumentError(f"{name}: expected subscripts and operands, got nothing")
    if isinstance(args[0], str):
        subscripts, operands = args[0], list(args[1:])
    else:
        subscripts, operands = from_interleaved(args)
    if not operands:
        raise ArgumentError(f"{name}: expected at least one operand")
    tensors = [x if isinstance(x, Tensor) else asarray(x) for x in operands]
    for t in tensors:
        if t.dtype is D.bool_:
            raise DTypeError(f"{name}: operands must be numeric, got a bool tensor; convert it with astype")
    return subscripts, promote(name, *tensors)


def einsum(*args: Any, optimize: Any = "auto") -> Tensor:
    """Einstein summation, NumPy's semantics (implicit/explicit output, ellipsis broadcasting,
    repeated indices, interleaved operand/sublist form)."""
    subscripts, tensors = _operands("einsum", args)
    terms, output, sizes, path, _, native = _plan(subscripts, tensors, optimize)
    if native is not None and contract_p.name in tensors[0].device.runtime.ops:
        return contract_p.bind(*tensors, spec=native, path=tuple(path))
    return execute(tensors, terms, output, sizes, path)


def einsum_path(*args: Any, optimize: Any = "auto") -> tuple[list[tuple[int, ...]], int]:
    """The contraction path einsum would use and its FLOP count (opt_einsum's estimate)."""
    subscripts, tensors = _operands("einsum_path", args)
    _, _, _, path, flops, _ = _plan(subscripts, tensors, optimize)
    return path, flops


__all__ = ["einsum", "einsum_path"]
