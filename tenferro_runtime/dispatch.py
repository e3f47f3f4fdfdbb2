"""`bind`: the single entry point of every primitive.

It hands the primitive to the highest-level transformation among the operands'
tracers in this context's interpreter stack (tracing.py), or to the eager
interpreter at the bottom (eager.py), which runs the kernel (after asking the observers
that check ops beforehand, energy budgets); then it tells the context's observers
(gradient tapes, energy accounting) what ran, eager or traced. Nothing else
intercepts a primitive.
"""

from __future__ import annotations

from typing import Any

from tenferro_core.primitive import Primitive

from .eager import EVAL, _with_device
from .tracing import BOTTOM, ask, interpreters, notify, top_trace

_NO_PARAMS: dict = {}


def bind(prim: Primitive, args: tuple, params: dict = _NO_PARAMS) -> Any:
    """Apply `prim` to `args` (tensors or tracers) with `params` under this context's stack."""
    stack = interpreters()
    if stack is BOTTOM:
        return EVAL.process(prim, args, params)
    top = top_trace(args, stack) if stack.traces else None  # observers only: an escaped tracer
    if top is None:  # still fails in the eager interpreter (reaching its buffer raises)
        ask(stack, prim, args, params)  # observers that check an op before it runs (budgets)
        if not params and not prim.params:
            out = EVAL.process(prim, args, params)
        else:
            out, params = EVAL.run(prim, args, params)
    else:
        out = top.process(prim, args, params)
    observers = stack.observers
    if observers:
        if top is not None and (params or prim.params):
            avals = tuple([a._aval for a in args])
            if not avals:
                params, _ = _with_device(prim, params)
            params = prim.check_params(params, avals)
        notify(stack, prim, args, params, out)
    return out


__all__ = ["bind"]
