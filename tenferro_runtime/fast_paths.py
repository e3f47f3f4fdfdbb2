"""Fast paths in front of the namespace's hottest functions (`add`, `multiply`, `exp`, ...,
hence the operators).

Where no transformation sits above the eager interpreter and the operands share one
aval (no promotion or broadcasting) — exactly when `bind` would hand the call to the
eager interpreter — the call goes straight to the kernel held in the op's front table
{aval: (kernel, result aval)}, filled from the device's dispatch memo, and the context's
observers are told what ran just as `bind` tells them.
"""

from __future__ import annotations

from typing import Any

from tenferro_core.errors import TenferroError
from tenferro_core.primitive import Primitive

from .kernels import call, failed
from .tensor import Tensor
from .tracing import BOTTOM, ask, interpreters, notify

_NO_PARAMS: dict = {}
_new_tensor = object.__new__


def fast_binary(prim: Primitive, general: Any, kinds: str | None = None,
                constant: Any = None) -> Any:
    """`general(x, y)` (a namespace function that binds `prim` on promoted, broadcast
    operands) with this interpreter's fast path in front: two tensors of one aval (whose
    dtype kind is in `kinds`; None: wherever `general` binds `prim` unchanged or raises as
    the op's rule does), in a context with no transformation above the eager interpreter,
    go straight to the kernel the op's front table holds for that aval, and the context's
    observers are told, exactly as `bind` would do. With `constant(name, value, aval)`
    (the namespace's cached scalar tensors), a Python float or int with a floating or
    complex tensor takes the same path."""
    scalar_kinds = "".join(k for k in "fc" if k in (kinds or "fc")) if constant else ""
    name = general.__name__
    front = _front(prim, 2, kinds)
    table = front.table

    def op(x: Any, y: Any, /) -> Any:
        if type(x) is Tensor:  # the hot path (tensor op tensor, or tensor op scalar) only
            if type(y) is not Tensor:
                if (type(y) is float or type(y) is int) and x._aval.dtype.kind in scalar_kinds:
                    y = constant(name, y, x._aval)
                else:
                    return general(x, y)
            av = x._aval
            if av is y._aval:
                entry = table.get(av)
                if entry is not None and interpreters() is BOTTOM:
                    try:
                        buf = entry[0](x._buf, y._buf)
                    except Exception as exc:
                        raise failed(prim, av.device, exc)  # noqa: B904
                    t = _new_tensor(Tensor)
                    t._buf = buf
                    t._aval = entry[1]
                    return t
        return slow(x, y)

    def slow(x: Any, y: Any) -> Any:
        """A Python scalar on the left, a first sighting of the aval, observers, the
        general path (`op` has made a Python scalar on the right a tensor)."""
        if type(x) is not Tensor:
            if type(y) is Tensor and (type(x) is float or type(x) is int) \
                    and y._aval.dtype.kind in scalar_kinds:
                x = constant(name, x, y._aval)
            else:
                return general(x, y)
        av = x._aval
        if av is y._aval:
            entry = front.entry(av)
            if entry is not None:
                stack = interpreters()
                if stack is BOTTOM:
                    return _call(entry[0], (x._buf, y._buf), entry[1], prim, av.device)
                if not stack.traces:  # observers only (tapes, energy): as bind tells them
                    return _observed(stack, entry[0], (x, y), entry[1], prim, av.device)
        return general(x, y)

    return _like(op, general)

def fast_unary(prim: Primitive, general: Any, kinds: str) -> Any:
    """`general(x)` with the fast path in front for a tensor whose dtype kind is in
    `kinds` (those `general` binds `prim` on as it is); see `fast_binary`."""
    front = _front(prim, 1, kinds)
    table = front.table

    def op(x: Any, /) -> Any:
        if type(x) is Tensor:
            av = x._aval
            entry = table.get(av) or front.entry(av)
            if entry is not None:
                stack = interpreters()
                if stack is BOTTOM:
                    return _call(entry[0], (x._buf,), entry[1], prim, av.device)
                if not stack.traces:
                    return _observed(stack, entry[0], (x,), entry[1], prim, av.device)
        return general(x)

    return _like(op, general)


FRONT_SIZE = 1024


class _Front:
    """One fast path's table {operand aval: dispatch entry [kernel, result aval, ...]}, filled
    from the device's dispatch memo (which validates and picks the kernel) so a hit is one dict lookup with no
    key to build; avals that take the general path are kept apart (`slow`). Bounded: emptied
    when full (the LRU memo behind it keeps the entries); thread-safe as dict reads and
    writes are atomic; emptied with the dispatch memos (`clear_fronts`), as its kernels are
    theirs."""

    def __init__(self, prim: Primitive, arity: int, kinds: str | None):
        self.prim = prim
        self.arity = arity
        self.kinds = kinds
        self.table: dict = {}
        self.slow: dict = {}

    def entry(self, av: Any) -> list | None:
        """The dispatch entry [kernel, result aval, ...] for operands of aval `av` (shared with
        the memo, so the kernel that replaces a first-call check is seen here too); None: the
        general path."""
        entry = self.table.get(av)
        if entry is not None or av in self.slow:
            return entry
        prim = self.prim
        if self.kinds is None or av.dtype.kind in self.kinds:
            try:
                entry = av.device.dispatch(prim, *([av] * self.arity))
            except TenferroError:  # the general path raises its own error: not remembered
                return None
            if entry[1] is not None:
                return _put(self.table, av, entry)
        _put(self.slow, av, None)
        return None


def _put(table: dict, key: Any, value: Any) -> Any:
    if len(table) >= FRONT_SIZE:
        table.clear()
    table[key] = value
    return value


_FRONTS: list[_Front] = []


def _front(prim: Primitive, arity: int, kinds: str | None) -> _Front:
    front = _Front(prim, arity, kinds)
    _FRONTS.append(front)
    return front


def clear_fronts() -> None:
    """Empty every fast path's table (with the dispatch memos their kernels come from)."""
    for front in _FRONTS:
        front.table.clear()
        front.slow.clear()


def _observed(stack: Any, fn: Any, args: tuple, out_aval: Any, prim: Primitive, device: Any) -> Tensor:
    """A fast path's kernel call in a context with observers, as `bind` runs it: the observers
    that check ops beforehand are asked first, all of them are told after."""
    ask(stack, prim, args, _NO_PARAMS)
    t = _call(fn, [a._buf for a in args], out_aval, prim, device)
    notify(stack, prim, args, _NO_PARAMS, t)
    return t


def _call(fn: Any, bufs: Any, out_aval: Any, prim: Primitive, device: Any) -> Tensor:
    """`fn(*bufs)` (kernels.call) wrapped as a Tensor of `out_aval`."""
    t = _new_tensor(Tensor)
    t._buf = call(fn, prim, device, bufs)
    t._aval = out_aval
    return t


def _like(op: Any, general: Any) -> Any:
    op.__name__ = op.__qualname__ = general.__name__
    op.__doc__ = general.__doc__
    op.__module__ = general.__module__
    op.__wrapped__ = general
    return op


__all__ = ["clear_fronts", "fast_binary", "fast_unary"]
