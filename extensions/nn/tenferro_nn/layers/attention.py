"""MultiheadAttention with PyTorch's parameter layout (packed `in_proj_weight` / `in_proj_bias`,
`out_proj` a Linear) and mask conventions."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, DTypeError, ShapeError
from tenferro_runtime import array_api as xp
from tenferro_runtime.tensor import Tensor

from .. import functional as F
from .. import init
from ..checks import HyperparameterError, flag, probability
from ..functional._attention import attention
from ..module import Module, where
from ._util import check, float_dtype, named_errors, positive_int, split_key
from .linear import Linear


class MultiheadAttention(Module):
    """Multi-head attention: ``softmax(q k^T / sqrt(head_dim) + mask) v`` per head between
    projections ``in_proj_weight`` (3 E, E) (query, key, value rows) and ``out_proj``.

    Masks as PyTorch's module: a bool `attn_mask` (L, S) or (N * num_heads, L, S) is True where
    attention is NOT allowed, a float one is added to the scores; a `key_padding_mask` (N, S)
    is True at padding keys. ``batch_first=True`` is the default here (PyTorch: False).
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 batch_first: bool = True, *, key: Tensor, dtype: Any = D.float32, device: Any = None):
        super().__init__()
        self.embed_dim = positive_int("MultiheadAttention", "embed_dim", embed_dim)
        self.num_heads = positive_int("MultiheadAttention", "num_heads", num_heads)
        if embed_dim % num_heads:
            raise HyperparameterError(f"MultiheadAttention: embed_dim ({embed_dim}) must be divisible by "
                                      f"num_heads ({num_heads})")
        self.head_dim = embed_dim // num_heads
        self.dropout = probability("MultiheadAttention", "dropout", dropout)
        self.batch_first = flag("MultiheadAttention", "batch_first", batch_first)
        bias = flag("MultiheadAttention", "bias", bias)
        float_dtype("MultiheadAttention", dtype)
        k_in, k_out = split_key("MultiheadAttention", key, 2)
        self.in_proj_weight = init.xavier_uniform(k_in, (3 * embed_dim, embed_dim), dtype, device)
        self.in_proj_bias = xp.zeros((3 * embed_dim,), dtype=dtype, device=device) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias, key=k_out, dtype=dtype, device=device)
        if bias:
            self.out_proj.bias = xp.zeros((embed_dim,), dtype=dtype, device=device)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = False, attn_mask: Tensor | None = None,
                average_attn_weights: bool = True, is_causal: bool = False, *,
                dropout_key: Any = None) -> tuple[Tensor, Tensor | None]:
        """(attention output, weights or None) like PyTorch; `need_weights` defaults to False.
        `is_causal` without `attn_mask` applies the causal mask (PyTorch requires the mask).
        Dropout in training needs `dropout_key` (`key` is the key tensor, as in PyTorch)."""
        e = self.embed_dim
        for what, v in (("need_weights", need_weights), ("average_attn_weights", average_attn_weights),
                        ("is_causal", is_causal)):
            flag(where(self), what, v)
        spelled = "(N, L, E)" if self.batch_first else "(L, N, E)"
        for what, t in (("query", query), ("key", key), ("value", value)):
            check(self, t, f"{spelled} or (L, E) with E = {e} ({what})", ndim=(2, 3), sizes={-1: e},
                  like=self.in_proj_weight)
        if not query.ndim == key.ndim == value.ndim:
            raise ShapeError(f"{where(self)}: query, key and value must all be batched or all unbatched, "
                             f"got {list(query.shape)}, {list(key.shape)}, {list(value.shape)}")
        batched = query.ndim == 3
        q, k, v = (t if not batched else t if self.batch_first else xp.permute_dims(t, (1, 0, 2))
                   for t in (query, key, value))
        if not batched:
            q, k, v = (xp.expand_dims(t, axis=0) for t in (q, k, v))
        (n, l_, _), s = q.shape, k.shape[1]
        if k.shape[0] != n or v.shape[:2] != k.shape[:2]:
            raise ShapeError(f"{where(self)}: key and value must have one length and the query's batch, "
                             f"got query {list(query.shape)}, key {list(key.shape)}, "
                             f"value {list(value.shape)}")
        with named_errors(self):
            mask = self._mask(attn_mask, key_padding_mask, is_causal, n, l_, s, q)
        w, b = self.in_proj_weight, self.in_proj_bias
        heads = []
        for i, t in enumerate((q, k, v)):
            y = F.linear(t, w[i * e:(i + 1) * e], None if b is None else b[i * e:(i + 1) * e])
            heads.append(xp.permute_dims(xp.reshape(y, (n, t.shape[1], self.num_heads, self.head_dim)),
                                         (0, 2, 1, 3)))
        p = self.dropout if self.training else 0.0
        if p > 0 and dropout_key is None:
            raise ArgumentError(f"{where(self)}: attention dropout ({p}) in training needs "
                                f"dropout_key=<a random key>; or call .eval()")
        with named_errors(self):
            out, probs = attention(*heads, mask, p, False, None, dropout_key, "MultiheadAttention")
        out = xp.reshape(xp.permute_dims(out, (0, 2, 1, 3)), (n, l_, e))
        out = self.out_proj(out)
        if batched and not self.batch_first:
            out = xp.permute_dims(out, (1, 0, 2))
        weights = None
        if need_weights:
            weights = xp.mean(probs, axis=1) if average_attn_weights else probs
        if not batched:
            out = out[0]
            weights = None if weights is None else weights[0]
        return out, weights

    def _mask(self, attn_mask: Tensor | None, key_padding_mask: Tensor | None, is_causal: bool, n: int,
              l_: int, s: int, like: Tensor) -> Tensor | None:
        """One float mask added to the scores (N or 1, heads or 1, L, S), or None."""
        total = None
        if attn_mask is None and is_causal:
            attn_mask = xp.asarray(np.triu(np.ones((l_, s), dtype=bool), 1), device=like.device)
        for what, m, shapes in (("attn_mask", attn_mask, ((l_, s), (n * self.num_heads, l_, s))),
                                ("key_padding_mask", key_padding_mask, ((n, s),))):
            if m is None:
                continue
            if not isinstance(m, Tensor) or m.shape not in shapes:
                got = list(m.shape) if isinstance(m, Tensor) else type(m).__name__
                raise ShapeError(f"{what} must have shape {' or '.join(str(list(x)) for x in shapes)}, "
                                 f"got {got}")
            if m.dtype == xp.bool:
                m = xp.where(m, xp.full(m.shape, -math.inf, dtype=like.dtype, device=like.device),
                             xp.zeros(m.shape, dtype=like.dtype, device=like.device))
            elif m.dtype is not like.dtype:
                raise DTypeError(f"{what} must be bool or {like.dtype} (added to the scores), got {m.dtype}")
            if what == "key_padding_mask":
                m = xp.reshape(m, (n, 1, 1, s))
            elif m.ndim == 3:
                m = xp.reshape(m, (n, self.num_heads, l_, s))
            total = m if total is None else total + m
        return total

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, batch_first={self.batch_first}"


__all__ = ["MultiheadAttention"]
