"""Conformance cases: for each core primitive, how to draw valid inputs.

A `Spec` says, for a dtype, how to probe the primitive's shape rule (so the
dtypes a primitive accepts are asked of the rule, not listed by hand) and how
to draw a `Case` (host operands, params, tolerance hints) with hypothesis.
`SPECS` maps every catalog primitive name to its spec.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tenferro_core import dtypes as D
from tenferro_core.avals import Aval
from tenferro_core.dtypes import DType
from tenferro_core.errors import DTypeError
from tenferro_core.primitive import Primitive


@dataclass(frozen=True)
class Ctx:
    """What a case may use of the device under test: its dtypes, and itself (for nullary ops)."""

    dtypes: tuple[DType, ...]
    device: Any = None

    @property
    def int_dtypes(self) -> tuple[DType, ...]:
        return tuple(d for d in self.dtypes if d.kind in "iu")

    @property
    def index_dtype(self) -> DType:
        """The preferred index dtype for probes: int64, int32, else any integer."""
        for d in (D.int64, D.int32):
            if d in self.dtypes:
                return d
        return self.int_dtypes[0] if self.int_dtypes else D.int64


@dataclass
class Case:
    """One drawn input: host operands, params and how to judge the result.

    `mult` scales the dtype tolerance; `bound` is a per-element error scale for
    accumulations; `check(actual, expected, case)` replaces value comparison
    where the result is not unique (scatter with duplicate indices).
    `exact` asks for bit-exact equality (data movement, bitcast).
    """

    args: tuple[np.ndarray, ...]
    params: dict[str, Any] = field(default_factory=dict)
    mult: float = 1.0
    bound: np.ndarray | None = None
    check: Callable[[np.ndarray, np.ndarray, Case], None] | None = None
    exact: bool = False


Probe = Callable[[DType, Ctx], tuple[tuple[Aval, ...], dict[str, Any]]]
Draw = Callable[[Callable, DType, Ctx], Case]


@dataclass(frozen=True)
class Spec:
    """How to test one primitive: `probe(dtype, ctx)` -> (avals, params); `draw(draw, dtype, ctx)`.

    `variants(dtype, ctx)`, when given, splits the tests of a dtype further (convert: one
    test per target dtype); `draw` then receives the variant as ``variant=``.
    """

    name: str
    probe: Probe
    draw: Draw
    variants: Callable[[DType, Ctx], tuple[Any, ...]] | None = None


def rule_accepts(prim: Primitive, spec: Spec, dtype: DType, ctx: Ctx) -> bool:
    """True when the shape rule accepts `dtype` for the probe signature and the device
    holds every output dtype; False on DTypeError (any other error is a bug in the probe)."""
    avals, params = spec.probe(dtype, ctx)
    try:
        outs = prim.abstract_eval(avals, prim.check_params(params, avals))
    except DTypeError:
        return False
    return all(o.dtype in ctx.dtypes for o in outs)


def av(shape: tuple[int, ...], dtype: DType) -> Aval:
    return Aval(tuple(shape), dtype)


def same_probe(nin: int, params: dict[str, Any] | None = None, shape: tuple[int, ...] = (2,)) -> Probe:
    """Probe with `nin` operands of one dtype and shape."""

    def probe(dtype: DType, ctx: Ctx):
        return tuple(av(shape, dtype) for _ in range(nin)), dict(params or {})

    return probe


def spec_table(*specs: Spec) -> dict[str, Spec]:
    return {s.name: s for s in specs}
