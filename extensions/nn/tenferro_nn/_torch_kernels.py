"""torch-backend kernels of tenferro-nn's ops (torch imported on first call).

- linear is ``torch.nn.functional.linear`` (one addmm for a 2-d input).
- relu is ``torch.threshold(x, 0, 0)`` (``x <= 0 ? 0 : x``), which keeps NaN and makes -0.0
  0.0 as the decomposition does (``torch.relu`` keeps -0.0).
- nll is ``nll_loss(reduction="none")`` on the class axis moved to position 1 (torch's
  layout), with the target as int64 (torch's (N, C, d1, ...) form takes no other dtype).
- the backward ops are torch's own: relu_tangent ``threshold_backward``, log_softmax_cotangent
  ``_log_softmax_backward_data``, nll_cotangent ``nll_loss_backward`` on (targets, classes)
  rows (the class axis moved last and back).
"""

from __future__ import annotations

from typing import Any

from .ops import (
    linear_p,
    log_softmax_cotangent_p,
    log_softmax_p,
    nll_cotangent_p,
    nll_p,
    relu_p,
    relu_tangent_p,
)

_ONE: dict = {}  # dtype -> the 1.0 total weight nll_loss_backward takes (unused by reduction none)


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


def linear(x: Any, w: Any, b: Any) -> Any:
    import torch

    return torch.nn.functional.linear(x, w, b)


def relu_tangent(x: Any, t: Any) -> Any:
    import torch

    return torch.ops.aten.threshold_backward(t, x, 0.0)


def log_softmax_cotangent(y: Any, c: Any, *, axis: int) -> Any:
    import torch

    return torch._log_softmax_backward_data(c, y, axis, y.dtype)


def nll_cotangent(ct: Any, target: Any, *, classes: int, axis: int, ignore_index: int) -> Any:
    import torch

    shape = (*ct.shape[:axis], classes, *ct.shape[axis:])
    if ct.numel() == 0 or classes == 0:
        return torch.zeros(shape, dtype=ct.dtype)
    one = _ONE.get(ct.dtype)
    if one is None:
        one = _ONE[ct.dtype] = torch.ones((), dtype=ct.dtype)
    rows = torch.empty((ct.numel(), classes), dtype=ct.dtype)
    g = torch.ops.aten.nll_loss_backward(ct.reshape(-1), rows, target.reshape(-1).long(), None, 0,
                                         ignore_index, one)
    if axis == ct.ndim:
        return g.reshape(shape)
    return g.reshape(*ct.shape, classes).movedim(-1, axis).contiguous()


KERNELS = {linear_p: linear, relu_p: relu, log_softmax_p: log_softmax, nll_p: nll,
           relu_tangent_p: relu_tangent, log_softmax_cotangent_p: log_softmax_cotangent,
           nll_cotangent_p: nll_cotangent}
