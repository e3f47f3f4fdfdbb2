"""Sequential, Dropout and Flatten."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from tenferro_core.errors import ArgumentError, TenferroIndexError
from tenferro_runtime import random
from tenferro_runtime.tensor import Tensor

from .. import functional as F
from ..checks import flag, integer, probability
from ..module import Module, where
from ._util import check, check_floating_input, named_errors


class Dropout(Module):
    """Zeroes elements with probability `p` in training (scaling the rest by 1/(1-p)); the
    identity in eval. Training needs a random key: ``layer(x, key=k)``."""

    takes_key = True  # Sequential hands it its own key

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        self.p = probability("Dropout", "p", p)
        self.inplace = flag("Dropout", "inplace", inplace)

    def forward(self, x: Tensor, key: Any = None) -> Tensor:
        check_floating_input(self, x)
        if not self.training or self.p == 0.0:
            return x
        if key is None:
            raise ArgumentError(
                f"{where(self)}: dropout in training mode needs a random key: call the model with "
                f"key=tenferro_runtime.random.key(seed) (a new one each step, e.g. random.fold_in(key, "
                f"step)), or switch to inference with .eval()")
        with named_errors(self):
            return F.dropout(x, self.p, key=key, training=True)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class Flatten(Module):
    """Merges axes start_dim..end_dim (`torch.nn.Flatten`; by default all but the batch axis)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim = integer("Flatten", "start_dim", start_dim)
        self.end_dim = integer("Flatten", "end_dim", end_dim)

    def forward(self, x: Tensor) -> Tensor:
        check(self, x, "a tensor")
        with named_errors(self):
            return F.flatten(x, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Sequential(Module):
    """Layers applied in order, stored as attributes "0", "1", ... (PyTorch's state-dict keys
    "0.weight", ...), or under the names of a mapping given as the only argument.

    ``model(x, key=k)`` splits `k` among the layers that take a key (Dropout, nested
    Sequential, any module class with ``takes_key = True``)."""

    takes_key = True

    def __init__(self, *layers: Module | Mapping[str, Module]):
        super().__init__()
        items = (list(layers[0].items()) if len(layers) == 1 and isinstance(layers[0], Mapping)
                 else [(str(i), m) for i, m in enumerate(layers)])
        for name, m in items:
            if not isinstance(m, Module):
                raise ArgumentError(f"Sequential: layer {name!r} is a {type(m).__name__}, not a Module")
            if not isinstance(name, str) or not name or name.startswith("_") or "." in name:
                raise ArgumentError(f"Sequential: layer name {name!r} must be a non-empty string without "
                                    f"dots, not starting with '_'")
            setattr(self, name, m)
        self._names = tuple(n for n, _ in items)

    def _layers(self) -> list[Module]:
        return [getattr(self, n) for n in self._names]

    def __len__(self) -> int:
        return len(self._names)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._layers())

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return Sequential(dict(zip(self._names[i], self._layers()[i])))
        if isinstance(i, bool) or not isinstance(i, int):
            raise ArgumentError(f"Sequential indices are ints or slices, got {type(i).__name__}")
        if not -len(self) <= i < len(self):
            raise TenferroIndexError(f"Sequential index {i} is out of range for {len(self)} layers")
        return getattr(self, self._names[i])

    def forward(self, x: Any, key: Any = None) -> Any:
        layers = self._layers()
        takers = [i for i, m in enumerate(layers) if getattr(m, "takes_key", False)]
        keys: dict[int, Any] = {}
        if key is not None and takers:
            split = random.split(key, len(takers))
            keys = {i: split[j] for j, i in enumerate(takers)}
        for i, m in enumerate(layers):
            x = m(x, key=keys.get(i)) if getattr(m, "takes_key", False) else m(x)
        return x


__all__ = ["Dropout", "Flatten", "Sequential"]
