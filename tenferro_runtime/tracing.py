"""Transformations as traces: the machinery `bind` hands primitives to.

Each active transformation is a `Trace` with a level (its position in
`dispatch.TRACE_STACK`). Its values are `Tracer`s. `bind` gives a primitive to
the highest-level trace among its operands' tracers; values of lower levels (or
plain tensors) are constants to it. Rules that compute on lower-level values
therefore reach the outer transformations, which is what makes transforms nest
(``grad(grad(f))``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from tenferro_core.errors import ConcretizationError, TenferroError

from .dispatch import TRACE_STACK
from .tensor import Tensor


class Trace:
    """One active transformation. Subclasses implement `process`."""

    def __init__(self) -> None:
        self.level = -1
        self.active = False

    def process(self, prim: Any, args: tuple, params: dict) -> Any:
        raise NotImplementedError

    def concrete(self, tracer: Tracer) -> Any:
        """The NumPy value of a tracer, where the transformation has one."""
        raise ConcretizationError(
            f"this value is abstract inside {type(self).__name__} (shape {tracer.shape}, dtype "
            f"{tracer.dtype}): Python control flow, bool()/float() and data-dependent shapes need "
            f"concrete values; compute them outside the traced function or pass them as arguments"
        )


class Tracer(Tensor):
    """A value of a transformation: an aval, no buffer of its own."""

    __slots__ = ("_trace",)

    def numpy(self):
        if not self._trace.active:
            raise TenferroError(
                "a value of a finished transformation (a tracer) escaped and was used later; "
                "return results from the transformed function instead of storing them"
            )
        return self._trace.concrete(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._aval.str_short()})"


@contextlib.contextmanager
def new_trace(trace: Trace) -> Iterator[Trace]:
    """Push `trace` on the stack for the block (its level is its position)."""
    trace.level = len(TRACE_STACK)
    trace.active = True
    TRACE_STACK.append(trace)
    try:
        yield trace
    finally:
        trace.active = False
        TRACE_STACK.pop()


def top_trace(args: tuple) -> Trace | None:
    """The highest-level active trace among the operands' tracers."""
    top = None
    for a in args:
        tr = getattr(a, "_trace", None)
        if tr is not None:
            if not tr.active:
                raise TenferroError(
                    "a value of a finished transformation (a tracer) escaped and was used later; "
                    "return results from the transformed function instead of storing them"
                )
            if top is None or tr.level > top.level:
                top = tr
    return top


__all__ = ["Trace", "Tracer", "new_trace", "top_trace"]
