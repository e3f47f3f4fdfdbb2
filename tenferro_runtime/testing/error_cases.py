"""Bad inputs for every primitive family and the typed error each must raise.

Operands are zero-filled host arrays given as (shape, dtype name); a case
whose dtypes the device lacks is left out for that device. Elementwise cases
are generated (shape mismatch, dtype mismatch, a dtype the rule rejects);
the structural, reduction and contraction cases are written out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tenferro_core import catalog
from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, AxisError, DTypeError, ShapeError

from .cases import Ctx, av

F, F64, I, B, C = "float32", "float64", "int32", "bool", "complex64"


@dataclass(frozen=True)
class ErrorCase:
    """`prim` applied to zero tensors `operands` with `params` must raise `error`."""

    prim: str
    error: type[Exception]
    operands: tuple[tuple[tuple[int, ...], str], ...]
    params: dict[str, Any] = field(default_factory=dict, hash=False)
    label: str = ""

    @property
    def id(self) -> str:
        return f"{self.prim}-{self.label or self.error.__name__}"

    def applicable(self, ctx: Ctx) -> bool:
        return all(D.as_dtype(d) in ctx.dtypes for _, d in self.operands)


def E(prim: str, error: type[Exception], *operands: tuple[tuple[int, ...], str], label: str = "",
      **params: Any) -> ErrorCase:
    return ErrorCase(prim, error, tuple(operands), params, label)


def _accepted(prim, dtype, nin: int) -> bool:
    try:
        prim.rule(*(av((2,), dtype) for _ in range(nin)))
        return True
    except DTypeError:
        return False


def _elementwise_cases(ctx: Ctx) -> list[ErrorCase]:
    from .cases_elementwise import ELEMENTWISE_SPECS

    out = []
    # the device's dtypes first, so a rejected-dtype case is one the device can express
    dtypes = sorted((d for d in D.ALL_DTYPES if d is not D.bfloat16), key=lambda d: d not in ctx.dtypes)
    for name in ELEMENTWISE_SPECS:
        prim = catalog.BY_NAME[name]
        if name == "select":
            continue
        nin = prim.nin
        ok = [d for d in dtypes if _accepted(prim, d, nin)]
        bad = [d for d in dtypes if d not in ok]
        if bad:
            out.append(E(name, DTypeError, *[((2,), bad[0].name)] * nin, label=f"rejects-{bad[0].name}"))
        if nin >= 2:
            d = ok[0].name
            other = next(o.name for o in dtypes if o.name != d)
            out.append(E(name, ShapeError, ((2,), d), *[((3,), d)] * (nin - 1), label="shape-mismatch"))
            out.append(E(name, ShapeError, ((2,), d), *[((2, 1), d)] * (nin - 1), label="rank-mismatch"))
            out.append(E(name, DTypeError, ((2,), d), *[((2,), other)] * (nin - 1), label="dtype-mismatch"))
    return out


HANDWRITTEN = [
    E("select", DTypeError, ((2,), F), ((2,), F), ((2,), F), label="float-predicate"),
    E("select", ShapeError, ((3,), B), ((2,), F), ((2,), F)),
    E("select", DTypeError, ((2,), B), ((2,), F), ((2,), F64)),
    E("reshape", ShapeError, ((2, 3), F), new_sizes=(4,)),
    E("reshape", ArgumentError, ((2,), F), new_sizes=(-1, -2), label="negative-size"),
    E("reshape", ArgumentError, ((2,), F), new_sizes="ab", label="not-ints"),
    E("transpose", ShapeError, ((2, 3), F), permutation=(0,)),
    E("transpose", ShapeError, ((2, 3), F), permutation=(0, 0), label="repeated"),
    E("broadcast_in_dim", ShapeError, ((2,), F), shape=(3,), broadcast_dimensions=(0,)),
    E("broadcast_in_dim", ShapeError, ((2,), F), shape=(2, 2), broadcast_dimensions=(), label="dims"),
    E("broadcast_in_dim", AxisError, ((2,), F), shape=(2,), broadcast_dimensions=(1,), label="axis"),
    E("broadcast_in_dim", ShapeError, ((1, 1), F), shape=(2, 2), broadcast_dimensions=(1, 0),
      label="decreasing"),
    E("convert", ArgumentError, ((2,), F), new_dtype="no-such-dtype"),
    E("bitcast_convert", DTypeError, ((2,), F), new_dtype=D.float64),
    E("bitcast_convert", DTypeError, ((2,), "uint8"), new_dtype=D.bool_, label="bool"),
    E("slice", ShapeError, ((4,), F), start_indices=(0, 0), limit_indices=(1, 1)),
    E("slice", ShapeError, ((4,), F), start_indices=(3,), limit_indices=(2,), label="start-after-limit"),
    E("slice", ShapeError, ((4,), F), start_indices=(0,), limit_indices=(5,), label="past-end"),
    E("slice", ShapeError, ((4,), F), start_indices=(0,), limit_indices=(4,), strides=(0,), label="stride"),
    E("dynamic_slice", ShapeError, ((4,), F), slice_sizes=(1,), label="no-starts"),
    E("dynamic_slice", ShapeError, ((4,), F), ((1,), I), slice_sizes=(1,), label="start-not-0d"),
    E("dynamic_slice", DTypeError, ((4,), F), ((), F), slice_sizes=(1,)),
    E("dynamic_slice", ShapeError, ((4,), F), ((), I), slice_sizes=(5,), label="too-big"),
    E("dynamic_update_slice", ShapeError, ((2,), F), ((3,), F), ((), I)),
    E("dynamic_update_slice", ShapeError, ((2, 2), F), ((1,), F), ((), I), ((), I), label="rank"),
    E("dynamic_update_slice", DTypeError, ((2,), F), ((1,), F64), ((), I)),
    E("dynamic_update_slice", DTypeError, ((2,), F), ((1,), F), ((), F), label="float-start"),
    E("pad", ShapeError, ((2,), F), ((1,), F), padding_config=((0, 0, 0),)),
    E("pad", ShapeError, ((2,), F), ((), F), padding_config=((0, 0, 0), (0, 0, 0)), label="config"),
    E("pad", ShapeError, ((2,), F), ((), F), padding_config=((0, 0, -1),), label="interior"),
    E("pad", ShapeError, ((2,), F), ((), F), padding_config=((-2, -1, 0),), label="negative-size"),
    E("pad", DTypeError, ((2,), F), ((), F64), padding_config=((0, 0, 0),)),
    E("concatenate", ShapeError, ((2, 2), F), ((2, 3), F), dimension=0),
    E("concatenate", ShapeError, ((2, 2), F), ((2,), F), dimension=0, label="rank"),
    E("concatenate", DTypeError, ((2,), F), ((2,), F64), dimension=0),
    E("concatenate", AxisError, ((2,), F), ((2,), F), dimension=1, label="axis"),
    E("concatenate", ShapeError, dimension=0, label="no-operands"),
    E("reverse", AxisError, ((2,), F), dimensions=(1,)),
    E("reverse", AxisError, ((2,), F), dimensions=(0, 0), label="repeated"),
    E("gather", ShapeError, ((4,), F), ((3, 2), I), axes=(0,)),
    E("gather", DTypeError, ((4,), F), ((3, 1), F), axes=(0,)),
    E("gather", AxisError, ((4,), F), ((3, 1), I), axes=(1,), label="axis"),
    E("gather", ShapeError, ((0, 2), F), ((3, 1), I), axes=(0,), label="empty-axis"),
    E("scatter", ShapeError, ((4,), F), ((3, 1), I), ((2,), F), axes=(0,)),
    E("scatter", DTypeError, ((4,), F), ((3, 1), I), ((3,), F64), axes=(0,)),
    E("scatter", DTypeError, ((4,), F), ((3, 1), F), ((3,), F), axes=(0,), label="float-indices"),
    E("scatter_add", ShapeError, ((4,), F), ((3, 1), I), ((3, 2), F), axes=(0,)),
    E("scatter_add", DTypeError, ((4,), F), ((3, 1), I), ((3,), F64), axes=(0,)),
    E("scatter_add", ShapeError, ((4,), F), ((3,), I), ((3,), F), axes=(0,), label="indices-rank"),
    E("iota", DTypeError, dtype=D.bool_, shape=(3,), dimension=0),
    E("iota", AxisError, dtype=D.int32, shape=(3,), dimension=1),
    E("iota", ArgumentError, dtype=D.int32, shape=(-3,), dimension=0, label="negative-shape"),
    E("full", ArgumentError, shape=(2,), fill_value=[1, 2], dtype=D.float32, label="non-scalar-fill"),
    E("full", ArgumentError, shape=(-2,), fill_value=1, dtype=D.float32, label="negative-shape"),
    E("reduce_sum", AxisError, ((2,), F), axes=(1,)),
    E("reduce_prod", AxisError, ((2,), F), axes=(0, 0), label="repeated"),
    E("reduce_max", ShapeError, ((0, 2), F), axes=(0,), label="empty-axis"),
    E("reduce_min", ShapeError, ((2, 0), I), axes=(1,), label="empty-axis"),
    E("reduce_and", AxisError, ((2,), B), axes=(2,)),
    E("reduce_or", AxisError, ((2,), B), axes=(1,)),
    E("argmax", ShapeError, ((0,), F), axis=0, label="empty-axis"),
    E("argmin", AxisError, ((2,), F), axis=1),
    E("argmax", DTypeError, ((2,), F), axis=0, index_dtype=D.float32, label="float-index"),
    E("argmin", ArgumentError, ((2,), F), axis=-1, label="negative-axis"),
    E("cumsum", AxisError, ((2,), F), axis=1),
    E("cumsum", ShapeError, ((), F), axis=0, label="0d"),
    E("sort", AxisError, ((2,), F), dimension=1),
    E("sort", ShapeError, ((), F), dimension=0, label="0d"),
    E("argsort", AxisError, ((2, 2), F), dimension=2),
    E("argsort", DTypeError, ((2,), F), dimension=0, index_dtype=D.float32, label="float-index"),
    E("dot_general", ShapeError, ((2, 3), F), ((2, 3), F), contracting_dims=((1,), (0,))),
    E("dot_general", DTypeError, ((2, 3), F), ((3, 2), F64), contracting_dims=((1,), (0,))),
    E("dot_general", ShapeError, ((2, 3), F), ((4, 3), F), contracting_dims=((1,), (1,)),
      batch_dims=((0,), (0,)), label="batch"),
    E("dot_general", ShapeError, ((2, 3), F), ((3, 2), F), contracting_dims=((1,),), label="pairs"),
    E("dot_general", AxisError, ((2, 3), F), ((3, 2), F), contracting_dims=((2,), (0,)), label="axis"),
    E("dot_general", ShapeError, ((2, 3), F), ((3, 2), F), contracting_dims=((1,), ()), label="unpaired"),
    E("conv_general", ShapeError, ((1, 2), F), ((1, 2), F), label="rank"),
    E("conv_general", ShapeError, ((1, 2, 5), F), ((1, 3, 2), F), label="channels"),
    E("conv_general", ShapeError, ((1, 3, 5), F), ((2, 1, 2), F), feature_group_count=2, label="groups"),
    E("conv_general", ShapeError, ((1, 1, 2), F), ((1, 1, 3), F), label="window"),
    E("conv_general", ShapeError, ((1, 1, 5), F), ((1, 1, 2), F), window_strides=(1, 1), label="strides"),
    E("conv_general", ShapeError, ((1, 1, 5), F), ((1, 1, 2), F), rhs_dilation=(0,), label="dilation"),
    E("conv_general", DTypeError, ((1, 1, 5), F), ((1, 1, 2), F64)),
    E("conv_general", DTypeError, ((1, 1, 5), I), ((1, 1, 2), I), label="int"),
]

# primitives whose shape rule accepts every shape and dtype: only the generic checks apply
GENERIC_ONLY = frozenset({"copy"})


def unsupported_dtype_cases(ctx: Ctx) -> list[ErrorCase]:
    """Asking for a dtype the device lacks is a DTypeError, never a silent cast."""
    out = []
    for d in D.ALL_DTYPES:
        if d in ctx.dtypes:
            continue
        out += [E("convert", DTypeError, ((2,), F), new_dtype=d, label=f"to-{d.name}"),
                E("full", DTypeError, shape=(2,), fill_value=0, dtype=d, label=f"{d.name}"),
                E("iota", DTypeError, dtype=d, shape=(2,), dimension=0, label=f"{d.name}")]
    return out


def error_cases(ctx: Ctx) -> list[ErrorCase]:
    """Every error case that the device can express (its dtypes)."""
    cases = _elementwise_cases(ctx) + HANDWRITTEN + unsupported_dtype_cases(ctx)
    return [c for c in cases if c.applicable(ctx)]
