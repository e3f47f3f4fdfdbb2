"""The interpreter stack: what `bind` hands each primitive to.

The active interpretations of a thread or asyncio task are an immutable tuple
in a `ContextVar`, innermost last. Its bottom is the eager interpreter
(`eager.EvalTrace`), which runs kernels. Above it sit transformations (`Trace`:
graph tracing, JVP) and observers (`Observer`: gradient tapes, energy accounting
and budgets). A trace's level is its position in the stack; `bind` gives a
primitive to the highest-level trace among its operands' tracers, or to the
eager interpreter when none of them is traced, which asks the observers that
check ops beforehand (budgets) and then tells all of them what ran. Values of
lower levels are constants to a trace, so rules that compute on them reach the
outer transformations: that is what makes transforms nest (``grad(grad(f))``).
Pushing and popping restore the previous tuple through the ContextVar's token,
so no context ever sees another's entries.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

from tenferro_core.errors import ConcretizationError, TenferroError

from .tensor import Tensor


class Trace:
    """One interpreter of primitives. Subclasses implement `process`."""

    level = -1
    active = False
    label = ""  # what printing one of its tracers names it by ("compile(f)", "grad/jvp")

    def process(self, prim: Any, args: tuple, params: dict) -> Any:
        """Interpret `prim` applied to `args` (some of them this trace's tracers)."""
        raise NotImplementedError

    def concrete(self, tracer: Tracer) -> Any:
        """The NumPy value of a tracer, where the transformation has one."""
        raise ConcretizationError(
            f"this value is abstract inside {type(self).__name__} (shape {tracer.shape}, dtype "
            f"{tracer.dtype}): Python control flow, bool()/float() and data-dependent shapes need "
            f"concrete values; compute them outside the traced function or pass them as arguments"
        )


class Observer:
    """Sees every primitive the eager interpreter runs in its context (gradient tapes, energy
    accounting).

    An observer never changes what runs; it is told after the fact. An observer class that
    overrides `before` is also asked before each eager op (energy budgets), and may refuse it
    by raising.
    """

    def before(self, prim: Any, args: tuple, params: dict) -> None:
        """`prim` is about to run eagerly on concrete `args` (`params` as the caller gave them).
        Only called on observers whose class overrides it; raising stops the op before it runs."""

    def observe(self, prim: Any, args: tuple, params: dict, out: Any) -> None:
        """`prim` ran eagerly on `args` with canonical `params` and gave `out`."""

    def assigned(self, obj: Tensor, new: Tensor) -> None:
        """`obj` is about to take `new`'s value in place (``x += y``, ``x[i] = v``)."""

    def observe_graph(self, graph: Any, args: tuple, outs: list) -> None:
        """`graph` ran eagerly on `args` and gave `outs`. Where every observer of a context
        overrides this (and none checks ops beforehand), `eval_graph` replays the graph's plan
        and tells them once; otherwise it binds node by node and they see each primitive."""


_ESCAPED = (
    "a value of a finished transformation (a tracer) escaped and was used later; "
    "return results from the transformed function instead of storing them"
)


_OTHER_CONTEXT = (
    "a traced value of another thread or asyncio task (or of a transformation not active "
    "here) was used; transformations are per context, so pass concrete tensors between threads"
)


class Tracer(Tensor):
    """A value of a transformation: an aval, no buffer of its own."""

    __slots__ = ("_trace",)

    @property
    def _buf(self) -> Any:
        """Tracers have no buffer: reaching a kernel means the tracer left its transformation."""
        raise TenferroError(_ESCAPED if not self._trace.active else _OTHER_CONTEXT)

    def numpy(self):
        if not self._trace.active:
            raise TenferroError(_ESCAPED)
        return self._trace.concrete(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._aval.str_short()})"

    def __str__(self) -> str:
        """What ``print(tracer)`` shows: the aval and where to get the value, never an error."""
        where = self._trace.label or type(self._trace).__name__
        if not self._trace.active:
            return f"Traced<{self._aval.str_short()}> (a value of a finished {where})"
        return (f"Traced<{self._aval.str_short()}> (inside {where}: use tenferro_runtime.debug.print "
                f"to see its value at run time)")

    def __format__(self, spec: str) -> str:
        return str(self)

    def __reduce_ex__(self, protocol: Any) -> tuple:
        raise TenferroError(
            f"cannot pickle a traced value ({type(self).__name__} {self._aval.str_short()}) inside a "
            f"transformation (grad, jvp, trace, ...): it only stands for a value while the "
            f"transformation runs; return the values from the transformed function and pickle those"
        )

    def __reduce__(self) -> tuple:
        return self.__reduce_ex__(2)


class _Stack(tuple):
    """An interpreter stack with its observers, those of them that want `before` calls, and
    its traces above the eager interpreter listed once (read on every call by `bind` and the
    eager fast paths); `graphs`: a graph may replay as one plan here (`Observer.observe_graph`)."""

    observers: tuple
    pre: tuple
    traces: tuple
    graphs: bool


def _stack(entries: tuple) -> _Stack:
    stack = _Stack(entries)
    stack.observers = tuple(i for i in entries if isinstance(i, Observer))
    stack.pre = tuple(o for o in stack.observers if type(o).before is not Observer.before)
    stack.traces = tuple(i for i in entries[1:] if not isinstance(i, Observer))
    stack.graphs = not stack.traces and not stack.pre and all(
        type(o).observe_graph is not Observer.observe_graph for o in stack.observers)
    return stack


def _set(stack: tuple) -> contextvars.Token:
    if len(stack) == 1:
        return _STACK.set(BOTTOM)
    return _STACK.set(_stack(stack))


@contextlib.contextmanager
def new_trace(trace: Trace) -> Iterator[Trace]:
    """Push `trace` on this context's stack for the block (its level is its position)."""
    stack = _STACK.get()
    trace.level = len(stack)
    trace.active = True
    token = _set(stack + (trace,))
    try:
        yield trace
    finally:
        trace.active = False
        pop(token)


def push_observer(observer: Observer) -> contextvars.Token:
    """Put `observer` on this context's stack; undo with `pop(token)`."""
    return _set(_STACK.get() + (observer,))


def remove_observer(observer: Observer) -> contextvars.Token:
    """Take `observer` off this context's stack (if there); undo with `pop(token)`."""
    return _set(tuple(i for i in _STACK.get() if i is not observer))


def pop(token: contextvars.Token) -> None:
    """Restore the stack as it was before the change that returned `token`."""
    try:
        _STACK.reset(token)
    except ValueError:
        raise TenferroError(
            "an interpreter (a gradient tape or trace) was closed in another thread or asyncio "
            "task than the one that opened it; open and close it in the same context"
        ) from None


def top_trace(args: Any, stack: tuple | None = None) -> Trace | None:
    """The highest-level trace of this context among the operands' tracers (None: eager)."""
    if stack is None:
        stack = _STACK.get()
    top = None
    for a in args:
        tr = getattr(a, "_trace", None)
        if tr is not None:
            if not tr.active:
                raise TenferroError(_ESCAPED)
            if tr.level >= len(stack) or stack[tr.level] is not tr:
                raise TenferroError(_OTHER_CONTEXT)
            if top is None or tr.level > top.level:
                top = tr
    return top


def observers() -> tuple[Observer, ...]:
    """The observers on this context's stack, outermost first."""
    return _STACK.get().observers


def notify(stack: _Stack, prim: Any, args: tuple, params: dict, out: Any) -> None:
    """Tell the observers of `stack` that `prim` ran on `args` with canonical `params` and
    gave `out`: the one place observers are told about an op (bind, the eager fast paths,
    `observe`)."""
    for o in stack.observers:
        o.observe(prim, args, params, out)


def ask(stack: _Stack, prim: Any, args: tuple, params: dict) -> None:
    """Ask the observers of `stack` that check ops beforehand (energy budgets) whether `prim`
    may run on `args` now; one of them raises to refuse it."""
    for o in stack.pre:
        o.before(prim, args, params)


def notify_graph(stack: _Stack, graph: Any, args: tuple, outs: list) -> None:
    """Tell the observers of `stack` (all of them take whole graphs) that `graph` ran."""
    for o in stack.observers:
        o.observe_graph(graph, args, outs)


def observe(prim: Any, args: tuple, params: dict, out: Any) -> None:
    """Tell this context's observers that `out` was made from `args` without a kernel
    (e.g. a fresh wrapper over the same buffer, reported as `copy`)."""
    notify(_STACK.get(), prim, args, params, out)


def notify_assign(obj: Tensor, new: Tensor) -> None:
    """Tell this context's observers that `obj` takes `new`'s value in place."""
    for o in observers():
        o.assigned(obj, new)


class EagerInterpreter(Trace):
    """The eager interpreter's place at the bottom of every stack (level 0). `bind` hands a
    primitive none of whose operands is traced to `eager.EVAL`, which runs the kernel; this
    entry only marks the bottom, so this module needs nothing from the interpreter above it."""

    level = 0
    active = True

    def __repr__(self) -> str:
        return "EagerInterpreter()"


BOTTOM: _Stack = _stack((EagerInterpreter(),))
"""The stack of a context with no transformation and no observer: the eager interpreter alone."""
_STACK: contextvars.ContextVar[_Stack] = contextvars.ContextVar("tenferro_interpreters", default=BOTTOM)

interpreters = _STACK.get
"""This context's interpreter stack, bottom first (a C-level call: hot paths read it)."""


@contextlib.contextmanager
def eager_only() -> Iterator[None]:
    """Run the block with the eager interpreter alone on this context's stack (no
    transformation, no observer), restoring the stack after: how executors and passes
    evaluate on concrete values below whatever the caller has active."""
    token = _STACK.set(BOTTOM)
    try:
        yield
    finally:
        _STACK.reset(token)


__all__ = [
    "BOTTOM", "EagerInterpreter", "Observer", "Trace", "Tracer", "ask", "eager_only", "interpreters",
    "new_trace", "notify", "notify_assign", "notify_graph", "observe", "observers", "pop",
    "push_observer", "remove_observer", "top_trace",
]
