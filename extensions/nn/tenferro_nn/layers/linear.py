"""Linear and Embedding, with PyTorch's parameter names and default initializations."""

from __future__ import annotations

import math
from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.errors import DTypeError
from tenferro_runtime.tensor import Tensor

from .. import functional as F
from .. import init
from ..checks import flag, integer
from ..module import Module, where
from ._util import check, float_dtype, named_errors, not_negative_int, split_key


class Linear(Module):
    """y = x W^T + b: `weight` (out_features, in_features), `bias` (out_features,), both
    U(-1/sqrt(in_features), 1/sqrt(in_features)) like PyTorch."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, key: Tensor,
                 dtype: Any = D.float32, device: Any = None):
        super().__init__()
        self.in_features = not_negative_int("Linear", "in_features", in_features)
        self.out_features = not_negative_int("Linear", "out_features", out_features)
        bias = flag("Linear", "bias", bias)
        float_dtype("Linear", dtype)
        kw, kb = split_key("Linear", key, 2)
        shape = (out_features, in_features)
        self.weight = init.kaiming_uniform(kw, shape, dtype, device, a=math.sqrt(5))
        bound = 1 / math.sqrt(in_features) if in_features else 0.0
        self.bias = init.uniform(kb, (out_features,), dtype, device, -bound, bound) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        check(self, x, f"(*, {self.in_features})", sizes={-1: self.in_features}, like=self.weight)
        with named_errors(self):
            return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Embedding(Module):
    """A lookup table `weight` (num_embeddings, embedding_dim) ~ N(0, 1); the row `padding_idx`
    starts at zero and gets no gradient. Indices out of range are a TenferroIndexError when
    their values are known (eager)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, *,
                 key: Tensor, dtype: Any = D.float32, device: Any = None):
        super().__init__()
        self.num_embeddings = not_negative_int("Embedding", "num_embeddings", num_embeddings)
        self.embedding_dim = not_negative_int("Embedding", "embedding_dim", embedding_dim)
        float_dtype("Embedding", dtype)
        if padding_idx is not None:
            padding_idx = integer("Embedding", "padding_idx", padding_idx, -num_embeddings,
                                  num_embeddings - 1) % num_embeddings
        self.padding_idx = padding_idx
        (k,) = split_key("Embedding", key, 1)
        w = init.normal(k, (num_embeddings, embedding_dim), dtype, device)
        if padding_idx is not None:
            w[padding_idx] = 0.0
        self.weight = w

    def forward(self, indices: Tensor) -> Tensor:
        check(self, indices, "(*) integer indices")
        if indices.dtype.kind not in "iu":
            raise DTypeError(f"{where(self)}: expected integer indices, got {indices.dtype}; convert "
                             f"them with astype(indices, int64)")
        with named_errors(self):
            return F.embedding(indices, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"


__all__ = ["Embedding", "Linear"]
