"""SGD, Adam and AdamW with PyTorch's update formulas (torch/optim/sgd.py, adam.py: the
single-tensor path), written with tensor ops so an update traces and compiles.

Differences from PyTorch: one step count for all parameters (PyTorch keeps one per parameter;
they agree when every parameter gets a gradient each step, which is the only case here: a
gradient is required for every trainable parameter), and SGD's momentum buffer starts at zero
in the state and is set to the gradient on the first update (PyTorch creates it then).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tenferro_core.errors import ArgumentError
from tenferro_runtime import array_api as xp
from tenferro_runtime.tensor import Tensor

from ..checks import HyperparameterError, number
from .base import Hook, Optimizer, cast


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum (heavy-ball or Nesterov), L2 weight
    decay and maximization, as torch.optim.SGD.

    ``SGD(lr, momentum=...)`` for the functional API, ``SGD(params, lr=...)`` PyTorch-style.
    """

    _hyper_names = ("lr", "momentum", "dampening", "nesterov", "weight_decay", "maximize", "clip_norm")

    def __init__(self, params: Any = None, lr: Any = None, *, momentum: float = 0.0, dampening: float = 0.0,
                 nesterov: bool = False, weight_decay: float = 0.0, maximize: bool = False,
                 clip_norm: float | None = None, check_finite: bool = False, hooks: Sequence[Hook] = ()):
        super().__init__(params, lr, dict(momentum=momentum, dampening=dampening, nesterov=nesterov,
                                          weight_decay=weight_decay, maximize=maximize),
                         clip_norm=clip_norm, check_finite=check_finite, hooks=hooks)

    def _check(self, hp: dict[str, Any]) -> None:
        self._nonneg(hp, "momentum", "weight_decay")
        hp["dampening"] = number("SGD", "dampening", hp["dampening"], low=0.0, high=1.0)
        self._flags(hp, "nesterov", "maximize")
        if hp["nesterov"] and (hp["momentum"] <= 0 or hp["dampening"] != 0):
            raise HyperparameterError(f"SGD: nesterov momentum needs momentum > 0 and dampening == 0, got "
                                      f"momentum={hp['momentum']}, dampening={hp['dampening']}")

    def _slot_names(self, hp: Mapping[str, Any] | None = None) -> tuple[str, ...]:
        momentum = (hp or self.__dict__)["momentum"]
        return ("momentum_buffer",) if momentum != 0 else ()

    def _prepare(self, t: Tensor, lr: Any) -> dict[str, Any]:
        return {"lr": lr, "first": t == 0}

    def _update_leaf(self, p: Tensor, g: Tensor, slots: dict[str, Tensor],
                     ctx: dict[str, Any]) -> tuple[Tensor, dict[str, Tensor]]:
        if self.maximize:
            g = -g
        if self.weight_decay != 0:
            g = g + self.weight_decay * p
        if self.momentum != 0:
            m = self.momentum
            buf = xp.where(ctx["first"], g, slots["momentum_buffer"] * m + (1 - self.dampening) * g)
            slots = {"momentum_buffer": buf}
            g = g + m * buf if self.nesterov else buf
        return p + (-cast(ctx["lr"], p)) * g, slots


class Adam(Optimizer):
    """Adam (and AMSGrad), with L2 weight decay added to the gradient, as torch.optim.Adam.

    The bias corrections are tensor ops on the step count in the state, so a compiled
    update does not retrace as the step grows.
    """

    _hyper_names = ("lr", "betas", "eps", "weight_decay", "amsgrad", "maximize", "clip_norm")
    _decoupled = False
    _complex = False  # PyTorch treats a complex parameter as pairs of reals; not implemented

    def __init__(self, params: Any = None, lr: Any = None, *, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False, maximize: bool = False,
                 clip_norm: float | None = None, check_finite: bool = False, hooks: Sequence[Hook] = ()):
        super().__init__(params, lr, dict(betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                                          maximize=maximize),
                         clip_norm=clip_norm, check_finite=check_finite, hooks=hooks)

    def _check(self, hp: dict[str, Any]) -> None:
        name = type(self).__name__
        self._nonneg(hp, "eps", "weight_decay")
        betas = hp["betas"]
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ArgumentError(f"{name}: betas must be a pair of numbers in [0, 1), got {betas!r:.60}")
        hp["betas"] = tuple(number(name, f"betas[{i}]", b, low=0.0, high=1.0, high_open=True)
                            for i, b in enumerate(betas))
        self._flags(hp, "amsgrad", "maximize")

    def _slot_names(self, hp: Mapping[str, Any] | None = None) -> tuple[str, ...]:
        amsgrad = (hp or self.__dict__)["amsgrad"]
        return ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if amsgrad else ())

    def _prepare(self, t: Tensor, lr: Any) -> dict[str, Any]:
        b1, b2 = self.betas
        count = xp.astype(t + 1, xp.float64)
        bias1 = 1.0 - xp.pow(b1, count)
        bias2 = 1.0 - xp.pow(b2, count)
        return {"lr": lr, "step_size": lr / bias1, "bias2_sqrt": xp.sqrt(bias2)}

    def _update_leaf(self, p: Tensor, g: Tensor, slots: dict[str, Tensor],
                     ctx: dict[str, Any]) -> tuple[Tensor, dict[str, Tensor]]:
        b1, b2 = self.betas
        if self.maximize:
            g = -g
        if self.weight_decay != 0:
            if self._decoupled:
                p = p * (1 - cast(ctx["lr"], p) * self.weight_decay)
            else:
                g = g + self.weight_decay * p
        m, v = slots["exp_avg"], slots["exp_avg_sq"]
        w = 1 - b1
        m = m + w * (g - m) if w < 0.5 else g - (g - m) * (1 - w)  # torch's lerp
        v = v * b2 + (1 - b2) * g * g
        new = {"exp_avg": m, "exp_avg_sq": v}
        if self.amsgrad:
            v = new["max_exp_avg_sq"] = xp.maximum(slots["max_exp_avg_sq"], v)
        denom = xp.sqrt(v) / cast(ctx["bias2_sqrt"], p) + self.eps
        return p + (-cast(ctx["step_size"], p)) * m / denom, new


class AdamW(Adam):
    """Adam with decoupled weight decay (p *= 1 - lr * weight_decay before the step), as
    torch.optim.AdamW."""

    _decoupled = True

    def __init__(self, params: Any = None, lr: Any = None, *, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, maximize: bool = False,
                 clip_norm: float | None = None, check_finite: bool = False, hooks: Sequence[Hook] = ()):
        super().__init__(params, lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                         maximize=maximize, clip_norm=clip_norm, check_finite=check_finite, hooks=hooks)


__all__ = ["SGD", "Adam", "AdamW"]
