"""One function per core primitive: ``lax.add`` is the bound method ``catalog.add.bind``.

No broadcasting and no promotion happen here; this is the layer namespace
functions, decompositions and AD rules are written in.
"""

from __future__ import annotations

from tenferro_core import catalog

from . import dispatch  # noqa: F401  (installs the fast Primitive.bind before we take it)

for _p in catalog.PRIMITIVES:
    globals()[_p.name] = _p.bind

__all__ = [p.name for p in catalog.PRIMITIVES]
