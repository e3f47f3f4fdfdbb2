"""embedding (a gather, whose gradient is a scatter-add) and scaled dot-product attention."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tenferro_ad import stop_gradient
from tenferro_core.errors import DTypeError, ShapeError, TenferroIndexError
from tenferro_runtime import array_api as xp
from tenferro_runtime.tensor import Tensor

from ..checks import HyperparameterError, flag, integer, number, probability
from ._activation import dropout, safe_softmax
from ._util import check_floating, check_tensor


def concrete_values(t: Tensor) -> np.ndarray | None:
    """The values of an eager tensor; None for a traced (abstract) one."""
    return t.numpy() if type(t) is Tensor and getattr(t, "_buf", None) is not None else None


def check_indices(name: str, indices: Any, n: int) -> None:
    """Integer indices in [0, n): a TenferroIndexError when concrete values are outside."""
    check_tensor(name, indices, "indices")
    if indices.dtype.kind not in "iu":
        raise DTypeError(f"{name}: indices must have an integer dtype, got {indices.dtype}")
    host = concrete_values(indices)
    if host is not None and host.size and (host.min() < 0 or host.max() >= n):
        bad = host.min() if host.min() < 0 else host.max()
        raise TenferroIndexError(f"{name}: index {bad} is out of range for {n} embeddings; expected "
                                 f"0 <= index < {n}")


def embedding(indices: Tensor, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """Rows of `weight` (num_embeddings, dim) at integer `indices`: shape indices.shape + (dim,).
    The row `padding_idx` gets no gradient (`torch.nn.functional.embedding`)."""
    check_floating("embedding", weight, "weight")
    if weight.ndim != 2:
        raise ShapeError(f"embedding: weight must be 2-d (num_embeddings, embedding_dim), got "
                         f"{list(weight.shape)}")
    n = weight.shape[0]
    check_indices("embedding", indices, n)
    out = xp.take(weight, indices, axis=0)
    if padding_idx is not None:
        padding_idx = integer("embedding", "padding_idx", padding_idx, -n, n - 1)
        pad = xp.expand_dims(indices == (padding_idx % n), axis=-1)
        out = xp.where(pad, stop_gradient(out), out)
    return out


def _causal(l_: int, s: int, device: Any) -> Tensor:
    return xp.asarray(np.tril(np.ones((l_, s), dtype=bool)), device=device)


def attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
              dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
              dropout_key: Any = None, name: str = "scaled_dot_product_attention") -> tuple[Tensor, Tensor]:
    """(output, attention probabilities): the body of `scaled_dot_product_attention`."""
    for what, t in (("query", query), ("key", key), ("value", value)):
        check_floating(name, t, what)
        if t.dtype is not query.dtype:
            raise DTypeError(f"{name}: query, key and value must have one dtype, got {query.dtype}, "
                             f"{key.dtype} and {value.dtype}")
        if t.ndim < 2:
            raise ShapeError(f"{name}: {what} must be (..., length, features), got {list(t.shape)}")
    e, (l_, s) = query.shape[-1], (query.shape[-2], key.shape[-2])
    if key.shape[-1] != e or value.shape[-2] != s:
        raise ShapeError(f"{name}: expected query (..., L, E), key (..., S, E) and value (..., S, Ev), "
                         f"got {list(query.shape)}, {list(key.shape)} and {list(value.shape)}")
    scale = 1.0 / math.sqrt(e) if scale is None else number(name, "scale", scale, low=None)
    dropout_p = probability(name, "dropout_p", dropout_p)
    scores = xp.matmul(query, xp.matrix_transpose(key)) * scale
    if flag(name, "is_causal", is_causal):
        if attn_mask is not None:
            raise HyperparameterError(f"{name}: give attn_mask or is_causal=True, not both")
        attn_mask = _causal(l_, s, query.device)
    if attn_mask is not None:
        check_tensor(name, attn_mask, "attn_mask")
        if attn_mask.dtype == xp.bool:
            scores = xp.where(attn_mask, scores, xp.full_like(scores, -math.inf))
        elif attn_mask.dtype is scores.dtype:
            scores = scores + attn_mask
        else:
            raise DTypeError(f"{name}: attn_mask must be bool (True = attend) or {scores.dtype} (added "
                             f"to the scores), got {attn_mask.dtype}")
    probs = safe_softmax(scores, -1)
    if dropout_p > 0.0:
        probs_used = dropout(probs, dropout_p, key=dropout_key)
    else:
        probs_used = probs
    return xp.matmul(probs_used, value), probs


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 *, dropout_key: Any = None) -> Tensor:
    """softmax(q k^T * scale + mask) v over the last two axes, batch axes broadcast
    (`torch.nn.functional.scaled_dot_product_attention`).

    `attn_mask` is bool (True = may attend) or a float added to the scores; `is_causal` masks
    key positions after the query's (top-left aligned). A fully masked row gives zeros.
    Dropout (``dropout_p > 0``) needs `dropout_key` (the `key` name is the key tensor).
    """
    return attention(query, key, value, attn_mask, dropout_p, is_causal, scale, dropout_key)[0]


__all__ = ["embedding", "scaled_dot_product_attention"]
