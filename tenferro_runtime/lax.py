"""One function per core primitive: ``lax.add`` is the bound method ``catalog.add.bind``; and
structured control flow (`cond`, `switch`, `while_loop`, `fori_loop`, `scan`, `map`).

No broadcasting and no promotion happen here; this is the layer namespace
functions, decompositions and AD rules are written in.
"""

from __future__ import annotations

from tenferro_core import catalog

from . import dispatch  # noqa: F401  (installs the fast Primitive.bind before we take it)

for _p in catalog.PRIMITIVES:
    globals()[_p.name] = _p.bind

_CONTROL_FLOW = ("cond", "switch", "while_loop", "fori_loop", "scan", "map")


def __getattr__(name: str):  # control flow (control_flow.py), imported on first use
    if name in _CONTROL_FLOW:
        from . import control_flow

        return getattr(control_flow, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [p.name for p in catalog.PRIMITIVES] + list(_CONTROL_FLOW)
