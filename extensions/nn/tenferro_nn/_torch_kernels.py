"""torch-backend kernels of tenferro-nn's ops (torch imported on first call).

- relu is ``torch.threshold(x, 0, 0)`` (``x <= 0 ? 0 : x``), which keeps NaN and makes -0.0
  0.0 as the decomposition does (``torch.relu`` keeps -0.0).
- nll is ``nll_loss(reduction="none")`` on the class axis moved to position 1 (torch's
  layout), with the target as int64 (torch's (N, C, d1, ...) form takes no other dtype).
"""

from __future__ import annotations

from typing import Any

from .ops import log_softmax_p, nll_p, relu_p


def relu(x: Any) -> Any:
    import torch

    return torch.threshold(x, 0.0, 0.0)


def log_softmax(x: Any, *, axis: int) -> Any:
    import torch

    return torch.log_softmax(x, axis)


def nll(logp: Any, target: Any, *, axis: int, ignore_index: int) -> Any:
    import torch

    if logp.numel() == 0:  # torch's nd form mis-sizes empty inputs: ([1, 0, 0, 0] vs [1, 1, 1])
        return torch.zeros(target.shape, dtype=logp.dtype)
    if logp.ndim > 1 and axis != 1:
        logp = logp.movedim(axis, 1)
    if target.dtype is not torch.int64:
        target = target.long()
    return torch.nn.functional.nll_loss(logp, target, reduction="none", ignore_index=ignore_index)


KERNELS = {relu_p: relu, log_softmax_p: log_softmax, nll_p: nll}
