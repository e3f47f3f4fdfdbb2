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

# Active transformations, innermost last (tracing, AD). Empty means eager.
TRACE_STACK: list[Any] = []


def bind(prim: Primitive, args: tuple, params: dict) -> Any:
    """Apply `prim` to `args` under the innermost active transformation, or eagerly."""
    if TRACE_STACK:
        return TRACE_STACK[-1].process(prim, args, params)
    return eager(prim, args, params)


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

    dev = params.get("device")
    if isinstance(dev, Device):
        return dev
    if dev is None or isinstance(dev, str):
        dev = default_runtime().device(dev)
        params["device"] = dev
        return dev
    raise DeviceError(f"{prim.name}: 'device' must be a device name or Device, got {dev!r}")


def abstract_eval(prim: Primitive, avals: tuple, params: dict, device: Any) -> tuple[tuple, dict]:
    """Checked params and output avals, cached per (primitive, avals, params) in the runtime."""
    cache = device.runtime.eval_cache
    try:
        key = (prim, avals, *params.items())
        entry = cache.get(key)
    except TypeError:  # unhashable params (lists): normalize, don't cache
        key, entry = None, None
    if entry is not None:
        cache.hits += 1
        return entry
    cache.misses += 1
    nparams = prim.check_params(params)
    out_avals = prim.abstract_eval(avals, nparams)
    for a in out_avals:
        if a.dtype not in device.dtypes:
            raise DTypeError(
                f"{prim.name}: device {device} does not support dtype {a.dtype}; it supports "
                f"{sorted(d.name for d in device.dtypes)}; use another dtype or move to a device "
                f"that has it"
            )
    entry = (out_avals, nparams)
    if key is not None:
        cache.put(key, entry)
    return entry


def eager(prim: Primitive, args: tuple, params: dict) -> Any:
    """Run `prim` now on the operands' device."""
    try:
        avals = tuple([a._aval for a in args])
    except AttributeError:
        raise _not_tensor(prim, args) from None
    device = avals[0].device if avals else _nullary_device(prim, params)
    out_avals, nparams = abstract_eval(prim, avals, params, device)
    fn = device.kernels.get(prim)
    if fn is None:
        if prim.decomposition is not None:
            return prim.decomposition(*args, **nparams)
        raise device.runtime.missing_kernel(prim, device)
    out = fn(*[a._buf for a in args], **nparams)
    if prim.multiple_results:
        return tuple(Tensor._new(b, av) for b, av in zip(out, out_avals))
    return Tensor._new(out, out_avals[0])


Primitive._bind = staticmethod(bind)
