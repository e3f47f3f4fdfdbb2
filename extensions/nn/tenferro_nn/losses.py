"""Loss functions with PyTorch's semantics, written with the array namespace, so they trace,
differentiate (to any order) and compile on every backend.

The class dimension is 1 for inputs of shape (N, C, d1, ...) and 0 for a (C,) input, as in
`torch.nn.functional`. Targets are either class indices (an integer tensor of the input's shape
without the class dimension) or class probabilities (a floating tensor of the input's shape).
A class index out of range is an error when the target is concrete (checked on the host, or
by the kernel where the loss runs as one op on a device that has one); under tracing (`compile`,
a differentiated target) it cannot be checked before the run: such an entry contributes
nothing, like an ignored one, or the device's kernel raises when it runs.
"""

from __future__ import annotations

from typing import Any

from tenferro_core.errors import DTypeError, ShapeError
from tenferro_runtime import array_api as xp
from tenferro_runtime.tensor import Tensor

from .checks import choice, integer, number
from .functional import log_softmax
from .functional._util import check_floating, check_tensor
from .module import Module
from .ops import REDUCTIONS, call, check_classes, hits, native, nll_p


# ---- argument checks ------------------------------------------------------------------------
def _reduction(fn: str, reduction: Any) -> str:
    return choice(fn, "reduction", reduction, REDUCTIONS)


def _label_smoothing(fn: str, v: Any) -> float:
    return number(fn, "label_smoothing", v, low=0.0, high=1.0)


def _same_dtype(fn: str, what: str, x: Tensor, like: Tensor) -> None:
    if x.dtype is not like.dtype:
        raise DTypeError(f"{fn}: {what} is {x.dtype} but the input is {like.dtype}; expected the "
                         f"input's dtype (convert with astype({what}, {like.dtype}))")


def _class_weight(fn: str, weight: Any, logits: Tensor, cdim: int) -> Tensor | None:
    """The class weights (C,) reshaped to broadcast along the class dimension."""
    if weight is None:
        return None
    w = check_floating(fn, weight, "weight")
    c = logits.shape[cdim]
    if w.shape != (c,):
        raise ShapeError(f"{fn}: weight must have shape ({c},), one entry per class, got "
                         f"{list(w.shape)}")
    _same_dtype(fn, "weight", w, logits)
    return xp.reshape(w, (c,) + (1,) * (logits.ndim - cdim - 1))


def _class_dim(fn: str, x: Tensor) -> int:
    if x.ndim == 0:
        raise ShapeError(f"{fn}: expected input of shape (C,) or (N, C, d1, ...), got a 0-d tensor")
    return 0 if x.ndim == 1 else 1


def _check_target(fn: str, target: Tensor, logits: Tensor, cdim: int) -> None:
    """Checks a class-index target's shape and dtype."""
    want = logits.shape[:cdim] + logits.shape[cdim + 1:]
    if target.shape != want:
        raise ShapeError(
            f"{fn}: expected a target of shape {list(want)} (class indices) or {list(logits.shape)} "
            f"(class probabilities) for input of shape {list(logits.shape)}, got {list(target.shape)}")
    if target.dtype.kind not in "iu":
        raise DTypeError(f"{fn}: a target of class indices must be an integer tensor, got "
                         f"{target.dtype}")


def _check_range(fn: str, target: Tensor, classes: int, ignore_index: int) -> bool:
    """When `target` is concrete, checks its range; True when it is concrete and every entry
    is a class (none is `ignore_index`)."""
    if type(target) is not Tensor or not target.size:
        return False
    return check_classes(fn, target.numpy(), classes, ignore_index)  # a view on CPU devices


def _nll(fn: str, logp: Tensor, target: Tensor, cdim: int, ignore_index: int,
         reduction: str) -> Tensor:
    """The one-op NLL (`native`). Run now, its kernel checks the targets' range (`nll_p`'s
    contract), on the host only where it must; traced, it is checked here when concrete."""
    if type(logp) is not Tensor:
        _check_range(fn, target, logp.shape[cdim], ignore_index)
    return nll_p.bind(logp, target, axis=cdim, ignore_index=ignore_index, reduction=reduction)


# ---- building blocks ------------------------------------------------------------------------
def _reduce(loss: Tensor, reduction: str, denom: Any = None) -> Tensor:
    if reduction == "none":
        return loss
    total = xp.sum(loss)
    if reduction == "sum":
        return total
    return total / (loss.size if denom is None else denom)


def _nll_parts(logp: Tensor, target: Tensor, w: Tensor | None, ignore_index: int, cdim: int,
               every: bool) -> tuple[Tensor, Any, Tensor | None]:
    """(-w[y] logp[y] per element, the mean's denominator (the sum of w[y], 0 where ignored;
    None for the element count), the not-ignored mask (None: `every` target is a class))."""
    if w is None:
        loss = call(nll_p, logp, target, traced=True, axis=cdim, ignore_index=ignore_index,
                    reduction="none")
        if every:
            return loss, None, None
        valid = target != ignore_index
        return loss, xp.sum(xp.astype(valid, logp.dtype)), valid
    hit = hits(target, logp.shape[cdim], cdim, ignore_index)
    picked = xp.sum(xp.where(hit, logp, 0.0), axis=cdim)
    wy = xp.sum(xp.where(hit, w, 0.0), axis=cdim)
    return -(wy * picked), xp.sum(wy), target != ignore_index


def nll_loss(input: Tensor, target: Tensor, *, weight: Tensor | None = None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of class-index targets given log-probabilities `input`
    (torch.nn.functional.nll_loss): the weighted mean divides by the sum of the targets'
    weights."""
    fn = "nll_loss"
    _reduction(fn, reduction)
    logp = check_floating(fn, input, "input")
    cdim = _class_dim(fn, logp)
    target = check_tensor(fn, target, "target")
    _check_target(fn, target, logp, cdim)
    w = _class_weight(fn, weight, logp, cdim)
    if w is None and native(nll_p, logp, traced=True):  # one op, the reduction in the kernel
        return _nll(fn, logp, target, cdim, ignore_index, reduction)
    every = _check_range(fn, target, logp.shape[cdim], ignore_index)
    loss, denom, _ = _nll_parts(logp, target, w, ignore_index, cdim, every)
    return _reduce(loss, reduction, denom)


def cross_entropy(input: Tensor, target: Tensor, *, weight: Tensor | None = None,
                  ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Cross entropy of logits `input` against class indices or class probabilities
    (torch.nn.functional.cross_entropy, including how class weights, ignore_index and label
    smoothing combine), computed from a max-shifted log-softmax."""
    fn = "cross_entropy"
    _reduction(fn, reduction)
    logits = check_floating(fn, input, "input")
    cdim = _class_dim(fn, logits)
    target = check_tensor(fn, target, "target")
    eps = _label_smoothing(fn, label_smoothing)
    c = logits.shape[cdim]
    if target.shape == logits.shape:
        return _cross_entropy_probs(fn, logits, target, weight, reduction, eps, cdim)
    _check_target(fn, target, logits, cdim)
    w = _class_weight(fn, weight, logits, cdim)
    logp = log_softmax(logits, cdim)
    if w is None and eps == 0.0 and native(nll_p, logp, traced=True):
        return _nll(fn, logp, target, cdim, ignore_index, reduction)
    every = _check_range(fn, target, c, ignore_index)
    loss, denom, valid = _nll_parts(logp, target, w, ignore_index, cdim, every)
    nll = _reduce(loss, reduction, denom)
    if eps == 0.0:
        return nll
    smooth = -xp.sum(logp if w is None else logp * w, axis=cdim)
    if valid is not None:
        smooth = xp.where(valid, smooth, 0.0)
    return (1.0 - eps) * nll + _reduce(smooth, reduction, denom) * (eps / c)


def _cross_entropy_probs(fn: str, logits: Tensor, target: Tensor, weight: Any, reduction: str,
                         eps: float, cdim: int) -> Tensor:
    if target.dtype.kind != "f":
        raise DTypeError(f"{fn}: a target of the input's shape holds class probabilities and must be "
                         f"floating, got {target.dtype}; for class indices give shape "
                         f"{list(logits.shape[:cdim] + logits.shape[cdim + 1:])}")
    _same_dtype(fn, "target", target, logits)
    c = logits.shape[cdim]
    w = _class_weight(fn, weight, logits, cdim)
    if eps > 0.0:
        target = target * (1.0 - eps) + eps / c
    prod = log_softmax(logits, cdim) * target
    if w is not None:
        prod = prod * w
    if reduction == "none":
        return -xp.sum(prod, axis=cdim)
    total = -xp.sum(prod)
    return total if reduction == "sum" else total / (logits.size // c)


def _input_and_target(fn: str, input: Any, target: Any, reduction: str) -> tuple[Tensor, Tensor]:
    """Checked floating input and a target of its shape and dtype (elementwise losses)."""
    _reduction(fn, reduction)
    x = check_floating(fn, input, "input")
    t = check_floating(fn, target, "target")
    if t.shape != x.shape:
        raise ShapeError(f"{fn}: target must have the input's shape {list(x.shape)}, got {list(t.shape)}")
    _same_dtype(fn, "target", t, x)
    return x, t


def mse_loss(input: Tensor, target: Tensor, *, reduction: str = "mean") -> Tensor:
    """Squared error (input - target)**2, reduced. Unlike PyTorch (which warns and
    broadcasts) a target of another shape is an error."""
    x, t = _input_and_target("mse_loss", input, target, reduction)
    d = x - t
    return _reduce(d * d, reduction)


def _broadcastable(fn: str, what: str, w: Any, x: Tensor) -> Tensor:
    w = check_floating(fn, w, what)
    _same_dtype(fn, what, w, x)
    ok = w.ndim <= x.ndim and all(a in (1, b) for a, b in zip(w.shape[::-1], x.shape[::-1]))
    if not ok:
        raise ShapeError(f"{fn}: {what} of shape {list(w.shape)} does not broadcast to the input's "
                         f"shape {list(x.shape)}")
    return w


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                     pos_weight: Tensor | None = None, *,
                                     reduction: str = "mean") -> Tensor:
    """Binary cross entropy of logits (torch's formula (1 - t) x + lw softplus(-x) with
    lw = 1 + (pos_weight - 1) t), softplus written as max(-x, 0) + log1p(exp(-|x|)), so
    it is finite for any logit."""
    fn = "binary_cross_entropy_with_logits"
    x, t = _input_and_target(fn, input, target, reduction)
    pos = x >= 0
    softplus_neg = xp.where(pos, 0.0, -x) + xp.log1p(xp.exp(xp.where(pos, -x, x)))
    if pos_weight is None:
        loss = (1.0 - t) * x + softplus_neg
    else:
        pw = _broadcastable(fn, "pos_weight", pos_weight, x)
        loss = (1.0 - t) * x + ((pw - 1.0) * t + 1.0) * softplus_neg
    if weight is not None:
        loss = loss * _broadcastable(fn, "weight", weight, x)
    return _reduce(loss, reduction)


# ---- modules --------------------------------------------------------------------------------
class _Loss(Module):
    def __init__(self, reduction: str) -> None:
        super().__init__()
        self.reduction = _reduction(type(self).__name__, reduction)

    def _buffer(self, name: str, value: Any) -> None:
        """A tensor option (class weights) is a buffer: saved and compiled, never trained."""
        if value is None:
            setattr(self, name, None)
        else:
            self.register_buffer(name, check_floating(type(self).__name__, value, name))

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"


class CrossEntropyLoss(_Loss):
    """`cross_entropy` as a module; `weight` is a buffer."""

    def __init__(self, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0) -> None:
        super().__init__(reduction)
        self._buffer("weight", weight)
        self.ignore_index = integer(type(self).__name__, "ignore_index", ignore_index)
        self.label_smoothing = _label_smoothing(type(self).__name__, label_smoothing)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                             reduction=self.reduction, label_smoothing=self.label_smoothing)


class NLLLoss(_Loss):
    """`nll_loss` as a module; `weight` is a buffer."""

    def __init__(self, weight: Tensor | None = None, ignore_index: int = -100,
                 reduction: str = "mean") -> None:
        super().__init__(reduction)
        self._buffer("weight", weight)
        self.ignore_index = integer(type(self).__name__, "ignore_index", ignore_index)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index,
                        reduction=self.reduction)


class MSELoss(_Loss):
    """`mse_loss` as a module."""

    def __init__(self, reduction: str = "mean") -> None:
        super().__init__(reduction)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return mse_loss(input, target, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """`binary_cross_entropy_with_logits` as a module; `weight` and `pos_weight` are buffers."""

    def __init__(self, weight: Tensor | None = None, reduction: str = "mean",
                 pos_weight: Tensor | None = None) -> None:
        super().__init__(reduction)
        self._buffer("weight", weight)
        self._buffer("pos_weight", pos_weight)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return binary_cross_entropy_with_logits(input, target, self.weight, self.pos_weight,
                                                reduction=self.reduction)


__all__ = [
    "BCEWithLogitsLoss", "CrossEntropyLoss", "MSELoss", "NLLLoss", "REDUCTIONS",
    "binary_cross_entropy_with_logits", "cross_entropy", "mse_loss", "nll_loss",
]
