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
    check_classes,
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

    if x.dtype in (torch.float16, torch.bfloat16):  # a NaN's bits kept (see relu_tangent)
        return x.masked_fill(x <= 0, 0)
    return torch.threshold(x, 0.0, 0.0)


def log_softmax(x: Any, *, axis: int) -> Any:
    import torch

    return torch.log_softmax(x, axis)


_REDUCTION = {"none": 0, "mean": 1, "sum": 2}  # torch's Reduction enum


def nll(logp: Any, target: Any, *, axis: int, ignore_index: int, reduction: str) -> Any:
    import torch

    classes = logp.shape[axis]
    if logp.numel() == 0 or target.device.type != "cpu":  # torch's CPU kernel checks the classes;
        _check_classes(target, classes, ignore_index)  # CUDA's would assert on the device
    if logp.numel() == 0:  # torch's nd form mis-sizes empty inputs: ([1, 0, 0, 0] vs [1, 1, 1])
        per = torch.zeros(target.shape, dtype=logp.dtype, device=logp.device)
        return per if reduction == "none" else per.sum() / (0 if reduction == "mean" else 1)
    if logp.ndim > 1 and axis != 1:
        logp = logp.movedim(axis, 1)
    wide = target if target.dtype is torch.int64 else target.long()
    try:
        return torch.nn.functional.nll_loss(logp, wide, reduction=reduction, ignore_index=ignore_index)
    except IndexError:  # "Target 5 is out of bounds.": ours names the classes and what to do
        _check_classes(target, classes, ignore_index)
        raise


def _check_classes(target: Any, classes: int, ignore_index: int) -> None:
    """`ops.check_classes` on the targets' host copy (nll_p's contract: a typed error)."""
    check_classes("nll_loss", target.cpu().numpy(), classes, ignore_index)


def linear(x: Any, w: Any, b: Any) -> Any:
    import torch

    return torch.nn.functional.linear(x, w, b)


def relu_tangent(x: Any, t: Any) -> Any:
    import torch

    if t.dtype in (torch.float16, torch.bfloat16):
        # torch's vectorized 16-bit threshold kernels turn a NaN into 0xffff (-nan); a select
        # keeps the composition's bits
        return t.masked_fill(x <= 0, 0)
    return torch.ops.aten.threshold_backward(t, x, 0.0)


def log_softmax_cotangent(y: Any, c: Any, *, axis: int) -> Any:
    import torch

    return torch._log_softmax_backward_data(c, y, axis, y.dtype)


def nll_cotangent(ct: Any, target: Any, *, classes: int, axis: int, ignore_index: int,
                  reduction: str) -> Any:
    import torch

    shape = (*target.shape[:axis], classes, *target.shape[axis:])
    if target.numel() == 0 or classes == 0:
        return torch.zeros(shape, dtype=ct.dtype, device=ct.device)
    flat = target if target.ndim == 1 else target.reshape(-1)
    if flat.dtype is not torch.int64:
        flat = flat.long()
    if reduction == "mean":  # the targets not ignored, counted by torch: fewer calls than on the host
        total = (flat != ignore_index).sum(dtype=ct.dtype)
    else:
        total = _ONE.get(ct.dtype)
        if total is None:
            total = _ONE[ct.dtype] = torch.ones((), dtype=ct.dtype)
    rows = torch.empty((flat.numel(), classes), dtype=ct.dtype, device=ct.device)
    g = torch.ops.aten.nll_loss_backward.default(ct.reshape(-1) if reduction == "none" else ct, rows,
                                                 flat, None, _REDUCTION[reduction], ignore_index,
                                                 total)
    if axis == target.ndim:
        return g if target.ndim == 1 else g.reshape(shape)
    return g.reshape(*target.shape, classes).movedim(-1, axis).contiguous()


KERNELS = {linear_p: linear, relu_p: relu, log_softmax_p: log_softmax, nll_p: nll,
           relu_tangent_p: relu_tangent, log_softmax_cotangent_p: log_softmax_cotangent,
           nll_cotangent_p: nll_cotangent}
