"""The harness's torch side (torch:cpu candidates): operands as torch tensors with the same
layout as the NumPy case (strided, transposed, expanded stride-0 views), the result's contract
(an exact CPU `torch.Tensor`, no lazy bits, no storage shared with an input or an earlier
result) and torch's global state a candidate must leave alone. Imported only in the child."""

from __future__ import annotations

from typing import Any

import numpy as np


def _torch() -> Any:
    import torch

    return torch


class TorchIO:
    """Converts the Verifier's NumPy operands to torch tensors and judges torch results."""

    def __init__(self, dtype: str, device: str = "cpu"):
        torch = _torch()
        self.torch, self.dtype, self.device = torch, getattr(torch, dtype), torch.device(device)
        self.gpu = self.device.type != "cpu"
        self.memo: dict[int, tuple[np.ndarray, Any, Any]] = {}  # id(array) -> (array, tensor, on device)

    def inputs(self, arrays: list[np.ndarray]) -> list[Any]:
        """One tensor per operand. A contiguous writeable array is shared (torch.from_numpy,
        the same tensor object each time: changing the array in place changes the tensor, so
        the caching-by-identity probe reaches the candidate); any other layout is copied into
        a fresh storage and viewed with the array's strides (stride 0 stays 0)."""
        out = []
        for a in arrays:
            if a.flags.c_contiguous and a.flags.writeable:
                kept = self.memo.get(id(a))
                if kept is None or kept[0] is not a:
                    t = self.torch.from_numpy(a)
                    kept = self.memo[id(a)] = (a, t, t.to(self.device) if self.gpu else t)
                elif self.gpu:  # the same device tensor, holding the array's current values
                    kept[2].copy_(kept[1])
                out.append(kept[2])
            else:
                out.append(self.strided(a))
        return out

    def strided(self, a: np.ndarray) -> Any:
        torch, item = self.torch, a.itemsize
        if a.size == 0:
            return torch.empty(a.shape, dtype=self.dtype, device=self.device)
        if any(s < 0 for s in a.strides):
            return torch.from_numpy(a.copy()).to(self.device)
        steps = [s // item for s in a.strides]
        extent = 1 + sum((n - 1) * s for n, s in zip(a.shape, steps))
        span = np.lib.stride_tricks.as_strided(a, shape=(extent,), strides=(item,)).copy()
        return torch.from_numpy(span).to(self.device).as_strided(a.shape, steps)

    def views(self, bufs: list[Any]) -> list[np.ndarray]:
        """NumPy views of the tensors as the kernel saw them (for the unchanged-input check;
        copies from a GPU)."""
        return [t.cpu().numpy() if self.gpu else t.numpy() for t in bufs]

    def result(self, out: Any) -> tuple[np.ndarray | None, str | None, str | None]:
        """(a NumPy view of the result, None, None), or (None, check, why) when the result
        breaks the torch contract."""
        torch = self.torch
        if type(out) is not torch.Tensor:
            return None, "lazy_output", (
                f"returned {type(out).__module__}.{type(out).__name__}, not a torch.Tensor "
                f"(a subclass, lazy or deferred object)"
            )
        if out.device != self.device or out.layout is not torch.strided:
            return None, "contract", (
                f"returned a tensor on {out.device} with layout {out.layout}, not a strided tensor on "
                f"{self.device}"
            )
        if out.is_neg() or out.is_conj() or out.requires_grad:
            return None, "lazy_output", "returned a tensor with a lazy neg/conj bit or requires_grad set"
        if out.dtype is not self.dtype:
            return None, "contract", f"returned {out.dtype}, the task's dtype is {self.dtype}"
        return (out.detach().cpu().numpy() if self.gpu else out.numpy()), None, None

    @staticmethod
    def span(t: Any) -> tuple[int, int]:
        """The byte range of a tensor's whole storage."""
        st = t.untyped_storage()
        return st.data_ptr(), st.data_ptr() + st.nbytes()

    def overlaps(self, out: Any, others: list[Any]) -> bool:
        """Whether `out`'s storage overlaps any of `others`' (torch tensors) storages."""
        lo, hi = self.span(out)
        if hi == lo:
            return False
        for t in others:
            a, b = self.span(t)
            if b > a and a < hi and lo < b:
                return True
        return False

    def state(self) -> tuple:
        """torch's global state a kernel must not change."""
        torch = self.torch
        return (
            torch.get_num_threads(),
            torch.get_default_dtype(),
            torch.are_deterministic_algorithms_enabled(),
            torch.get_float32_matmul_precision(),
        )


def tensors(arrays: list[np.ndarray], device: str = "cpu") -> list[Any]:
    """Contiguous tensors sharing the arrays' memory (the benchmark's inputs), or copies on a GPU."""
    torch = _torch()
    return [torch.from_numpy(np.ascontiguousarray(a)).to(device) for a in arrays]


__all__ = ["TorchIO", "tensors"]
