"""Reductions, scans and sorting along axes."""

from __future__ import annotations

from ..dtypes import DEFAULT_INDEX
from ..errors import DTypeError, ShapeError
from ..params import p_bool, p_dtype, p_ints, p_nonneg_int
from ..primitive import REQUIRED, Primitive
from ._rules import check_axes, check_kinds


def _reduce(name: str, kinds: str, *, empty_ok: bool, **flags) -> Primitive:
    def rule(x, *, axes):
        check_kinds(name, x, kinds)
        check_axes(name, axes, x.ndim)
        if not empty_ok and any(x.shape[a] == 0 for a in axes):
            raise ShapeError(
                f"{name}: cannot reduce a zero-length axis (an empty reduction has no identity "
                f"for {name}); got shape {x.shape} reduced over axes {axes}"
            )
        return tuple(n for i, n in enumerate(x.shape) if i not in axes), x.dtype

    return Primitive(name, rule, params={"axes": (p_ints, REQUIRED)}, **flags)


reduce_sum = _reduce("reduce_sum", "iufc", empty_ok=True, linear=(0,))
reduce_prod = _reduce("reduce_prod", "iufc", empty_ok=True)
reduce_max = _reduce("reduce_max", "biuf", empty_ok=False)
reduce_min = _reduce("reduce_min", "biuf", empty_ok=False)
reduce_and = _reduce("reduce_and", "b", empty_ok=True, differentiable=False)
reduce_or = _reduce("reduce_or", "b", empty_ok=True, differentiable=False)


def _arg(name: str) -> Primitive:
    def rule(x, *, axis, index_dtype):
        check_kinds(name, x, "biuf")
        check_axes(name, (axis,), x.ndim, "axis")
        if x.shape[axis] == 0:
            raise ShapeError(f"{name}: axis {axis} of shape {x.shape} is empty; it has no {name[3:]}")
        if index_dtype.kind not in "iu":
            raise DTypeError(f"{name}: index_dtype must be an integer dtype, got {index_dtype}")
        return tuple(n for i, n in enumerate(x.shape) if i != axis), index_dtype

    return Primitive(
        name,
        rule,
        params={"axis": (p_nonneg_int, REQUIRED), "index_dtype": (p_dtype, DEFAULT_INDEX)},
        differentiable=False,
    )


argmax = _arg("argmax")
argmin = _arg("argmin")


def _cumsum(x, *, axis, reverse):
    check_kinds("cumsum", x, "iufc")
    check_axes("cumsum", (axis,), max(x.ndim, 1) if x.ndim else 0, "axis")
    return x.shape, x.dtype


cumsum = Primitive(
    "cumsum",
    _cumsum,
    params={"axis": (p_nonneg_int, REQUIRED), "reverse": (p_bool, False)},
    linear=(0,),
)


def _sort_rule(name: str, indices: bool):
    def rule(x, *, dimension, descending, stable, **index_dtype):
        check_kinds(name, x, "biuf")
        check_axes(name, (dimension,), x.ndim, "dimension")
        if not indices:
            return x.shape, x.dtype
        if index_dtype["index_dtype"].kind not in "iu":
            raise DTypeError(
                f"{name}: index_dtype must be an integer dtype, got {index_dtype['index_dtype']}"
            )
        return x.shape, index_dtype["index_dtype"]

    return rule


SORT_PARAMS = {
    "dimension": (p_nonneg_int, REQUIRED),
    "descending": (p_bool, False),
    "stable": (p_bool, True),
}
sort = Primitive("sort", _sort_rule("sort", False), params=SORT_PARAMS)
argsort = Primitive(
    "argsort",
    _sort_rule("argsort", True),
    params={**SORT_PARAMS, "index_dtype": (p_dtype, DEFAULT_INDEX)},
    differentiable=False,
)

PRIMITIVES = (
    reduce_sum, reduce_prod, reduce_max, reduce_min, reduce_and, reduce_or, argmax, argmin,
    cumsum, sort, argsort,
)

__all__ = [p.name for p in PRIMITIVES]
