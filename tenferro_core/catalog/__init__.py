"""The closed core catalog (DESIGN.md section 3).

Primitives are importable by name, e.g. ``from tenferro_core.catalog import add``; each gets
its fusion category from `categories` and its cost rule from `cost.CORE_COST_RULES`.
"""

from __future__ import annotations

from ..primitive import Primitive
from . import contraction, elementwise, reductions, structural
from .categories import apply_categories
from .contraction import *  # noqa: F403
from .elementwise import *  # noqa: F403
from .reductions import *  # noqa: F403
from .structural import *  # noqa: F403

PRIMITIVES: tuple[Primitive, ...] = (
    elementwise.PRIMITIVES + structural.PRIMITIVES + reductions.PRIMITIVES + contraction.PRIMITIVES
)
BY_NAME: dict[str, Primitive] = {p.name: p for p in PRIMITIVES}

apply_categories(PRIMITIVES)
