"""Activation modules: thin, parameterless wrappers of `tenferro_nn.functional`."""

from __future__ import annotations

from tenferro_runtime.tensor import Tensor

from .. import functional as F
from ..checks import choice, flag, integer
from ..module import Module
from ._util import check_floating_input, named_errors


class _Activation(Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        # accepted for PyTorch compatibility; tenferro never mutates x
        self.inplace = flag(type(self).__name__, "inplace", inplace)

    def forward(self, x: Tensor) -> Tensor:
        check_floating_input(self, x)
        with named_errors(self):
            return self._fn(x)

    def _fn(self, x: Tensor) -> Tensor:
        raise NotImplementedError


class ReLU(_Activation):
    """max(x, 0)."""

    def _fn(self, x: Tensor) -> Tensor:
        return F.relu(x)


class SiLU(_Activation):
    """x sigmoid(x)."""

    def _fn(self, x: Tensor) -> Tensor:
        return F.silu(x)


class Tanh(_Activation):
    """tanh(x)."""

    def _fn(self, x: Tensor) -> Tensor:
        return F.tanh(x)


class Sigmoid(_Activation):
    """1 / (1 + exp(-x))."""

    def _fn(self, x: Tensor) -> Tensor:
        return F.sigmoid(x)


class GELU(_Activation):
    """x Phi(x), exact (``approximate="none"``) or by the tanh formula."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = choice("GELU", "approximate", approximate, ("none", "tanh"))

    def _fn(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Softmax(_Activation):
    """softmax along `dim`."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = integer(type(self).__name__, "dim", dim)

    def _fn(self, x: Tensor) -> Tensor:
        return F.softmax(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    """log of softmax along `dim`, computed stably."""

    def _fn(self, x: Tensor) -> Tensor:
        return F.log_softmax(x, self.dim)


__all__ = ["GELU", "LogSoftmax", "ReLU", "SiLU", "Sigmoid", "Softmax", "Tanh"]
