"""The category of every core primitive, one table (DESIGN.md section 7).

The fusion pass reads `Primitive.category`; the catalog modules stay free of it and
`tenferro_core.catalog` applies this table once at import. Choices worth a word:

- convert and bitcast_convert are elementwise: one output element from one input element.
- iota and full are elementwise too, with no operand: each output element is a function of
  its index alone, so a fused group can compute them in its loop instead of reading a buffer.
- cumsum, sort and argsort are reductions: an output element depends on a whole axis of the
  input, so they end an elementwise group like reduce_sum does. sort is no structural op
  either: the order it applies depends on the values.
- copy is structural (a layout-preserving move of the whole operand).
- nothing in the core catalog is "random": random numbers are built from core primitives
  (DESIGN.md section 10); the category is for extension ops that draw bits.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..primitive import CATEGORIES, Primitive
from . import contraction, elementwise

_BY_CATEGORY: dict[str, tuple[str, ...]] = {
    "elementwise": tuple(p.name for p in elementwise.PRIMITIVES)
    + ("convert", "bitcast_convert", "iota", "full"),
    "broadcast": ("broadcast_in_dim",),
    "reduction": (
        "reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "reduce_and", "reduce_or",
        "argmax", "argmin", "cumsum", "sort", "argsort",
    ),
    "structural": ("reshape", "transpose", "slice", "pad", "concatenate", "reverse", "copy"),
    "indexing": ("gather", "scatter", "scatter_add", "dynamic_slice", "dynamic_update_slice"),
    "contraction": tuple(p.name for p in contraction.PRIMITIVES),
}

CATEGORY: dict[str, str] = {name: cat for cat, names in _BY_CATEGORY.items() for name in names}
"""Core primitive name -> its category (one of `tenferro_core.primitive.CATEGORIES`)."""


def apply_categories(primitives: Iterable[Primitive]) -> None:
    """Set `category` on the core primitives the table names.

    One the table lacks keeps its own (None unless its constructor set one); importing the
    catalog never fails over it, tests/test_cost.py does (`missing_categories`).
    """
    for p in primitives:
        if p.name in CATEGORY:
            p.category = CATEGORY[p.name]


def missing_categories(primitives: Iterable[Primitive]) -> list[str]:
    """Names of primitives whose category is not one of `CATEGORIES`."""
    return [p.name for p in primitives if p.category not in CATEGORIES]


__all__ = ["CATEGORY", "apply_categories", "missing_categories"]
