"""`bind`: apply a primitive eagerly, or hand it to the active transformation.

The eager fast path is a cache lookup of the abstract-eval result (checked
params and output avals), a dict lookup of the device's precomputed kernel
and a call. Shape rules therefore run once per signature, and always before
a kernel sees its inputs, so bad input never reaches a backend.
"""

from __future__ import annotations

from typing import Any

from tenferro_core.errors import ArgumentError, DeviceError, DTypeError
from tenferro_core.primitive import Primitive

from .tensor import Tensor

# Active transformations, innermost last (tracing, AD); see tracing.py. Active
# gradient tapes are on TRACE_STACK too (so the short paths step aside) and in TAPES.
TRACE_STACK: list[Any] = []
TAPES: list[Any] = []


def bind(prim: Primitive, args: tuple, params: dict) -> Any:
    """Apply `prim` under the highest-level transformation among its operands, or eagerly.

    Open tapes (`TAPES`) see every call, eager or traced, and record those on values they watch.
    """
    if TRACE_STACK:
        trace = _tracing.top_trace(args)
        if trace is not None:
            out = trace.process(prim, args, params)
            for tape in TAPES:
                tape.record(prim, args, params, out)
            return out
    out = eager(prim, args, params)
    for tape in TAPES:
        tape.record(prim, args, params, out)
    return out


def _not_tensor(prim: Primitive, args: tuple) -> ArgumentError:
    for i, a in enumerate(args):
        if not isinstance(a, Tensor):
            return ArgumentError(
                f"{prim.name}: operand {i} must be a tenferro Tensor, got {type(a).__name__}; "
                f"convert it with tenferro_runtime.array_api.asarray"
            )
    return ArgumentError(f"{prim.name}: bad operands {args!r}")


def _nullary_device(prim: Primitive, params: dict) -> Any:
    from .runtime import Device, default_runtime

    if "device" not in prim.params:  # an op with operands called with none: let its rule say why
        prim.abstract_eval((), prim.check_params(params))
        raise ArgumentError(f"{prim.name}: expected tensor operands, got none")
    dev = params.get("device")
    if isinstance(dev, Device):
        return dev
    if dev is None or isinstance(dev, str):
        dev = default_runtime().device(dev)
        params["device"] = dev
        return dev
    raise DeviceError(f"{prim.name}: 'device' must be a device name or Device, got {dev!r}")


def prepare(prim: Primitive, avals: tuple, params: dict, device: Any) -> tuple:
    """(output avals, checked params, kernel or None) for a call signature; not cached here."""
    nparams = prim.check_params(params)
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
    elif device.specialize is not None:
        fn = device.specialize(prim.name, fn, avals, out_avals)
    return out_avals, nparams, fn


def eager(prim: Primitive, args: tuple, params: dict) -> Any:
    """Run `prim` now on the operands' device.

    The device's dispatch cache maps (primitive, avals, params) to the checked
    params, output avals and kernel, so a repeated call is one dict lookup.
    """
    try:
        if len(args) == 2:
            avals = (args[0]._aval, args[1]._aval)
        else:
            avals = tuple([a._aval for a in args])
    except AttributeError:
        raise _not_tensor(prim, args) from None
    device = avals[0].device if avals else _nullary_device(prim, params)
    cache = device.dispatch_cache
    try:
        key = (prim, avals, *params.items())
        if prim.exact_params:
            key += tuple(repr(params.get(n)) for n in prim.exact_params)
        entry = cache.get(key)
    except TypeError:  # unhashable params (lists): normalize, don't cache
        key = entry = None
    if entry is None:
        cache.misses += 1
        entry = prepare(prim, avals, params, device)
        if key is not None:
            cache.put(key, entry)
            if not entry[1] and entry[2] is not None and not prim.multiple_results and len(avals) <= 2:
                cache.put((prim, *avals), (entry[2], entry[0][0]))  # read by _bind_method
    else:
        cache.hits += 1
    out_avals, nparams, fn = entry
    if fn is None:
        return prim.decomposition(*args, **nparams)
    if len(args) == 2 and not nparams:
        out = fn(args[0]._buf, args[1]._buf)
    else:
        out = fn(*[a._buf for a in args], **nparams)
    if prim.multiple_results:
        return tuple(Tensor._new(b, av) for b, av in zip(out, out_avals))
    t = _new_tensor(Tensor)
    t._buf = out
    t._aval = out_avals[0]
    return t


_new_tensor = object.__new__


def bind2(prim: Primitive, a: Any, b: Any) -> Any:
    """`prim.bind(a, b)` without params. A signature seen before is one cache lookup
    and the kernel call; everything else goes through `eager`."""
    if not TRACE_STACK:
        try:
            av = a._aval
            cache = av.device.dispatch_cache
            hit = cache.get((prim, av, b._aval))
        except AttributeError:  # a non-tensor operand: eager raises the typed error
            hit = None
        if hit is not None:
            cache.hits += 1
            t = _new_tensor(Tensor)
            t._buf = hit[0](a._buf, b._buf)
            t._aval = hit[1]
            return t
    return bind(prim, (a, b), {})


def bind1(prim: Primitive, a: Any) -> Any:
    """`prim.bind(a)` without params; see `bind2`."""
    if not TRACE_STACK:
        try:
            av = a._aval
            cache = av.device.dispatch_cache
            hit = cache.get((prim, av))
        except AttributeError:
            hit = None
        if hit is not None:
            cache.hits += 1
            t = _new_tensor(Tensor)
            t._buf = hit[0](a._buf)
            t._aval = hit[1]
            return t
    return bind(prim, (a,), {})


def _bind_method(self: Primitive, *args: Any, **params: Any) -> Any:
    """`Primitive.bind`: the common no-params unary and binary calls take the short paths."""
    if not params:
        if len(args) == 2:
            return bind2(self, args[0], args[1])
        if len(args) == 1:
            return bind1(self, args[0])
    return bind(self, args, params)


Primitive.bind = _bind_method

from . import tracing as _tracing  # noqa: E402  (tracing builds on this module)
