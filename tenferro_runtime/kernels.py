"""Calling kernels: the one call site, the one error mapping, the result checks.

`call` runs a kernel on buffers; `failed` turns whatever a kernel (or an executor's
runner) raised into the typed error every caller raises: a `KernelError` naming
primitive, backend and device with the backend's exception chained, a
`KernelMemoryError` (also a `MemoryError`) for a failed allocation, a `TenferroError`
unchanged. The eager hot paths and generated plan code call kernels inline for speed,
and hand what they catch to `failed`.

Results are checked against the abstract eval (buffer type, shape, dtype) the first
time each dispatch signature runs (`first_call_checked`: the wrapper replaces itself in
the dispatch entry once it has passed, so later calls pay nothing), and on every call
with ``TENFERRO_CHECK_KERNELS=1`` or `Runtime(check_kernels=True)`. Executors' runners
are checked the same way (`check_outputs`).
"""

from __future__ import annotations

from typing import Any

from tenferro_core.errors import KernelError, KernelMemoryError, TenferroError

_NO_PARAMS: dict = {}


def call(fn: Any, prim: Any, device: Any, bufs: Any, params: dict | None = None) -> Any:
    """`fn(*bufs, **params)`, with what it raises mapped by `failed`."""
    try:
        return fn(*bufs, **params) if params else fn(*bufs)
    except Exception as exc:
        raise failed(prim, device, exc)  # noqa: B904  (failed() sets the cause)


def failed(prim: Any, device: Any, exc: BaseException, who: str | None = None) -> BaseException:
    """The error to raise for `exc`, raised by the kernel of `prim` on `device` (or by `who`,
    an executor's runner): a TenferroError as it is, anything else a `KernelError` (a
    `KernelMemoryError` for an allocation failure) with `exc` as its cause. Raise it with a
    plain ``raise failed(...)`` inside the ``except`` block: the cause is set here."""
    if isinstance(exc, TenferroError):
        return exc
    if who is None:
        who = f"kernel for {prim.name!r} on backend {device.backend.name!r} (device {device})"
    if is_out_of_memory(exc):
        err: KernelError = _out_of_memory(who, exc)
    else:
        err = KernelError(
            f"{who} raised {type(exc).__name__}: {_first_line(exc)}; the inputs passed the op's "
            f"shape and dtype checks, so this is a backend limitation or bug: try another device, "
            f"or report it to the backend")
    err.__cause__ = exc
    return err


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


def memory_error(what: str, device: Any, exc: BaseException) -> KernelMemoryError:
    """The typed error for an allocation that failed outside a kernel (a host transfer)."""
    return _out_of_memory(f"{what} on device {device}", exc)


def _out_of_memory(where: str, exc: BaseException) -> KernelMemoryError:
    return KernelMemoryError(
        f"{where} could not allocate memory ({type(exc).__name__}: {_first_line(exc)}); free "
        f"memory (drop references to large tensors), use smaller shapes, or move to a device "
        f"with more memory"
    )


# ---- result checks -------------------------------------------------------------------------

def checked(fn: Any, prim: Any, device: Any, out_avals: tuple) -> Any:
    """`fn` with every result compared against the abstract eval (TENFERRO_CHECK_KERNELS)."""

    def checked_kernel(*bufs: Any, **params: Any) -> Any:
        out = fn(*bufs, **params)
        check_result(prim, device, out_avals, out)
        return out

    form = getattr(fn, "loop_operand", None)  # how a loop prepares operands: results still checked
    if form is not None:
        checked_kernel.loop_operand = form  # type: ignore[attr-defined]
    return checked_kernel


def first_call_checked(entry: list, prim: Any, device: Any) -> None:
    """Make `entry` (a dispatch entry [kernel, result aval, result avals]) check its kernel's
    first result: the checking wrapper puts the plain kernel back once a result has passed,
    so later calls (and front tables or plans filled afterwards) pay nothing."""
    fn, out_avals = entry[0], entry[2]

    def first_call(*bufs: Any, **params: Any) -> Any:
        out = fn(*bufs, **params)
        check_result(prim, device, out_avals, out)
        entry[0] = fn
        return out

    first_call.plain = fn
    entry[0] = first_call


def plain(fn: Any) -> Any:
    """`fn` without its first-call check (for callers that checked a first result themselves)."""
    return getattr(fn, "plain", fn)


def check_result(prim: Any, device: Any, out_avals: tuple, out: Any, who: str | None = None) -> None:
    """Raise KernelError unless `out` (a buffer, or a sequence for multi-result ops) has the
    buffer type, shape and dtype the abstract eval promised."""
    if prim.multiple_results:
        if not isinstance(out, (tuple, list)) or len(out) != len(out_avals):
            raise _bad_result(prim, device, f"{len(out_avals)} results", _kind(out), who)
        outs = out
    else:
        outs = (out,)
    for i, (buf, av) in enumerate(zip(outs, out_avals)):
        what = f"result {i}" if prim.multiple_results else "its result"
        _check_buffer(device, buf, av, lambda exp, got, w=what: _bad_result(
            prim, device, f"{exp} for {w}", got, who))


def check_outputs(who: str, device: Any, avals: list, outs: Any) -> None:
    """Raise KernelError unless an executor's runner returned a list or tuple of one buffer
    per tensor output, each of the aval it promised (None in `avals`: a fixed output whose
    buffer entry is ignored)."""
    if not isinstance(outs, (list, tuple)) or len(outs) != len(avals):
        raise KernelError(
            f"{who} returned {_kind(outs)}; it must return a list of {len(avals)} output "
            f"buffer(s), one per graph output; fix the executor")
    for i, (buf, av) in enumerate(zip(outs, avals)):
        if av is not None:
            _check_buffer(device, buf, av, lambda exp, got, i=i: KernelError(
                f"{who} returned {got} for output {i}; the graph promised {exp}; fix the "
                f"executor"))


def _check_buffer(device: Any, buf: Any, av: Any, error: Any) -> None:
    backend = device.backend
    try:
        shape, dtype = backend.describe(buf)
    except Exception as exc:
        raise error(f"a {backend.name} buffer", f"{type(buf).__name__} ({type(exc).__name__}: "
                                                f"{exc})") from exc
    if tuple(shape) != av.shape or dtype is not av.dtype:
        raise error(f"{av.dtype}{list(av.shape)}", f"{dtype}{list(shape)}")


def _kind(out: Any) -> str:
    n = f" of {len(out)}" if isinstance(out, (list, tuple)) else ""
    return f"{type(out).__name__}{n}"


def _bad_result(prim: Any, device: Any, expected: str, got: str, who: str | None) -> KernelError:
    who = who or f"kernel for {prim.name!r} on backend {device.backend.name!r} (device {device})"
    return KernelError(
        f"{who} returned {got}; the op's abstract eval expects {expected}; fix the kernel or its "
        f"registration")


__all__ = ["call", "check_outputs", "check_result", "checked", "failed", "first_call_checked",
           "is_out_of_memory", "memory_error", "plain"]
