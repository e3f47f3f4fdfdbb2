"""The eager interpreter: the bottom of every interpreter stack, and the home of every
eager fast path.

A call is: canonical params (checked on every call, so a cache hit can never
skip validation), one lookup of the device's dispatch cache keyed by
(primitive, operand avals, canonical params), and the kernel. A miss runs the
shape rule, checks the device supports the result dtypes and picks the kernel
(or the op's decomposition), so bad input never reaches a backend. A kernel
that raises surfaces as a `KernelError` naming primitive, backend and device;
with kernel checks on (``TENFERRO_CHECK_KERNELS=1`` or `Runtime(check_kernels=True)`)
every result is compared with the abstract eval.
"""

from __future__ import annotations

from typing import Any

from tenferro_core.errors import (
    ArgumentError,
    DeviceError,
    DTypeError,
    KernelError,
    KernelMemoryError,
    TenferroError,
)
from tenferro_core.primitive import Primitive

from . import tracing
from .tensor import Tensor
from .tracing import Trace

_NO_PARAMS: dict = {}
_new_tensor = object.__new__


class EvalTrace(Trace):
    """Runs primitives now, on their operands' device."""

    level = 0
    active = True

    def process(self, prim: Primitive, args: tuple, params: dict) -> Any:
        """Run `prim` on concrete tensors."""
        if not params and not prim.params:  # the hot path: one memo call, then the kernel
            n = len(args)
            try:
                if n == 2:
                    a, b = args
                    av = a._aval
                    entry = av.device.dispatch(prim, av, b._aval)
                    bufs: tuple = (a._buf, b._buf)
                elif n == 1:
                    av = args[0]._aval
                    entry = av.device.dispatch(prim, av)
                    bufs = (args[0]._buf,)
                else:
                    return self.run(prim, args, params)[0]
            except AttributeError:
                raise _not_tensor(prim, args) from None
            out_aval = entry[1]
            if out_aval is not None:  # one result, a kernel: the common case
                return _call(entry[0], bufs, out_aval, prim, av.device)
        return self.run(prim, args, params)[0]

    def run(self, prim: Primitive, args: tuple, params: dict) -> tuple:
        """(`prim` run on concrete tensors, its canonical params): what `bind` tells the
        observers, so they need no second `check_params`."""
        try:
            avals = tuple([a._aval for a in args])
        except AttributeError:
            raise _not_tensor(prim, args) from None
        if avals:
            device = avals[0].device
        else:
            params, device = _with_device(prim, params)
        if prim.params:
            nparams = prim.check_params(params, avals)  # every call: a cache hit never skips it
            try:
                entry = device.dispatch(prim, avals, *params_key(prim, nparams))
            except TypeError:  # an unhashable payload value: build, don't cache
                entry = prepare(prim, avals, nparams, device)
        else:
            if params:
                prim.check_params(params, avals)  # raises: this op takes no params
            nparams = _NO_PARAMS
            entry = device.dispatch(prim, *avals)
        fn, out_aval, out_avals = entry
        if fn is None:
            return prim.decomposition(*args, **nparams), nparams
        bufs = [a._buf for a in args]
        try:
            out = fn(*bufs, **nparams)
        except TenferroError:
            raise
        except Exception as exc:
            raise kernel_error(prim, device, exc) from exc
        if prim.multiple_results:
            return tuple([Tensor._new(b, av) for b, av in zip(out, out_avals)]), nparams
        return Tensor._new(out, out_aval), nparams

    def fast_binary(self, prim: Primitive, general: Any, kinds: str | None = None,
                    constant: Any = None) -> Any:
        """`general(x, y)` (a namespace function that binds `prim` on promoted, broadcast
        operands) with this interpreter's fast path in front: two tensors of one aval (whose
        dtype kind is in `kinds`; None: wherever `general` binds `prim` unchanged or raises as
        the op's rule does), in a context with no transformation above the eager interpreter,
        go straight to the kernel the op's front table holds for that aval, and the context's
        observers are told, exactly as `bind` would do. With `constant(name, value, aval)`
        (the namespace's cached scalar tensors), a Python float or int with a floating or
        complex tensor takes the same path."""
        stack_var, bottom = tracing._STACK, tracing.BOTTOM
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
                    if entry is not None and stack_var.get() is bottom:
                        try:
                            buf = entry[0](x._buf, y._buf)
                        except TenferroError:
                            raise
                        except Exception as exc:
                            raise kernel_error(prim, av.device, exc) from exc
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
                    stack = stack_var.get()
                    if stack is bottom:
                        return _call(entry[0], (x._buf, y._buf), entry[1], prim, av.device)
                    if not stack.traces:  # observers only (tapes, energy): as bind tells them
                        return _observed(stack, entry[0], (x, y), entry[1], prim, av.device)
            return general(x, y)

        return _like(op, general)

    def fast_unary(self, prim: Primitive, general: Any, kinds: str) -> Any:
        """`general(x)` with the fast path in front for a tensor whose dtype kind is in
        `kinds` (those `general` binds `prim` on as it is); see `fast_binary`."""
        stack_var, bottom = tracing._STACK, tracing.BOTTOM
        front = _front(prim, 1, kinds)
        table = front.table

        def op(x: Any, /) -> Any:
            if type(x) is Tensor:
                av = x._aval
                entry = table.get(av) or front.entry(av)
                if entry is not None:
                    stack = stack_var.get()
                    if stack is bottom:
                        return _call(entry[0], (x._buf,), entry[1], prim, av.device)
                    if not stack.traces:
                        return _observed(stack, entry[0], (x,), entry[1], prim, av.device)
            return general(x)

        return _like(op, general)


FRONT_SIZE = 1024


class _Front:
    """One fast path's table {operand aval: (kernel, result aval)}, filled from the device's
    dispatch memo (which validates and picks the kernel) so a hit is one dict lookup with no
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

    def entry(self, av: Any) -> tuple | None:
        """(kernel, result aval) for operands of aval `av`; None: the general path."""
        entry = self.table.get(av)
        if entry is not None or av in self.slow:
            return entry
        prim = self.prim
        if self.kinds is None or av.dtype.kind in self.kinds:
            try:
                fn, out_aval, _ = av.device.dispatch(prim, *([av] * self.arity))
            except TenferroError:  # the general path raises its own error: not remembered
                return None
            if out_aval is not None:
                return _put(self.table, av, (fn, out_aval))
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
    for o in stack.pre:
        o.before(prim, args, _NO_PARAMS)
    t = _call(fn, [a._buf for a in args], out_aval, prim, device)
    for o in stack.observers:
        o.observe(prim, args, _NO_PARAMS, t)
    return t


def _call(fn: Any, bufs: Any, out_aval: Any, prim: Primitive, device: Any) -> Tensor:
    """`fn(*bufs)` wrapped as a Tensor of `out_aval`; a kernel's exception becomes a KernelError."""
    try:
        buf = fn(*bufs)
    except TenferroError:
        raise
    except Exception as exc:
        raise kernel_error(prim, device, exc) from exc
    t = _new_tensor(Tensor)
    t._buf = buf
    t._aval = out_aval
    return t


def _like(op: Any, general: Any) -> Any:
    op.__name__ = op.__qualname__ = general.__name__
    op.__doc__ = general.__doc__
    op.__module__ = general.__module__
    op.__wrapped__ = general
    return op


def params_key(prim: Primitive, nparams: dict) -> tuple:
    """Canonical params as cache-key parts: ``(items,)``, plus ``(type, repr)`` of the params
    whose == is too coarse for a key (-0.0 == 0.0 == False, nan != nan) as a second part, so
    ``dict(items)`` is still the params themselves."""
    items = tuple(nparams.items())
    if not prim.exact_params:
        return (items,)
    return items, tuple([(type(nparams[n]), repr(nparams[n])) for n in prim.exact_params])


def prepare(prim: Primitive, avals: tuple, nparams: dict, device: Any) -> tuple:
    """(kernel or None for the decomposition, the one output aval or None, output avals)."""
    out_avals = prim.abstract_eval(avals, nparams)
    for a in out_avals:
        if a.dtype not in device.dtypes:
            raise DTypeError(
                f"{prim.name}: device {device} does not support dtype {a.dtype}; it supports "
                f"{sorted(d.name for d in device.dtypes)}; use another dtype or move to a device "
                f"that has it"
            )
    fn = device.kernels.get(prim)
    if fn is None:
        if prim.decomposition is None:
            raise device.runtime.missing_kernel(prim, device)
        return None, None, out_avals
    if device.specialize is not None:
        fn = device.specialize(prim.name, fn, avals, out_avals)
    if device.runtime.check_kernels:
        fn = _checked(fn, prim, device, out_avals)
    return fn, (None if prim.multiple_results else out_avals[0]), out_avals


def _checked(fn: Any, prim: Primitive, device: Any, out_avals: tuple) -> Any:
    """`fn` with its results compared against the abstract eval (TENFERRO_CHECK_KERNELS)."""

    def checked(*bufs: Any, **params: Any) -> Any:
        out = fn(*bufs, **params)
        check_result(prim, device, out_avals, out)
        return out

    return checked


def check_result(prim: Primitive, device: Any, out_avals: tuple, out: Any) -> None:
    """Raise KernelError unless `out` (a buffer, or a tuple for multi-result ops) has the buffer
    type, shape and dtype the abstract eval promised."""
    backend = device.backend
    if prim.multiple_results:
        if not isinstance(out, (tuple, list)) or len(out) != len(out_avals):
            raise _bad_result(prim, device, f"{len(out_avals)} results", f"{type(out).__name__}")
        outs = out
    else:
        outs = (out,)
    for i, (buf, av) in enumerate(zip(outs, out_avals)):
        what = f"result {i}" if prim.multiple_results else "its result"
        try:
            shape, dtype = backend.describe(buf)
        except Exception as exc:
            raise _bad_result(
                prim, device, f"a {backend.name} buffer for {what}",
                f"{type(buf).__name__} ({type(exc).__name__}: {exc})") from exc
        if tuple(shape) != av.shape or dtype is not av.dtype:
            raise _bad_result(prim, device, f"{av.dtype}{list(av.shape)} for {what}",
                              f"{dtype}{list(shape)}")


def _bad_result(prim: Primitive, device: Any, expected: str, got: str) -> KernelError:
    return KernelError(
        f"kernel for {prim.name!r} on backend {device.backend.name!r} (device {device}) returned "
        f"{got}; the op's abstract eval expects {expected}; fix the kernel or its registration"
    )


_OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory",
                "not enough memory", "failed to allocate memory")
"""Lower-case fragments of the RuntimeError messages allocators raise where they have no
MemoryError of their own (torch's DefaultCPUAllocator, CUDA, MPS, XLA)."""


def is_out_of_memory(exc: BaseException) -> bool:
    """True when `exc` reports a failed allocation: a `MemoryError` (NumPy), torch's
    ``OutOfMemoryError`` (CUDA), or a RuntimeError whose message says the allocator ran out
    (torch's CPU allocator). Recognised by class name, module and message, so this module
    never imports a backend's framework."""
    if isinstance(exc, MemoryError):
        return True
    for cls in type(exc).__mro__:
        if cls.__name__ == "OutOfMemoryError" and cls.__module__.split(".")[0] in ("torch", "jax", "jaxlib"):
            return True
    if isinstance(exc, RuntimeError):
        msg = str(exc).lower()
        return any(m in msg for m in _OOM_MARKERS)
    return False


def _first_line(exc: BaseException) -> str:
    """The exception's message without the C++ stack torch appends to some errors."""
    msg = str(exc)
    cut = msg.find("\nException raised from ")
    return msg if cut < 0 else msg[:cut]


def kernel_error(prim: Primitive, device: Any, exc: BaseException) -> KernelError:
    """The typed error for a kernel that raised `exc` (chained by the caller): a
    `KernelMemoryError` (also a `MemoryError`) for an allocation failure on any backend."""
    where = f"kernel for {prim.name!r} on backend {device.backend.name!r} (device {device})"
    if is_out_of_memory(exc):
        return _out_of_memory(where, exc)
    return KernelError(
        f"{where} raised {type(exc).__name__}: {_first_line(exc)}; the inputs passed the op's shape "
        f"and dtype checks, so this is a backend limitation or bug: try another device, or report "
        f"it to the backend"
    )


def memory_error(what: str, device: Any, exc: BaseException) -> KernelMemoryError:
    """The typed error for an allocation that failed outside a kernel (a host transfer)."""
    return _out_of_memory(f"{what} on device {device}", exc)


def _out_of_memory(where: str, exc: BaseException) -> KernelMemoryError:
    return KernelMemoryError(
        f"{where} could not allocate memory ({type(exc).__name__}: {_first_line(exc)}); free "
        f"memory (drop references to large tensors), use smaller shapes, or move to a device "
        f"with more memory"
    )


def _not_tensor(prim: Primitive, args: tuple) -> ArgumentError:
    for i, a in enumerate(args):
        if not isinstance(a, Tensor):
            return ArgumentError(
                f"{prim.name}: operand {i} must be a tenferro Tensor, got {type(a).__name__}; "
                f"convert it with tenferro_runtime.array_api.asarray"
            )
    return ArgumentError(f"{prim.name}: bad operands {args!r}")


def _with_device(prim: Primitive, params: dict) -> tuple[dict, Any]:
    """(params with 'device' resolved to a Device, that Device) for an op with no operands."""
    from .runtime import Device, default_runtime

    if "device" not in prim.params:  # an op with operands called with none: let its rule say why
        prim.abstract_eval((), prim.check_params(params))
        raise ArgumentError(f"{prim.name}: expected tensor operands, got none")
    dev = params.get("device")
    if isinstance(dev, Device):
        return params, dev
    if dev is None or isinstance(dev, str):
        dev = default_runtime().device(dev)
        return {**params, "device": dev}, dev
    raise DeviceError(f"{prim.name}: 'device' must be a device name or Device, got {dev!r}")


EVAL = EvalTrace()
tracing.install_bottom(EVAL)

__all__ = ["EVAL", "EvalTrace", "check_result", "is_out_of_memory", "kernel_error", "memory_error",
           "params_key", "prepare"]
