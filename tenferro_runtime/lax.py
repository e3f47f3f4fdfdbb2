"""One function per core primitive: ``lax.add(x, y)`` is ``add.bind(x, y)``.

No broadcasting and no promotion happen here; this is the layer namespace
functions, decompositions and AD rules are written in.
"""

from __future__ import annotations

from typing import Any

from tenferro_core import catalog
from tenferro_core.primitive import Primitive


def _wrap(prim: Primitive):
    def fn(*args: Any, **params: Any) -> Any:
        return prim.bind(*args, **params)

    fn.__name__ = fn.__qualname__ = prim.name
    fn.__doc__ = prim.__doc__
    return fn


for _p in catalog.PRIMITIVES:
    globals()[_p.name] = _wrap(_p)

__all__ = [p.name for p in catalog.PRIMITIVES]
