"""Launching a compiled Triton kernel without `JITFunction.run`'s per-call work.

`JITFunction.run` binds the arguments, computes their specialization and a cache key,
asks the driver for the current device and stream and checks the kernel's globals on every
call: 8-12 µs of Python, more than a short-row softmax takes on an H100. `Launcher` does
that once per specialization (what Triton compiles a separate kernel for: each pointer's
16-byte alignment and dtype, each integer's divisibility by 16, being 1 and its width) and
then calls the compiled kernel's C launcher directly. Under the interpreter, or while a
launch hook is set (profilers), every call goes through `JITFunction.run`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from .cache import interpreted

log = logging.getLogger("tenferro_triton")


def specialization(arg: Any) -> Any:
    """What Triton specializes a compiled kernel on for one argument's value."""
    if isinstance(arg, bool) or arg is None:
        return arg
    if isinstance(arg, int):
        width = 0 if -2**31 <= arg < 2**31 else 1 if 0 <= arg < 2**32 else 2
        return (arg % 16 == 0, arg == 1, width)
    if isinstance(arg, float):
        return float
    ptr = getattr(arg, "data_ptr", None)
    if ptr is not None:
        return (arg.dtype, ptr() % 16 == 0)
    return type(arg)


def _hooks_set() -> bool:
    """Whether a launch hook is on (a profiler's): a non-empty `HookChain` in Triton 3.4+."""
    global _RUNTIME_KNOBS
    if _RUNTIME_KNOBS is None:
        from triton import knobs

        _RUNTIME_KNOBS = knobs.runtime
    return any(h is not None and bool(getattr(h, "calls", True))
               for h in (_RUNTIME_KNOBS.launch_enter_hook, _RUNTIME_KNOBS.launch_exit_hook))


_RUNTIME_KNOBS: Any = None


class Launcher:
    """One jit function at one grid with fixed constexpr and compile options, called with the
    positional arguments that vary (its leading parameters)."""

    def __init__(self, fn: Any, grid: Sequence[int], constexprs: dict[str, Any] | None = None,
                 **options: Any) -> None:
        self.fn, self.options = fn, options
        self.constexprs = dict(constexprs or {})
        self.grid = (tuple(grid) + (1, 1))[:3]
        self._compiled: dict[tuple, tuple] = {}
        self._lock = threading.Lock()
        names = list(getattr(fn, "arg_names", ()))
        self._tail = [self.constexprs[n] for n in names if n in self.constexprs]
        self._direct = (bool(names) and not interpreted()
                        and all(n in self.constexprs for n in names[len(names) - len(self._tail):]))

    def __call__(self, *args: Any) -> None:
        key = None
        torch = _cuda()
        tensor = torch.Tensor
        dev = (args[0].device if args and args[0].__class__ is tensor
               else next((a.device for a in args if hasattr(a, "device")), None))
        if self._direct and not _hooks_set():
            # specialization(a), written out for tensors: this runs on every launch
            key = (dev, *[(a.dtype, not a.data_ptr() & 15) if a.__class__ is tensor
                          else specialization(a) for a in args])
            hit = self._compiled.get(key)
            if hit is not None and dev.index == torch._C._cuda_getDevice():
                run, function, packed = hit
                g0, g1, g2 = self.grid
                try:
                    run(g0, g1, g2, torch._C._cuda_getCurrentRawStream(dev.index), function, packed,
                        None, None, None, *args, *self._tail)
                    return
                except (TypeError, ValueError) as e:  # a launcher of another calling convention:
                    log.warning("direct launch of %s failed (%s); launching through JITFunction.run",
                                getattr(self.fn, "__name__", self.fn), e)  # checked before launching
                    self._direct, key = False, None
        self._slow(key, dev, args)

    def _slow(self, key: tuple | None, dev: Any, args: tuple) -> None:
        """Launches through `JITFunction.run`, on `dev`, the CUDA device of the arguments
        (Triton launches on the current one), and keeps the compiled kernel's launcher under
        `key`."""
        if dev is None or dev.type != "cuda" or (key is None and dev.index == _cuda().cuda.current_device()):
            self.fn[self.grid](*args, **self.constexprs, **self.options)
            return
        with self._lock, _cuda().cuda.device(dev):
            kernel = self.fn[self.grid](*args, **self.constexprs, **self.options)
            if key is None:
                return
            if hasattr(kernel, "result"):  # an asynchronous compile's future
                kernel = kernel.result()
            if len(args) + len(self._tail) != len(self.fn.arg_names):
                self._direct = False  # defaults or keywords in between: always the slow path
            else:
                self._compiled[key] = (kernel.run, kernel.function, kernel.packed_metadata)


_TORCH: Any = None


def _cuda() -> Any:
    """torch (imported on the first launch)."""
    global _TORCH
    if _TORCH is None:
        import torch

        _TORCH = torch
    return _TORCH


__all__ = ["Launcher", "specialization"]
