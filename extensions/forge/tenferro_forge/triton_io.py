"""The harness's Triton side (Triton candidates, tasks on torch:cuda:N): where the kernels run
(the task's GPU, or Triton's interpreter on torch:cpu when there is none or TRITON_INTERPRET is
set), a count of Triton launches, and a guard that records every torch op the launcher runs
outside them. Imported only in the child, before the candidate."""

from __future__ import annotations

import os
from typing import Any

LAYOUT_OPS = frozenset(
    {
        "empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided",
        "zeros", "zeros_like", "new_zeros", "full", "full_like", "new_full", "fill", "fill_", "zero_",
        "clone", "copy_", "contiguous", "lift_fresh", "detach", "alias",
        "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "expand", "t", "transpose",
        "permute", "squeeze", "unsqueeze", "flatten", "unflatten", "movedim", "slice", "select",
        "narrow", "split", "resolve_conj", "resolve_neg",
    }
)  # fmt: skip
"""The torch ops a Triton candidate's launcher may run: allocation, fills and layout (the
computation belongs in its @triton.jit kernels)."""


class _State:
    launches = 0
    depth = 0  # > 0 inside a Triton launch (the interpreter's own torch copies are not the launcher's)


STATE = _State()
DEVICE = ["cpu"]
"""The torch device this child runs the candidate on (set by `prepare`)."""


def interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def prepare(task: dict) -> str:
    """The torch device the candidate runs on: the task's ``cuda:N`` when torch sees a GPU and
    the interpreter is not forced, else ``cpu`` with TRITON_INTERPRET=1 set (before triton is
    imported: triton.jit reads it when a kernel is defined). Wraps Triton's launchers to count
    launches."""
    import torch

    device = "cpu"
    if not interpreted() and torch.cuda.is_available():
        device = task["device"].partition(":")[2]
    else:
        os.environ["TRITON_INTERPRET"] = "1"
    _watch_launches()
    return device


def _watch_launches() -> None:
    import importlib

    classes = []
    for module, name in (
        ("triton.runtime.jit", "JITFunction"),
        ("triton.runtime.interpreter", "InterpretedFunction"),
    ):
        try:
            classes.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):  # another triton layout: count what exists
            continue
    if not classes:
        raise RuntimeError("triton has no JITFunction to count launches of (is triton installed?)")
    for cls in classes:
        if getattr(cls.run, "forge_counted", False):
            continue
        run = cls.run

        def counted(self: Any, *args: Any, _run: Any = run, **kwargs: Any) -> Any:
            if not kwargs.get("warmup"):
                STATE.launches += 1
            STATE.depth += 1
            try:
                return _run(self, *args, **kwargs)
            finally:
                STATE.depth -= 1

        counted.forge_counted = True
        cls.run = counted


def guard() -> Any:
    """A context (a TorchDispatchMode) whose `ops` lists the torch ops outside LAYOUT_OPS the
    launcher ran outside Triton launches."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Guard(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
            if STATE.depth == 0:
                name = func.overloadpacket.__name__
                if name not in LAYOUT_OPS and name not in self.ops:
                    self.ops.append(name)
            return func(*args, **(kwargs or {}))

    return Guard()


def poison_device(nbytes: int, itemsize: int, device: str, pattern: int) -> None:
    """Blocks of about `nbytes` filled with `pattern` on the GPU and freed: torch's caching
    allocator hands them out again to the next allocations of that size (best effort: it
    picks among its free blocks by size and address)."""
    import torch

    dt = {2: torch.int16, 4: torch.int32, 8: torch.int64}[itemsize]
    n = max(1, nbytes // itemsize)
    blocks = [torch.full((n + k,), pattern, dtype=dt, device=device) for k in (64, 16, 1, 0, 0)]
    while blocks:
        blocks.pop(0)


def synchronize(device: str) -> None:
    """Wait for every stream of the GPU (nothing on the CPU)."""
    if device != "cpu":
        import torch

        torch.cuda.synchronize(device)


__all__ = ["DEVICE", "LAYOUT_OPS", "STATE", "guard", "interpreted", "poison_device", "prepare", "synchronize"]
