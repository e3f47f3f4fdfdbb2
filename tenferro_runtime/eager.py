"""The eager interpreter: what runs a primitive at the bottom of every interpreter stack.

A call is: canonical params (checked on every call, so a cache hit can never
skip validation), one lookup of the device's dispatch cache keyed by
(primitive, operand avals, canonical params), and the kernel. A miss runs the
shape rule, checks the device supports the result dtypes and picks the kernel
(or the op's decomposition), so bad input never reaches a backend. Kernels are
called and their errors mapped by kernels.py; a dispatch entry checks its
kernel's first result against the abstract eval (every result with kernel
checks on). The fast paths in front of the namespace's hottest functions are
in fast_paths.py.
"""

from __future__ import annotations

from typing import Any

from tenferro_core.errors import ArgumentError, DeviceError, DTypeError
from tenferro_core.primitive import Primitive

from .kernels import checked, failed, first_call_checked
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
                elif n == 3:
                    a, b, c = args
                    av = a._aval
                    entry = av.device.dispatch(prim, av, b._aval, c._aval)
                    bufs = (a._buf, b._buf, c._buf)
                else:
                    return self.run(prim, args, params)[0]
            except AttributeError:
                raise _not_tensor(prim, args) from None
            out_aval = entry[1]
            if out_aval is not None:  # one result, a kernel: the common case
                try:
                    buf = entry[0](*bufs)
                except Exception as exc:
                    raise failed(prim, av.device, exc)  # noqa: B904  (failed() sets the cause)
                t = _new_tensor(Tensor)
                t._buf = buf
                t._aval = out_aval
                return t
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
        else:
            if params:
                prim.check_params(params, avals)  # raises: this op takes no params
            nparams = _NO_PARAMS
        entry = dispatch(prim, avals, nparams, device)
        fn, out_aval, out_avals = entry
        if fn is None:
            return prim.decomposition(*args, **nparams), nparams
        bufs = [a._buf for a in args]
        try:
            out = fn(*bufs, **nparams)
        except Exception as exc:
            raise failed(prim, device, exc)  # noqa: B904  (failed() sets the cause)
        if prim.multiple_results:
            return tuple([Tensor._new(b, av) for b, av in zip(out, out_avals)]), nparams
        return Tensor._new(out, out_aval), nparams


def dispatch(prim: Primitive, avals: tuple, nparams: dict, device: Any) -> list:
    """`device`'s dispatch entry (see `prepare`) for `prim` on `avals` with canonical `nparams`:
    the one place a dispatch key is built (``(prim, *avals)`` without params, ``(prim, avals,
    *params_key)`` with them; the eager hot paths inline the first form)."""
    if not prim.params:
        return device.dispatch(prim, *avals)
    try:
        return device.dispatch(prim, avals, *params_key(prim, nparams))
    except TypeError:  # an unhashable payload value: build, don't cache
        return prepare(prim, avals, nparams, device)


def params_key(prim: Primitive, nparams: dict) -> tuple:
    """Canonical params as cache-key parts: ``(items,)``, plus ``(type, repr)`` of the params
    whose == is too coarse for a key (-0.0 == 0.0 == False, nan != nan) as a second part, so
    ``dict(items)`` is still the params themselves."""
    items = tuple(nparams.items())
    if not prim.exact_params:
        return (items,)
    return items, tuple([(type(nparams[n]), repr(nparams[n])) for n in prim.exact_params])


def prepare(prim: Primitive, avals: tuple, nparams: dict, device: Any) -> list:
    """The dispatch entry [kernel or None for the decomposition, the one output aval or None,
    output avals]. A list: its kernel checks its first result and then puts the plain kernel
    in its place (every result with kernel checks on)."""
    out_avals = prim.abstract_eval(avals, nparams)
    for a in out_avals:
        if a.dtype not in device.dtypes:
            raise DTypeError(
                f"{prim.name}: device {device} does not support dtype {a.dtype}; it supports "
                f"{sorted(d.name for d in device.dtypes)}; use another dtype or move to a device "
                f"that has it"
            )
    fn = device.kernel_for(prim, avals, out_avals, nparams)
    if fn is None:
        if prim.decomposition is None:
            raise device.runtime.missing_kernel(prim, device)
        return [None, None, out_avals]
    if device.runtime.check_kernels:
        return [checked(fn, prim, device, out_avals), None if prim.multiple_results else out_avals[0],
                out_avals]
    entry = [fn, None if prim.multiple_results else out_avals[0], out_avals]
    first_call_checked(entry, prim, device)
    return entry


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

__all__ = ["EVAL", "EvalTrace", "dispatch", "params_key", "prepare"]
